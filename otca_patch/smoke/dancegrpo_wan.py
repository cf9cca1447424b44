"""Run DanceGRPO's real Wan2.1 ``train_one_step`` on the CPU with tiny models.

What runs for real: upstream's whole ``train_one_step`` (rollout loop with classifier-free guidance,
``flux_step`` SDE sampling and log-probs, VAE latent de-normalisation, diffusers' VideoProcessor,
``export_to_video`` to mp4, ``video_first_frame_to_pil`` re-reading the mp4, HPSv2 through hpsv2's
open_clip on a tiny checkpoint, group advantages, step permutation, PPO loss, gradient clipping,
optimizer steps) and diffusers' own ``WanTransformer3DModel`` and ``AutoencoderKLWan`` (tiny configs;
diffusers >= 0.35), with the layer's hooks when asked. Nothing is stood in. Like upstream, the model
is wrapped in neither FSDP nor DDP; each rank writes a checksum of its weights so tests can see
whether the replicas stay equal (``--otca_sync_grads``).
"""
from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

import torch

from ..config import OtcaConfig
from .sizes import VIDEO_PROMPTS, RolloutSizes
from .dancegrpo_flux import upstream_hps_reward
from .environment import smoke_device
from .harness import (call_by_signature, cast_inputs_to_weights, enter_run_folder, finish,
                      load_upstream, on_device, optimizer_and_schedule, report_step)

UPSTREAM_FILE = "fastvideo/train_grpo_wan_2_1.py"
PROMPTS = VIDEO_PROMPTS


@dataclass
class Sizes(RolloutSizes):
    """The family's sizes plus the video length, the PPO clips and classifier-free guidance."""

    frames: int = 5  # video frames; latents have (frames - 1) / 4 + 1
    learning_rate: float = 1e-3
    clip_range: float = 1e-4
    adv_clip_max: float = 5.0
    cfg_infer: float = 5.0


def upstream_args(sizes: Sizes) -> argparse.Namespace:
    """The upstream arguments ``train_one_step`` reads, as ``finetune_wan_2_1_grpo.sh`` sets them."""
    return argparse.Namespace(
        use_group=True, num_generations=sizes.num_generations, w=sizes.image_size, h=sizes.image_size,
        t=sizes.frames, sampling_steps=sizes.sampling_steps, shift=sizes.shift, eta=sizes.eta, init_same_noise=True,
        cfg_infer=sizes.cfg_infer, use_hpsv2=True, timestep_fraction=sizes.timestep_fraction,
        clip_range=sizes.clip_range, adv_clip_max=sizes.adv_clip_max,
        gradient_accumulation_steps=sizes.num_generations,
    )


def prompt_embeddings(rank: int, step: int, seed: int):
    """What upstream's loader hands ``train_one_step``: prompt embeds [1, L, 32], negative embeds
    [1, L, 32], and the caption as a list (a tuple is rejected by upstream on current torch)."""
    generator = torch.Generator().manual_seed(10_000 + seed)
    table = {p: torch.randn(1, 8, 32, generator=generator) for p in PROMPTS}
    negative = torch.randn(1, 8, 32, generator=generator)
    caption = PROMPTS[(rank + step) % len(PROMPTS)]
    return table[caption].clone(), negative.clone(), [caption]


def tiny_wan_transformer():
    """diffusers' ``WanTransformer3DModel``, one block, 2 heads of 12 (rope splits 4/4/4), text dim 32."""
    from diffusers import WanTransformer3DModel

    return WanTransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=12, in_channels=16,
                                 out_channels=16, text_dim=32, freq_dim=16, ffn_dim=32, num_layers=1,
                                 rope_max_seq_len=32)


def tiny_wan_vae():
    """diffusers' ``AutoencoderKLWan`` (8 base channels, one res block per level), Wan2.1's 4x temporal
    and 8x spatial compression and its published latents_mean / latents_std."""
    from diffusers import AutoencoderKLWan

    return AutoencoderKLWan(base_dim=8, z_dim=16, dim_mult=[1, 1, 1, 1], num_res_blocks=1,
                            temperal_downsample=[False, True, True])


def weights_checksum(model: torch.nn.Module) -> float:
    return float(sum(p.detach().double().sum() for p in model.parameters()))


def run(upstream_dir: Path, out_dir: Path, config: OtcaConfig, sizes: Sizes, reward_root: Path,
        probe=None) -> dict:
    upstream_dir = upstream_dir.resolve()  # before the chdir below
    rank, world_size = enter_run_folder(out_dir, "videos")  # upstream writes ./videos/*.mp4, ./reward.txt

    from ..rewards import tiny

    reward_root.mkdir(parents=True, exist_ok=True)
    hps_checkpoint = tiny.build_hpsv2(reward_root)
    module = load_upstream(upstream_dir, UPSTREAM_FILE, config, "dancegrpo_train_grpo_wan_2_1")
    recorder = probe(module, log_prob_index=2) if probe else None  # all_log_probs: result[2]

    torch.manual_seed(sizes.seed)  # the same weights for every rank and every mode
    transformer = on_device(tiny_wan_transformer())
    cast_inputs_to_weights(transformer)
    vae = on_device(tiny_wan_vae().eval())
    steps = train(module, transformer, vae, hps_checkpoint, sizes, rank, out_dir)
    return finish(out_dir, config, rank, world_size, steps, recorder, sync_grads=config.otca_sync_grads)


def train(module, transformer, vae, hps_checkpoint: Path, sizes: Sizes, rank: int, out_dir: Path, args=None) -> list:
    """Upstream's ``train_one_step`` for ``sizes.steps`` steps on ``transformer`` (trained in place),
    with upstream's HPSv2 on the tiny checkpoint; writes each rank's weight checksums. Returns the
    smoke.json step entries."""
    from ..rewards import tiny

    reward_model, tokenizer, preprocess_val = upstream_hps_reward(hps_checkpoint, tiny.TINY_HPS_ARCH)
    reward_model = on_device(reward_model)
    transformer.train()
    optimizer, lr_scheduler = optimizer_and_schedule(transformer, sizes.learning_rate)
    args = args or upstream_args(sizes)
    torch.manual_seed(sizes.seed * 1000 + rank)  # rollout noise and step order: per rank, as upstream seeds

    steps = []
    for step in range(1, sizes.steps + 1):
        embeds, negative, caption = prompt_embeddings(rank, step, sizes.seed)
        embeds, negative = embeds.to(smoke_device()), negative.to(smoke_device())
        loss, grad_norm = call_by_signature(module.train_one_step, dict(
            args=args, device=smoke_device(), transformer=transformer, vae=vae, reward_model=reward_model,
            tokenizer=tokenizer, optimizer=optimizer, lr_scheduler=lr_scheduler, encoder_hidden_states=embeds,
            negative_prompt_embeds=negative, caption=caption, noise_scheduler=None, max_grad_norm=1.0,
            preprocess_val=preprocess_val))
        steps.append(report_step(rank, step, loss, grad_norm, weights=weights_checksum(transformer)))
    (out_dir / f"weights_rank{rank}.json").write_text(json.dumps([s["weights"] for s in steps]))
    return steps
