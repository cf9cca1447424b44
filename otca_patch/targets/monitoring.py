"""Per-objective monitoring on wandb: what the layer logs under ``otca/`` each training step, and on
which row, so that it sits beside upstream's own log of the same step.

Logged (rank 0, every training step, observe mode too, so a vanilla run shows them):
``otca/reward/<objective>`` (mean over all ranks' samples), ``otca/advantage/<objective>`` and
``otca/advantage_std/<objective>`` (the per-objective group advantage), ``otca/mixture/<objective>``,
``otca/step_weight/step_<i>`` (denoising step i's mean weight: one line per step over training, so
which step gets what stays readable, where a histogram would hide it) with ``otca/step_weight_max``,
``otca/conflict_share`` and the other scalars of the credit summary.

Where upstream logs a step:
* ``"explicit"``: the target knows the step of upstream's row and it is still open: ``wandb.log(..., step=s)``.
* ``"next"``: upstream logs the step *after* the layer wrote it (DanceGRPO: ``train_one_step`` returns,
  then ``wandb.log({...}, step=step)``). ``commit=False`` would join the row still open, the previous
  step's (wandb keeps a row open until a larger step arrives). The numbers wait instead, and are
  merged into upstream's next ``wandb.log`` call (the run's ``log`` is wrapped once, on rank 0).
  Were upstream not to log that step, they get a row of their own before the next step's wait.
* ``"current"``: upstream logged the step before the layer wrote it (DanceGRPO SD's and FlowGRPO's
  epoch, written after the epoch's last training log): ``commit=False`` joins that open row.
"""
from __future__ import annotations

import math
import sys


def wandb_scalars(summary: dict, names) -> dict:
    """``{otca/...: value}`` of one step's credit summary (``Credit.summary`` plus the runtime's
    ``reward_mean_per_objective`` and ``objective_advantage_mean``)."""
    scalars = {f"otca/{k}": v for k, v in summary.items() if isinstance(v, float)}
    per_objective = {"reward": "reward_mean_per_objective", "advantage": "objective_advantage_mean",
                     "advantage_std": "objective_advantage_std", "mixture": "mixture_mean_per_objective"}
    for prefix, key in per_objective.items():
        for name, value in zip(names, summary.get(key) or ()):
            scalars[f"otca/{prefix}/{name}"] = float(value) if value is not None else math.nan
    profile = summary.get("step_weight_mean_per_step") or ()
    width = len(str(len(profile) - 1))  # step_00 .. step_27: wandb sorts the panels in step order
    for step, weight in enumerate(profile):
        scalars[f"otca/step_weight/step_{step:0{width}d}"] = float(weight)
    return scalars


class WandbRows:
    """Puts one step's ``otca/`` numbers on upstream's row of that step (see the module docstring)."""

    def __init__(self):
        self.pending: dict | None = None
        self.wrapped_run = None

    def log(self, scalars: dict, how: str, step=None) -> None:
        wandb = sys.modules.get("wandb")
        if wandb is None or getattr(wandb, "run", None) is None:
            return
        if how == "explicit":
            wandb.log(scalars, step=step)
        elif how == "current":
            wandb.log(scalars, commit=False)
        else:
            self._flush(wandb)  # upstream did not log the previous step: its numbers get their own row
            self._wrap(wandb)
            self.pending = scalars

    def _flush(self, wandb) -> None:
        if self.pending is not None:
            pending, self.pending = self.pending, None
            self._original(pending)

    def _wrap(self, wandb) -> None:
        run = wandb.run
        if self.wrapped_run is run:
            return
        original = run.log
        rows = self

        def log_with_otca(data=None, *args, **kwargs):
            if rows.pending is not None and isinstance(data, dict):
                data, rows.pending = {**rows.pending, **data}, None
            return original(data, *args, **kwargs)

        self._original = original
        run.log = log_with_otca
        if getattr(wandb, "log", None) == original:  # wandb.log is the run's bound log after wandb.init
            wandb.log = log_with_otca
        self.wrapped_run = run
