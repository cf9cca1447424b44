"""Tiny stand-ins for the two Wan2.1 model classes DanceGRPO's Wan trainer imports from diffusers.

diffusers 0.32 (this environment; DanceGRPO pins it) has no ``AutoencoderKLWan`` and no
``WanTransformer3DModel``, so the upstream file cannot even be imported here. These classes stand in
at exactly those two names: same call signatures and output shapes as diffusers' Wan models, a few
hundred parameters, no attention. Everything around them in upstream's trainer runs for real.
"""
from __future__ import annotations

import math
import sys
import types

import torch
from torch import nn
from torch.nn import functional as F


class WanTransformerBlock(nn.Module):
    """Named because upstream imports it (for gradient checkpointing, unused in the smoke run)."""


class TinyWanTransformer(nn.Module):
    """``forward(hidden_states [B, C, T, h, w], timestep [B], encoder_hidden_states [B, L, D]) -> ([B, C, T, h, w],)``:
    a velocity conditioned on the timestep and the mean text embedding."""

    def __init__(self, channels: int = 16, text_dim: int = 32, width: int = 32):
        super().__init__()
        self.inp = nn.Conv3d(channels, width, 1)
        self.time = nn.Linear(16, width)
        self.text = nn.Linear(text_dim, width)
        self.out = nn.Conv3d(width, channels, 3, padding=1)

    def forward(self, hidden_states, timestep, encoder_hidden_states, attention_kwargs=None, return_dict=True):
        dtype = self.inp.weight.dtype  # upstream's CUDA autocast reconciles bf16 inputs; here: cast
        x = self.inp(hidden_states.to(dtype))
        freqs = torch.exp(-math.log(10000.0) * torch.arange(8, device=x.device) / 8)
        angles = timestep.to(dtype)[:, None] * freqs[None]
        cond = self.time(torch.cat([angles.sin(), angles.cos()], dim=1)) + self.text(encoder_hidden_states.to(dtype).mean(1))
        out = self.out(F.silu(x + cond[:, :, None, None, None]))
        return (out,) if not return_dict else {"sample": out}


class TinyWanVae(nn.Module):
    """``decode(latents [B, 16, T, h, w]) -> ([B, 3, 4(T-1)+1, 8h, 8w],)`` in [-1, 1], with the
    ``config.latents_mean / latents_std / z_dim`` that upstream reads."""

    def __init__(self, z_dim: int = 16):
        super().__init__()
        self.proj = nn.Conv3d(z_dim, 3, 1)
        self.config = types.SimpleNamespace(z_dim=z_dim, latents_mean=[0.1] * z_dim, latents_std=[2.0] * z_dim)

    def enable_tiling(self):
        pass

    def decode(self, latents, return_dict=True):
        frames = 4 * (latents.shape[2] - 1) + 1
        size = (frames, latents.shape[3] * 8, latents.shape[4] * 8)
        video = torch.tanh(F.interpolate(self.proj(latents.to(self.proj.weight.dtype)), size=size, mode="trilinear"))
        return (video,) if not return_dict else {"sample": video}


def install() -> None:
    """Make ``from diffusers import AutoencoderKLWan, WanTransformer3DModel`` and
    ``diffusers.models.transformers.transformer_wan`` resolve to the stand-ins (only if absent)."""
    import diffusers

    if hasattr(diffusers, "WanTransformer3DModel"):
        return
    diffusers.AutoencoderKLWan, diffusers.WanTransformer3DModel = TinyWanVae, TinyWanTransformer
    module = types.ModuleType("diffusers.models.transformers.transformer_wan")
    module.WanTransformerBlock = WanTransformerBlock
    sys.modules[module.__name__] = module
