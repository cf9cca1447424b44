"""The one rule that turns a difference's 95% interval into words; ``compare``, the demo and the
ablation all use it (the demo through ``intervals.pareto_verdict`` / ``sign_of``).

A difference (candidate minus reference, higher is better) with a practical threshold is

* **better** / **worse** when its interval lies wholly beyond ``+threshold`` / ``-threshold``;
* **no detectable difference** when its interval contains 0 and lies wholly within
  ``[-threshold, +threshold]``; **negligible** when it lies wholly within but excludes 0: either way no
  difference that matters;
* **not decided** otherwise: the interval reaches across a threshold, so the label would depend on
  the seeds (a few more could make it better, worse or negligible). Said as "not decided at N seeds",
  with the effect and its interval, never as a label.

Without a known threshold nothing is called negligible or undecided: the interval containing 0 gives
no detectable difference, else better / worse. An undefined interval (one seed, too few steps) is no
detectable difference.

The threshold is stated wherever a verdict is printed. Its default is ``DEFAULT_THRESHOLD`` times the
objective's spread (``compare``: the balanced score's per-objective sigma; the demo: the spread of
the evaluation samples at the start, in the table's units); ``--threshold`` changes the multiple.
"""
from __future__ import annotations

import math

#: the practical threshold, in units of the objective's spread (a tenth of a standard deviation)
DEFAULT_THRESHOLD = 0.1

NONE = "no detectable difference"
NEGLIGIBLE = "negligible"
BETTER = "better"
WORSE = "worse"
UNDECIDED = "not decided"


def classify(low: float, high: float, threshold: float | None) -> str:
    """``NONE``, ``NEGLIGIBLE``, ``BETTER``, ``WORSE`` or ``UNDECIDED`` for a 95% interval ``[low, high]``.
    ``threshold`` None or NaN: no practical threshold is known, so nothing is negligible or undecided."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return NONE
    if threshold is None or not math.isfinite(threshold):
        return NONE if low <= 0 <= high else BETTER if low > 0 else WORSE
    if low > threshold:
        return BETTER
    if high < -threshold:
        return WORSE
    if -threshold <= low and high <= threshold:
        return NONE if low <= 0 <= high else NEGLIGIBLE
    return UNDECIDED


def direction(low: float, high: float, threshold: float | None) -> int:
    """+1 better, -1 worse, 0 for no detectable, a negligible or an undecided difference."""
    return {BETTER: 1, WORSE: -1}.get(classify(low, high, threshold), 0)


def undecided_text(runs: int | None, unit: str = "seeds") -> str:
    """``UNDECIDED`` said with how many runs stand behind it: "not decided at 8 seeds"."""
    return f"{UNDECIDED} at {runs} {unit}" if runs else UNDECIDED


def threshold_text(threshold: float | None, unit: str = "") -> str:
    if threshold is None or not math.isfinite(threshold):
        return "no practical threshold (no spread known)"
    return f"+-{threshold:.4g}{unit}"
