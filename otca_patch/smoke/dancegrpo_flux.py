"""Run DanceGRPO's real FLUX ``train_one_step`` on the CPU with tiny models it builds: the smoke
harness of the FLUX family (``[target.smoke] harness = "dancegrpo_flux"``), which runs the spec's
``file``, so a trainer that follows the family (a fork's copy of the FLUX trainer) needs no module.

Vanilla (no layer flag) imports the upstream file untouched; with ``--otca`` / ``--otca_observe``
the file is rewritten by its hook-point spec exactly as a real launch would. Everything that
decides the numbers (weights, prompts, noise) is seeded after the layer is installed, so vanilla
and OTCA runs start from the same state and the same arguments print the same numbers.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from types import SimpleNamespace

import torch

from ..config import OtcaConfig
from .environment import smoke_device
from .harness import (call_by_signature, device_loader, enter_run_folder, finish, fsdp_wrap, load_upstream,
                      on_device, optimizer_and_schedule, report_step)
from .sizes import IMAGE_PROMPTS, RolloutSizes

PROMPTS = IMAGE_PROMPTS


@dataclass
class Sizes(RolloutSizes):
    """The family's sizes (latents image_size / 8, packed 2x2 into 64 channels) and the PPO clips."""

    clip_range: float = 1e-4
    adv_clip_max: float = 5.0


def upstream_args(sizes: Sizes) -> argparse.Namespace:
    """The upstream arguments ``train_one_step`` reads, as ``finetune_flux_grpo.sh`` sets them."""
    return argparse.Namespace(
        use_group=True, num_generations=sizes.num_generations, w=sizes.image_size, h=sizes.image_size, t=1,
        sampling_steps=sizes.sampling_steps, shift=sizes.shift, eta=sizes.eta, init_same_noise=True,
        use_hpsv2=True, use_pickscore=False, timestep_fraction=sizes.timestep_fraction,
        clip_range=sizes.clip_range, adv_clip_max=sizes.adv_clip_max, gradient_accumulation_steps=sizes.num_generations,
        ignore_last=True, train_batch_size=1,
    )


def tiny_transformer():
    from diffusers import FluxTransformer2DModel

    return FluxTransformer2DModel(patch_size=1, in_channels=64, num_layers=1, num_single_layers=1,
                                  attention_head_dim=16, num_attention_heads=2, joint_attention_dim=32,
                                  pooled_projection_dim=32, guidance_embeds=True, axes_dims_rope=(4, 4, 8))


def tiny_vae():
    from diffusers import AutoencoderKL

    # four blocks: the 8x downsampling upstream hard-codes; 16 latent channels as FLUX's VAE
    return AutoencoderKL(in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 4,
                         up_block_types=("UpDecoderBlock2D",) * 4, block_out_channels=(8, 8, 8, 8),
                         latent_channels=16, layers_per_block=1, norm_num_groups=4)


def upstream_hps_reward(checkpoint: Path, arch: str):
    """HPSv2 as upstream's ``main`` builds it (hpsv2's open_clip + the ``{'state_dict'}`` file),
    on the tiny architecture the checkpoint was written with."""
    from hpsv2.src import open_clip as hps_open_clip

    model, _, preprocess_val = hps_open_clip.create_model_and_transforms(
        arch, None, precision="fp32", device="cpu", jit=False, force_quick_gelu=False, force_custom_text=False,
        force_patch_dropout=False, force_image_size=None, pretrained_image=False, image_mean=None,
        image_std=None, light_augmentation=True, aug_cfg={}, output_dict=True, with_score_predictor=False,
        with_region_predictor=False)
    model.load_state_dict(torch.load(checkpoint, map_location="cpu", weights_only=True)["state_dict"])
    return model.eval(), hps_open_clip.get_tokenizer(arch), preprocess_val


def prompt_loader(rank: int, seed: int):
    """Upstream's loader yields (prompt_embeds [1, L, 32], pooled [1, 32], text_ids [1, 3], captions).

    Captions come as a list: upstream's own collate hands a tuple, which its train_one_step
    rejects on current torch ("Unsupported caption type") -- an upstream incompatibility.
    """
    generator = torch.Generator().manual_seed(10_000 + seed)
    table = {p: (torch.randn(1, 8, 32, generator=generator), torch.randn(1, 32, generator=generator))
             for p in PROMPTS}
    position = rank
    while True:
        caption = PROMPTS[position % len(PROMPTS)]
        embeds, pooled = table[caption]
        yield embeds.clone(), pooled.clone(), torch.zeros(1, 3), [caption]
        position += 1


def target_smoke(name: str, smoke) -> SimpleNamespace:
    """What the smoke command runs for target ``name`` (``smoke``: its spec's ``hooks.spec.Smoke``):
    the family's sizes and run, on the spec's file."""
    return SimpleNamespace(Sizes=Sizes, run=partial(run, upstream_file=smoke.file))


def run(upstream_dir: Path, out_dir: Path, config: OtcaConfig, sizes: Sizes, reward_root: Path,
        probe=None, *, upstream_file: str) -> dict:
    rank, world_size = enter_run_folder(out_dir, "images")  # upstream writes ./images/*.png, ./reward.txt

    from ..rewards import tiny

    reward_root.mkdir(parents=True, exist_ok=True)
    hps_checkpoint = tiny.build_hpsv2(reward_root)
    module = load_upstream(upstream_dir.resolve(), upstream_file, config, f"dancegrpo_{Path(upstream_file).stem}")
    recorder = probe(module, log_prob_index=2) if probe else None  # all_log_probs: result[2]

    torch.manual_seed(sizes.seed)  # the same weights for every rank and every mode
    transformer = on_device(tiny_transformer())
    vae = on_device(tiny_vae().eval())
    reward_model, tokenizer, preprocess_val = upstream_hps_reward(hps_checkpoint, tiny.TINY_HPS_ARCH)
    reward_model = on_device(reward_model)
    transformer = fsdp_wrap(transformer)
    transformer.train()
    optimizer, lr_scheduler = optimizer_and_schedule(transformer, sizes.learning_rate)
    args = upstream_args(sizes)
    loader = device_loader(prompt_loader(rank, sizes.seed))
    torch.manual_seed(sizes.seed * 1000 + rank)  # rollout noise and step order: per rank, as upstream seeds

    steps = []
    for step in range(1, sizes.steps + 1):
        loss, grad_norm = call_by_signature(module.train_one_step, dict(
            args=args, device=smoke_device(), transformer=transformer, vae=vae, reward_model=reward_model,
            tokenizer=tokenizer, optimizer=optimizer, lr_scheduler=lr_scheduler, loader=loader, noise_scheduler=None,
            max_grad_norm=1.0, preprocess_val=preprocess_val, ema_handler=None))
        steps.append(report_step(rank, step, loss, grad_norm))
    return finish(out_dir, config, rank, world_size, steps, recorder)
