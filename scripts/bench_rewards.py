#!/usr/bin/env python
"""Batched reward scoring vs one image at a time, on the tiny reward models, in one process.

Prints, per model, the wall time to score B images in one call and in B calls of one image, and
their ratio (one-at-a-time / batched; > 1 means batching pays). Tiny random checkpoints are built
in a temporary directory (otca_patch.rewards.tiny), so no real weights are needed.

    python scripts/bench_rewards.py [--batch 16] [--repeats 5] [--size 64] [--threads 2]
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch

from otca_patch.rewards import RewardSet, tiny


def _time(fn, repeats: int) -> float:
    fn()  # warm-up (allocations, lazy init)
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--size", type=int, default=64, help="input image side (resized to the models' 32)")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    with tempfile.TemporaryDirectory(prefix="otca_bench_rewards_") as root:
        checkpoints, options = tiny.build_all(root)
        reward_set = RewardSet(list(checkpoints), checkpoints, options=options)
        images = torch.rand(args.batch, 3, args.size, args.size, generator=torch.Generator().manual_seed(0))
        prompts = [f"a photo of object number {i}" for i in range(args.batch)]

        print(f"batch {args.batch}, {args.size}x{args.size} inputs, {args.threads} threads, "
              f"median of {args.repeats}")
        print(f"{'model':<12} {'batched ms':>11} {'one-by-one ms':>14} {'ratio':>7}")
        for model in reward_set.models:
            batched = _time(lambda: model.score(images, prompts), args.repeats)
            single = _time(lambda: [model.score(images[i:i + 1], prompts[i:i + 1]) for i in range(args.batch)],
                           args.repeats)
            print(f"{model.name:<12} {batched * 1e3:11.1f} {single * 1e3:14.1f} {single / batched:6.1f}x")
        total = _time(lambda: reward_set.score(images, prompts), args.repeats)
        print(f"RewardSet of {len(reward_set)} columns, batched: {total * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
