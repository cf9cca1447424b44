"""The demo's reward functions: three bounded image objectives computed from pixels and the prompt
(no model, no download), vectorised over the batch. Each lies in [0, 1] and the prompt's clean
render (``data.clean_render``) scores exactly 1 on all three: the joint optimum is known.

- ``palette``: the image uses the two colours the prompt names:
  ``1 - mean_pixels min(|p - c_obj|, |p - c_bg|) / sqrt(3)``.
- ``shape``: agreement with the prompt's template (its shape, centred, the size word's extent):
  ``1 - mean_pixels |f - m|``, where ``m`` is the template mask and ``f = d_bg / (d_obj + d_bg)`` is
  how much a pixel looks like the object colour rather than the background.
- ``edges``: the image's edge energy matches the clean render's: ``min(r, 1 / r)`` with
  ``r = E(image) / E(clean render)`` and ``E`` the mean squared colour difference of neighbouring
  pixels; blur lowers it (``r < 1``), grain and noise lower it too (``r > 1``).

They conflict partly, on some samples: a blurred but well-placed shape keeps ``shape`` and loses
``edges``; an over-large shape or a shifted colour can gain ``edges`` (more or stronger boundary)
while leaving the template or the palette. Only the clean render maximises all three.

The ``agreeing`` regime (``regimes``) replaces ``edges`` by ``fidelity``: every pixel close to the
clean render, ``1 - mean_pixels |p - clean| / sqrt(3)``; it moves with ``palette`` and ``shape``.
"""
from __future__ import annotations

import math

import torch

from .data import clean_render, prompt_colours, template_mask

OBJECTIVES = ("palette", "shape", "edges")


def to_unit_rgb(images: torch.Tensor) -> torch.Tensor:
    """``[B, 3, H, W]`` in [-1, 1] (unclamped model output) -> displayable [0, 1]."""
    return ((images + 1) / 2).clamp(0, 1)


def _distances(rgb: torch.Tensor, prompt_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    fg, bg = prompt_colours(prompt_ids)
    d_fg = torch.linalg.vector_norm(rgb - fg.view(-1, 3, 1, 1), dim=1)  # [B, H, W]
    d_bg = torch.linalg.vector_norm(rgb - bg.view(-1, 3, 1, 1), dim=1)
    return d_fg, d_bg


def palette(rgb: torch.Tensor, prompt_ids: torch.Tensor) -> torch.Tensor:
    """``rgb [B, 3, H, W]`` in [0, 1], ``prompt_ids [B, 4]`` -> ``[B]``."""
    d_fg, d_bg = _distances(rgb, prompt_ids)
    return 1 - torch.minimum(d_fg, d_bg).flatten(1).mean(dim=1) / math.sqrt(3)


def shape(rgb: torch.Tensor, prompt_ids: torch.Tensor) -> torch.Tensor:
    d_fg, d_bg = _distances(rgb, prompt_ids)
    objectness = d_bg / (d_fg + d_bg).clamp(min=1e-6)  # 1 on the object colour, 0 on the background
    mask = template_mask(prompt_ids, rgb.shape[-1]).to(rgb.dtype)
    return 1 - (objectness - mask).abs().flatten(1).mean(dim=1)


def edge_energy(rgb: torch.Tensor) -> torch.Tensor:
    """Mean squared colour difference of horizontally and vertically neighbouring pixels, ``[B]``
    (squared, so that blur, which spreads a step over several pixels, lowers it)."""
    dx = (rgb[..., :, 1:] - rgb[..., :, :-1]).pow(2).mean(dim=(1, 2, 3))
    dy = (rgb[..., 1:, :] - rgb[..., :-1, :]).pow(2).mean(dim=(1, 2, 3))
    return (dx + dy) / 2


def edges(rgb: torch.Tensor, prompt_ids: torch.Tensor) -> torch.Tensor:
    reference = edge_energy(to_unit_rgb(clean_render(prompt_ids, rgb.shape[-1])))
    ratio = edge_energy(rgb).clamp(min=1e-6) / reference.clamp(min=1e-6)
    return torch.minimum(ratio, 1 / ratio)


def fidelity(rgb: torch.Tensor, prompt_ids: torch.Tensor) -> torch.Tensor:
    clean = to_unit_rgb(clean_render(prompt_ids, rgb.shape[-1]))
    return 1 - torch.linalg.vector_norm(rgb - clean, dim=1).flatten(1).mean(dim=1) / math.sqrt(3)


def chroma(rgb: torch.Tensor) -> torch.Tensor:
    """Mean over the pixels of ``max - min`` of the three channels (HSV's saturation times value),
    ``[B, 3, H, W] -> [B]``: 0 for greys, 1 for the six pure hues."""
    return (rgb.max(dim=1).values - rgb.min(dim=1).values).flatten(1).mean(dim=1)


def vividness(rgb: torch.Tensor, prompt_ids: torch.Tensor) -> torch.Tensor:
    """``1 + chroma(image) - chroma(clean render)``: 1 on the clean render, below it for washed-out
    colours, and *above* it (up to about 1.9) for colours pushed towards pure hues. Its gradient at
    any colour raises the largest channel and lowers the smallest, which turns the hue (and a white
    or black into a colour): off the prompt's palette from the first step, and blurring the
    object/background distinction ``shape`` reads. The ``hacking`` regime's saturation-loving reward."""
    reference = to_unit_rgb(clean_render(prompt_ids, rgb.shape[-1]))
    return 1 + chroma(rgb) - chroma(reference)


#: Every objective by name (a regime picks K of them).
OBJECTIVE_FUNCTIONS = {"palette": palette, "shape": shape, "edges": edges, "fidelity": fidelity,
                       "vividness": vividness}


def objective_rewards(images: torch.Tensor, prompt_ids: torch.Tensor, objectives=OBJECTIVES) -> torch.Tensor:
    """The named objectives for a batch: ``images [B, 3, H, W]`` in [-1, 1] -> ``[B, K]`` (``objectives`` order)."""
    rgb = to_unit_rgb(images.float())
    return torch.stack([OBJECTIVE_FUNCTIONS[name](rgb, prompt_ids) for name in objectives], dim=1)
