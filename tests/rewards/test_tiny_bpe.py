"""The byte-level BPE table the tiny CLIP tokenizers are built with is GPT-2's, on any transformers
(5.x dropped ``tokenization_clip.bytes_to_unicode``, which the layer used to import)."""
import importlib

import pytest

from otca_patch.rewards.tiny import bytes_to_unicode
from upstream_snapshots import missing


def reference_table():
    for module in ("transformers.models.clip.tokenization_clip", "transformers.convert_slow_tokenizer"):
        try:
            return getattr(importlib.import_module(module), "bytes_to_unicode")()
        except (ImportError, AttributeError):
            continue
    missing("this transformers ships no bytes_to_unicode to compare with")


def test_the_table_is_gpt2s():
    table = bytes_to_unicode()
    assert table == reference_table()
    assert len(set(table.values())) == 256 and table[ord("a")] == "a" and table[ord(" ")] == "\u0120"
