"""Reward models by name: ``available()`` lists them, ``load(name, checkpoint=PATH, ...)`` builds one.

Adapters are imported on first use, so listing names or loading one model never imports the
others' libraries (open_clip, transformers, ImageReward, DanceGRPO).
"""
from __future__ import annotations

import importlib
from pathlib import Path
from typing import Callable, Dict, List, Optional, Union

import torch

from .base import RewardModel

Factory = Callable[..., RewardModel]

# name -> "module:Class" (lazy) or a factory registered at run time.
_REGISTRY: Dict[str, Union[str, Factory]] = {
    "clip_t": "otca_patch.rewards.clip_t:ClipTReward",
    "hpsv2": "otca_patch.rewards.hpsv2:HPSv2Reward",
    "aesthetic": "otca_patch.rewards.aesthetic:AestheticReward",
    "pickscore": "otca_patch.rewards.pickscore:PickScoreReward",
    "imagereward": "otca_patch.rewards.imagereward:ImageRewardReward",
    "videoalign": "otca_patch.rewards.videoalign:VideoAlignReward",
}


def available() -> List[str]:
    """Registered reward names, in registration order."""
    return list(_REGISTRY)


def register(name: str, factory: Factory) -> None:
    """Add (or replace) a reward: ``factory(checkpoint=..., device=..., dtype=..., **options)``."""
    if not name or not isinstance(name, str):
        raise ValueError("reward name must be a non-empty str")
    _REGISTRY[name] = factory


def _factory(name: str) -> Factory:
    try:
        entry = _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown reward model {name!r}; available: {', '.join(available())}") from None
    if isinstance(entry, str):
        module, attr = entry.split(":")
        entry = getattr(importlib.import_module(module), attr)
    return entry


def load(name: str, checkpoint: Optional[Union[str, Path]] = None, device: Union[str, torch.device] = "cpu",
         dtype: Optional[torch.dtype] = None, **options) -> RewardModel:
    """Build reward ``name`` from a local checkpoint (``checkpoint`` or its ``OTCA_CKPT_*`` variable).

    ``dtype=None`` keeps the adapter's default (float32; bfloat16 for VideoAlign, as upstream runs it).
    ``options`` are adapter-specific (e.g. ``model_name`` for clip_t, ``clip_checkpoint`` for aesthetic,
    ``processor`` for pickscore, ``arch`` for hpsv2).
    """
    kwargs = dict(options)
    if dtype is not None:
        kwargs["dtype"] = dtype
    return _factory(name)(checkpoint=checkpoint, device=device, **kwargs)
