"""``hpsv2``: HPSv2.1 (Human Preference Score v2.1), scored as the HPSv2 project and DanceGRPO's FLUX
trainer do.

Architecture: the hpsv2 package's vendored open_clip ``ViT-H-14`` (``arch=`` may name another
config registered with ``hpsv2.src.open_clip.add_model_config``; the tests use a tiny one). Weights:
``HPS_v2.1_compressed.pt``, a ``{'state_dict': ...}`` holding the complete CLIP, so the LAION base
weights DanceGRPO loads first are not needed. Preprocessing: HPSv2's validation transform with
``light_augmentation=True`` -- resize the long side to 224, zero-pad to square, OpenAI mean/std.
score = diag(image_features @ text_features.T) with both L2-normalised (no logit scale).
"""
from __future__ import annotations

from typing import List, Optional, Union

import torch

from .base import ImageBatch, RewardModel
from .checkpoints import CheckpointSpec, PathLike, load_into, load_state_dict, offline_hub, resolve
from .clip_libs import REWARDS_EXTRA, bpe_vocab_file, import_hpsv2_open_clip, installed
from .preprocess import CLIP_MEAN, CLIP_STD, preprocess_images

SPEC = CheckpointSpec(
    model="hpsv2",
    env_var="OTCA_CKPT_HPSV2",
    expected="HPS_v2.1_compressed.pt from huggingface xswu/HPSv2",
)


class HPSv2Reward(RewardModel):
    checkpoint_slots = (("checkpoint", SPEC, True),)
    """HPSv2.1 score, about 0.2..0.35 for real weights; ``[B]`` float32."""

    name = "hpsv2"

    @classmethod
    def missing_packages(cls, paths):
        if not installed("hpsv2"):
            return f"reward model 'hpsv2' needs the hpsv2 package, which is not installed: {REWARDS_EXTRA}"
        if bpe_vocab_file() is None:
            return (f"reward model 'hpsv2': hpsv2's tokenizer vocabulary is missing (its wheel omits it) and no "
                    f"open_clip_torch ships a copy: {REWARDS_EXTRA}")
        return None

    def __init__(self, checkpoint: Optional[PathLike] = None, device: Union[str, torch.device] = "cpu",
                 dtype: torch.dtype = torch.float32, arch: str = "ViT-H-14"):
        super().__init__(device, dtype)
        self.checkpoint = resolve(SPEC, checkpoint)
        hps_open_clip = import_hpsv2_open_clip()
        if arch not in hps_open_clip.list_models():
            raise ValueError(f"reward model 'hpsv2': unknown hpsv2 open_clip architecture {arch!r}")
        with offline_hub():
            # pretrained=None: no hub tag is resolved; weights come from the local file below.
            model = hps_open_clip.create_model(arch, pretrained=None, precision="fp32", device="cpu",
                                               output_dict=True)
            self.tokenizer = hps_open_clip.get_tokenizer(arch)
        load_into(SPEC, self.checkpoint, model, load_state_dict(SPEC, self.checkpoint, key="state_dict"))
        self.model = model.to(device=self.device, dtype=dtype).eval()
        size = model.visual.image_size
        self.image_size = int(size[0] if isinstance(size, (tuple, list)) else size)
        self.mean = tuple(getattr(model.visual, "image_mean", None) or CLIP_MEAN)
        self.std = tuple(getattr(model.visual, "image_std", None) or CLIP_STD)

    def _score(self, images: ImageBatch, prompts: List[str]) -> torch.Tensor:
        pixels = preprocess_images(images, self.image_size, self.mean, self.std, "pad_longest",
                                   self.device, self.dtype)
        tokens = self.tokenizer(prompts).to(self.device)
        out = self.model(pixels, tokens)
        logits_per_image = out["image_features"].float() @ out["text_features"].float().T
        return torch.diagonal(logits_per_image)
