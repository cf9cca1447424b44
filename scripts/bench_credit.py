#!/usr/bin/env python
"""Benchmark ``compute_credit`` against two plain passes over the same latents.

    python scripts/bench_credit.py [--repeats 15] [--cases flux,video] [--threads N]

On a shared machine, torch's OpenMP threads stall on every parallel region when another process
holds a core, which hurts compute_credit's ~70 small chunked ops far more than the two single-op
baselines; ``--threads 1`` gives the contention-free comparison (the load average is printed).

Cases (bfloat16 latents, as the trainers keep them):
  flux   B=12, T=16, K=3, FLUX-512 packed latents [12, 17, 1024, 64]          (26.7 MB)
  video  B=8,  T=16, K=3, HunyuanVideo-like [8, 17, 16, 9, 30, 52]             (61.1 MB;
         16 channels x 9 latent frames x 30 x 52 = 224,640 values per state)

Time: in one process, ``compute_credit`` vs (a) ``torch.linalg.vector_norm(latents, dim=-1,
dtype=torch.float32)`` (one read of the trajectory with a float32 reduction) and (b)
``latents.clone()`` (the memory floor: one read and one write). Each is warmed up, then the three
are run round-robin (so load from other processes hits them alike) and the median of the repeats
is reported.

Peak extra memory: torch's CPU allocator keeps no statistics and tracemalloc does not see it, so
each function runs in a fresh child process that reads the kernel's resident-set peak. The child
is started with ``MALLOC_MMAP_THRESHOLD_=65536``, so glibc serves every large block with mmap and
returns it on free (no heap caching that would hide or pre-pay an allocation). It builds the
latents, makes one tiny warm-up call (library initialisation, thread pools), writes "5" to
``/proc/self/clear_refs`` (resets VmHWM to the current VmRSS), records VmRSS, runs the function
once and reads VmHWM: peak extra = VmHWM - VmRSS before. The clone baseline must come out at about
the size of the latents, which checks the method. Page granularity: +-4 kB.

Targets (printed as PASS / MISS, never asserted): credit faster than the norm reduction, within
3x the copy, and peak extra memory <= two float32 copies of one step's latents for the batch
(2 * B * prod(shape[2:]) * 4 bytes).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from otca_patch.credit import CreditConfig, compute_credit, group_ids_from_size  # noqa: E402

CASES = {
    "flux": {"batch": 12, "group_size": 6, "objectives": 3, "shape": (12, 17, 1024, 64)},
    "video": {"batch": 8, "group_size": 4, "objectives": 3, "shape": (8, 17, 16, 9, 30, 52)},
}


def make_inputs(name: str, seed: int = 0):
    spec = CASES[name]
    gen = torch.Generator().manual_seed(seed)
    # Drawn directly in bfloat16: no float32 temporary of the whole trajectory.
    latents = torch.empty(spec["shape"], dtype=torch.bfloat16).normal_(generator=gen)
    rewards = torch.randn(spec["batch"], spec["objectives"], generator=gen)
    group_ids = group_ids_from_size(spec["batch"], spec["group_size"])
    return rewards, latents, group_ids


def functions(rewards, latents, group_ids):
    config = CreditConfig()
    return {
        "credit": lambda: compute_credit(rewards, latents, group_ids, config),
        "norm": lambda: torch.linalg.vector_norm(latents, dim=-1, dtype=torch.float32),
        "copy": lambda: latents.clone(),
    }


def budget_bytes(latents: torch.Tensor) -> int:
    """Two float32 copies of one step's latents for the whole batch."""
    return 2 * latents.shape[0] * latents[0, 0].numel() * 4


# ----------------------------------------------------------------------------- memory (child process)


def _status() -> dict:
    values = {}
    with open("/proc/self/status") as handle:
        for line in handle:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                values[key] = int(rest.split()[0]) * 1024
    return values


def child_measure(case: str, which: str) -> None:
    rewards, latents, group_ids = make_inputs(case)
    tiny = make_inputs("flux")  # warm-up on a small slice: initialises kernels and thread pools
    functions(tiny[0][:2], tiny[1][:2, :, :4].clone(), tiny[2][:2])[which]()
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")
    before = _status()
    result = functions(rewards, latents, group_ids)[which]()
    after = _status()
    del result
    print(json.dumps({"rss_before": before["VmRSS"], "hwm_reset": before["VmHWM"], "hwm_after": after["VmHWM"],
                      "extra": after["VmHWM"] - before["VmRSS"]}))


def measure_peak(case: str, which: str) -> int:
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")
    threads = ["--threads", str(torch.get_num_threads())]
    out = subprocess.run([sys.executable, __file__, "--child", case, which, *threads], env=env, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])["extra"]


# ----------------------------------------------------------------------------- timing


def time_case(case: str, repeats: int, warmup: int = 2) -> dict:
    rewards, latents, group_ids = make_inputs(case)
    fns = functions(rewards, latents, group_ids)
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    samples = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():  # round-robin
            start = time.perf_counter()
            fn()
            samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in samples.items()}


def mb(n: float) -> str:
    return f"{n / 2**20:8.2f} MB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--cases", default="flux,video")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--child", nargs=2, metavar=("CASE", "FUNCTION"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    if args.child:
        child_measure(*args.child)
        return

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.2f}; median of {args.repeats} round-robin repeats")
    misses = 0
    for case in args.cases.split(","):
        shape = CASES[case]["shape"]
        latents_bytes = torch.Size(shape).numel() * 2
        times = time_case(case, args.repeats)
        rewards, latents, _ = make_inputs(case)
        budget = budget_bytes(latents)
        del rewards, latents
        peaks = {which: measure_peak(case, which) for which in ("credit", "norm", "copy")}
        print(f"\n[{case}] latents {list(shape)} bfloat16 ({mb(latents_bytes).strip()}), K={CASES[case]['objectives']}")
        for name in ("credit", "norm", "copy"):
            print(f"  {name:7s} {times[name] * 1e3:9.2f} ms   peak extra {mb(peaks[name])}")
        vs_norm = times["credit"] / times["norm"]
        vs_copy = times["credit"] / times["copy"]
        checks = [
            (f"credit/norm  = {vs_norm:6.2f}  (target < 1)", vs_norm < 1),
            (f"credit/copy  = {vs_copy:6.2f}  (target <= 3)", vs_copy <= 3),
            (f"peak extra   = {mb(peaks['credit']).strip()} vs budget {mb(budget).strip()} "
             f"(2 float32 steps; {peaks['credit'] / budget:.2f}x)", peaks["credit"] <= budget),
        ]
        for text, ok in checks:
            misses += not ok
            print(f"  {'PASS' if ok else 'MISS'}  {text}")
        print(f"  (memory method check: copy peak / latents size = {peaks['copy'] / latents_bytes:.3f})")
    print(f"\n{'all targets met' if not misses else f'{misses} target(s) missed'}")


if __name__ == "__main__":
    main()
