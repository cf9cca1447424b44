"""Run FlowGRPO's real ``scripts/train_qwenimage_edit.py`` ``main()`` (9745241) on the CPU with a tiny
Qwen-Image-Edit (``tiny_qwenimage.build_tiny_qwenimage_edit``) under ``torchrun`` on two processes,
through upstream's own FSDP path with the Qwen-Image smoke's CPU stand-ins (``flowgrpo_qwenimage``).
Its dataset is upstream's image-editing layout (FLUX-Kontext's: ``{split}_metadata.jsonl``, one
distinct edit prompt per input image, so upstream's groups are the prompts' groups).

Where the sizes come from: the trainer resizes each input image to ``config.resolution``; the
sampler resizes it again to ``calculate_dimensions(1024 * 1024, width / height)`` (1024 x 1024 for
a square; ``compute_log_prob`` hard-codes the same) for the VAE and the vision tower; latents are
``1 / vae_scale_factor`` of the pixels, ``vae_scale_factor = 2 ** len(vae.temperal_downsample)``.
The tiny model keeps that small without touching upstream: a 64x VAE (8 x 8 packed condition
tokens) and a processor that resizes any image to 56 x 56 (4 vision tokens); the generated image
is ``resolution`` = 256 (a multiple of ``2 * vae_scale_factor``: 2 x 2 packed tokens).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from . import flowgrpo_qwenimage as qwen
from .flowgrpo_flux_kontext import write_edit_dataset
from .tiny_qwenimage import build_tiny_qwenimage_edit


@dataclass
class Sizes(qwen.Sizes):
    """Qwen-Image's window; the generated image a multiple of 128 pixels (the tiny 64x VAE, packed 2x2)."""

    resolution: int = 256


TRAINER = replace(qwen.TRAINER, upstream_file="scripts/train_qwenimage_edit.py", module_name="train_qwenimage_edit",
                  build_model=build_tiny_qwenimage_edit, model_env="OTCA_TINY_QWENIMAGE_EDIT_DIR",
                  write_dataset=write_edit_dataset)
run = TRAINER.run
before_imports = qwen.before_imports
