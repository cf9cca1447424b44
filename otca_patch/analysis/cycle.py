"""The prompt cycle of a run: trainers walk through their prompts in a fixed order, so the per-step
mean reward repeats with the period of that walk (the smoke's DanceGRPO data: every 4 steps). A mean
over whole cycles removes that swing; a mean over part of one does not.

The run log does not name prompts, so the period is found from the per-step curve itself: for each
candidate period p the share of the (linearly detrended) curve's variance explained by its p phase
means, as an F statistic (which charges each extra phase, so a multiple of the true period loses to
it). ``--cycle`` overrides the estimate.
"""
from __future__ import annotations

import numpy as np

#: an F statistic of the phase means above this is taken as a cycle (about the 1% point for 20 steps)
MIN_F = 5.0


def _residual_sum(values: np.ndarray, period: int) -> float:
    """Residual sum of squares of the phase-means model of ``period`` (after a linear trend)."""
    n = len(values)
    t = np.arange(n)
    residual = values - np.polyval(np.polyfit(t, values, 1), t) if n > 2 else values - values.mean()
    phases = t % period
    fitted = np.array([residual[phases == j].mean() for j in range(period)])[phases]
    return float(((residual - fitted) ** 2).sum())


def _nested_f(values: np.ndarray, small: int, large: int) -> float:
    """F statistic of the phase-means model of period ``large`` against that of ``small`` (a divisor)."""
    n = len(values)
    rss_small, rss_large = _residual_sum(values, small), _residual_sum(values, large)
    if rss_small <= 0 or n - large < 2:
        return 0.0
    return ((rss_small - rss_large) / (large - small)) / (max(rss_large, 1e-12 * rss_small) / (n - large))


def detect_cycle(values: np.ndarray) -> tuple[int, str]:
    """(period, how it was found) of a per-step curve ``[T]``; period 1 when no cycle stands out.
    The period with the largest F against no cycle, then a multiple of it wherever the multiple
    explains significantly more (a nested F test: period 4 beats its divisor 2 when phases 0 and 2 differ).
    Candidates need at least two whole cycles plus two steps of residual."""
    values = np.asarray(values, dtype=float)
    n = len(values)
    candidates = [p for p in range(2, n // 2 + 1) if n - p >= 2]
    if not candidates:
        return 1, f"{n} steps are too few to look for a pattern that repeats with the trainer's prompt order"
    scores = {p: _nested_f(values, 1, p) for p in candidates}
    best = max(scores, key=scores.get)
    if scores[best] < MIN_F:
        return 1, "the per-step scores show no pattern that repeats with the trainer's prompt order"
    chosen = best
    for multiple in candidates:
        if multiple > chosen and multiple % chosen == 0 and _nested_f(values, chosen, multiple) >= MIN_F:
            chosen = multiple
    return chosen, (f"the per-step scores repeat every {chosen} steps (the trainer's prompt order), so each "
                    "stretch holds whole repeats")


def cycle_window(cycle: int, length: int) -> int:
    """The smallest multiple of ``cycle`` that is at least ``length ** (1/3)`` steps (and fits the run):
    the block of the block means and the smoothing window of the curves."""
    blocks = max(1, int(np.ceil(length ** (1 / 3) / cycle)))
    return max(1, min(cycle * blocks, length))
