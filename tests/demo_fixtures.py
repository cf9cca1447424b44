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


def tiny_flags(skip=("modes", "seeds")) -> list:
    """``TINY_SIZES`` as command-line flags (booleans as ``--name`` / ``--no_name``), without ``skip``."""
    from otca_patch.demo.config import TINY_SIZES

    flags = []
    for name, value in TINY_SIZES.items():
        if name in skip:
            continue
        flags += [f"--{name}"] if value is True else ([f"--no_{name}"] if value is False else [f"--{name}", str(value)])
    return flags
