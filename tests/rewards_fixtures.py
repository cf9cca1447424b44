"""Shared helpers for the reward tests: tiny checkpoints built once per session, a network guard.

Imported by tests/test_rewards_*.py (not a conftest, so other suites do not pay for it). The
checkpoints and loaded models are cached at module level because pytest would otherwise run a
session fixture imported into several modules once per module.
"""
from __future__ import annotations

import socket
import tempfile
import urllib.request
from pathlib import Path
from typing import Dict, List

import pytest
import torch

from otca_patch.rewards import load, tiny

import importlib.util

#: ImageReward is installed with --no-deps (its pins conflict with open_clip's timm); without it the
#: imagereward cases skip, saying what to install.
HAS_IMAGEREWARD = all(importlib.util.find_spec(m) is not None for m in ("ImageReward", "fairscale"))
NEEDS_IMAGEREWARD = pytest.mark.skipif(
    not HAS_IMAGEREWARD, reason="pip install --no-deps image-reward==1.5 fairscale==0.4.13")
IMAGE_REWARDS = ["clip_t", "hpsv2", "aesthetic", "pickscore",
                 pytest.param("imagereward", marks=NEEDS_IMAGEREWARD)]
#: The names alone, for RewardSet tests (imagereward only when installed).
IMAGE_REWARD_NAMES = ["clip_t", "hpsv2", "aesthetic", "pickscore"] + (["imagereward"] if HAS_IMAGEREWARD else [])
PROMPTS = ["a photo of a cat", "a red car on the road", "blue tree", "the dog in the snow"]

_CACHE: Dict[str, object] = {}


def tiny_checkpoints():
    """``(checkpoints, options)`` for every image reward, built once under a temp dir."""
    if "ckpts" not in _CACHE:
        root = Path(tempfile.mkdtemp(prefix="otca_reward_ckpts_"))
        _CACHE["root"] = root
        _CACHE["ckpts"] = tiny.build_all(root, include_imagereward=HAS_IMAGEREWARD)
    return _CACHE["ckpts"]


def loaded_model(name: str):
    """The reward ``name`` loaded once from its tiny checkpoint."""
    key = f"model:{name}"
    if key not in _CACHE:
        checkpoints, options = tiny_checkpoints()
        _CACHE[key] = load(name, checkpoint=checkpoints[name], **options[name])
    return _CACHE[key]


def images(batch: int = 4, seed: int = 0, size: int = tiny.TINY_IMAGE_SIZE) -> torch.Tensor:
    """``[B, 3, size, size]`` in [0, 1] on the uint8 grid, so a PIL round trip is lossless."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (batch, 3, size, size), generator=g).float() / 255.0


def to_pil(batch: torch.Tensor) -> List:
    from PIL import Image

    arr = (batch * 255).round().to(torch.uint8).permute(0, 2, 3, 1).numpy()
    return [Image.fromarray(a) for a in arr]


def _download_targets():
    """(module, attribute) of every download entry point the reward loaders could reach."""
    import importlib

    targets = [(socket.socket, "connect"), (urllib.request, "urlopen")]
    names = {
        "huggingface_hub": ["hf_hub_download", "snapshot_download"],
        "huggingface_hub.file_download": ["hf_hub_download"],
        "huggingface_hub._snapshot_download": ["snapshot_download"],
        "transformers.utils.hub": ["hf_hub_download"],
        "open_clip.pretrained": ["download_pretrained", "download_pretrained_from_hf",
                                 "download_pretrained_from_url", "hf_hub_download"],
        "open_clip.factory": ["download_pretrained", "download_pretrained_from_hf"],
        "hpsv2.src.open_clip.pretrained": ["download_pretrained", "download_pretrained_from_hf",
                                           "download_pretrained_from_url"],
        "hpsv2.src.open_clip.factory": ["download_pretrained", "download_pretrained_from_hf"],
    }
    for module_name, attrs in names.items():
        module = importlib.import_module(module_name)
        targets += [(module, a) for a in attrs if getattr(module, a, None) is not None]
    return targets


@pytest.fixture
def network_calls(monkeypatch):
    """Every hub download function and socket connect replaced by a recorder that raises.

    Yields the list of calls made; a test asserts it stays empty.
    """
    tiny_checkpoints()  # build first: hpsv2's open_clip import must have happened (and needs no network)
    calls: list = []

    def make(label):
        def refuse(*args, **kwargs):
            calls.append(label)
            raise RuntimeError(f"network access attempted via {label}")
        return refuse

    for module, attr in _download_targets():
        monkeypatch.setattr(module, attr, make(f"{getattr(module, '__name__', module)}.{attr}"))
    yield calls
