"""``aesthetic``: the LAION aesthetic predictor v2 (improved-aesthetic-predictor).

score = MLP(L2-normalised CLIP ViT-L/14 image embedding), the head being the published
``sac+logos+ava1-l14-linearMSE.pth`` (``layers.{0,2,4,6,7}`` Linear stack, see ``heads.py``).
Two files: the head (``checkpoint=`` / ``OTCA_CKPT_AESTHETIC``) and the CLIP backbone it was trained
on (``clip_checkpoint=`` / ``OTCA_CKPT_AESTHETIC_CLIP``; OpenAI ViT-L/14, the same file as clip_t's
default). Prompts are accepted for the common interface and ignored.
"""
from __future__ import annotations

from typing import List, Optional, Union

import torch

from .base import ImageBatch, RewardModel
from .checkpoints import CheckpointSpec, PathLike, load_into, load_state_dict, resolve
from .heads import LinearHead
from .clip_backbone import load_clip_backbone
from .clip_libs import open_clip_file_problem
from .preprocess import preprocess_images

HEAD_SPEC = CheckpointSpec(
    model="aesthetic",
    env_var="OTCA_CKPT_AESTHETIC",
    expected="the LAION aesthetic predictor v2 head sac+logos+ava1-l14-linearMSE.pth "
             "(github christophschuhmann/improved-aesthetic-predictor)",
)
CLIP_SPEC = CheckpointSpec(
    model="aesthetic",
    env_var="OTCA_CKPT_AESTHETIC_CLIP",
    option="clip_checkpoint",
    expected="open_clip ViT-L-14 OpenAI weights (open_clip_model.safetensors or open_clip_pytorch_model.bin "
             "from huggingface timm/vit_large_patch14_clip_224.openai), or the transformers CLIP folder "
             "openai/clip-vit-large-patch14, as the backbone for sac+logos+ava1-l14-linearMSE.pth",
    kind="any",
)


class AestheticReward(RewardModel):
    checkpoint_slots = (("checkpoint", HEAD_SPEC, True), ("clip_checkpoint", CLIP_SPEC, True))
    """score = head(normalize(clip.encode_image(x))); roughly 1..10 for the published head; ``[B]``."""

    name = "aesthetic"

    @classmethod
    def missing_packages(cls, paths):
        return open_clip_file_problem(cls.name, paths["clip_checkpoint"])

    def __init__(self, checkpoint: Optional[PathLike] = None, device: Union[str, torch.device] = "cpu",
                 dtype: torch.dtype = torch.float32, clip_checkpoint: Optional[PathLike] = None,
                 model_name: str = "ViT-L-14", quick_gelu: bool = True):
        super().__init__(device, dtype)
        self.checkpoint = resolve(HEAD_SPEC, checkpoint)
        self.clip_checkpoint = resolve(CLIP_SPEC, clip_checkpoint)
        head_sd = load_state_dict(HEAD_SPEC, self.checkpoint)
        try:
            widths = LinearHead.widths_from_state_dict(head_sd)
        except KeyError as exc:
            raise HEAD_SPEC.error(self.checkpoint, f"not an aesthetic-head state dict (missing key {exc})") from None
        self.head = LinearHead(widths)
        load_into(HEAD_SPEC, self.checkpoint, self.head, head_sd)
        self.clip = load_clip_backbone(CLIP_SPEC, self.clip_checkpoint, model_name, quick_gelu, self.device, dtype)
        self.image_size, self.mean, self.std = self.clip.image_size, self.clip.mean, self.clip.std
        embed_dim = self.clip.embed_dim
        if embed_dim != widths[0]:
            raise HEAD_SPEC.error(self.checkpoint, f"head takes {widths[0]}-d embeddings but the CLIP backbone "
                                                   f"{model_name} ({self.clip_checkpoint}) gives {embed_dim}-d")
        self.head = self.head.to(device=self.device, dtype=dtype).eval()

    def _score(self, images: ImageBatch, prompts: List[str]) -> torch.Tensor:
        pixels = preprocess_images(images, self.image_size, self.mean, self.std, "center_crop",
                                   self.device, self.dtype)
        emb = torch.nn.functional.normalize(self.clip.encode_image(pixels).float(), dim=-1)
        return self.head(emb.to(self.dtype)).squeeze(-1)
