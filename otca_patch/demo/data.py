"""The synthetic, prompt-conditioned image set: "a <colour> <shape> on <colour>" rendered as a
small RGB image in [-1, 1]. Generated on the fly from a generator (no files, no downloads)."""
from __future__ import annotations

import torch

#: Named colours (RGB in [0, 1]). Several are dark or saturated, so that brightening or adding
#: contrast moves pixels off the prompt's palette: the objectives then truly conflict.
COLOURS = {
    "red": (0.85, 0.12, 0.10),
    "green": (0.12, 0.60, 0.20),
    "blue": (0.12, 0.22, 0.85),
    "yellow": (0.95, 0.85, 0.15),
    "purple": (0.50, 0.18, 0.65),
    "orange": (0.95, 0.55, 0.10),
    "white": (0.92, 0.92, 0.92),
    "black": (0.06, 0.06, 0.06),
}
SHAPES = ("circle", "square", "triangle")
COLOUR_NAMES = tuple(COLOURS)
#: Word vocabulary of the text embedding: colours first, then shapes.
VOCAB = COLOUR_NAMES + SHAPES
#: A prompt is three word ids: (object colour, shape, background colour).
PROMPT_LENGTH = 3


def colour_table() -> torch.Tensor:
    """``[n_colours, 3]`` RGB in [0, 1], in ``COLOUR_NAMES`` order."""
    return torch.tensor([COLOURS[name] for name in COLOUR_NAMES], dtype=torch.float32)


def sample_prompts(n: int, generator: torch.Generator) -> torch.Tensor:
    """``[n, 3]`` word ids (object colour, shape, background colour), the two colours different."""
    n_colours = len(COLOUR_NAMES)
    fg = torch.randint(0, n_colours, (n,), generator=generator)
    # an offset in 1..n-1 guarantees a background colour different from the object's
    bg = (fg + torch.randint(1, n_colours, (n,), generator=generator)) % n_colours
    shape = torch.randint(0, len(SHAPES), (n,), generator=generator) + n_colours
    return torch.stack([fg, shape, bg], dim=1)


def prompt_text(prompt_ids: torch.Tensor) -> list[str]:
    """``[n, 3]`` ids -> ``["a red circle on blue", ...]``."""
    return [f"a {VOCAB[int(f)]} {VOCAB[int(s)]} on {VOCAB[int(b)]}" for f, s, b in prompt_ids.tolist()]


def prompt_colours(prompt_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Object and background RGB of each prompt: two ``[n, 3]`` tensors in [0, 1]."""
    table = colour_table().to(prompt_ids.device)
    return table[prompt_ids[:, 0]], table[prompt_ids[:, 2]]


def render(prompt_ids: torch.Tensor, image_size: int, generator: torch.Generator) -> torch.Tensor:
    """Draw each prompt's shape at a random place and size: ``[n, 3] -> [n, 3, H, W]`` in [-1, 1].

    Vectorised over the batch: every shape is a mask on a shared pixel grid.
    """
    n = prompt_ids.shape[0]
    size = float(image_size)
    radius = (0.18 + 0.14 * torch.rand(n, generator=generator)) * size  # half-extent in pixels
    centre = radius.unsqueeze(1) + torch.rand(n, 2, generator=generator) * (size - 2 * radius).unsqueeze(1)
    coords = torch.arange(image_size, dtype=torch.float32) + 0.5
    y = coords.view(1, -1, 1) - centre[:, 1].view(-1, 1, 1)  # [n, H, 1]
    x = coords.view(1, 1, -1) - centre[:, 0].view(-1, 1, 1)  # [n, 1, W]
    r = radius.view(-1, 1, 1)
    circle = x * x + y * y <= r * r
    square = (x.abs() <= 0.85 * r) & (y.abs() <= 0.85 * r)
    # apex up: the half-width grows linearly from the top edge to the base
    triangle = (y >= -r) & (y <= r) & (x.abs() <= (y + r) * 0.5)
    shape_index = (prompt_ids[:, 1] - len(COLOUR_NAMES)).view(-1, 1, 1)
    mask = torch.where(shape_index == 0, circle, torch.where(shape_index == 1, square, triangle))  # [n, H, W]
    fg, bg = prompt_colours(prompt_ids)
    image = torch.where(mask.unsqueeze(1), fg.view(n, 3, 1, 1), bg.view(n, 3, 1, 1))
    return image * 2 - 1
