"""The tiny base model: diffusers' ``FluxTransformer2DModel`` (the FLUX architecture DanceGRPO
trains) working directly on 2x2-patchified pixels, conditioned by a small learned word table."""
from __future__ import annotations

import torch
from torch import nn

from .config import DemoConfig
from .data import PROMPT_LENGTH, VOCAB

CHANNELS = 3
PATCH = 2


def pack(images: torch.Tensor) -> torch.Tensor:
    """``[B, C, H, W] -> [B, (H/2)(W/2), 4C]``: FLUX's 2x2 token packing (here the "latent" is the image)."""
    b, c, h, w = images.shape
    x = images.reshape(b, c, h // PATCH, PATCH, w // PATCH, PATCH).permute(0, 2, 4, 1, 3, 5)
    return x.reshape(b, (h // PATCH) * (w // PATCH), c * PATCH * PATCH)


def unpack(tokens: torch.Tensor, image_size: int) -> torch.Tensor:
    """Inverse of ``pack``: ``[..., N, 4C] -> [..., C, H, W]`` (leading dims kept)."""
    lead, grid = tokens.shape[:-2], image_size // PATCH
    c = tokens.shape[-1] // (PATCH * PATCH)
    x = tokens.reshape(-1, grid, grid, c, PATCH, PATCH).permute(0, 3, 1, 4, 2, 5)
    return x.reshape(*lead, c, image_size, image_size)


def _rope_axes(head_dim: int) -> tuple[int, int, int]:
    """Rotary dims per position axis (text index, row, column); even, summing to ``head_dim``."""
    row = max(2, (head_dim - 4) // 4 * 2)  # most frequencies go to the two image axes
    return head_dim - 2 * row, row, row


class PromptEncoder(nn.Module):
    """A word table plus one embedding per word slot (FLUX gives text tokens no position): the
    stand-in for T5 (token states ``[B, 3, D]``) and CLIP (pooled ``[B, D]``). Frozen during GRPO,
    as DanceGRPO trains on precomputed prompt embeddings."""

    def __init__(self, text_dim: int):
        super().__init__()
        self.words = nn.Embedding(len(VOCAB), text_dim)
        self.slots = nn.Parameter(torch.zeros(PROMPT_LENGTH, text_dim))
        self.pool = nn.Linear(PROMPT_LENGTH * text_dim, text_dim)

    def forward(self, prompt_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        tokens = self.words(prompt_ids) + self.slots  # [B, 3, D]
        return tokens, self.pool(tokens.flatten(1))


class TinyFlux(nn.Module):
    """Velocity model ``v(z_sigma, sigma, prompt)`` with ``z_sigma = (1 - sigma) x + sigma noise``,
    ``v = noise - x`` (rectified flow, FLUX's parameterisation: ``x_hat = z - sigma v``)."""

    def __init__(self, config: DemoConfig):
        super().__init__()
        from diffusers import FluxTransformer2DModel  # heavy import, only when a model is built

        self.image_size = config.image_size
        self.prompt_encoder = PromptEncoder(config.text_dim)
        self.transformer = FluxTransformer2DModel(
            patch_size=1, in_channels=CHANNELS * PATCH * PATCH, num_layers=config.layers,
            num_single_layers=config.single_layers, attention_head_dim=config.head_dim,
            num_attention_heads=config.heads, joint_attention_dim=config.text_dim,
            pooled_projection_dim=config.text_dim, guidance_embeds=False, axes_dims_rope=_rope_axes(config.head_dim),
        )
        grid = config.image_size // PATCH
        image_ids = torch.zeros(grid, grid, 3)
        image_ids[..., 1] = torch.arange(grid).view(-1, 1)
        image_ids[..., 2] = torch.arange(grid).view(1, -1)
        self.register_buffer("image_ids", image_ids.reshape(grid * grid, 3), persistent=False)
        self.register_buffer("text_ids", torch.zeros(PROMPT_LENGTH, 3), persistent=False)

    @property
    def token_shape(self) -> tuple[int, int]:
        """``(N, 4C)``: the shape of one packed sample."""
        grid = self.image_size // PATCH
        return grid * grid, CHANNELS * PATCH * PATCH

    def forward(self, z: torch.Tensor, sigma: torch.Tensor, prompt_ids: torch.Tensor) -> torch.Tensor:
        """``z [B, N, 4C]``, ``sigma [B]`` in [0, 1], ``prompt_ids [B, 3]`` -> velocity ``[B, N, 4C]``."""
        tokens, pooled = self.prompt_encoder(prompt_ids)
        return self.transformer(
            hidden_states=z, encoder_hidden_states=tokens, pooled_projections=pooled,
            timestep=sigma.to(z.dtype), img_ids=self.image_ids, txt_ids=self.text_ids, return_dict=False,
        )[0]

    def freeze_prompt_encoder(self) -> None:
        self.prompt_encoder.requires_grad_(False)
