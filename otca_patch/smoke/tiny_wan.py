"""A tiny Wan2.1 text-to-video pipeline folder (diffusers' ``WanPipeline`` layout, random weights),
built locally without downloads: the transformer and VAE of the DanceGRPO Wan smoke
(``dancegrpo_wan``), a 32-wide UMT5 text encoder over the tiny T5 vocabulary (``tiny_text``), and
Wan2.1's scheduler (UniPC with flow sigmas, shift 3), as the published Wan2.1-T2V-1.3B folder has.
"""
from __future__ import annotations

from pathlib import Path

import torch

from .tiny_text import T5_VOCAB_SIZE, t5_tokenizer


def build_tiny_wan(folder: str | Path, seed: int = 0) -> Path:
    """Write the pipeline folder (an existing complete folder is reused)."""
    from diffusers import UniPCMultistepScheduler, WanPipeline
    from transformers import UMT5Config, UMT5EncoderModel

    from .dancegrpo_wan import tiny_wan_transformer, tiny_wan_vae

    folder = Path(folder)
    if (folder / "model_index.json").is_file():
        return folder
    torch.manual_seed(seed)
    transformer, vae = tiny_wan_transformer(), tiny_wan_vae()
    text_encoder = UMT5EncoderModel(UMT5Config(vocab_size=T5_VOCAB_SIZE, d_model=32, d_ff=37, d_kv=8, num_heads=4,
                                               num_layers=1, relative_attention_num_buckets=8))
    scheduler = UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=3.0,
                                        num_train_timesteps=1000)
    pipeline = WanPipeline(tokenizer=t5_tokenizer(), text_encoder=text_encoder, transformer=transformer, vae=vae,
                           scheduler=scheduler)
    pipeline.save_pretrained(folder)
    return folder
