"""Shared fixtures of the demo's tests (import the fixture into a test module to use it there)."""
import pytest
import torch


@pytest.fixture(autouse=True)
def one_thread():
    """The demo's setting: tiny matrices gain nothing from threads, and lose a lot on shared cores."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
