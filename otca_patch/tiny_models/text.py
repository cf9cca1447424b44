"""Tiny text tokenizers built offline, for the tiny pipelines of smoke runs, eval tests and demos.

CLIP's real BPE ships with open_clip, hpsv2 and OpenAI's clip, so the CLIP tokenizer is the real one
where one of them is installed (else a stand-in of the same size, ``rewards.tiny``); T5's sentencepiece
model is not on disk, so the T5 tokenizer is a Unigram vocabulary of one piece per word of ``TINY_WORDS``
wrapped as ``T5TokenizerFast`` (it saves and loads as ``tokenizer.json`` like the real one).
"""
from __future__ import annotations

from pathlib import Path

#: The words the tiny prompts use; anything else maps to <unk>.
TINY_WORDS = ("a", "an", "the", "red", "blue", "green", "yellow", "circle", "square", "triangle", "star", "on",
              "in", "at", "over", "white", "background", "snow", "night", "sea", "photo", "of", "cat", "dog")
#: captions of the image runs on tiny models (the tiny text encoders map each to fixed random embeddings)
IMAGE_PROMPTS = ("a red circle on a white background", "a blue square in the snow", "a green triangle at night",
                 "a yellow star over the sea")
#: captions of the video runs on tiny models
VIDEO_PROMPTS = ("a red ball rolling on grass", "a blue car driving in the snow", "a green kite in the wind",
                 "a yellow boat on the sea")


#: <pad>, </s>, <unk> come first.
T5_VOCAB_SIZE = 3 + len(TINY_WORDS)


def clip_tokenizer(folder: Path):
    """OpenAI CLIP's tokenizer, its vocab/merges files written under ``folder / "_bpe"``."""
    from transformers import CLIPTokenizer

    from ..rewards.tiny import clip_bpe_tokenizer  # OpenAI CLIP's BPE, from the copy a package ships

    return clip_bpe_tokenizer(CLIPTokenizer, Path(folder) / "_bpe")


def t5_tokenizer():
    """A ``T5TokenizerFast`` over ``TINY_WORDS`` (lower-cased, split on whitespace)."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers
    from transformers import T5TokenizerFast

    # a Unigram model (T5's own kind): transformers 5 rebuilds a T5 tokenizer from tokenizer.json's
    # [token, score] list and refuses a word-level {token: id} map; each word is one piece, ids as listed
    pieces = [(token, 0.0) for token in ("<pad>", "</s>", "<unk>")] + [(word, -1.0) for word in TINY_WORDS]
    backend = Tokenizer(models.Unigram(pieces, unk_id=2))
    backend.normalizer = normalizers.Lowercase()
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    return T5TokenizerFast(tokenizer_object=backend, eos_token="</s>", unk_token="<unk>", pad_token="<pad>",
                           extra_ids=0)
