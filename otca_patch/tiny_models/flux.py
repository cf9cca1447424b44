"""A tiny FLUX pipeline folder (diffusers layout) and a checkpoint in DanceGRPO's layout, built
locally without downloads: SkyReels' smoke run draws its first frames with it, and ``otca-patch
eval`` is tested with it on a CPU.

Sizes follow the smoke runs' tiny transformer (32-wide text conditioning, 64 packed latent
channels). The T5 tokenizer is a word-level ``tokenizers`` vocabulary wrapped as
``T5TokenizerFast`` (saved as tokenizer.json): T5's real sentencepiece model needs a download.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

from .text import T5_VOCAB_SIZE, clip_tokenizer, t5_tokenizer

#: words of the tiny T5 vocabulary (anything else maps to <unk>)

def flux_transformer():
    """diffusers' ``FluxTransformer2DModel``, one block of each kind, 32-wide text conditioning, 64
    packed latent channels (from the current seed)."""
    from diffusers import FluxTransformer2DModel

    return FluxTransformer2DModel(patch_size=1, in_channels=64, num_layers=1, num_single_layers=1,
                                  attention_head_dim=16, num_attention_heads=2, joint_attention_dim=32,
                                  pooled_projection_dim=32, guidance_embeds=True, axes_dims_rope=(4, 4, 8))


def flux_vae():
    """A four-block ``AutoencoderKL``: the 8x downsampling upstream hard-codes; 16 latent channels as FLUX's VAE."""
    from diffusers import AutoencoderKL

    return AutoencoderKL(in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 4,
                         up_block_types=("UpDecoderBlock2D",) * 4, block_out_channels=(8, 8, 8, 8),
                         latent_channels=16, layers_per_block=1, norm_num_groups=4)


def tiny_transformer(seed: int = 0):
    """The smoke runs' tiny FLUX transformer, initialised from ``seed``."""
    torch.manual_seed(seed)
    return flux_transformer()


def build_tiny_flux(folder: str | Path, seed: int = 0) -> Path:
    """Write the pipeline folder (an existing complete folder is reused)."""
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, FluxPipeline
    from transformers import CLIPTextConfig, CLIPTextModel, T5Config, T5EncoderModel

    folder = Path(folder)
    if (folder / "model_index.json").is_file():
        return folder
    transformer = tiny_transformer(seed)
    text_encoder = CLIPTextModel(CLIPTextConfig(bos_token_id=49406, eos_token_id=49407, pad_token_id=49407,
                                                hidden_size=32, intermediate_size=37, num_attention_heads=4,
                                                num_hidden_layers=1, vocab_size=49408, max_position_embeddings=77))
    text_encoder_2 = T5EncoderModel(T5Config(vocab_size=T5_VOCAB_SIZE, d_model=32, d_ff=37, d_kv=8, num_layers=1,
                                             num_heads=4, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0))
    # four blocks: FLUX's 8x downsampling; 16 latent channels, packed 2x2 into the transformer's 64
    vae = AutoencoderKL(in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 4,
                        up_block_types=("UpDecoderBlock2D",) * 4, block_out_channels=(8, 8, 8, 8), latent_channels=16,
                        layers_per_block=1, norm_num_groups=4, shift_factor=0.0, scaling_factor=1.0,
                        use_quant_conv=False, use_post_quant_conv=False)
    tokenizer = clip_tokenizer(folder)
    pipeline = FluxPipeline(scheduler=FlowMatchEulerDiscreteScheduler(shift=3.0), vae=vae, text_encoder=text_encoder,
                            tokenizer=tokenizer, text_encoder_2=text_encoder_2, tokenizer_2=t5_tokenizer(),
                            transformer=transformer)
    pipeline.save_pretrained(str(folder), safe_serialization=True)
    return folder


def save_dancegrpo_checkpoint(transformer, output_dir: str | Path, step: int, epoch: int = 0) -> Path:
    """The on-disk result of DanceGRPO's ``save_checkpoint`` (fastvideo/utils/checkpoint.py):
    ``checkpoint-<step>-<epoch>/diffusion_pytorch_model.safetensors`` (the full state dict) and
    ``config.json`` (``dict(transformer.config)`` without ``dtype``)."""
    from safetensors.torch import save_file

    folder = Path(output_dir) / f"checkpoint-{step}-{epoch}"
    folder.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in transformer.state_dict().items()},
              str(folder / "diffusion_pytorch_model.safetensors"))
    config = dict(transformer.config)
    config.pop("dtype", None)
    (folder / "config.json").write_text(json.dumps(config, indent=4))
    return folder


def build_tiny_kontext(folder: Path) -> Path:
    """The tiny FLUX folder, declared a ``FluxKontextPipeline`` (the same components: Kontext feeds
    the input image's packed latents to the same transformer, after the noisy ones)."""
    build_tiny_flux(folder)
    index = json.loads((folder / "model_index.json").read_text())
    (folder / "model_index.json").write_text(json.dumps({**index, "_class_name": "FluxKontextPipeline"}, indent=2))
    return folder
