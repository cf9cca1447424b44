"""Numbers the comparison reports: smoothed curves, the balanced score, steps-to-reach.

Definitions (the report repeats them):

* **smoothed mean / band** of a per-step curve: centred moving average over ``window`` steps;
  the band is that mean +- the standard deviation of the per-step values inside the same window
  (step-to-step spread, which needs only per-step means, so reward.txt runs get one too).
* **balanced score** at step t: ``mean_k (m[t, k] - mu_k) / sigma_k`` where ``m[t, k]`` is
  objective k's mean reward at step t, and ``mu_k`` / ``sigma_k`` are the mean and standard deviation
  of objective k over the reference run's (the first run's) samples at its first logged step. Every
  run uses the same ``mu`` / ``sigma``, so one unit is "one initial sample std of that objective" and
  no objective outweighs another by its scale. Where the reference has no per-sample spread (a
  reward.txt run, or a constant objective) ``sigma_k`` is 1 and the report says so.
* **final score**: the mean balanced score over a run's last ``window`` steps.
* **steps to reach**: the first step at which a run's smoothed balanced score is at least another
  run's final score (None: never within the run).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .logs import Run


def default_window(length: int) -> int:
    """About a tenth of the run, odd (so the centred window is symmetric), at least 1."""
    window = max(1, length // 10)
    return window if window % 2 else window + 1


def smooth(values: np.ndarray, window: int) -> tuple[np.ndarray, np.ndarray]:
    """(centred moving mean, moving std) along axis 0; the window shrinks at the ends."""
    values = np.asarray(values, dtype=float)
    half = window // 2
    mean, spread = np.empty_like(values), np.empty_like(values)
    for t in range(len(values)):
        part = values[max(0, t - half): t + half + 1]
        mean[t] = part.mean(axis=0)
        spread[t] = part.std(axis=0)
    return mean, spread


@dataclass(frozen=True)
class Standardiser:
    """The reference statistics of the balanced score."""

    mean: np.ndarray  # [K]
    std: np.ndarray  # [K]
    unit_std: tuple[str, ...]  # objectives whose std fell back to 1

    def balanced(self, reward_mean: np.ndarray) -> np.ndarray:
        """[T, K] per-step objective means -> [T] balanced score."""
        return ((reward_mean - self.mean) / self.std).mean(axis=1)


def standardiser_from(reference: Run) -> Standardiser:
    mean = reference.reward_mean[0].astype(float)
    std = reference.reward_std[0].astype(float).copy()
    unit = tuple(name for name, s in zip(reference.objectives, std) if not np.isfinite(s) or s <= 0)
    std[~np.isfinite(std) | (std <= 0)] = 1.0
    return Standardiser(mean=mean, std=std, unit_std=unit)


@dataclass
class RunScores:
    label: str
    steps: np.ndarray
    balanced: np.ndarray  # [T]
    balanced_smooth: np.ndarray  # [T]
    final: float


def score_runs(runs: list[Run], window: int, standardiser: Standardiser) -> list[RunScores]:
    scores = []
    for run in runs:
        balanced = standardiser.balanced(run.reward_mean)
        smoothed, _ = smooth(balanced, window)
        scores.append(RunScores(run.label, run.steps, balanced, smoothed, float(balanced[-window:].mean())))
    return scores


def steps_to_reach(scores: RunScores, target: float) -> int | None:
    """First step whose smoothed balanced score is >= ``target``; None if never."""
    reached = np.nonzero(scores.balanced_smooth >= target)[0]
    return int(scores.steps[reached[0]]) if len(reached) else None


def reach_table(scores: list[RunScores]) -> dict[tuple[str, str], int | None]:
    """(run, other) -> steps ``run`` needs to reach ``other``'s final score, for every ordered pair."""
    return {(a.label, b.label): steps_to_reach(a, b.final) for a in scores for b in scores if a is not b}
