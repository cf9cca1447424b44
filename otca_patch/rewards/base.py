"""The reward-model interface and the input checks every adapter shares.

A reward model maps a batch of B generated samples and their B prompts to B float32 scores:

- images: a float tensor ``[B, 3, H, W]`` with values in [0, 1], or a list of B PIL images;
- videos (video models only): a float tensor ``[B, F, 3, H, W]`` in [0, 1].

Models that produce several objectives at once (VideoAlign's VQ / MQ / TA) list them in
``output_names`` and return ``[B, len(output_names)]`` from ``score_all``; ``RewardSet`` expands them
into one column each.
"""
from __future__ import annotations

import abc
import math
from typing import Any, List, Mapping, Optional, Sequence, Tuple, Union

import torch

ImageInput = Union[torch.Tensor, Sequence[Any]]  # [B, 3, H, W] or B PIL images (PIL imported lazily)
ImageBatch = Union[torch.Tensor, List[torch.Tensor]]  # [B, 3, H, W] or B tensors [3, H_i, W_i]

# Decoders in bf16/fp16 can overshoot [0, 1] by rounding only; anything beyond this is a caller bug
# (e.g. images still in [-1, 1]) and is rejected rather than silently clamped.
_RANGE_TOLERANCE = 1e-3


class RewardModel(abc.ABC):
    """One reward model, loaded once and reused for every batch.

    Subclasses set ``name`` and implement ``_score`` (or ``_score_all`` for multi-output models);
    ``score`` / ``score_all`` add the input checks, ``torch.no_grad`` and the float32 output.
    """

    name: str = "reward"
    #: Column names this model contributes to a RewardSet; one per objective.
    output_names: Tuple[str, ...] = ()
    #: "image" models take [B, 3, H, W]; "video" models take [B, F, 3, H, W].
    modality: str = "image"

    def __init__(self, device: Union[str, torch.device] = "cpu", dtype: torch.dtype = torch.float32):
        self.device = torch.device(device)
        self.dtype = dtype

    @classmethod
    def missing_packages(cls, paths: Mapping[str, Optional[str]]) -> Optional[str]:
        """One line saying what this reward lacks in this environment (a package, a file a package
        ships), or None. ``paths``: each of its ``checkpoint_slots``' path, None where nothing names
        it. Checked before a launch: it must not import the reward's library."""
        return None

    def to(self, device: Union[str, torch.device]) -> "RewardModel":
        """Move the model's weights (every ``nn.Module`` it holds) to ``device``; inputs follow ``self.device``."""
        device = torch.device(device)
        for value in vars(self).values():
            if isinstance(value, torch.nn.Module):
                value.to(device)
        self.device = device
        return self

    @property
    def outputs(self) -> Tuple[str, ...]:
        """Column names, ``(name,)`` for single-objective models."""
        return self.output_names or (self.name,)

    def score(self, images: ImageInput, prompts: Sequence[str]) -> torch.Tensor:
        """Score B samples against B prompts.

        Returns a float32 CPU-or-device tensor ``[B]`` (on ``self.device``), without gradients.
        Multi-output models return their overall score here (see the adapter's docstring).
        """
        with torch.no_grad():
            batch = self._check_input(images)
            prompts = check_prompts(prompts, _batch_len(batch))
            out = self._score(batch, prompts)
        return out.detach().to(torch.float32).reshape(-1)

    def score_all(self, images: ImageInput, prompts: Sequence[str]) -> torch.Tensor:
        """Every objective of this model: float32 ``[B, len(outputs)]``."""
        if len(self.outputs) == 1:
            return self.score(images, prompts).unsqueeze(1)
        with torch.no_grad():
            batch = self._check_input(images)
            prompts = check_prompts(prompts, _batch_len(batch))
            out = self._score_all(batch, prompts)
        return out.detach().to(torch.float32)

    def _check_input(self, images):
        if self.modality == "video":
            return to_video_batch(images)
        return to_image_batch(images)

    @abc.abstractmethod
    def _score(self, images: ImageBatch, prompts: List[str]) -> torch.Tensor:
        """Checked inputs (float32 on CPU or the caller's device, in [0, 1]) -> ``[B]``."""

    def _score_all(self, images: ImageBatch, prompts: List[str]) -> torch.Tensor:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, device={self.device}, dtype={self.dtype})"


def _batch_len(batch: ImageBatch) -> int:
    return len(batch) if isinstance(batch, list) else int(batch.shape[0])


def check_prompts(prompts: Sequence[str], batch_size: int) -> List[str]:
    """B prompts as a list of str; ValueError if the count or type is wrong."""
    if isinstance(prompts, str):
        raise ValueError(
            f"prompts must be a sequence of {batch_size} strings, one per sample, got a single str")
    prompts = list(prompts)
    if len(prompts) != batch_size:
        raise ValueError(f"prompts count mismatch: got {len(prompts)} prompts for {batch_size} samples")
    bad = [i for i, p in enumerate(prompts) if not isinstance(p, str)]
    if bad:
        raise ValueError(f"prompts must be str; prompt {bad[0]} is {type(prompts[bad[0]]).__name__}")
    return prompts


def _check_range(t: torch.Tensor, what: str) -> torch.Tensor:
    if not torch.is_floating_point(t):
        raise ValueError(f"{what} must be a float tensor with values in [0, 1], got dtype {t.dtype}")
    if t.numel() == 0:
        raise ValueError(f"{what} is empty (shape {tuple(t.shape)})")
    lo, hi = float(t.min()), float(t.max())
    if math.isnan(lo) or math.isnan(hi):
        raise ValueError(f"{what} contains NaN")
    if lo < -_RANGE_TOLERANCE or hi > 1 + _RANGE_TOLERANCE:
        raise ValueError(f"{what} values must lie in [0, 1], found min {lo:.4g} max {hi:.4g}")
    return t.float().clamp_(0.0, 1.0)


def pil_to_tensor(image) -> torch.Tensor:
    """One PIL image -> float32 ``[3, H, W]`` in [0, 1] (RGB; alpha dropped, greyscale expanded)."""
    import numpy as np

    arr = np.asarray(image.convert("RGB"), dtype=np.uint8)
    return torch.from_numpy(arr.copy()).permute(2, 0, 1).float().div_(255.0)


def to_image_batch(images: ImageInput) -> ImageBatch:
    """Validate images and return ``[B, 3, H, W]`` float32 in [0, 1].

    A list of PIL images of different sizes comes back as a list of ``[3, H_i, W_i]`` tensors
    (each adapter resizes to its model's size before stacking).
    """
    if isinstance(images, torch.Tensor):
        if images.dim() != 4 or images.shape[1] != 3:
            raise ValueError(f"images must have shape [B, 3, H, W], got {tuple(images.shape)}")
        if images.shape[0] == 0:
            raise ValueError("images is an empty batch (B = 0)")
        return _check_range(images, "images")
    if isinstance(images, (list, tuple)):
        if not images:
            raise ValueError("images is an empty list")
        tensors = []
        for i, im in enumerate(images):
            if not hasattr(im, "convert") or not hasattr(im, "size"):
                raise ValueError(
                    f"images must be a tensor [B, 3, H, W] or a list of PIL images; item {i} is "
                    f"{type(im).__name__}")
            tensors.append(pil_to_tensor(im))
        if all(t.shape == tensors[0].shape for t in tensors):
            return torch.stack(tensors)
        return tensors
    raise ValueError(
        f"images must be a float tensor [B, 3, H, W] in [0, 1] or a list of PIL images, "
        f"got {type(images).__name__}")


def to_video_batch(videos) -> torch.Tensor:
    """Validate videos and return ``[B, F, 3, H, W]`` float32 in [0, 1]."""
    if not isinstance(videos, torch.Tensor):
        raise ValueError(f"videos must be a float tensor [B, F, 3, H, W] in [0, 1], got {type(videos).__name__}")
    if videos.dim() != 5 or videos.shape[2] != 3:
        raise ValueError(f"videos must have shape [B, F, 3, H, W], got {tuple(videos.shape)}")
    if videos.shape[0] == 0 or videos.shape[1] == 0:
        raise ValueError(f"videos must have B >= 1 and F >= 1, got shape {tuple(videos.shape)}")
    return _check_range(videos, "videos")
