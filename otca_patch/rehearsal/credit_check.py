"""Does an ``--otca`` run log hold the credit its spec gives? For every logged step the records of all
processes are gathered (rank-major, as the runtimes gather), the credit is recomputed with the credit
engine from the logged rewards ``[B, K]``, TCD progress ``delta_s [B, S]``, group ids and, under
``--otca_objective_timing probe``, the logged map ``objective_timing [K, T]`` the step used, and each
process's trained advantages (the leading columns upstream keeps, or for an SDE window the steps its
``advantage_steps`` name) and step weights are checked against it (absolute tolerance 1e-5)."""
from __future__ import annotations

import json
from pathlib import Path

from ..runlog import LOG_NAME

TOLERANCE = 1e-5


def read_records(run_dir: Path) -> list[dict]:
    log = run_dir / LOG_NAME
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()] if log.is_file() else []


def check(run_dir: Path, processes: int, report=print) -> list[str]:
    """The problems found (none: every step of every rank matches); ``report`` gets one line per step."""
    import torch

    from ..credit import CreditConfig, credit_from_progress

    log = run_dir / LOG_NAME
    if not log.is_file():
        return [f"{log} does not exist"]
    records = read_records(run_dir)
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
        timing = logged_timing_map(by_rank[0])
        if any(r.get("objective_timing") != by_rank[0].get("objective_timing") for r in by_rank[1:]):
            problems.append(f"step {step}: the ranks logged different objective_timing maps")
        credit = credit_from_progress(gathered["rewards"], gathered["delta_s"], gathered["group_ids"],
                                      CreditConfig(**by_rank[0]["config"]), timing_map=timing)
        start = 0
        for record in by_rank:
            count = len(record[prefix + "rewards"])
            rows = (start + torch.tensor(record["kept_rows"])) if prefix else slice(start, start + count)
            start += count
            logged = torch.tensor(record["advantages"], dtype=credit.advantages.dtype)
            if "advantage_steps" in record:  # an SDE window: column j of a sample is its step advantage_steps[:, j]
                expected = credit.advantages[rows].gather(1, torch.tensor(record["advantage_steps"]))
            else:  # the leading columns upstream keeps
                expected = credit.advantages[rows, :logged.shape[1]]
            if not torch.allclose(logged, expected, atol=TOLERANCE):
                problems.append(f"step {step} rank {record['rank']}: logged advantages differ from the credit "
                                f"engine by {(logged - expected).abs().max().item():.3g}")
            weights = torch.tensor(record["step_weights"], dtype=credit.step_weights.dtype)
            if not torch.allclose(weights, credit.step_weights[rows], atol=TOLERANCE):
                problems.append(f"step {step} rank {record['rank']}: logged step weights differ from TCD's")
        timed = "" if timing is None else ", with the logged objective_timing map"
        report(f"step {step}: {len(by_rank)} process(es), B={start}, objectives {by_rank[0]['objectives']}, "
               f"mode {by_rank[0]['mode']}{timed}: advantages and step weights "
               f"{'match' if len(problems) == before else 'DIFFER from'} the credit engine")
    return problems


def logged_timing_map(record: dict):
    """``[K, T]`` float64 map a record's credit used (``null`` entries: NaN), or None (none logged,
    or not yet measured)."""
    import torch

    rows = record.get("objective_timing")
    if rows is None:
        return None
    return torch.tensor([[float("nan") if v is None else v for v in row] for row in rows], dtype=torch.float64)
