#!/usr/bin/env python
"""``check_run_log_credit.py RUN_DIR [--processes N]``: does the ``--otca`` run log in RUN_DIR hold
the credit the spec gives?

For every logged step it gathers the records of all processes (rank-major, as the runtimes gather),
recomputes the credit with the installed credit engine from the logged rewards ``[B, K]``, TCD
progress ``delta_s [B, S]`` and group ids, and checks each process's trained advantages (the
leading columns upstream keeps, or, where the record names them in ``advantage_steps [B, T]``, the
step of each column: FlowGRPO's SDE windows) and step weights against it. Used by check_upstream_env.sh in an
upstream environment, where the package is installed (run it from outside the repository).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from otca_patch.credit import CreditConfig, credit_from_progress


def check(run_dir: Path, processes: int) -> list[str]:
    log = run_dir / "run_log.jsonl"
    if not log.is_file():
        return [f"{log} does not exist"]
    records = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    steps = sorted({r["step"] for r in records})
    problems = [] if steps else [f"{log} holds no step"]
    for step in steps:
        before = len(problems)
        by_rank = sorted((r for r in records if r["step"] == step), key=lambda r: r["rank"])
        if [r["rank"] for r in by_rank] != list(range(processes)):
            problems.append(f"step {step}: ranks {[r['rank'] for r in by_rank]}, expected 0..{processes - 1}")
            continue
        # best-of-n (HunyuanVideo): the credit is over every rollout, then each rank takes its kept rows
        prefix = "rollout_" if "rollout_rewards" in by_rank[0] else ""
        gathered = {key: torch.cat([torch.tensor(r[prefix + key]) for r in by_rank])
                    for key in ("rewards", "delta_s", "group_ids")}
        credit = credit_from_progress(gathered["rewards"], gathered["delta_s"], gathered["group_ids"],
                                      CreditConfig(**by_rank[0]["config"]))
        start = 0
        for record in by_rank:
            count = len(record[prefix + "rewards"])
            rows = (start + torch.tensor(record["kept_rows"])) if prefix else slice(start, start + count)
            start += count
            logged = torch.tensor(record["advantages"], dtype=credit.advantages.dtype)
            expected = credit.advantages[rows, :logged.shape[1]]
            if "advantage_steps" in record:  # column j of row i is step advantage_steps[i][j]
                expected = credit.advantages[rows].gather(1, torch.tensor(record["advantage_steps"]))
            if not torch.allclose(logged, expected, atol=1e-5):
                problems.append(f"step {step} rank {record['rank']}: logged advantages differ from the credit "
                                f"engine by {(logged - expected).abs().max().item():.3g}")
            weights = torch.tensor(record["step_weights"], dtype=credit.step_weights.dtype)
            if not torch.allclose(weights, credit.step_weights[rows], atol=1e-5):
                problems.append(f"step {step} rank {record['rank']}: logged step weights differ from TCD's")
        print(f"step {step}: {len(by_rank)} process(es), B={start}, objectives {by_rank[0]['objectives']}, "
              f"mode {by_rank[0]['mode']}: advantages and step weights "
              f"{'match' if len(problems) == before else 'DIFFER from'} the credit engine")
    return problems


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--processes", type=int, default=1)
    args = parser.parse_args(argv)
    problems = check(args.run_dir, args.processes)
    for problem in problems:
        print(f"credit check: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
