"""Seed statistics: means with Student-t 95% intervals (``scipy.stats``' t quantile, exact for every
df: no 1.96 beyond df = 30), paired differences between two variants run with the same seeds, and a
Pareto verdict over the objectives (the rule that reads an interval is ``verdict``). Used by
``otca-patch compare`` (``difference``), the demo and the ablation."""
from __future__ import annotations

import math

import numpy as np
from scipy import stats

from .verdict import BETTER, NEGLIGIBLE, NONE, UNDECIDED, WORSE, classify, direction, threshold_text, undecided_text


def mean_interval(values, threshold: float | None = None) -> dict:
    """``{"mean", "low", "high", "n", "values"}``: the mean and its 95% t-interval (NaN bounds for n = 1);
    with ``threshold`` (the practical threshold of a difference, see ``analysis.verdict``) also
    ``"threshold"`` and ``"verdict"``."""
    array = np.asarray(values, dtype=float)
    n, mean = len(array), float(array.mean())
    # t times the standard error (not stats.t.interval: a zero spread gives a zero-width interval, not NaN)
    half = float(stats.t.ppf(0.975, n - 1) * stats.sem(array)) if n > 1 else math.nan
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
    open_ = [k for k, v in verdicts.items() if v == UNDECIDED]
    stated = "; practical thresholds " + ", ".join(f"{k} {threshold_text(limits[k])}" for k in differences)
    small = (f" The differences on {', '.join(negligible)} exclude 0 but lie within the practical threshold: "
             "negligible." if negligible else "")
    if open_ and not (better and worse):  # a label the next seeds could change: the effects say it instead
        runs = max((differences[k].get("n") or 0 for k in open_), default=0)
        effects = ", ".join(f"{k} {_effect(differences[k])}" for k in open_)
        decided = "; ".join(f"{verdicts[k]} on {k}" for k in differences if k not in open_)
        return (f"{undecided_text(runs).capitalize()}: the 95% interval of `{candidate}` - `{reference}` reaches "
                f"across the practical threshold on {effects}{f' ({decided})' if decided else ''}; more seeds "
                f"decide it ({stated[2:]}).")
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
    if all(limit is not None and math.isfinite(limit) for limit in limits.values()):
        return (f"No practical difference: every objective's 95% interval of `{candidate}` - `{reference}` "
                f"contains 0 and lies within the practical threshold ({stated[2:]}).")
    return (f"Not separated: every objective's 95% interval of `{candidate}` - `{reference}` contains 0 "
            f"at this number of seeds ({stated[2:]}).")


def _effect(interval: dict) -> str:
    """``+0.012 [-0.004, +0.028]``: the mean difference and its 95% interval."""
    return f"{interval['mean']:+.3f} [{interval['low']:+.3f}, {interval['high']:+.3f}]"


def plain_line(differences: dict, objectives, candidate: str, reference: str) -> str:
    """One plain line for a paired comparison (candidate minus reference, ``{column: mean_interval}``
    with each objective's practical threshold), e.g. ``"OTCA vs Multi-GRPO: palette -0.024, shape
    -0.016, edges no difference, more drift -> no gain here"``. An objective is named with its mean
    when it is better or worse (interval off 0 and beyond the threshold), else "negligible" or "no
    difference"; the drift when its interval is off 0; the conclusion follows ``pareto_verdict``'s rule."""
    parts, signs, undecided, runs = [], [], [], 0
    for name in objectives:
        d = differences[name]
        verdict = classify(d["low"], d["high"], d.get("threshold"))
        signs.append({BETTER: 1, WORSE: -1}.get(verdict, 0))
        undecided.append(verdict == UNDECIDED)
        runs = max(runs, d.get("n") or 0)
        parts.append(f"{name} {d['mean']:+.3f}".replace("-", "\u2212") if verdict in (BETTER, WORSE, UNDECIDED)
                     else f"{name} {'negligible' if verdict == NEGLIGIBLE else 'no difference'}")
    drift = differences.get("drift")
    if drift is not None and classify(drift["low"], drift["high"], None) != NONE:
        parts.append("more drift" if drift["low"] > 0 else "less drift")
    if any(undecided) and not (1 in signs and -1 in signs):  # the next seeds could change the label
        conclusion = undecided_text(runs)
    elif 1 in signs and -1 not in signs:
        conclusion = "a gain"
    elif -1 in signs and 1 not in signs:
        conclusion = "no gain here (worse)"
    elif 1 in signs:
        conclusion = "a trade-off"
    else:
        conclusion = "no practical difference"
    return f"{candidate} vs {reference}: " + ", ".join(parts) + f" \u2192 {conclusion}"
