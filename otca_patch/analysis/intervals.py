"""Seed statistics: means with Student-t 95% intervals (the exact t quantile of ``student_t``, for
every df), paired differences between two variants run with the same seeds, and a Pareto verdict
over the objectives (the rule that reads an interval is ``verdict``). Used by ``otca-patch compare``
(``difference``), the demo and the ablation."""
from __future__ import annotations

import math

import numpy as np

from .student_t import t_quantile_975
from .verdict import NEGLIGIBLE, NONE, classify, direction, threshold_text


def mean_interval(values, threshold: float | None = None) -> dict:
    """``{"mean", "low", "high", "n", "values"}``: the mean and its 95% t-interval (NaN bounds for n = 1);
    with ``threshold`` (the practical threshold of a difference, see ``analysis.verdict``) also
    ``"threshold"`` and ``"verdict"``."""
    array = np.asarray(values, dtype=float)
    n, mean = len(array), float(array.mean())
    half = t_quantile_975(n - 1) * float(array.std(ddof=1)) / math.sqrt(n) if n > 1 else math.nan
    interval = {"mean": mean, "low": mean - half, "high": mean + half, "n": n, "values": array.tolist()}
    if threshold is not None:
        interval.update(threshold=float(threshold), verdict=classify(interval["low"], interval["high"], threshold))
    return interval


def sign_of(interval: dict, threshold: float | None = None) -> int:
    """+1 if the interval lies above 0, -1 if below, 0 if it contains 0 (or is undefined) or lies
    wholly within the practical threshold (``threshold``, else the interval's own ``"threshold"``)."""
    return direction(interval["low"], interval["high"], interval.get("threshold") if threshold is None else threshold)


def pareto_verdict(differences: dict, candidate: str, reference: str, thresholds: dict | None = None) -> str:
    """One sentence from per-objective paired-difference intervals ``{objective: mean_interval}``
    (candidate minus reference). An objective counts as better or worse only when its interval
    excludes 0 and leaves the practical threshold (``thresholds[objective]``, else the interval's
    own ``"threshold"``); the thresholds are stated in the sentence."""
    limits = {k: (thresholds or {}).get(k, v.get("threshold")) for k, v in differences.items()}
    verdicts = {k: classify(v["low"], v["high"], limits[k]) for k, v in differences.items()}
    signs = {k: sign_of(v, limits[k]) for k, v in differences.items()}
    better = [k for k, s in signs.items() if s > 0]
    worse = [k for k, s in signs.items() if s < 0]
    negligible = [k for k, v in verdicts.items() if v == NEGLIGIBLE]
    stated = "; practical thresholds " + ", ".join(f"{k} {threshold_text(limits[k])}" for k in differences)
    small = (f" The differences on {', '.join(negligible)} exclude 0 but lie within the practical threshold: "
             "negligible." if negligible else "")
    if better and not worse:
        return (f"`{candidate}` Pareto-dominates `{reference}`: better on {', '.join(better)} (95% interval above 0 "
                f"and beyond the practical threshold), not worse on any objective.{small} ({stated[2:]}.)")
    if worse and not better:
        return (f"`{reference}` Pareto-dominates `{candidate}`: `{candidate}` is worse on {', '.join(worse)} "
                f"(95% interval below 0 and beyond the practical threshold), not better on any objective.{small} "
                f"({stated[2:]}.)")
    if better and worse:
        return (f"A trade-off: `{candidate}` is better on {', '.join(better)} and worse on {', '.join(worse)} "
                f"than `{reference}` (95% intervals{stated}).{small}")
    if negligible:
        unseparated = [k for k, v in verdicts.items() if v == NONE]
        rest = (f" On {', '.join(unseparated)} the 95% interval contains 0 (not separated at this number of seeds)."
                if unseparated else "")
        return (f"No practical difference: `{candidate}` - `{reference}` is neither better nor worse on any "
                f"objective.{small}{rest} ({stated[2:]}.)")
    return (f"Not separated: every objective's 95% interval of `{candidate}` - `{reference}` contains 0 "
            f"at this number of seeds ({stated[2:]}).")
