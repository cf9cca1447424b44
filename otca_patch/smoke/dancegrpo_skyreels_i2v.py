"""Run DanceGRPO's real SkyReels image-to-video ``train_one_step`` on the CPU with tiny models.

What runs for real: upstream's whole ``train_one_step`` (a FLUX pipeline drawing the first frame,
saving and re-reading it as JPEG, HunyuanVideo-VAE first-frame latents padded over time, the rollout
loop with classifier-free guidance against the empty-prompt embedding, ``flux_step`` SDE sampling and
log-probs, VAE decode, diffusers' VideoProcessor, ``export_to_video`` to mp4, MQ group advantages,
step permutation, the PPO loss, FSDP gradient clipping, optimizer steps), upstream's own HunyuanVideo
transformer (``fastvideo.models.hunyuan_hf``, tiny, 32 input channels as SkyReels-I2V, under FSDP) and
diffusers' ``FluxPipeline`` loaded from a tiny folder written locally (``./data/flux`` as upstream's
``main`` loads it). Replaced, at the smallest boundaries (the same as the HunyuanVideo smoke run):
- ``flash_attn_no_pad`` (a CUDA-only flash-attention kernel) inside that transformer: masked SDPA;
- VideoAlign's ``inferencer.reward(paths, prompts, use_norm=True)`` (a Qwen2-VL model, GPU-sized):
  ``StubVideoAlign`` scores the mp4 upstream wrote from its pixels, in VideoAlign's return format;
- the VAE is diffusers' ``AutoencoderKLHunyuanVideo`` (what upstream's ``load_vae("hunyuan_hf")`` builds), tiny.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import torch

from ..config import OtcaConfig
from .sizes import RolloutSizes
from .dancegrpo_hunyuan import StubVideoAlign, prompt_loader, tiny_transformer, tiny_vae
from .environment import smoke_device
from .harness import (call_by_signature, cast_inputs_to_weights, device_loader, enter_run_folder,
                      finish, fsdp_wrap, load_upstream, on_device, optimizer_and_schedule,
                      report_step)

UPSTREAM_FILE = "fastvideo/train_grpo_skyreels_i2v.py"


@dataclass
class Sizes(RolloutSizes):
    """The family's sizes plus the video length and classifier-free guidance."""

    frames: int = 5  # video frames; latents have (frames - 1) / 4 + 1
    shift: float = 7.0
    cfg_infer: float = 5.0


def upstream_args(sizes: Sizes) -> argparse.Namespace:
    """The upstream arguments ``train_one_step`` reads, as ``finetune_skyreels_i2v.sh`` sets them."""
    return argparse.Namespace(
        use_group=True, num_generations=sizes.num_generations, w=sizes.image_size, h=sizes.image_size,
        t=sizes.frames, fps=8, sampling_steps=sizes.sampling_steps, shift=sizes.shift, eta=sizes.eta,
        init_same_noise=True, use_videoalign=True, cfg_infer=sizes.cfg_infer,
        timestep_fraction=sizes.timestep_fraction, gradient_accumulation_steps=sizes.num_generations,
    )


def empty_prompt(seed: int):
    """What upstream loads from ``./data/empty/prompt_embed/0.pt`` and ``prompt_attention_mask/0.pt``:
    the empty prompt's ``[1 + L, 32]`` states (the first token carries the pooled projection) and ``[L]`` mask."""
    states = torch.randn(9, 32, generator=torch.Generator().manual_seed(20_000 + seed))
    mask = torch.zeros(8, dtype=torch.long)
    mask[:2] = 1
    return states, mask


def flux_pipeline(folder: Path):
    """diffusers' ``FluxPipeline`` from a tiny folder, loaded as upstream's ``main`` loads ``./data/flux``
    (float32 here: the CPU)."""
    from diffusers import FluxPipeline

    from .tiny_flux import build_tiny_flux

    pipeline = FluxPipeline.from_pretrained(str(build_tiny_flux(folder)), torch_dtype=torch.float32)
    pipeline.set_progress_bar_config(disable=True)
    return pipeline


def run(upstream_dir: Path, out_dir: Path, config: OtcaConfig, sizes: Sizes, reward_root: Path,
        probe=None) -> dict:
    upstream_dir = upstream_dir.resolve()  # before the chdir below
    # upstream writes ./videos/flux_<rank>.jpg, ./videos/*.mp4 and ./reward.txt in the run folder
    rank, world_size = enter_run_folder(out_dir, "videos")
    reward_root.mkdir(parents=True, exist_ok=True)
    module = load_upstream(upstream_dir, UPSTREAM_FILE, config, "dancegrpo_train_grpo_skyreels_i2v")
    recorder = probe(module, log_prob_index=4) if probe else None  # all_log_probs: result[4]

    torch.manual_seed(sizes.seed)  # the same weights for every rank and every mode
    transformer = on_device(tiny_transformer(in_channels=32))
    cast_inputs_to_weights(transformer)
    vae = on_device(tiny_vae().eval())
    pipe_flux = on_device(flux_pipeline(reward_root / f"flux_rank{rank}"))
    transformer = fsdp_wrap(transformer)
    transformer.train()
    optimizer, lr_scheduler = optimizer_and_schedule(transformer, sizes.learning_rate)
    args = upstream_args(sizes)
    loader = device_loader(prompt_loader(rank, sizes.seed))
    empty_states, empty_mask = (t.to(smoke_device()) for t in empty_prompt(sizes.seed))
    torch.manual_seed(sizes.seed * 1000 + rank)  # first frames, rollout noise and step order: per rank

    steps = []
    for step in range(1, sizes.steps + 1):
        loss, grad_norm = call_by_signature(module.train_one_step, dict(
            args=args, device=smoke_device(), transformer=transformer, pipe_flux=pipe_flux, vae=vae,
            inferencer=StubVideoAlign(), optimizer=optimizer, lr_scheduler=lr_scheduler, loader=loader,
            max_grad_norm=1.0, step=step, empty_cond_hidden_states=empty_states,
            empty_cond_attention_mask=empty_mask))
        steps.append(report_step(rank, step, loss, grad_norm))
    return finish(out_dir, config, rank, world_size, steps, recorder)
