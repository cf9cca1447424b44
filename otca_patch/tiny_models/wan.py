"""Tiny Wan models, built locally without downloads: diffusers' ``WanTransformer3DModel`` and
``AutoencoderKLWan`` in tiny configs (what DanceGRPO's Wan smoke trains), a Wan2.1 text-to-video
pipeline folder (``WanPipeline`` layout: those two, a 32-wide UMT5 over the tiny T5 vocabulary of
``text``, and Wan2.1's scheduler, UniPC with flow sigmas, shift 3, as the published Wan2.1-T2V-1.3B
folder has) and a Wan2.2-A14B-layout folder (two experts and ``boundary_ratio``).
"""
from __future__ import annotations

from pathlib import Path

import torch

from .text import T5_VOCAB_SIZE, t5_tokenizer


def wan_transformer():
    """diffusers' ``WanTransformer3DModel``, one block, 2 heads of 12 (rope splits 4/4/4), text dim 32."""
    from diffusers import WanTransformer3DModel

    return WanTransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=12, in_channels=16,
                                 out_channels=16, text_dim=32, freq_dim=16, ffn_dim=32, num_layers=1,
                                 rope_max_seq_len=32)


def wan_vae():
    """diffusers' ``AutoencoderKLWan`` (8 base channels, one res block per level), Wan2.1's 4x temporal
    and 8x spatial compression and its published latents_mean / latents_std."""
    from diffusers import AutoencoderKLWan

    return AutoencoderKLWan(base_dim=8, z_dim=16, dim_mult=[1, 1, 1, 1], num_res_blocks=1,
                            temperal_downsample=[False, True, True])


def build_tiny_wan(folder: str | Path, seed: int = 0) -> Path:
    """Write the pipeline folder (an existing complete folder is reused)."""
    from diffusers import UniPCMultistepScheduler, WanPipeline
    from transformers import UMT5Config, UMT5EncoderModel

    folder = Path(folder)
    if (folder / "model_index.json").is_file():
        return folder
    torch.manual_seed(seed)
    transformer, vae = wan_transformer(), wan_vae()
    text_encoder = UMT5EncoderModel(UMT5Config(vocab_size=T5_VOCAB_SIZE, d_model=32, d_ff=37, d_kv=8, num_heads=4,
                                               num_layers=1, relative_attention_num_buckets=8))
    scheduler = UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=3.0,
                                        num_train_timesteps=1000)
    pipeline = WanPipeline(tokenizer=t5_tokenizer(), text_encoder=text_encoder, transformer=transformer, vae=vae,
                           scheduler=scheduler)
    pipeline.save_pretrained(folder)
    return folder


def build_tiny_wan22(folder: Path, boundary_ratio: float, seed: int) -> Path:
    """A Wan2.2-A14B-layout folder (two experts of different weights), written once."""
    from diffusers import FlowMatchEulerDiscreteScheduler, WanPipeline
    from transformers import UMT5Config, UMT5EncoderModel

    if (folder / "model_index.json").is_file():
        return folder
    torch.manual_seed(seed)
    experts = [wan_transformer(), wan_transformer()]
    text_encoder = UMT5EncoderModel(UMT5Config(vocab_size=T5_VOCAB_SIZE, d_model=32, d_ff=37, d_kv=8, num_layers=1,
                                               num_heads=4, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0))
    pipeline = WanPipeline(tokenizer=t5_tokenizer(), text_encoder=text_encoder, vae=wan_vae(),
                           scheduler=FlowMatchEulerDiscreteScheduler(shift=3.0), transformer=experts[0],
                           transformer_2=experts[1], boundary_ratio=boundary_ratio)
    pipeline.save_pretrained(str(folder), safe_serialization=True)
    return folder
