"""What an A/B run's ``compare/samples.png`` must show (tests of ``otca-patch ab``, synthetic and real)."""
from pathlib import Path

import numpy as np
from PIL import Image


def check_ab_samples(out: Path, columns: int, last_differs: list | None = None) -> None:
    """``out/compare/samples.png`` is the grid of both sides' kept samples (rows vanilla, otca; ``columns``
    prompts at the first step, then at the last): the sides started from the same weights, prompts
    and noise, so every first-step cell of one side equals the other's; a last-step cell differs
    where ``last_differs`` says (None: at least one does, the sides trained differently)."""
    from otca_patch.analysis.sample_panels import panel_grid
    from otca_patch.analysis.sides import load_side

    written = Image.open(out / "compare" / "samples.png").convert("RGB")
    grid, _ = panel_grid([load_side(out / "vanilla", "vanilla"), load_side(out / "otca", "otca")])
    assert written.size == grid.image.size and np.array_equal(np.asarray(written), np.asarray(grid.image))
    assert sorted(grid.boxes) == [(row, c) for row in (0, 1) for c in range(2 * columns)]
    cell = {key: np.asarray(written.crop(box)) for key, box in grid.boxes.items()}
    for c in range(columns):
        assert np.array_equal(cell[0, c], cell[1, c]), f"first-step column {c} differs between the sides"
        assert not np.array_equal(cell[0, c], cell[0, columns + c])  # the last step is another picture
    differs = [not np.array_equal(cell[0, columns + c], cell[1, columns + c]) for c in range(columns)]
    assert differs == last_differs if last_differs is not None else any(differs), differs
