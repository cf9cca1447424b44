"""Run DanceGRPO's real HunyuanVideo ``train_one_step`` on the CPU with tiny models.

What runs for real: upstream's whole ``train_one_step`` (rollout loop, ``flux_step`` SDE sampling and
log-probs, VAE decode, diffusers' VideoProcessor, ``export_to_video`` to mp4, VQ/MQ group advantages,
best-of-n selection, step permutation, both PPO losses, FSDP gradient clipping, optimizer steps)
and upstream's own HunyuanVideo transformer (``fastvideo.models.hunyuan_hf``, tiny config, under FSDP),
with the layer's hooks when asked. What is stubbed, at the smallest boundaries:
- ``flash_attn_no_pad`` (a CUDA-only flash-attention kernel) inside that transformer: replaced by
  ``masked_attention``, the same padded-key attention through ``scaled_dot_product_attention``;
- VideoAlign's ``inferencer.reward(paths, prompts, use_norm=True)`` (a Qwen2-VL model):
  ``StubVideoAlign`` re-reads each mp4 upstream wrote and returns deterministic VQ, MQ and TA from
  its pixels and its prompt, in VideoAlign's return format;
- the VAE is diffusers' ``AutoencoderKLHunyuanVideo`` (tiny) rather than fastvideo's copy of it.
"""
from __future__ import annotations

import argparse
import zlib
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.nn import functional as F

from ..config import OtcaConfig
from .environment import smoke_device
from .harness import (call_by_signature, cast_inputs_to_weights, device_loader, enter_run_folder,
                      finish, fsdp_wrap, load_upstream, on_device, optimizer_and_schedule,
                      report_step)
from .sizes import VIDEO_PROMPTS, RolloutSizes

UPSTREAM_FILE = "fastvideo/train_grpo_hunyuan.py"
PROMPTS = VIDEO_PROMPTS

@dataclass
class Sizes(RolloutSizes):
    """The family's sizes plus best-of-n, VideoAlign's loss coefficients and the video length."""

    bestofn: int = 4  # upstream's best-of-n; == num_generations keeps every sample
    vq_coef: float = 1.0
    mq_coef: float = 1.0
    frames: int = 5  # video frames; latents have (frames - 1) / 4 + 1


def upstream_args(sizes: Sizes) -> argparse.Namespace:
    """The upstream arguments ``train_one_step`` reads, as ``finetune_hunyuan_grpo.sh`` sets them."""
    return argparse.Namespace(
        use_group=True, num_generations=sizes.num_generations, bestofn=sizes.bestofn, vq_coef=sizes.vq_coef,
        mq_coef=sizes.mq_coef, w=sizes.image_size, h=sizes.image_size, t=sizes.frames, fps=8,
        sampling_steps=sizes.sampling_steps, shift=sizes.shift, eta=sizes.eta, use_same_noise=True,
        use_videoalign=True, timestep_fraction=sizes.timestep_fraction, gradient_accumulation_steps=sizes.bestofn,
    )


def masked_attention(qkv, key_padding_mask, causal=False, dropout_p=0.0, softmax_scale=None):
    """``flash_attn_no_pad`` on the CPU: qkv ``[B, S, 3, H, D]``, key_padding_mask ``[B, S]`` (True =
    token) -> ``[B, S, H, D]``; padded queries give zeros, as flash-attn's ``pad_input`` leaves them."""
    if causal or dropout_p:
        raise NotImplementedError("masked_attention covers the non-causal, dropout-free call upstream makes")
    query, key, value = (t.transpose(1, 2) for t in qkv.unbind(2))
    mask = key_padding_mask.bool()
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=mask[:, None, None, :], scale=softmax_scale)
    return out.transpose(1, 2) * mask[:, :, None, None].to(out.dtype)


class StubVideoAlign:
    """VideoAlign's ``reward`` interface, scoring the mp4 upstream wrote from its pixels."""

    def reward(self, video_paths, prompts, fps=None, num_frames=None, max_pixels=None, use_norm=True):
        import cv2
        import numpy as np

        results = []
        for path, prompt in zip(video_paths, prompts):
            capture, frames = cv2.VideoCapture(path), []
            while True:
                ok, frame = capture.read()
                if not ok:
                    break
                frames.append(frame[..., ::-1].astype(np.float64) / 255.0)  # BGR -> RGB
            capture.release()
            if not frames:
                raise RuntimeError(f"stub VideoAlign: cannot read {path}")
            video = np.stack(frames)  # [F, H, W, 3]
            channel = zlib.crc32(prompt.encode()) % 3  # the prompt's "colour": stable across processes
            vq = 4.0 * video.std() - 1.0
            mq = 20.0 * np.abs(np.diff(video, axis=0)).mean() if len(video) > 1 else 0.0
            ta = 4.0 * (video[..., channel].mean() - video.mean())
            results.append({"VQ": float(vq), "MQ": float(mq), "TA": float(ta)})
        for result in results:
            result["Overall"] = result["VQ"] + result["MQ"] + result["TA"]
        return results


def tiny_transformer(in_channels: int = 16):
    """Upstream's HunyuanVideo transformer, tiny; ``in_channels=32`` is the image-to-video layout
    (noise latents and first-frame latents concatenated on the channels)."""
    import fastvideo.models.hunyuan_hf.modeling_hunyuan as modeling

    modeling.flash_attn_no_pad = masked_attention
    return modeling.HunyuanVideoTransformer3DModel(
        in_channels=in_channels, out_channels=16, num_attention_heads=2, attention_head_dim=16, num_layers=1,
        num_single_layers=1, num_refiner_layers=1, text_embed_dim=32, pooled_projection_dim=16, rope_axes_dim=(4, 6, 6))


def tiny_vae():
    from diffusers import AutoencoderKLHunyuanVideo

    return AutoencoderKLHunyuanVideo(
        in_channels=3, out_channels=3, latent_channels=16, down_block_types=("HunyuanVideoDownBlock3D",) * 4,
        up_block_types=("HunyuanVideoUpBlock3D",) * 4, block_out_channels=(8, 8, 8, 8), layers_per_block=1,
        norm_num_groups=4, temporal_compression_ratio=4, mid_block_add_attention=False)


def prompt_loader(rank: int, seed: int):
    """Upstream's loader yields (encoder_hidden_states [1, 1 + L, 32] -- the first token carries the
    pooled projection --, encoder_attention_mask [1, L] with padding, captions as a list)."""
    generator = torch.Generator().manual_seed(10_000 + seed)
    table = {p: torch.randn(1, 9, 32, generator=generator) for p in PROMPTS}
    mask = torch.ones(1, 8, dtype=torch.long)
    mask[:, 6:] = 0
    position = rank
    while True:
        caption = PROMPTS[position % len(PROMPTS)]
        yield table[caption].clone(), mask.clone(), [caption]
        position += 1


def run(upstream_dir: Path, out_dir: Path, config: OtcaConfig, sizes: Sizes, reward_root: Path,
        probe=None) -> dict:
    upstream_dir = upstream_dir.resolve()  # before the chdir below
    # upstream writes ./videos/*.mp4, ./vq_reward.txt and ./mq_reward.txt in the run folder
    rank, world_size = enter_run_folder(out_dir, "videos")
    reward_root.mkdir(parents=True, exist_ok=True)
    module = load_upstream(upstream_dir, UPSTREAM_FILE, config, "dancegrpo_train_grpo_hunyuan")
    recorder = probe(module, log_prob_index=5) if probe else None  # all_log_probs: result[5]

    torch.manual_seed(sizes.seed)  # the same weights for every rank and every mode
    transformer = on_device(tiny_transformer())
    cast_inputs_to_weights(transformer)
    vae = on_device(tiny_vae().eval())
    transformer = fsdp_wrap(transformer)
    transformer.train()
    optimizer, lr_scheduler = optimizer_and_schedule(transformer, sizes.learning_rate)
    args = upstream_args(sizes)
    loader = device_loader(prompt_loader(rank, sizes.seed))
    torch.manual_seed(sizes.seed * 1000 + rank)  # rollout noise, selection and step order: per rank

    steps = []
    for step in range(1, sizes.steps + 1):
        loss, grad_norm = call_by_signature(module.train_one_step, dict(
            args=args, device=smoke_device(), transformer=transformer, vae=vae, inferencer=StubVideoAlign(),
            optimizer=optimizer, lr_scheduler=lr_scheduler, loader=loader, max_grad_norm=1.0, step=step))
        steps.append(report_step(rank, step, loss, grad_norm))
    return finish(out_dir, config, rank, world_size, steps, recorder)
