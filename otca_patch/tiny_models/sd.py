"""A tiny Stable Diffusion 1.x pipeline folder in diffusers' layout, built locally (no download), so
upstream's own ``StableDiffusionPipeline.from_pretrained("./data/stable-diffusion-v1-4")`` loads it.

Real diffusers classes in tiny configs: a 3-level ``UNet2DConditionModel`` (cross-attention only at
the coarsest level, 32-wide text conditioning), a one-block ``AutoencoderKL`` (no downsampling: the
64x64 latents upstream hard-codes decode to 64x64 images), a 32-wide ``CLIPTextModel`` with OpenAI
CLIP's real tokenizer, and SD 1.4's scheduler settings (upstream switches to DDIM from them).
"""
from __future__ import annotations

from pathlib import Path

import torch

from .text import clip_tokenizer


def build_tiny_sd(folder: str | Path, seed: int = 0) -> Path:
    """Write the pipeline folder (an existing complete folder is reused)."""
    from diffusers import AutoencoderKL, DDIMScheduler, StableDiffusionPipeline, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel

    folder = Path(folder)
    if (folder / "model_index.json").is_file():
        return folder
    torch.manual_seed(seed)
    unet = UNet2DConditionModel(
        sample_size=64, in_channels=4, out_channels=4, layers_per_block=1, block_out_channels=(16, 32, 32),
        down_block_types=("DownBlock2D", "DownBlock2D", "CrossAttnDownBlock2D"),
        up_block_types=("CrossAttnUpBlock2D", "UpBlock2D", "UpBlock2D"), cross_attention_dim=32,
        attention_head_dim=8, norm_num_groups=8)
    vae = AutoencoderKL(in_channels=3, out_channels=3, block_out_channels=(8,), down_block_types=("DownEncoderBlock2D",),
                        up_block_types=("UpDecoderBlock2D",), layers_per_block=1, latent_channels=4,
                        norm_num_groups=4, scaling_factor=0.18215)
    text_encoder = CLIPTextModel(CLIPTextConfig(
        bos_token_id=49406, eos_token_id=49407, pad_token_id=49407, hidden_size=32, intermediate_size=37,
        num_attention_heads=4, num_hidden_layers=2, vocab_size=49408, hidden_act="quick_gelu"))
    scheduler = DDIMScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
                              num_train_timesteps=1000, clip_sample=False, set_alpha_to_one=False, steps_offset=1)
    pipeline = StableDiffusionPipeline(vae=vae, text_encoder=text_encoder, tokenizer=clip_tokenizer(folder), unet=unet,
                                       scheduler=scheduler, safety_checker=None, feature_extractor=None,
                                       requires_safety_checker=False)
    pipeline.save_pretrained(str(folder), safe_serialization=True)
    return folder
