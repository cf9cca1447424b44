"""The difference between two sides of a comparison, per objective and for the balanced score, with a
95% interval and a verdict (``verdict.classify``).

* **Several runs per side** (seeds): each run's mean over the compared steps; runs paired by their
  order when both sides have the same number (``ab --seeds`` runs seed i on both sides), a Student-t
  interval of the paired differences; otherwise Welch's interval of the two sides' means.
* **One run per side**: the A/B sides share prompts and noise, so the difference is taken step by
  step (same step, same prompts) and the prompt effect cancels. Consecutive steps are still
  correlated (the same model, the prompt walk), so the interval is a batch-means interval: the
  differences are cut into consecutive blocks of whole prompt cycles (``cycle.cycle_window``) and the
  Student-t interval is taken over the block means. A difference is called only when the interval
  of the whole run and those of both halves (first and second half of the blocks) exclude 0 on the
  same side: a gap that depends on where the run stops is not a difference.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy import stats

from .intervals import mean_interval
from .logs import Run
from .verdict import BETTER, UNDECIDED, WORSE, classify


@dataclass
class Difference:
    """candidate - reference of one quantity (an objective's mean reward, or the balanced score)."""

    name: str
    reference: float  # the reference side's mean over the compared steps (and runs)
    candidate: float
    mean: float
    low: float
    high: float
    threshold: float
    verdict: str
    method: str
    notes: list[str] = field(default_factory=list)


def common_steps(runs: list[Run]) -> np.ndarray:
    steps = set(runs[0].steps.tolist())
    for run in runs[1:]:
        steps &= set(run.steps.tolist())
    return np.array(sorted(steps), dtype=int)


def at_steps(run: Run, values: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """Rows of ``values`` (aligned with ``run.steps``) at ``steps``."""
    index = {int(s): i for i, s in enumerate(run.steps)}
    return values[[index[int(s)] for s in steps]]


def block_interval(differences: np.ndarray, block: int) -> dict:
    """Batch means: the last ``len // block`` whole blocks of ``differences [T]`` (the earliest
    remainder, where both sides are closest to the shared start, is left out); their mean and
    Student-t 95% interval over the block means (NaN bounds with fewer than two blocks)."""
    count = len(differences) // block
    if count == 0:
        return {"mean": math.nan, "low": math.nan, "high": math.nan, "n": 0, "values": []}
    used = differences[len(differences) - count * block:]
    return mean_interval(used.reshape(count, block).mean(axis=1))


def welch_interval(reference: np.ndarray, candidate: np.ndarray) -> dict:
    """candidate mean - reference mean with Welch's 95% interval (unpaired runs: ``scipy.stats``' Welch t
    test, Welch-Satterthwaite's df unrounded). Both sides constant: the zero-width interval at the
    difference (where scipy's would be NaN)."""
    mean = float(candidate.mean() - reference.mean())
    if not (reference.var() > 0 or candidate.var() > 0):
        return {"mean": mean, "low": mean, "high": mean}
    low, high = stats.ttest_ind(candidate, reference, equal_var=False).confidence_interval(0.95)
    return {"mean": mean, "low": float(low), "high": float(high)}


def compare_sides(reference: list[Run], candidate: list[Run], series, names: list[str], thresholds: list[float],
                  block: int) -> list[Difference]:
    """One ``Difference`` per column of ``series(run) -> [T, Q]`` (named ``names``; practical
    thresholds ``thresholds``), over the steps every run of both sides logged."""
    steps = common_steps(reference + candidate)
    ref = np.stack([at_steps(run, series(run), steps) for run in reference])  # [R, T, Q]
    cand = np.stack([at_steps(run, series(run), steps) for run in candidate])
    ref_side, cand_side = ref.mean(axis=(0, 1)), cand.mean(axis=(0, 1))
    out = []
    for q, (name, threshold) in enumerate(zip(names, thresholds)):
        notes = []
        if len(reference) >= 2 and len(candidate) >= 2:
            per_ref, per_cand = ref[:, :, q].mean(axis=1), cand[:, :, q].mean(axis=1)
            if len(reference) == len(candidate):
                interval = mean_interval(per_cand - per_ref)
                method = (f"{len(reference)} seeds on each side, paired by seed: the spread of the {len(reference)} "
                          "per-seed differences (Student t)")
            else:
                interval = welch_interval(per_ref, per_cand)
                method = (f"{len(reference)} and {len(candidate)} seeds, not paired: the spread of each side's "
                          "per-seed means (Welch t)")
            verdict = classify(interval["low"], interval["high"], threshold)
        else:
            paired = cand[:, :, q].mean(axis=0) - ref[:, :, q].mean(axis=0)  # [T]: same step, same prompts
            interval = block_interval(paired, block)
            blocks = interval["n"]
            method = (f"one run per side: the sides' difference at each step (the same step saw the same prompts and "
                      f"noise on both), averaged over {blocks} consecutive stretch(es) of {block} steps; the spread of "
                      f"those {blocks} averages (Student t)")
            verdict = classify(interval["low"], interval["high"], threshold)
            if blocks < 2:
                notes.append(f"only {len(steps)} common steps: fewer than two blocks of {block}, no interval")
            elif verdict in (BETTER, WORSE):
                used = paired[len(paired) - blocks * block:]
                cut = (blocks // 2) * block
                halves = [block_interval(part, block) for part in (used[:cut], used[cut:])]
                agree = [classify(h["low"], h["high"], threshold) == verdict for h in halves]
                if not all(agree):
                    text = ", ".join(f"{which} half {h['mean']:+.4g} [{h['low']:+.4g}, {h['high']:+.4g}]"
                                     for which, h in zip(("first", "second"), halves))
                    notes.append(f"{verdict} over the whole run, but not in both halves ({text}): "
                                 "the gap depends on where the run stops")
                    verdict = UNDECIDED
        out.append(Difference(name, float(ref_side[q]), float(cand_side[q]), interval["mean"], interval["low"],
                              interval["high"], threshold, verdict, method, notes))
    return out
