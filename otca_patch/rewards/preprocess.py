"""Batched CLIP-style image preprocessing on tensors (no per-image PIL round trip).

Two geometries, matching the reference transforms:

- ``"center_crop"``: resize the short side to ``size`` (bicubic), centre-crop ``size x size``;
  what OpenAI CLIP / open_clip / the LAION aesthetic predictor / ImageReward / PickScore's
  CLIPProcessor do.
- ``"pad_longest"``: resize the long side to ``size`` keeping aspect, zero-pad to a square;
  HPSv2's ``ResizeMaxSize`` (its ``light_augmentation=True`` validation transform, which pads in
  [0, 1] space before normalisation).

The reference transforms resize PIL images in uint8; here the resize runs on float tensors with
antialiasing, so non-identity resizes differ from them by resampling rounding only.
"""
from __future__ import annotations

from typing import Sequence, Union

import torch
import torch.nn.functional as F
from torchvision.transforms.v2 import functional as TF

#: OpenAI CLIP's normalisation, used by every CLIP-family reward here unless the checkpoint says otherwise.
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


def _resize(x: torch.Tensor, hw) -> torch.Tensor:
    if tuple(x.shape[-2:]) == tuple(hw):
        return x
    return TF.resize(x, list(hw), interpolation=TF.InterpolationMode.BICUBIC, antialias=True)


def _center_crop(x: torch.Tensor, size: int) -> torch.Tensor:
    h, w = x.shape[-2:]
    short = min(h, w)
    # torchvision's Resize(int) rounds the long side down via int(); keep the same sizes.
    hw = (size, int(size * w / h)) if h == short else (int(size * h / w), size)
    x = _resize(x, hw)
    return TF.center_crop(x, [size, size])


def _pad_longest(x: torch.Tensor, size: int) -> torch.Tensor:
    h, w = x.shape[-2:]
    scale = size / float(max(h, w))
    if scale == 1.0:
        return x
    nh, nw = round(h * scale), round(w * scale)
    x = _resize(x, (nh, nw))
    pad_h, pad_w = size - nh, size - nw
    return F.pad(x, (pad_w // 2, pad_w - pad_w // 2, pad_h // 2, pad_h - pad_h // 2), value=0.0)


def preprocess_images(
    images: Union[torch.Tensor, Sequence[torch.Tensor]],
    size: int,
    mean: Sequence[float] = CLIP_MEAN,
    std: Sequence[float] = CLIP_STD,
    mode: str = "center_crop",
    device: Union[str, torch.device, None] = None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """``[B, 3, H, W]`` in [0, 1] (or B tensors ``[3, H_i, W_i]``) -> normalised ``[B, 3, size, size]``.

    A stacked batch is resized in one call; only a list of differently sized images is resized one
    by one (then stacked).
    """
    geometry = {"center_crop": _center_crop, "pad_longest": _pad_longest}.get(mode)
    if geometry is None:
        raise ValueError(f"unknown preprocessing mode {mode!r}; use 'center_crop' or 'pad_longest'")
    if isinstance(images, torch.Tensor):
        x = geometry(images.to(device=device, dtype=torch.float32), size)
    else:
        x = torch.stack([geometry(im.to(device=device, dtype=torch.float32).unsqueeze(0), size)[0]
                         for im in images])
    m = torch.tensor(mean, dtype=torch.float32, device=x.device).view(1, 3, 1, 1)
    s = torch.tensor(std, dtype=torch.float32, device=x.device).view(1, 3, 1, 1)
    return ((x - m) / s).to(dtype)
