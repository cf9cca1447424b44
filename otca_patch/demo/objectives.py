"""The demo's reward functions: three image objectives computed from pixels and the prompt, with
no model and no download, vectorised over the batch.

- ``colour_fidelity``: the image uses the two colours the prompt names (object and background):
  ``1 - mean_pixels min(|p - c_obj|, |p - c_bg|) / sqrt(3)``, in [0, 1].
- ``brightness``: mean luminance (Rec. 601 weights), in [0, 1].
- ``contrast``: RMS contrast, the standard deviation of luminance over the pixels, in [0, 0.5].

They conflict: most named colours are dark or saturated, so raising brightness or contrast means
leaving the prompt's palette; and brightening towards white flattens contrast.
"""
from __future__ import annotations

import math

import torch

from .data import prompt_colours

OBJECTIVES = ("colour_fidelity", "brightness", "contrast")
_LUMA = torch.tensor([0.299, 0.587, 0.114])


def to_unit_rgb(images: torch.Tensor) -> torch.Tensor:
    """``[B, 3, H, W]`` in [-1, 1] (unclamped model output) -> displayable [0, 1]."""
    return ((images + 1) / 2).clamp(0, 1)


def colour_fidelity(rgb: torch.Tensor, prompt_ids: torch.Tensor) -> torch.Tensor:
    """``rgb [B, 3, H, W]`` in [0, 1], ``prompt_ids [B, 3]`` -> ``[B]``."""
    fg, bg = prompt_colours(prompt_ids)
    d_fg = torch.linalg.vector_norm(rgb - fg.view(-1, 3, 1, 1), dim=1)  # [B, H, W]
    d_bg = torch.linalg.vector_norm(rgb - bg.view(-1, 3, 1, 1), dim=1)
    return 1 - torch.minimum(d_fg, d_bg).flatten(1).mean(dim=1) / math.sqrt(3)


def luminance(rgb: torch.Tensor) -> torch.Tensor:
    """``[B, 3, H, W] -> [B, H, W]``."""
    return torch.einsum("bchw,c->bhw", rgb, _LUMA.to(rgb))


def brightness(rgb: torch.Tensor) -> torch.Tensor:
    return luminance(rgb).flatten(1).mean(dim=1)


def contrast(rgb: torch.Tensor) -> torch.Tensor:
    return luminance(rgb).flatten(1).std(dim=1, correction=0)


def objective_rewards(images: torch.Tensor, prompt_ids: torch.Tensor) -> torch.Tensor:
    """Every objective for a batch: ``images [B, 3, H, W]`` in [-1, 1] -> ``[B, K]`` (``OBJECTIVES`` order)."""
    rgb = to_unit_rgb(images.float())
    return torch.stack([colour_fidelity(rgb, prompt_ids), brightness(rgb), contrast(rgb)], dim=1)
