"""The synthetic, prompt-conditioned image task: "a <size> <colour> <shape> on <colour>".

The *clean render* of a prompt is fully determined by it: the shape centred, its half-extent set by
the size word, in exactly the two named colours. The base model is pre-trained on a *corrupted
mixture* of renders (colour jitter, blur, wrong size or place, each with probability
``corrupt_prob``), so it samples a mixture of clean and corrupted images: the objectives of
``pixel_rewards`` are all maximised (at 1) by the clean render, so a joint optimum exists and is
known, and GRPO has room to move towards it. Generated on the fly from a generator (no files).
"""
from __future__ import annotations

import torch

#: Named colours (RGB in [0, 1]).
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
#: Size words and the clean half-extent each names, as a fraction of the image side.
SIZES = {"small": 0.24, "large": 0.40}
COLOUR_NAMES, SIZE_NAMES = tuple(COLOURS), tuple(SIZES)
#: Word vocabulary of the text embedding: colours, shapes, sizes.
VOCAB = COLOUR_NAMES + SHAPES + SIZE_NAMES
#: A prompt is four word ids: (object colour, shape, background colour, size).
PROMPT_LENGTH = 4
CORRUPTIONS = ("colour_jitter", "blur", "misplacement")
#: Corruptions only some regimes use; drawn after every one of ``CORRUPTIONS`` and only when named, so
#: the mixtures (and cached base models) of the regimes without them are unchanged.
EXTRA_CORRUPTIONS = ("fading",)


def colour_table() -> torch.Tensor:
    """``[n_colours, 3]`` RGB in [0, 1], in ``COLOUR_NAMES`` order."""
    return torch.tensor([COLOURS[name] for name in COLOUR_NAMES], dtype=torch.float32)


def sample_prompts(n: int, generator: torch.Generator) -> torch.Tensor:
    """``[n, 4]`` word ids (object colour, shape, background colour, size), the two colours different."""
    n_colours = len(COLOUR_NAMES)
    fg = torch.randint(0, n_colours, (n,), generator=generator)
    # an offset in 1..n-1 guarantees a background colour different from the object's
    bg = (fg + torch.randint(1, n_colours, (n,), generator=generator)) % n_colours
    shape = torch.randint(0, len(SHAPES), (n,), generator=generator) + n_colours
    size = torch.randint(0, len(SIZES), (n,), generator=generator) + n_colours + len(SHAPES)
    return torch.stack([fg, shape, bg, size], dim=1)


def prompt_text(prompt_ids: torch.Tensor) -> list[str]:
    """``[n, 4]`` word ids -> the prompts as words: "a <size> <colour> <shape> on <colour>"."""
    return [f"a {VOCAB[size]} {VOCAB[fg]} {VOCAB[shape]} on {VOCAB[bg]}" for fg, shape, bg, size in prompt_ids.tolist()]


def prompt_colours(prompt_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Object and background RGB of each prompt: two ``[n, 3]`` tensors in [0, 1]."""
    table = colour_table().to(prompt_ids.device)
    return table[prompt_ids[:, 0]], table[prompt_ids[:, 2]]


def prompt_radius(prompt_ids: torch.Tensor, image_size: int) -> torch.Tensor:
    """``[n]`` clean half-extent in pixels named by each prompt's size word."""
    fractions = torch.tensor([SIZES[name] for name in SIZE_NAMES])
    return fractions[prompt_ids[:, 3] - len(COLOUR_NAMES) - len(SHAPES)] * image_size


def shape_mask(prompt_ids: torch.Tensor, image_size: int, centre: torch.Tensor, radius: torch.Tensor) -> torch.Tensor:
    """``[n, H, W]`` bool mask of each prompt's shape at ``centre [n, 2]`` (x, y) with half-extent ``radius [n]``."""
    coords = torch.arange(image_size, dtype=torch.float32) + 0.5
    y = coords.view(1, -1, 1) - centre[:, 1].view(-1, 1, 1)  # [n, H, 1]
    x = coords.view(1, 1, -1) - centre[:, 0].view(-1, 1, 1)  # [n, 1, W]
    r = radius.view(-1, 1, 1)
    circle = x * x + y * y <= r * r
    square = (x.abs() <= 0.85 * r) & (y.abs() <= 0.85 * r)
    # apex up: the half-width grows linearly from the top edge to the base
    triangle = (y >= -r) & (y <= r) & (x.abs() <= (y + r) * 0.5)
    index = (prompt_ids[:, 1] - len(COLOUR_NAMES)).view(-1, 1, 1)
    return torch.where(index == 0, circle, torch.where(index == 1, square, triangle))


def template_mask(prompt_ids: torch.Tensor, image_size: int) -> torch.Tensor:
    """``[n, H, W]`` the clean render's shape mask: centred, the size word's half-extent."""
    centre = torch.full((prompt_ids.shape[0], 2), image_size / 2)
    return shape_mask(prompt_ids, image_size, centre, prompt_radius(prompt_ids, image_size))


def paint(mask: torch.Tensor, fg: torch.Tensor, bg: torch.Tensor) -> torch.Tensor:
    """``mask [n, H, W]``, colours ``[n, 3]`` in [0, 1] -> image ``[n, 3, H, W]`` in [-1, 1]."""
    n = mask.shape[0]
    return torch.where(mask.unsqueeze(1), fg.view(n, 3, 1, 1), bg.view(n, 3, 1, 1)) * 2 - 1


def clean_render(prompt_ids: torch.Tensor, image_size: int) -> torch.Tensor:
    """The prompt's one correct image (the joint optimum of every objective): ``[n, 4] -> [n, 3, H, W]``."""
    fg, bg = prompt_colours(prompt_ids)
    return paint(template_mask(prompt_ids, image_size), fg, bg)


def box_blur(images: torch.Tensor) -> torch.Tensor:
    """3x3 mean filter with edge replication, ``[n, 3, H, W]`` -> same."""
    padded = torch.nn.functional.pad(images, (1, 1, 1, 1), mode="replicate")
    return torch.nn.functional.avg_pool2d(padded, 3, stride=1)


def corrupted_render(prompt_ids: torch.Tensor, image_size: int, corrupt_prob: float,
                     generator: torch.Generator, corruptions=CORRUPTIONS) -> torch.Tensor:
    """The pre-training mixture: each of ``corruptions`` (default all of ``CORRUPTIONS``) applied
    independently with ``corrupt_prob``; the draws are the same whichever are switched off.

    - colour jitter: both colours moved by up to +-0.3 per channel (off the prompt's palette);
    - blur: one 3x3 box blur (soft edges, mixed colours);
    - misplacement: the half-extent drawn anywhere between 0.7x the small and 1.2x the large size
      (whatever the size word) and the centre moved by up to 1/6 of the side;
    - fading (``EXTRA_CORRUPTIONS``, only where named): both colours moved towards mid-grey by a
      fraction drawn in [0.15, 0.5] (washed-out images, below the clean render's ``vividness``).
    ``[n, 4] -> [n, 3, H, W]`` in [-1, 1].
    """
    n, size = prompt_ids.shape[0], float(image_size)
    draw = lambda: torch.rand(n, generator=generator) < corrupt_prob  # noqa: E731
    jitter, blur, misplace = (draw() & (name in corruptions) for name in CORRUPTIONS)
    fg, bg = prompt_colours(prompt_ids)
    shift = (torch.rand(n, 2, 3, generator=generator) * 0.6 - 0.3) * jitter.view(-1, 1, 1)
    fg, bg = (fg + shift[:, 0]).clamp(0, 1), (bg + shift[:, 1]).clamp(0, 1)
    low, high = 0.7 * min(SIZES.values()) * size, 1.2 * max(SIZES.values()) * size
    radius = torch.where(misplace, low + torch.rand(n, generator=generator) * (high - low),
                         prompt_radius(prompt_ids, image_size))
    offset = (torch.rand(n, 2, generator=generator) * 2 - 1) * size / 6 * misplace.view(-1, 1)
    if "fading" in corruptions:  # drawn last: the other regimes' draws stay as they were
        fade = draw() * (0.15 + 0.35 * torch.rand(n, generator=generator))
        fg, bg = (c + (0.5 - c) * fade.view(-1, 1) for c in (fg, bg))
    images = paint(shape_mask(prompt_ids, image_size, size / 2 + offset, radius), fg, bg)
    return torch.where(blur.view(-1, 1, 1, 1), box_blur(images), images)
