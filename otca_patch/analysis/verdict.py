"""The one rule that turns a difference's 95% interval into words; ``compare``, the demo and the
ablation all use it (the demo through ``intervals.pareto_verdict`` / ``sign_of``).

A difference (candidate minus reference, higher is better) is

* **no detectable difference** when its interval contains 0 (or is undefined: one seed, too few steps);
* **negligible** when the interval excludes 0 but lies wholly within ``[-threshold, +threshold]``,
  the practical threshold: a difference that small is real but does not matter;
* **better** / **worse** otherwise.

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


def classify(low: float, high: float, threshold: float | None) -> str:
    """``NONE``, ``NEGLIGIBLE``, ``BETTER`` or ``WORSE`` for a 95% interval ``[low, high]``.
    ``threshold`` None or NaN: no practical threshold is known, so nothing is called negligible."""
    if not (math.isfinite(low) and math.isfinite(high)) or low <= 0 <= high:
        return NONE
    if threshold is not None and math.isfinite(threshold) and -threshold <= low and high <= threshold:
        return NEGLIGIBLE
    return BETTER if low > 0 else WORSE


def direction(low: float, high: float, threshold: float | None) -> int:
    """+1 better, -1 worse, 0 for no detectable or a negligible difference."""
    return {BETTER: 1, WORSE: -1}.get(classify(low, high, threshold), 0)


def threshold_text(threshold: float | None, unit: str = "") -> str:
    if threshold is None or not math.isfinite(threshold):
        return "no practical threshold (no spread known)"
    return f"+-{threshold:.4g}{unit}"
