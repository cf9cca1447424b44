"""Seed statistics: means with Student-t 95% intervals, paired differences between two variants
run with the same seeds, and a Pareto verdict over the objectives."""
from __future__ import annotations

import math

import numpy as np

#: Two-sided 95% Student-t quantiles t_{0.975, df} for df = 1..30 (beyond: the normal 1.96).
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t_quantile_975(df: int) -> float:
    if df < 1:
        return math.nan
    return _T975[df - 1] if df <= len(_T975) else 1.96


def mean_interval(values) -> dict:
    """``{"mean", "low", "high", "n", "values"}``: the mean and its 95% t-interval (NaN bounds for n = 1)."""
    array = np.asarray(values, dtype=float)
    n, mean = len(array), float(array.mean())
    half = t_quantile_975(n - 1) * float(array.std(ddof=1)) / math.sqrt(n) if n > 1 else math.nan
    return {"mean": mean, "low": mean - half, "high": mean + half, "n": n, "values": array.tolist()}


def sign_of(interval: dict) -> int:
    """+1 if the interval lies above 0, -1 if below, 0 if it contains 0 (or is undefined)."""
    if interval["low"] > 0:
        return 1
    if interval["high"] < 0:
        return -1
    return 0


def pareto_verdict(differences: dict, candidate: str, reference: str) -> str:
    """One sentence from per-objective paired-difference intervals ``{objective: mean_interval}``
    (candidate minus reference)."""
    signs = {k: sign_of(v) for k, v in differences.items()}
    better = [k for k, s in signs.items() if s > 0]
    worse = [k for k, s in signs.items() if s < 0]
    if better and not worse:
        return (f"`{candidate}` Pareto-dominates `{reference}`: better on {', '.join(better)} (95% interval above 0), "
                "not worse on any objective.")
    if worse and not better:
        return (f"`{reference}` Pareto-dominates `{candidate}`: `{candidate}` is worse on {', '.join(worse)} "
                "(95% interval below 0), not better on any objective.")
    if better and worse:
        return (f"A trade-off: `{candidate}` is better on {', '.join(better)} and worse on {', '.join(worse)} "
                f"than `{reference}` (95% intervals).")
    return (f"Not separated: every objective's 95% interval of `{candidate}` - `{reference}` contains 0 "
            "at this number of seeds.")
