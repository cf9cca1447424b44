"""``clip_t``: CLIP-T, the cosine similarity of CLIP image and text embeddings.

Default architecture ``ViT-L-14`` with QuickGELU, i.e. OpenAI's CLIP ViT-L/14 -- the CLIP-T
backbone most text-to-image RL papers report, and the same file the aesthetic predictor needs, so
one checkpoint on disk serves both. Any open_clip architecture name works (``model_name=``, e.g.
``ViT-B-32``); set ``quick_gelu=False`` for non-OpenAI (LAION) weights. A folder in transformers'
layout (e.g. openai/clip-vit-large-patch14) loads through ``CLIPModel`` instead, which needs no
open_clip (``clip_backbone``).
"""
from __future__ import annotations

from typing import List, Optional, Union

import torch

from .base import ImageBatch, RewardModel
from .checkpoints import CheckpointSpec, PathLike, resolve
from .clip_backbone import load_clip_backbone
from .clip_libs import open_clip_file_problem
from .preprocess import preprocess_images

SPEC = CheckpointSpec(
    model="clip_t",
    env_var="OTCA_CKPT_CLIP_T",
    expected="an open_clip state dict for the chosen architecture, by default ViT-L-14 OpenAI weights "
             "(open_clip_model.safetensors or open_clip_pytorch_model.bin from huggingface "
             "timm/vit_large_patch14_clip_224.openai), or a transformers CLIP folder (openai/clip-vit-large-patch14)",
    kind="any",
)


class ClipTReward(RewardModel):
    #: (parameter, where its file is looked for, whether it must be there): checked before a launch
    checkpoint_slots = (("checkpoint", SPEC, True),)
    """score = cos(image_emb, text_emb) in [-1, 1]; ``[B]`` float32."""

    name = "clip_t"

    @classmethod
    def missing_packages(cls, paths):
        return open_clip_file_problem(cls.name, paths["checkpoint"])

    def __init__(self, checkpoint: Optional[PathLike] = None, device: Union[str, torch.device] = "cpu",
                 dtype: torch.dtype = torch.float32, model_name: str = "ViT-L-14", quick_gelu: bool = True):
        super().__init__(device, dtype)
        self.checkpoint = resolve(SPEC, checkpoint)
        self.model_name = model_name
        self.model = load_clip_backbone(SPEC, self.checkpoint, model_name, quick_gelu, self.device, dtype)
        self.image_size, self.mean, self.std = self.model.image_size, self.model.mean, self.model.std

    def embed(self, images: ImageBatch, prompts: List[str]):
        """L2-normalised (image [B, E], text [B, E]) embeddings in float32."""
        pixels = preprocess_images(images, self.image_size, self.mean, self.std, "center_crop",
                                   self.device, self.dtype)
        img = self.model.encode_image(pixels).float()
        txt = self.model.encode_text(prompts).float()
        return (torch.nn.functional.normalize(img, dim=-1), torch.nn.functional.normalize(txt, dim=-1))

    def _score(self, images: ImageBatch, prompts: List[str]) -> torch.Tensor:
        img, txt = self.embed(images, prompts)
        return (img * txt).sum(dim=-1)
