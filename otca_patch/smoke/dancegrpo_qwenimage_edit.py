"""Run DanceGRPO's real Qwen-Image-Edit ``train_one_step`` on the CPU with tiny models it builds.

The Qwen-Image smoke run (``dancegrpo_qwenimage``: same tiny transformer, VAE, FSDP and its one CPU
replacement) with what the edit dataset adds per prompt: the conditioning image's VAE latents
``[1, 16, 1, h, w]`` (seeded noise here) and its ``calculated_height`` / ``calculated_width``.
"""
from __future__ import annotations

from pathlib import Path

import torch

from ..config import OtcaConfig
from . import dancegrpo_qwenimage as qwen
from .dancegrpo_image import run_image_trainer

UPSTREAM_FILE = "fastvideo/train_grpo_qwenimage_edit.py"
Sizes = qwen.Sizes


def edit_batch(rank: int, step: int, sizes: Sizes) -> dict:
    """Qwen-Image's loader batch plus the conditioning image of its prompt."""
    batch = qwen.prompt_batch(rank, step, sizes.seed)
    generator = torch.Generator().manual_seed(20_000 + sizes.seed + qwen.PROMPTS.index(batch["caption"][0]))
    side = sizes.image_size // 8
    return {**batch, "image_latents": torch.randn(1, 16, 1, side, side, generator=generator),
            "calculated_height": torch.tensor([sizes.image_size]), "calculated_width": torch.tensor([sizes.image_size])}


def run(upstream_dir: Path, out_dir: Path, config: OtcaConfig, sizes: Sizes, reward_root: Path, probe=None) -> dict:
    return run_image_trainer(upstream_dir, out_dir, config, reward_root, probe, UPSTREAM_FILE, sizes,
                             qwen.upstream_args(sizes), lambda: qwen.fsdp_wrap(qwen.tiny_transformer()), qwen.tiny_vae,
                             lambda rank, step: edit_batch(rank, step, sizes))
