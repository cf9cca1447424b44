"""GRPO runs in worker processes give exactly the numbers of inline runs (one torch thread each)."""
import pytest
import torch

from otca_patch.demo.config import tiny_config
from otca_patch.demo.experiment import run_experiment


@pytest.mark.slow
def test_worker_processes_give_the_numbers_of_an_inline_run(tmp_path):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        inline = run_experiment(tiny_config(out=str(tmp_path), grpo_steps=1, workers=1), log=lambda msg: None)
        spawned = run_experiment(tiny_config(out=str(tmp_path), grpo_steps=1, workers=2), log=lambda msg: None)
    finally:
        torch.set_num_threads(threads)
    assert spawned["base_model"]["cached"] is True  # the workers read the file the first run cached
    assert [r["history"] for r in spawned["runs"]] == [r["history"] for r in inline["runs"]]
