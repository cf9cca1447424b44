"""``samples.png`` of a comparison: the samples each run kept (``otca_patch.samples``) at its first
and its last training step, one row per run, one column per prompt."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from ..sample_grid import Grid, sample_grid
from ..samples import AGAIN, FIRST, LAST, read_kept
from .sides import Side

FILE = "samples.png"


def run_folder(side: Side) -> Path:
    """The folder whose samples stand for ``side``: its run, or its first seed's."""
    path = Path(side.runs[0].path)
    return path if path.is_dir() else path.parent


def samples_figure(sides: list[Side], out: Path) -> Optional[str]:
    """Write ``out/samples.png`` and return the report's lines about it; None when no run kept samples."""
    laid_out = panel_grid(sides)
    if laid_out is None:
        return None
    grid, lines = laid_out
    grid.save(out / FILE)
    return lines


def panel_grid(sides: list[Side]) -> Optional[tuple[Grid, str]]:
    """The grid of the runs' kept samples and the report's lines about it (None: no run kept any).
    The later columns show the same prompts as the first step's: the latest step that saw them again
    (the reference's); only when the reference never came back to them, its last step, said so."""
    folders = [run_folder(side) for side in sides]
    first = [read_kept(folder, FIRST) for folder in folders]
    if all(k is None for k in first):
        return None
    again = [read_kept(folder, AGAIN) for folder in folders]
    reference_again = next((k for k, f in zip(again, first) if f is not None), None)
    if reference_again is not None:
        later, later_title = again, "the same prompts again"
    else:
        later = [read_kept(folder, LAST) for folder in folders]
        reference_first, reference_last = next(((f, k) for f, k in zip(first, later) if f is not None))
        same = reference_last is None or reference_last.prompts == reference_first.prompts
        later_title = "last step" if same else "last step, other prompts"
    rows = [(side.label, []) for side in sides]
    columns, groups, mismatched = [], [], []
    for kept, title in ((first, "first step"), (later, later_title)):
        present = [k for k in kept if k is not None]
        if not present or (kept is not first and [k.step for k in present] == [k.step for k in first if k]):
            continue  # a one-step run: its last step is its first
        reference = present[0]
        steps = sorted({k.step for k in present})
        groups.append((f"{title}: step {' / '.join(map(str, steps))}", len(reference.prompts)))
        columns += reference.prompts
        for (label, cells), side_kept in zip(rows, kept):
            images = [] if side_kept is None else side_kept.images
            cells += [images[i] if i < len(images) else None for i in range(len(reference.prompts))]
            if side_kept is not None and side_kept.prompts[:len(reference.prompts)] != reference.prompts:
                mismatched.append(f"{label} ({title})")
    grid = sample_grid(rows, columns, groups=groups)
    later_shown = None if len(groups) < 2 else later_title != "last step, other prompts"
    return grid, "\n".join(_caption(sides, first, later_shown, mismatched))


def _caption(sides: list[Side], first: list, same_prompts: bool | None, mismatched: list) -> list[str]:
    """The report's lines under the grid; ``same_prompts``: whether the later columns repeat the first
    step's prompts (None: no later columns)."""
    seeds = " (each side's first seed)" if any(side.count > 1 for side in sides) else ""
    lines = [f"![samples]({FILE})", "",
             f"Rank 0's samples{seeds}, up to four, different prompts first (a video: frames from its start to its "
             "end). Runs with the same seed see the same prompts and noise at a step, so runs that start from the "
             "same weights show the same first-step samples."]
    if same_prompts:
        lines.append("Left: the first training step; right: the latest step that saw the same prompts again: what "
                     "training changed, prompt by prompt (that step's noise may differ from the first's).")
    elif same_prompts is False:
        lines.append("The trainer never came back to the first step's prompts (a run shorter than one pass over its "
                     "prompts), so the right-hand columns are the last step's, with other prompts: compare the rows "
                     "there (the same step, prompts and noise), not the left with the right.")
    if mismatched:
        lines.append(f"Not the reference's prompts: {', '.join(mismatched)} (the runs did not share their seed or "
                     "data order); compare those panels with care.")
    missing = [side.label for side, k in zip(sides, first) if k is None]
    if missing:
        lines.append(f"No samples kept by {', '.join(missing)} (a run without the layer, or one from before it kept "
                     "samples): grey panels.")
    return lines
