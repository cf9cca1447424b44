"""Run DanceGRPO's real Qwen-Image ``train_one_step`` on the CPU with tiny models it builds.

diffusers' real ``QwenImageTransformer2DModel`` (one block) and ``AutoencoderKLQwenImage`` (8x spatial
downsampling with 16 latent channels, as upstream hard-codes) in tiny configs; upstream's
``fsdp_util_qwenimage`` auto-wrap policy (one FSDP unit per ``QwenImageTransformerBlock``) with its
bfloat16 mixed precision, under real FSDP in a gloo world; HPSv2 through hpsv2's open_clip on a tiny
checkpoint; prompt embeddings ``[1, L, 32]`` with a padding mask and ``original_length`` as upstream's
dataset gives them.

Replaced in the smoke run only (docs/dancegrpo.md: DanceGRPO's environment): upstream's ``fsdp_wrapper`` passes
``device_id=rank % torch.cuda.device_count()``, a division by zero without a GPU; the smoke run builds
the same ``FSDP(...)`` (policy, mixed precision, sharding, prefetch, ``use_orig_params``) with the CPU
as its device.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import torch

from ..config import OtcaConfig
from . import dancegrpo_flux as flux
from .dancegrpo_flux import PROMPTS
from .dancegrpo_image import run_image_trainer

UPSTREAM_FILE = "fastvideo/train_grpo_qwenimage.py"
TEXT_LENGTH, TEXT_WIDTH = 8, 32  # padded prompt embeddings [L, D] as upstream's dataset stores them


@dataclass
class Sizes(flux.Sizes):
    """The FLUX smoke sizes (latents image_size / 8 with 16 channels, packed 2x2 into 64), 4 sampling steps."""

    sampling_steps: int = 4


def upstream_args(sizes: Sizes) -> argparse.Namespace:
    """The upstream arguments ``train_one_step`` reads: the FLUX trainer's (``finetune_qwenimage_grpo.sh``
    sets the same), and HPSv3 offered but off."""
    args = flux.upstream_args(sizes)
    args.use_hpsv3 = False
    return args


def tiny_transformer():
    from diffusers import QwenImageTransformer2DModel

    return QwenImageTransformer2DModel(patch_size=2, in_channels=64, out_channels=16, num_layers=1,
                                       attention_head_dim=16, num_attention_heads=2, joint_attention_dim=TEXT_WIDTH,
                                       guidance_embeds=False, axes_dims_rope=(4, 6, 6))


def tiny_vae():
    from diffusers import AutoencoderKLQwenImage

    return AutoencoderKLQwenImage(base_dim=8, z_dim=16, dim_mult=[1, 1, 1, 1], num_res_blocks=1, attn_scales=[],
                                  temperal_downsample=[False, False, False])


def fsdp_wrap(transformer: torch.nn.Module) -> torch.nn.Module:
    """``fsdp_util_qwenimage.fsdp_wrapper`` with ``main``'s ``FSDPConfig``, on the smoke device (the CPU, or
    this rank's GPU) instead of CUDA device ``rank % torch.cuda.device_count()``."""
    from .environment import smoke_device

    import functools

    from torch.distributed.fsdp import BackwardPrefetch, CPUOffload, MixedPrecision, ShardingStrategy
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy
    from diffusers.models.transformers.transformer_qwenimage import QwenImageTransformerBlock

    return FSDP(transformer, auto_wrap_policy=functools.partial(transformer_auto_wrap_policy,
                                                                 transformer_layer_cls={QwenImageTransformerBlock}),
                mixed_precision=MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16,
                                               buffer_dtype=torch.bfloat16),
                sharding_strategy=ShardingStrategy.FULL_SHARD, backward_prefetch=BackwardPrefetch.BACKWARD_PRE,
                cpu_offload=CPUOffload(offload_params=False), use_orig_params=True, device_id=smoke_device())


def prompt_batch(rank: int, step: int, seed: int) -> dict:
    """What upstream's loader yields for one prompt: embeddings ``[1, L, D]`` padded after
    ``original_length`` tokens, the mask ``[1, L]``, the caption list and ``original_length [1]``."""
    generator = torch.Generator().manual_seed(10_000 + seed)
    table = {p: torch.randn(1, TEXT_LENGTH, TEXT_WIDTH, generator=generator) for p in PROMPTS}
    caption = PROMPTS[(rank + step - 1) % len(PROMPTS)]
    length = TEXT_LENGTH - 2 - (step % 2)  # padded, and not the same length every step
    mask = (torch.arange(TEXT_LENGTH) < length).long()[None]
    return {"prompt_embeds": table[caption] * mask[..., None], "prompt_attention_masks": mask,
            "caption": [caption], "original_length": torch.tensor([length])}


def run(upstream_dir: Path, out_dir: Path, config: OtcaConfig, sizes: Sizes, reward_root: Path, probe=None) -> dict:
    return run_image_trainer(upstream_dir, out_dir, config, reward_root, probe, UPSTREAM_FILE, sizes,
                             upstream_args(sizes), lambda: fsdp_wrap(tiny_transformer()), tiny_vae,
                             lambda rank, step: prompt_batch(rank, step, sizes.seed))
