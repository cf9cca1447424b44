"""Build an open_clip CLIP from a local state dict (shared by ``clip_t`` and ``aesthetic``).

``pretrained=None`` keeps open_clip from resolving any hub tag; the weights are then loaded from
the caller's file through ``checkpoints.load_state_dict`` (safetensors or ``weights_only=True``).
"""
from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Callable, Tuple, Union

import torch

from .checkpoints import CheckpointSpec, load_into, load_state_dict, offline_hub
from .preprocess import CLIP_MEAN, CLIP_STD


class _DropRandomInitWarning(logging.Filter):
    """open_clip warns "No pretrained weights loaded ... initialized randomly" for pretrained=None;
    untrue here (the state dict is loaded right after), so it is dropped while the model is built."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "No pretrained weights loaded" not in record.getMessage()


@contextlib.contextmanager
def quiet_random_init():
    quiet = _DropRandomInitWarning()
    logging.getLogger().addFilter(quiet)
    try:
        yield
    finally:
        logging.getLogger().removeFilter(quiet)


def _image_size(visual) -> int:
    size = visual.image_size
    if isinstance(size, (tuple, list)):
        if size[0] != size[1]:
            raise ValueError(f"non-square CLIP input size {tuple(size)} is not supported")
        size = size[0]
    return int(size)


def build_open_clip(spec: CheckpointSpec, path: Path, model_name: str, quick_gelu: bool,
                    device: Union[str, torch.device], dtype: torch.dtype,
                    ) -> Tuple[torch.nn.Module, Callable, int, tuple, tuple]:
    """(model in eval mode on device/dtype, tokenizer, image size, mean, std)."""
    import open_clip

    if model_name not in open_clip.list_models():
        raise ValueError(f"reward model {spec.model!r}: unknown open_clip architecture {model_name!r} "
                         f"(see open_clip.list_models())")
    with quiet_random_init(), offline_hub():
        model = open_clip.create_model(model_name, pretrained=None, force_quick_gelu=quick_gelu, device="cpu")
        tokenizer = open_clip.get_tokenizer(model_name)
    load_into(spec, path, model, load_state_dict(spec, path))
    model = model.to(device=device, dtype=dtype).eval()
    pre = getattr(model.visual, "preprocess_cfg", None) or {}
    mean = tuple(pre.get("mean") or getattr(model.visual, "image_mean", None) or CLIP_MEAN)
    std = tuple(pre.get("std") or getattr(model.visual, "image_std", None) or CLIP_STD)
    return model, tokenizer, _image_size(model.visual), mean, std
