"""``samples.png`` of a comparison: the samples each run kept (``otca_patch.samples``) at its first
and its last training step, one row per run, one column per prompt."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from ..sample_grid import Grid, sample_grid
from ..samples import FIRST, LAST, read_kept
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
    """The grid of the runs' kept samples and the report's lines about it (None: no run kept any)."""
    kept = {which: [read_kept(run_folder(side), which) for side in sides] for which in (FIRST, LAST)}
    if all(k is None for k in kept[FIRST]):
        return None
    rows = [(side.label, []) for side in sides]
    columns, groups, mismatched = [], [], []
    for which, title in ((FIRST, "first step"), (LAST, "last step")):
        present = [k for k in kept[which] if k is not None]
        if which == LAST and [k.step for k in present] == [k.step for k in kept[FIRST] if k is not None]:
            continue  # a one-step run: its last step is its first
        reference = present[0]
        steps = sorted({k.step for k in present})
        groups.append((f"{title} ({' / '.join(map(str, steps))})", len(reference.prompts)))
        columns += reference.prompts
        for (label, cells), side_kept in zip(rows, kept[which]):
            images = [] if side_kept is None else side_kept.images
            cells += [images[i] if i < len(images) else None for i in range(len(reference.prompts))]
            if side_kept is not None and side_kept.prompts[:len(reference.prompts)] != reference.prompts:
                mismatched.append(f"{label} ({title})")
    grid = sample_grid(rows, columns, groups=groups)
    seeds = " (each side's first seed)" if any(side.count > 1 for side in sides) else ""
    lines = [f"![samples]({FILE})", "",
             f"Rank 0's samples{seeds} at the first and the last training step, up to four, different prompts "
             "first (a video: frames from its start to its end). Runs with the same seed see the same prompts "
             "and noise at a step, so runs that start from the same weights show the same first-step samples."]
    if mismatched:
        lines.append(f"Not the reference's prompts: {', '.join(mismatched)} (the runs did not share their seed or "
                     "data order); compare those panels with care.")
    missing = [side.label for side, k in zip(sides, kept[FIRST]) if k is None]
    if missing:
        lines.append(f"No samples kept by {', '.join(missing)} (a run without the layer, or one from before it kept "
                     "samples): grey panels.")
    return grid, "\n".join(lines)
