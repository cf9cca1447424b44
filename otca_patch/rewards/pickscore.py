"""``pickscore``: PickScore_v1 through transformers' CLIPModel and CLIPProcessor.

Two folders in ``save_pretrained`` layout: the model (``checkpoint=`` / ``OTCA_CKPT_PICKSCORE``,
yuvalkirstain/PickScore_v1) and the processor it was trained with (``processor=`` /
``OTCA_CKPT_PICKSCORE_PROCESSOR``, laion/CLIP-ViT-H-14-laion2B-s32B-b79K); if the processor is not
given, the model folder is used when it holds the processor files.

score = logit_scale.exp() * cos(image_emb, text_emb), as the PickScore authors compute it (about
18..23 for real weights). DanceGRPO's FLUX trainer leaves out the logit_scale factor -- a constant
multiple (100 for PickScore_v1).

The processor supplies the tokenizer and the image size / mean / std; the image resize itself
runs batched on tensors (``preprocess.py``) rather than through the processor's per-image PIL path.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import List, Optional, Union

import torch

from .base import ImageBatch, RewardModel
from .checkpoints import CheckpointSpec, PathLike, offline_hub, resolve
from .preprocess import preprocess_images

SPEC = CheckpointSpec(
    model="pickscore",
    env_var="OTCA_CKPT_PICKSCORE",
    expected="the yuvalkirstain/PickScore_v1 folder (config.json + model.safetensors or pytorch_model.bin)",
    kind="dir",
)
PROCESSOR_SPEC = CheckpointSpec(
    model="pickscore",
    env_var="OTCA_CKPT_PICKSCORE_PROCESSOR",
    option="processor",
    expected="the laion/CLIP-ViT-H-14-laion2B-s32B-b79K processor folder (preprocessor_config.json + "
             "tokenizer files)",
    kind="dir",
)


def _has_processor(folder: Path) -> bool:
    return (folder / "preprocessor_config.json").is_file() and (
        (folder / "tokenizer.json").is_file() or (folder / "vocab.json").is_file())


def _crop_size(image_processor) -> int:
    crop = getattr(image_processor, "crop_size", None) or image_processor.size
    if isinstance(crop, dict):
        crop = crop.get("height") or crop.get("shortest_edge")
    return int(crop)


class PickScoreReward(RewardModel):
    checkpoint_slots = (("checkpoint", SPEC, True), ("processor", PROCESSOR_SPEC, False))  # processor: the model's
    """PickScore; ``[B]`` float32."""

    name = "pickscore"

    def __init__(self, checkpoint: Optional[PathLike] = None, device: Union[str, torch.device] = "cpu",
                 dtype: torch.dtype = torch.float32, processor: Optional[PathLike] = None):
        super().__init__(device, dtype)
        from transformers import CLIPModel, CLIPProcessor

        self.checkpoint = resolve(SPEC, checkpoint)
        if processor is None and not os.environ.get(PROCESSOR_SPEC.env_var) and _has_processor(self.checkpoint):
            processor = self.checkpoint
        self.processor_path = resolve(PROCESSOR_SPEC, processor)
        if not _has_processor(self.processor_path):
            raise PROCESSOR_SPEC.error(self.processor_path, "no preprocessor_config.json / tokenizer files there")
        with offline_hub():
            try:
                self.processor = CLIPProcessor.from_pretrained(str(self.processor_path), local_files_only=True)
            except Exception as exc:
                raise PROCESSOR_SPEC.error(self.processor_path, f"cannot load the processor ({type(exc).__name__}: "
                                                                f"{' '.join(str(exc).split())[:200]})") from exc
            try:
                model = CLIPModel.from_pretrained(str(self.checkpoint), local_files_only=True, torch_dtype=dtype)
            except Exception as exc:
                raise SPEC.error(self.checkpoint, f"cannot load the model ({type(exc).__name__}: "
                                                  f"{' '.join(str(exc).split())[:200]})") from exc
        self.model = model.to(self.device).eval()
        ip = self.processor.image_processor
        self.image_size = _crop_size(ip)
        self.mean, self.std = tuple(ip.image_mean), tuple(ip.image_std)

    def _score(self, images: ImageBatch, prompts: List[str]) -> torch.Tensor:
        pixels = preprocess_images(images, self.image_size, self.mean, self.std, "center_crop",
                                   self.device, self.dtype)
        text = self.processor.tokenizer(prompts, padding=True, truncation=True, max_length=77,
                                        return_tensors="pt").to(self.device)
        img = torch.nn.functional.normalize(self.model.get_image_features(pixel_values=pixels).float(), dim=-1)
        txt = torch.nn.functional.normalize(self.model.get_text_features(**text).float(), dim=-1)
        return self.model.logit_scale.exp().float() * (img * txt).sum(dim=-1)
