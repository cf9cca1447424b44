"""A tiny Qwen-Image pipeline folder (diffusers' ``QwenImagePipeline`` layout), built locally without
downloads, so upstream's own ``DiffusionPipeline.from_pretrained`` loads it: the one-block
transformer and 8x VAE of the DanceGRPO Qwen-Image smoke, a one-layer Qwen2.5-VL text encoder
(32 wide, as the transformer's text conditioning; a one-block vision tower it never calls) and a
byte-level Qwen2 tokenizer with Qwen's chat tokens (every byte a token: the pipeline's prompt
template is longer than its 34 dropped tokens, and any prompt decodes back to itself).

``build_tiny_qwenimage_edit`` writes the ``QwenImageEditPipeline`` layout: the same text encoder
with the vision tokens its template uses (the vision tower reads the input image), a Qwen2-VL
processor that resizes any image to 56 x 56 (4 vision tokens), and a VAE of 64x downsampling
(``vae_scale_factor`` is ``2 ** len(temperal_downsample)``), so the 1024 x 1024 condition image
upstream hard-codes (``calculate_dimensions(1024 * 1024, 1)``) is 8 x 8 packed latents.

Needs a transformers release with Qwen2.5-VL (4.49 or later).
"""
from __future__ import annotations

from pathlib import Path

import torch

#: Qwen's chat tokens (the pipeline's prompt template uses the first two)
SPECIAL_TOKENS = ("<|im_start|>", "<|im_end|>", "<|endoftext|>")
#: the vision tokens of the edit pipeline's template (the processor expands the image pad)
VISION_TOKENS = ("<|vision_start|>", "<|image_pad|>", "<|vision_end|>")
#: the video pad, unused by the edit pipeline but a token of its own: transformers 5's processor counts
#: it in the ids, where an unknown token would read as the padding
VIDEO_PAD = "<|video_pad|>"
#: the edit processor's image size: 2 x 2 merged patches of 14 (smart_resize keeps it in [min, max])
VISION_PIXELS = 56 * 56
TEXT_WIDTH = 32


def qwenimage_transformer():
    """diffusers' ``QwenImageTransformer2DModel``, one block, 32-wide text conditioning, 64 packed channels."""
    from diffusers import QwenImageTransformer2DModel

    return QwenImageTransformer2DModel(patch_size=2, in_channels=64, out_channels=16, num_layers=1,
                                       attention_head_dim=16, num_attention_heads=2, joint_attention_dim=32,
                                       guidance_embeds=False, axes_dims_rope=(4, 6, 6))


def qwenimage_vae():
    """diffusers' ``AutoencoderKLQwenImage``: 8x spatial downsampling, 16 latent channels (as upstream hard-codes)."""
    from diffusers import AutoencoderKLQwenImage

    return AutoencoderKLQwenImage(base_dim=8, z_dim=16, dim_mult=[1, 1, 1, 1], num_res_blocks=1, attn_scales=[],
                                  temperal_downsample=[False, False, False])


def byte_level_tokenizer(folder: Path, extra_tokens: tuple = ()):
    """A ``Qwen2Tokenizer``, as Qwen-Image ships (the slow one under transformers 4), over the 256
    byte-level symbols with no merges and ``SPECIAL_TOKENS`` (plus ``extra_tokens``); its vocab.json /
    merges.txt are written under ``folder / "_bpe"``."""
    import json

    from tokenizers.pre_tokenizers import ByteLevel
    from transformers import Qwen2Tokenizer

    files = Path(folder) / "_bpe"
    files.mkdir(parents=True, exist_ok=True)
    vocab = {symbol: i for i, symbol in enumerate(sorted(ByteLevel.alphabet()))}
    (files / "vocab.json").write_text(json.dumps(vocab))
    (files / "merges.txt").write_text("#version: 0.2\n")
    # read back by from_pretrained, which transformers 4 and 5 do alike (5's constructor takes vocab=/merges=
    # and, given file names, builds an empty vocabulary: every byte <|endoftext|>, the prompt gone)
    tokenizer = Qwen2Tokenizer.from_pretrained(str(files), unk_token="<|endoftext|>", bos_token=None,
                                               eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    tokenizer.add_special_tokens({"additional_special_tokens": [*SPECIAL_TOKENS[:2], *extra_tokens]})
    return tokenizer


def tiny_text_encoder(tokenizer):
    """A one-layer Qwen2.5-VL (a one-block vision tower), its vision token ids the tokenizer's when it has them."""
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    tokens = {"image_token_id": VISION_TOKENS[1], "video_token_id": VIDEO_PAD, "vision_start_token_id": VISION_TOKENS[0]}
    vocab = tokenizer.get_vocab()
    ids = {name: vocab[token] if token in vocab else len(tokenizer) + offset  # else ids past the vocabulary
           for offset, (name, token) in enumerate(tokens.items(), start=1)}
    config = Qwen2_5_VLConfig(
        vocab_size=len(tokenizer) + 8, hidden_size=TEXT_WIDTH, intermediate_size=37, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=2048,
        rope_scaling={"type": "mrope", "mrope_section": [2, 3, 3]},
        vision_config={"depth": 1, "hidden_size": 16, "intermediate_size": 16, "num_heads": 2,
                       "out_hidden_size": TEXT_WIDTH, "fullatt_block_indexes": [0]},
        pad_token_id=tokenizer.pad_token_id, **ids)
    return Qwen2_5_VLForConditionalGeneration(config)


def build_tiny_qwenimage(folder: str | Path, seed: int = 0) -> Path:
    """Write the pipeline folder (an existing complete folder is reused)."""
    from diffusers import FlowMatchEulerDiscreteScheduler, QwenImagePipeline

    folder = Path(folder)
    if (folder / "model_index.json").is_file():
        return folder
    torch.manual_seed(seed)
    tokenizer = byte_level_tokenizer(folder)
    text_encoder = tiny_text_encoder(tokenizer)  # initialised first: the weights of earlier runs
    pipeline = QwenImagePipeline(scheduler=FlowMatchEulerDiscreteScheduler(shift=3.0), vae=qwenimage_vae(),
                                 text_encoder=text_encoder, tokenizer=tokenizer, transformer=qwenimage_transformer())
    pipeline.save_pretrained(str(folder), safe_serialization=True)
    return folder


def video_processor(processor_class) -> dict:
    """The processor's ``video_processor`` where its class requires one (transformers >= 4.52; 4.x before
    it has none): the edit pipeline never passes videos, so it only has to exist, at the vision size."""
    import inspect

    if "video_processor" not in inspect.signature(processor_class.__init__).parameters:
        return {}
    from transformers import Qwen2VLVideoProcessor

    return {"video_processor": Qwen2VLVideoProcessor(min_pixels=VISION_PIXELS, max_pixels=VISION_PIXELS)}


def build_tiny_qwenimage_edit(folder: str | Path, seed: int = 0) -> Path:
    """Write the edit pipeline folder (see the module docstring; an existing complete folder is reused)."""
    from diffusers import AutoencoderKLQwenImage, FlowMatchEulerDiscreteScheduler, QwenImageEditPipeline
    from transformers import Qwen2VLImageProcessorFast, Qwen2VLProcessor

    folder = Path(folder)
    if (folder / "model_index.json").is_file():
        return folder
    torch.manual_seed(seed)
    tokenizer = byte_level_tokenizer(folder, (*VISION_TOKENS, VIDEO_PAD))
    # the fast processor: upstream hands it the sampler's [-1, 1] tensor, which the slow one's PIL resize refuses
    image_processor = Qwen2VLImageProcessorFast(min_pixels=VISION_PIXELS, max_pixels=VISION_PIXELS)
    processor = Qwen2VLProcessor(image_processor=image_processor, tokenizer=tokenizer, **video_processor(Qwen2VLProcessor))
    vae = AutoencoderKLQwenImage(base_dim=4, z_dim=16, dim_mult=[1] * 7, num_res_blocks=0, attn_scales=[],
                                 temperal_downsample=[False] * 6)
    pipeline = QwenImageEditPipeline(scheduler=FlowMatchEulerDiscreteScheduler(shift=3.0), vae=vae,
                                     text_encoder=tiny_text_encoder(tokenizer), tokenizer=tokenizer,
                                     processor=processor, transformer=qwenimage_transformer())
    pipeline.save_pretrained(str(folder), safe_serialization=True)
    return folder
