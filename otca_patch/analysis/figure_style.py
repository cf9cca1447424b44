"""What every figure shares: matplotlib without a display, steps on whole-number ticks, and one look
per run (colour, line style, marker), so that runs drawn over each other all stay visible and a line
in the figure says which of them coincide."""
from __future__ import annotations

import numpy as np

from ..files import atomic_path

LINE_STYLES = ("-", "--", ":", "-.")
MARKERS = ("o", "x", "s", "^", "v", "D", "+", "*")
#: a step axis with at most this many steps gets a tick at every step
EVERY_STEP_TICKS = 12
#: curves closer than this share of the plotted range at every step are drawn over each other
COINCIDE_SHARE = 0.01


def pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def save(fig, path):
    """Written to a temporary name and renamed: an interrupted run never leaves half a PNG."""
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
    pyplot().close(fig)
    return path


def run_look(index: int) -> dict:
    """The colour, line style and marker of the ``index``-th run (the first solid, the next dashed, ...)."""
    return {"color": f"C{index % 10}", "linestyle": LINE_STYLES[index % len(LINE_STYLES)],
            "marker": MARKERS[index % len(MARKERS)]}


def tint(colour: str, share: float = 0.4) -> tuple:
    """``colour`` mixed with ``share`` of white: the light, opaque version of a run's colour."""
    from matplotlib.colors import to_rgb

    return tuple(c + (1.0 - c) * share for c in to_rgb(colour))


def step_ticks(axis, first: int, last: int) -> None:
    """Whole-number ticks on a step axis (``ax.xaxis`` or ``ax.yaxis``) running from ``first`` to ``last``:
    every step when there are few, else whole numbers only."""
    from matplotlib.ticker import MaxNLocator

    if last - first + 1 <= EVERY_STEP_TICKS:
        axis.set_ticks(range(int(first), int(last) + 1))
    else:
        axis.set_major_locator(MaxNLocator(integer=True))


def coinciding(curves: list[tuple[np.ndarray, np.ndarray]]) -> list[list[int]]:
    """Groups (two or more indices) of ``(steps, values)`` curves that lie within ``COINCIDE_SHARE`` of the
    range of all values at every step they share: drawn, they cover one another."""
    finite = [np.asarray(v, dtype=float)[np.isfinite(v)] for _, v in curves]
    values = np.concatenate(finite) if finite else np.array([])
    span = float(values.max() - values.min()) if values.size else 0.0
    tolerance = COINCIDE_SHARE * span if span > 0 else 1e-12 * max(1.0, float(np.abs(values).max(initial=0.0)))
    groups: list[list[int]] = []
    for index, (steps, vals) in enumerate(curves):
        for group in groups:
            first_steps, first_vals = curves[group[0]]
            shared, mine, theirs = np.intersect1d(steps, first_steps, return_indices=True)
            gap = np.abs(np.asarray(vals, dtype=float)[mine] - np.asarray(first_vals, dtype=float)[theirs])
            if shared.size and np.nanmax(gap, initial=0.0) <= tolerance:
                group.append(index)
                break
        else:
            groups.append([index])
    return [group for group in groups if len(group) > 1]


def coincide_note(labels: list[str], groups: list[list[int]], looks: list[int] | None = None) -> str:
    """The line a figure carries about its coinciding curves ('' when none coincide); ``groups`` index
    ``labels``; curve ``i`` was drawn with ``run_look(looks[i])`` (default ``run_look(i)``)."""
    looks = list(range(len(labels))) if looks is None else looks
    parts = []
    for group in groups:
        names = [labels[i] for i in group]
        parts.append(f"{', '.join(names[:-1])} and {names[-1]} are equal here (within {COINCIDE_SHARE:.0%} of "
                     f"the scale everywhere), drawn over each other: {names[-1]} is the "
                     f"{STYLE_WORDS[run_look(looks[group[-1]])['linestyle']]} line on top")
    return "; ".join(parts)


STYLE_WORDS = {"-": "solid", "--": "dashed", ":": "dotted", "-.": "dash-dotted"}


def note_coinciding(ax, labels: list[str], curves: list[tuple[np.ndarray, np.ndarray]], width: int = 70,
                    looks: list[int] | None = None) -> str:
    """Writes ``coincide_note`` (wrapped to ``width`` characters) under the axes' title when some of
    ``curves`` (one per label, drawn with the ``run_look`` of ``looks``) coincide; returns the note."""
    import textwrap

    note = coincide_note(labels, coinciding(curves), looks)
    if note:
        ax.set_title("\n".join([ax.get_title(), *textwrap.wrap(note, width)]), fontsize=9)
    return note
