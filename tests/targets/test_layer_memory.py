"""The layer's per-step work never materialises a batch-sized copy of the trajectory: every tensor an
op creates during the credit hooks is recorded (a dispatch mode) and compared with ``all_latents``."""
import json
import subprocess
import sys
from argparse import Namespace
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from otca_patch.config import OtcaConfig
from otca_patch.targets.registry import runtime_for
SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_memory.py"


class LargestAllocation(TorchDispatchMode):
    """The largest tensor (bytes) any op returns while active."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {t.untyped_storage().data_ptr() for t in list(args) + list((kwargs or {}).values())
                  if isinstance(t, torch.Tensor)}
        for tensor in out if isinstance(out, (tuple, list)) else (out,):
            # a view or an in-place result shares an input's storage: it allocates nothing
            if isinstance(tensor, torch.Tensor) and tensor.untyped_storage().data_ptr() not in inputs:
                self.largest = max(self.largest, tensor.untyped_storage().nbytes())
        return out


def _trajectory(batch, steps=8):
    """One state of the batch is 1 MiB of float32: TCD works one step at a time (tcd.DEFAULT_CHUNK_BYTES)."""
    all_latents = torch.randn(batch, steps + 1, 4, 64, 1024 // batch)
    return all_latents, torch.randn(batch, steps)


def test_flux_credit_reads_the_latents_in_place(tmp_path):
    runtime = runtime_for("dancegrpo-flux", OtcaConfig(otca=True, otca_log_dir=str(tmp_path)))
    all_latents, log_probs = _trajectory(8)
    samples = {"log_probs": log_probs[:, :-1], "rewards": torch.randn(8)}
    args = Namespace(use_group=True, num_generations=4)
    with LargestAllocation() as watch:
        runtime.assign_advantages(samples, all_latents, torch.randn(8), args)
    trajectory = all_latents.numel() * all_latents.element_size()
    assert watch.largest <= 0.25 * trajectory, f"{watch.largest / trajectory:.2f} of the trajectory"


def test_hunyuan_best_of_n_credit_copies_no_rows(tmp_path):
    runtime = runtime_for("dancegrpo-hunyuan", OtcaConfig(otca=True, otca_log_dir=str(tmp_path)))
    runtime.reset()
    all_latents, log_probs = _trajectory(8)
    for value in torch.rand(8).tolist():
        runtime.collect_text_alignment(value)
    samples = {"log_probs": log_probs[:, :-1], "vq_rewards": torch.randn(8), "mq_rewards": torch.randn(8)}
    samples["vq_advantages"], samples["mq_advantages"] = torch.randn(8), torch.randn(8)
    runtime.mark_rows(samples)
    kept = torch.tensor([6, 1, 0, 7])
    samples = {key: value[kept] for key, value in samples.items()}
    args = Namespace(use_group=True, num_generations=8, bestofn=4, vq_coef=1.0, mq_coef=1.0)
    with LargestAllocation() as watch:
        runtime.assign_advantages(samples, all_latents, args)
    trajectory = all_latents.numel() * all_latents.element_size()
    assert watch.largest <= 0.25 * trajectory, f"{watch.largest / trajectory:.2f} of the trajectory"


def test_bench_memory_prints_before_and_after_per_shape(tmp_path):
    out = tmp_path / "bench.json"
    done = subprocess.run([sys.executable, str(SCRIPT), "--scale", "0.01", "--steps", "2", "--device", "cpu",
                           "--json", str(out)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(out.read_text())["results"]
    assert set(results) == {"flux-512", "hunyuan-480x53"}
    for name, paths in results.items():
        assert set(paths) == {"before", "after"}
        for result in paths.values():
            assert result["trajectory_bytes"] > 0 and result["ratio_total"] >= 0
        assert f"{name:15s} before" in done.stdout and f"{name:15s} after" in done.stdout
    assert "fingerprint (invariants.py)" in done.stdout
