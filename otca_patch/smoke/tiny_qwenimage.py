"""A tiny Qwen-Image pipeline folder (diffusers' ``QwenImagePipeline`` layout), built locally without
downloads, so upstream's own ``DiffusionPipeline.from_pretrained`` loads it: the one-block
transformer and 8x VAE of the DanceGRPO Qwen-Image smoke, a one-layer Qwen2.5-VL text encoder
(32 wide, as the transformer's text conditioning; a one-block vision tower it never calls) and a
byte-level Qwen2 tokenizer with Qwen's chat tokens (every byte a token: the pipeline's prompt
template is longer than its 34 dropped tokens, and any prompt decodes back to itself).

Needs a transformers release with Qwen2.5-VL (4.49 or later).
"""
from __future__ import annotations

from pathlib import Path

import torch

#: Qwen's chat tokens (the pipeline's prompt template uses the first two)
SPECIAL_TOKENS = ("<|im_start|>", "<|im_end|>", "<|endoftext|>")
TEXT_WIDTH = 32


def byte_level_tokenizer(folder: Path):
    """A ``Qwen2Tokenizer``, as Qwen-Image ships (the slow one under transformers 4), over the 256
    byte-level symbols with no merges and ``SPECIAL_TOKENS``; its vocab.json / merges.txt are written under ``folder / "_bpe"``."""
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
    tokenizer.add_special_tokens({"additional_special_tokens": list(SPECIAL_TOKENS[:2])})
    return tokenizer


def build_tiny_qwenimage(folder: str | Path, seed: int = 0) -> Path:
    """Write the pipeline folder (an existing complete folder is reused)."""
    from diffusers import FlowMatchEulerDiscreteScheduler, QwenImagePipeline
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    from .dancegrpo_qwenimage import tiny_transformer, tiny_vae

    folder = Path(folder)
    if (folder / "model_index.json").is_file():
        return folder
    torch.manual_seed(seed)
    tokenizer = byte_level_tokenizer(folder)
    config = Qwen2_5_VLConfig(
        vocab_size=len(tokenizer) + 8, hidden_size=TEXT_WIDTH, intermediate_size=37, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=2048,
        rope_scaling={"type": "mrope", "mrope_section": [2, 3, 3]},
        vision_config={"depth": 1, "hidden_size": 16, "intermediate_size": 16, "num_heads": 2,
                       "out_hidden_size": TEXT_WIDTH, "fullatt_block_indexes": [0]},
        pad_token_id=tokenizer.pad_token_id, image_token_id=len(tokenizer) + 1, video_token_id=len(tokenizer) + 2,
        vision_start_token_id=len(tokenizer) + 3)
    text_encoder = Qwen2_5_VLForConditionalGeneration(config)
    pipeline = QwenImagePipeline(scheduler=FlowMatchEulerDiscreteScheduler(shift=3.0), vae=tiny_vae(),
                                 text_encoder=text_encoder, tokenizer=tokenizer, transformer=tiny_transformer())
    pipeline.save_pretrained(str(folder), safe_serialization=True)
    return folder
