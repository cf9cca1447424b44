"""Numbers the comparison reports: smoothed curves, the balanced score, steps-to-reach.

Definitions (the report repeats them):

* **window**: a whole number of prompt cycles (``cycle.cycle_window``), so a mean over it holds every
  prompt equally often and the prompt swing cancels; ``--window`` overrides it.
* **smoothed mean / band** of a per-step curve (plots): centred moving average over ``window`` steps;
  the band is that mean +- the standard deviation of the per-step values inside the same window.
* **balanced score** at step t: ``mean_k (m[t, k] - mu_k) / sigma_k`` where ``m[t, k]`` is objective
  k's mean reward at step t, ``mu_k`` the reference run's (the first run's) mean of m over its first
  window, and ``sigma_k`` a robust spread of objective k: the median, over every logged step of every
  run with per-sample rewards, of the within-step sample standard deviation (one odd step cannot move
  it). Without per-sample rewards (reward.txt only) it is the robust spread of the per-step means
  (1.4826 x their median absolute deviation; their std where that is 0), which the report says is a
  spread of step means, not of samples.
  An objective with no spread at all is left out of the balanced score, and the report says so.
* **final score**: the mean balanced score over a run's last ``window`` steps.
* **steps to reach**: the first step at which a run's trailing mean balanced score over ``window``
  steps (whole prompt cycles, so the swing cannot fake it) is at least another run's final score.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .logs import LogError, Run


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
    std: np.ndarray  # [K]; NaN: the objective has no spread and is left out of the balanced score
    how: tuple[str, ...]  # per objective: where its sigma came from

    @property
    def used(self) -> np.ndarray:
        return np.isfinite(self.std) & (self.std > 0)

    def balanced(self, reward_mean: np.ndarray) -> np.ndarray:
        """[T, K] per-step objective means -> [T] balanced score (over the objectives with a spread)."""
        used = self.used
        return ((reward_mean[:, used] - self.mean[used]) / self.std[used]).mean(axis=1)


MAD_TO_STD = 1.4826  # a normal distribution's std per median absolute deviation


def standardiser_from(runs, window: int = 1, reference: Run | None = None) -> Standardiser:
    """``runs``: the compared runs (or one run) whose spread gives sigma; ``reference`` (default the
    first run) gives mu over its first ``window`` steps. Raises ``LogError`` when no objective has any spread."""
    runs = [runs] if isinstance(runs, Run) else list(runs)
    reference = reference or runs[0]
    mean = reference.reward_mean[:window].mean(axis=0).astype(float)
    std, how = np.full(len(reference.objectives), np.nan), []
    for k, name in enumerate(reference.objectives):
        within = {run.label: run.reward_std[:, k][np.isfinite(run.reward_std[:, k])] for run in runs}
        within = {label: v for label, v in within.items() if len(v)}
        pooled = np.concatenate(list(within.values())) if within else np.array([])
        if len(pooled) and np.median(pooled) > 0:
            std[k] = float(np.median(pooled))
            how.append(f"median over {len(pooled)} logged steps of {', '.join(within)} of the within-step sample std")
            continue
        means = reference.reward_mean[:, k]
        spread = MAD_TO_STD * float(np.median(np.abs(means - np.median(means))))
        spread = spread if spread > 0 else float(means.std())
        if spread > 1e-12 * max(1.0, float(np.abs(means).max())):
            std[k] = spread
            how.append(f"no per-sample rewards: robust spread of {reference.label}'s per-step means "
                       "(a spread of step means, smaller than a sample std)")
        else:
            how.append("no spread in any run: left out of the balanced score")
    result = Standardiser(mean=mean, std=std, how=tuple(how))
    if not result.used.any():
        raise LogError(f"no objective varies in any run ({', '.join(reference.objectives)}): there is no scale for "
                       "the balanced score")
    return result


@dataclass
class RunScores:
    label: str
    steps: np.ndarray
    balanced: np.ndarray  # [T]
    balanced_smooth: np.ndarray  # [T] trailing mean over the window (NaN before it fills)
    final: float


def trailing_mean(values: np.ndarray, window: int) -> np.ndarray:
    """Mean of the last ``window`` values at each step; NaN before ``window`` steps exist."""
    values = np.asarray(values, dtype=float)
    out = np.full(len(values), np.nan)
    for end in range(window, len(values) + 1):  # summed directly: the last value equals the final score exactly
        out[end - 1] = values[end - window:end].mean()
    return out


def score_runs(runs: list[Run], window: int, standardiser: Standardiser) -> list[RunScores]:
    scores = []
    for run in runs:
        balanced = standardiser.balanced(run.reward_mean)
        scores.append(RunScores(run.label, run.steps, balanced, trailing_mean(balanced, window),
                                float(balanced[-window:].mean())))
    return scores


def steps_to_reach(scores: RunScores, target: float) -> int | None:
    """First step whose trailing mean balanced score over the window is >= ``target``; None if never."""
    with np.errstate(invalid="ignore"):
        reached = np.nonzero(scores.balanced_smooth >= target)[0]
    return int(scores.steps[reached[0]]) if len(reached) else None


def reach_table(scores: list[RunScores]) -> dict[tuple[str, str], int | None]:
    """(run, other) -> steps ``run`` needs to reach ``other``'s final score, for every ordered pair."""
    return {(a.label, b.label): steps_to_reach(a, b.final) for a in scores for b in scores if a is not b}
