"""One run-log record per advantage computation (docs/run-log.md), so that the credit can be recomputed
from outside: the rewards, groups and progress it was computed from, and what it gave."""
from __future__ import annotations

import os

from ..runlog import RunLog
from .contract import VERIFIED_COMMIT

_LOGS: dict = {}  # folder -> [RunLog, records written]: one log per folder and process (the driver)


def write(chosen, estimator: str, rewards, groups, delta_s, result, advantages, clipped: int) -> None:
    folder = os.path.abspath(chosen.config.otca_log_dir)
    entry = _LOGS.get(folder)
    if entry is None:
        entry = _LOGS[folder] = [RunLog(folder), 0]
    entry[1] += 1
    n_steps = delta_s.shape[1]
    one = lambda tensor: tensor[::n_steps]  # noqa: E731  one of the T copies of each sample
    entry[0].write({
        "step": entry[1], "rank": 0, "world_size": 1, "mode": chosen.credit.mode, "observe": False,
        "estimator": estimator, "config": chosen.credit.to_dict(), "objectives": list(chosen.objectives),
        "spec": {"target": "verl-omni", "upstream": "verl-omni", "plugin": "otca_patch.verl_omni",
                 "verified_commit": VERIFIED_COMMIT},
        "std_convention": "repeated_over_steps", "adv_clip_max": chosen.adv_clip_max, "clipped": clipped,
        "group_ids": groups, "rewards": rewards, "delta_s": delta_s,
        "step_weights": one(result.step_weights), "mixture": one(result.mixture), "lambdas": one(result.lambdas),
        "objective_advantages": one(result.objective_advantages), "combined": one(result.combined),
        "advantages": advantages, "summary": result.summary(),
    })


def forget() -> None:
    """Close every log (tests: the next call starts a new run in its folder)."""
    _LOGS.clear()
