"""FlowGRPO's groups: samples that share a prompt, over the batch gathered from every process.

Upstream groups by the prompt text decoded from the gathered token ids (``PerPromptStatTracker``),
so two prompts that tokenise alike are one group. Each process turns its own decoded prompts into
a 63-bit key that is the same in every process (``hash()`` is salted per process, so it cannot
be used); only the ``[B]`` keys are gathered, and every process numbers the gathered keys alike.
"""
from __future__ import annotations

import hashlib
from typing import Sequence

import torch


def prompt_keys(prompts: Sequence[str], device=None) -> torch.Tensor:
    """``[B]`` int64: a key per prompt text, equal across processes and runs (blake2b, 63 bits)."""
    keys = [int.from_bytes(hashlib.blake2b(p.encode("utf-8"), digest_size=8).digest(), "big") >> 1
            for p in prompts]
    return torch.tensor(keys, dtype=torch.long, device=device)


def group_ids_from_keys(keys: torch.Tensor) -> torch.Tensor:
    """``[B]`` keys -> ``[B]`` group ids 0, 1, ... numbered in order of first appearance."""
    first_seen: dict[int, int] = {}
    ids = [first_seen.setdefault(key, len(first_seen)) for key in keys.tolist()]
    return torch.tensor(ids, dtype=torch.long, device=keys.device)
