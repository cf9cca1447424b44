#!/usr/bin/env python
"""The memory the layer adds to one DanceGRPO training step, as a ratio to one copy of the trajectory.

    python scripts/bench_memory.py                      # FLUX-512 and Hunyuan-480x53, CPU (or CUDA if present)
    python scripts/bench_memory.py --scale 0.05 --json out.json     # smaller latents (tests)

What runs is the layer's own per-step work, through the runtimes' hook methods, on rollouts of
upstream's shapes (float32, as upstream keeps ``all_latents``; K = 3 objectives; ``otca`` mode):

- FLUX-512 (``train_grpo_flux.py``): 12 samples, 16 steps, latents ``[12, 17, 1024, 64]``;
- Hunyuan-480x53 (``train_grpo_hunyuan.py`` defaults): 24 rollouts, best-of-8, 16 steps, latents
  ``[24, 17, 16, 14, 60, 60]``.

Per step: ``assign_advantages`` (rewards, TCD's progress, the credit) and ``permuted_keys`` (which
also builds ``invariants.py``'s fingerprint of the steps' latents: that part is owned by another
branch and is measured as it is on this one, and reported on its own line).

Measured: the peak of memory above what the step's inputs already hold, during the layer's calls.
CUDA: ``torch.cuda.max_memory_allocated`` (reset before each call). CPU: the process's peak
resident set (``VmHWM``, reset through ``/proc/self/clear_refs``) above its resident set before the
call (tracemalloc does not see torch's allocator). Each figure is the largest over steps 2..N
(steady state); step 1 is printed too. ``before`` reproduces the old path in the same process: TCD's
progress on ``all_latents[rows]``, a copy of the rows (all of them for FLUX, the kept ones for Hunyuan).
"""
from __future__ import annotations

import argparse
import json
import sys
from argparse import Namespace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from otca_patch.config import OtcaConfig  # noqa: E402
from otca_patch.targets.dancegrpo import GrpoRuntime  # noqa: E402
from otca_patch.targets.registry import runtime_for  # noqa: E402

#: name -> (rollouts per rank, kept rows, sampling steps, one latent's shape)
SHAPES = {"flux-512": (12, 12, 16, (1024, 64)), "hunyuan-480x53": (24, 8, 16, (16, 14, 60, 60))}
GOAL = 0.25
STEP_KEYS = ["timesteps", "latents", "next_latents", "log_probs"]


class PeakMeter:
    """Peak memory above the level at ``start()``: CUDA's allocator, or the CPU's resident set."""

    def __init__(self, device: torch.device):
        self.device = device

    def start(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self.base = torch.cuda.memory_allocated(self.device)
        else:
            Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current VmRSS
            self.base = _status("VmRSS")

    def peak(self) -> int:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            return torch.cuda.max_memory_allocated(self.device) - self.base
        return _status("VmHWM") - self.base


def _status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/self/status has no {field}")


def rollout(name: str, scale: float, device, seed: int):
    """(all_latents [B, S+1, ...], log_probs [B, S], vq, mq) of one rank, upstream's shapes times ``scale``."""
    batch, _, steps, shape = SHAPES[name]
    shape = shape[:-1] + (max(1, int(shape[-1] * scale)),)
    generator = torch.Generator(device="cpu").manual_seed(seed)
    all_latents = torch.randn((batch, steps + 1) + shape, generator=generator).to(device)
    log_probs = torch.randn(batch, steps, generator=generator).to(device)
    return all_latents, log_probs, torch.randn(batch, generator=generator), torch.randn(batch, generator=generator)


def old_progress(runtime: GrpoRuntime, kept=None):
    """The path before: TCD's progress on ``all_latents[rows]`` (advanced indexing copies those rows)."""
    def progress(all_latents, final=None):
        rows = torch.arange(all_latents.shape[0], device=all_latents.device) if kept is None else kept
        delta_s = GrpoRuntime.progress(runtime, all_latents[rows], final)
        full = delta_s.new_zeros((all_latents.shape[0], delta_s.shape[1]))
        full[rows] = delta_s
        return full
    runtime.progress = progress


def flux_step(runtime, all_latents, log_probs, vq, mq, args, meter):
    samples = {"latents": all_latents[:, :-1][:, :-1], "next_latents": all_latents[:, 1:][:, :-1],
               "log_probs": log_probs[:, :-1], "rewards": vq.to(all_latents.device)}
    advantages = ((vq - vq.mean()) / (vq.std() + 1e-8)).to(all_latents.device)
    return _measure(meter, lambda: runtime.assign_advantages(samples, all_latents, advantages, args),
                    lambda: runtime.permuted_keys(samples, STEP_KEYS))


def hunyuan_step(runtime, all_latents, log_probs, vq, mq, args, meter):
    runtime.reset()
    for value in torch.rand(all_latents.shape[0]).tolist():
        runtime.collect_text_alignment(value)
    device = all_latents.device
    samples = {"latents": all_latents[:, :-1][:, :-1], "next_latents": all_latents[:, 1:][:, :-1],
               "log_probs": log_probs[:, :-1], "vq_rewards": vq.to(device), "mq_rewards": mq.to(device)}
    samples["vq_advantages"] = (vq - vq.mean()) / (vq.std() + 1e-8)
    samples["mq_advantages"] = (mq - mq.mean()) / (mq.std() + 1e-8)
    runtime.mark_rows(samples)
    order = torch.argsort(args.vq_coef * samples["vq_advantages"] + args.mq_coef * samples["mq_advantages"])
    kept = torch.cat([order[-args.bestofn // 2:], order[:args.bestofn // 2]])
    samples = {key: value[kept.to(value.device)] for key, value in samples.items()}  # upstream's selection
    return _measure(meter, lambda: runtime.assign_advantages(samples, all_latents, args),
                    lambda: runtime.permuted_keys(samples, STEP_KEYS)), kept


def _measure(meter, credit, fingerprint) -> dict:
    meter.start()
    credit()
    credit_peak = meter.peak()
    meter.start()
    fingerprint()
    return {"credit": credit_peak, "fingerprint": meter.peak()}


def bench(name: str, path: str, scale: float, steps: int, device) -> dict:
    config = OtcaConfig(otca=True, otca_log_dir="/tmp/otca_bench_memory_logs",
                        otca_rewards=("upstream",) if name == "flux-512" else ("upstream.vq", "upstream.mq", "upstream.ta"))
    runtime = runtime_for("dancegrpo-flux" if name == "flux-512" else "dancegrpo-hunyuan", config)
    batch, kept_rows, _, _ = SHAPES[name]
    args = Namespace(use_group=True, num_generations=batch, bestofn=kept_rows, vq_coef=1.0, mq_coef=1.0)
    meter, figures, trajectory = PeakMeter(device), [], 0
    for step in range(steps):
        all_latents, log_probs, vq, mq = rollout(name, scale, device, seed=step)
        trajectory = all_latents.numel() * all_latents.element_size()
        if name == "flux-512":
            if path == "before":
                old_progress(runtime)
            figures.append(flux_step(runtime, all_latents, log_probs, vq, mq, args, meter))
        else:
            step_of = _hunyuan_before if path == "before" else hunyuan_step
            figures.append(step_of(runtime, all_latents, log_probs, vq, mq, args, meter)[0])
        del all_latents, log_probs
    steady = {part: max(f[part] for f in figures[1:] or figures) for part in ("credit", "fingerprint")}
    return {"trajectory_bytes": trajectory, "first": figures[0], "steady": steady,
            "ratio_credit": steady["credit"] / trajectory, "ratio_fingerprint": steady["fingerprint"] / trajectory,
            "ratio_total": max(f["credit"] + f["fingerprint"] for f in figures[1:] or figures) / trajectory}


def _hunyuan_before(runtime, all_latents, log_probs, vq, mq, args, meter):
    """The old Hunyuan path: progress of the kept rows only, copied out of ``all_latents``."""
    scores = args.vq_coef * (vq - vq.mean()) / (vq.std() + 1e-8) + args.mq_coef * (mq - mq.mean()) / (mq.std() + 1e-8)
    order = torch.argsort(scores)
    old_progress(runtime, torch.cat([order[-args.bestofn // 2:], order[:args.bestofn // 2]]).to(all_latents.device))
    return hunyuan_step(runtime, all_latents, log_probs, vq, mq, args, meter)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scale", type=float, default=1.0, help="scale of a latent's last dimension (tests: 0.05)")
    parser.add_argument("--steps", type=int, default=3, help="training steps per measurement (the first is warm-up)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--shapes", default=",".join(SHAPES), help=f"comma-separated, of {', '.join(SHAPES)}")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cpu" and not Path("/proc/self/clear_refs").exists():
        print("bench_memory: the CPU figures need Linux's /proc/self/clear_refs; none here")
        return 0
    meter_name = "torch.cuda.max_memory_allocated" if device.type == "cuda" else "peak resident set (VmHWM)"
    print(f"the layer's peak extra memory per training step / one copy of the trajectory ({device}, {meter_name}; "
          f"steady state = max over steps 2..{args.steps}; goal <= {GOAL})")
    results = {}
    for name in [s for s in args.shapes.split(",") if s]:
        for path in ("before", "after"):
            result = results.setdefault(name, {})[path] = bench(name, path, args.scale, args.steps, device)
            print(f"  {name:15s} {path:6s} trajectory {result['trajectory_bytes'] / 2**20:8.1f} MiB   "
                  f"credit {result['ratio_credit']:.3f}   fingerprint (invariants.py) {result['ratio_fingerprint']:.3f}   "
                  f"total {result['ratio_total']:.3f}   (first step: credit "
                  f"{result['first']['credit'] / result['trajectory_bytes']:.3f})")
    if args.json:
        args.json.write_text(json.dumps({"device": str(device), "scale": args.scale, "goal": GOAL, "results": results},
                                        indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
