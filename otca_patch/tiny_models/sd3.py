"""A tiny Stable Diffusion 3 pipeline folder in diffusers' layout, built locally (no download), so
upstream's own ``StableDiffusion3Pipeline.from_pretrained(config.pretrained.model)`` loads it.

Sizes follow diffusers' own SD3 pipeline tests: one transformer layer, 32-wide CLIP text encoders
(pooled 2 x 32 = 64), a 64-wide T5 (FlowGRPO's ``encode_prompt`` pads the concatenated CLIP
embeddings up to the T5 width), a one-block VAE (no downsampling: latents are the image size).
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

from .text import T5_VOCAB_SIZE, clip_tokenizer, t5_tokenizer

#: words of the tiny T5 vocabulary (anything else maps to <unk>)

def build_tiny_sd3(folder: str | Path, seed: int = 0) -> Path:
    """Write the pipeline folder (idempotent: an existing complete folder is reused)."""
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, SD3Transformer2DModel, StableDiffusion3Pipeline
    from transformers import CLIPTextConfig, CLIPTextModelWithProjection, T5Config, T5EncoderModel

    folder = Path(folder)
    if (folder / "model_index.json").is_file():
        return folder
    torch.manual_seed(seed)
    transformer = SD3Transformer2DModel(sample_size=16, patch_size=2, in_channels=4, num_layers=1,
                                        attention_head_dim=8, num_attention_heads=2, joint_attention_dim=64,
                                        caption_projection_dim=16, pooled_projection_dim=64, out_channels=4)
    clip_config = CLIPTextConfig(bos_token_id=49406, eos_token_id=49407, pad_token_id=49407, hidden_size=32,
                                 intermediate_size=37, layer_norm_eps=1e-05, num_attention_heads=4,
                                 num_hidden_layers=2, vocab_size=49408, hidden_act="gelu", projection_dim=32)
    text_encoder = CLIPTextModelWithProjection(clip_config)
    text_encoder_2 = CLIPTextModelWithProjection(clip_config)
    text_encoder_3 = T5EncoderModel(T5Config(vocab_size=T5_VOCAB_SIZE, d_model=64, d_ff=64, d_kv=16,
                                             num_layers=1, num_heads=2, pad_token_id=0, eos_token_id=1,
                                             decoder_start_token_id=0))
    vae = AutoencoderKL(sample_size=16, in_channels=3, out_channels=3, block_out_channels=(4,),
                        down_block_types=("DownEncoderBlock2D",), up_block_types=("UpDecoderBlock2D",),
                        layers_per_block=1, latent_channels=4, norm_num_groups=1, use_quant_conv=False,
                        use_post_quant_conv=False, shift_factor=0.0609, scaling_factor=1.5035)
    tokenizer = clip_tokenizer(folder)
    pipeline = StableDiffusion3Pipeline(
        transformer=transformer, scheduler=FlowMatchEulerDiscreteScheduler(shift=3.0), vae=vae,
        text_encoder=text_encoder, tokenizer=tokenizer, text_encoder_2=text_encoder_2,
        tokenizer_2=tokenizer, text_encoder_3=text_encoder_3, tokenizer_3=t5_tokenizer())
    pipeline.save_pretrained(str(folder), safe_serialization=True)
    json.loads((folder / "model_index.json").read_text())  # written last by save_pretrained: a complete folder
    return folder
