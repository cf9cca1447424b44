"""A CLIP image/text encoder from a local checkpoint (shared by ``clip_t`` and ``aesthetic``).

Two on-disk formats, each loaded with what the environment has (``clip_libs``):
- a file (``open_clip_model.safetensors``, ``open_clip_pytorch_model.bin``): an open_clip state dict
  for a named architecture, built by open_clip or hpsv2's vendored copy of it;
- a folder in transformers' ``save_pretrained`` layout (``config.json``, weights, tokenizer files,
  optionally ``preprocessor_config.json``), e.g. openai/clip-vit-large-patch14: transformers'
  ``CLIPModel``, which every trainer's environment has.
``pretrained=None`` / ``local_files_only=True``: nothing resolves a hub tag; the weights are the
caller's file, loaded through ``checkpoints`` (safetensors or ``weights_only=True``).
"""
from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Callable, List, Union

import torch

from .checkpoints import CheckpointSpec, load_into, load_state_dict, offline_hub
from .clip_libs import import_open_clip
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


class ClipBackbone(torch.nn.Module):
    """``encode_image(pixels [B, 3, S, S]) -> [B, E]``, ``encode_text(prompts) -> [B, E]`` (not
    normalised), with the input size ``image_size`` = S and the pixel ``mean`` / ``std`` it expects."""

    def __init__(self, model: torch.nn.Module, encode_image: Callable, encode_text: Callable,
                 image_size: int, mean: tuple, std: tuple, embed_dim: int):
        super().__init__()
        self.model = model
        self._encode_image, self._encode_text = encode_image, encode_text
        self.image_size, self.mean, self.std, self.embed_dim = image_size, mean, std, embed_dim

    def encode_image(self, pixels: torch.Tensor) -> torch.Tensor:
        return self._encode_image(pixels)

    def encode_text(self, prompts: List[str]) -> torch.Tensor:
        return self._encode_text(prompts)


def _square_size(size, what: str) -> int:
    if isinstance(size, dict):
        size = size.get("height") or size.get("shortest_edge")
    if isinstance(size, (tuple, list)):
        if size[0] != size[1]:
            raise ValueError(f"non-square CLIP input size {tuple(size)} of {what} is not supported")
        size = size[0]
    return int(size)


def load_clip_backbone(spec: CheckpointSpec, path: Path, model_name: str, quick_gelu: bool,
                       device: Union[str, torch.device], dtype: torch.dtype) -> ClipBackbone:
    """The backbone at ``path`` in eval mode on ``device``/``dtype``: a folder loads through
    transformers (``model_name`` and ``quick_gelu`` then come from its config), a file through open_clip."""
    backbone = (_from_transformers(spec, path, dtype) if path.is_dir()
                else _from_open_clip(spec, path, model_name, quick_gelu))
    return backbone.to(device=device, dtype=dtype).eval()


def _from_open_clip(spec: CheckpointSpec, path: Path, model_name: str, quick_gelu: bool) -> ClipBackbone:
    open_clip = import_open_clip(f"reward model {spec.model!r} (an open_clip checkpoint file)")
    if model_name not in open_clip.list_models():
        raise ValueError(f"reward model {spec.model!r}: unknown open_clip architecture {model_name!r} "
                         f"(see open_clip.list_models())")
    with quiet_random_init(), offline_hub():
        model = open_clip.create_model(model_name, pretrained=None, force_quick_gelu=quick_gelu, device="cpu")
        tokenizer = open_clip.get_tokenizer(model_name)
    load_into(spec, path, model, load_state_dict(spec, path))
    pre = getattr(model.visual, "preprocess_cfg", None) or {}
    mean = tuple(pre.get("mean") or getattr(model.visual, "image_mean", None) or CLIP_MEAN)
    std = tuple(pre.get("std") or getattr(model.visual, "image_std", None) or CLIP_STD)

    def encode_text(prompts: List[str]) -> torch.Tensor:
        return model.encode_text(tokenizer(prompts).to(next(model.parameters()).device))

    return ClipBackbone(model, model.encode_image, encode_text, _square_size(model.visual.image_size, model_name),
                        mean, std, int(model.visual.output_dim))


def _from_transformers(spec: CheckpointSpec, path: Path, dtype: torch.dtype) -> ClipBackbone:
    from transformers import AutoTokenizer, CLIPImageProcessor, CLIPModel

    def failed(what: str, exc: Exception):
        return spec.error(path, f"cannot load the {what} of this transformers CLIP folder "
                                f"({type(exc).__name__}: {' '.join(str(exc).split())[:200]})")

    with offline_hub():
        try:
            model = CLIPModel.from_pretrained(str(path), local_files_only=True, torch_dtype=dtype)
        except Exception as exc:
            raise failed("model", exc) from exc
        try:
            tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        except Exception as exc:
            raise failed("tokenizer", exc) from exc
        size, mean, std = model.config.vision_config.image_size, CLIP_MEAN, CLIP_STD
        if (path / "preprocessor_config.json").is_file():
            processor = CLIPImageProcessor.from_pretrained(str(path), local_files_only=True)
            size = getattr(processor, "crop_size", None) or processor.size
            mean, std = processor.image_mean, processor.image_std

    def encode_text(prompts: List[str]) -> torch.Tensor:
        tokens = tokenizer(prompts, padding=True, truncation=True, max_length=77, return_tensors="pt")
        return model.get_text_features(**tokens.to(model.device))

    return ClipBackbone(model, lambda pixels: model.get_image_features(pixel_values=pixels), encode_text,
                        _square_size(size, str(path)), tuple(mean), tuple(std), int(model.config.projection_dim))
