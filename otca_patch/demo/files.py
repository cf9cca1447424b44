"""Atomic file writes: a report is either the old one or the new one, never half written."""
from __future__ import annotations

import torch

from ..files import atomic_path, atomic_write_json, atomic_write_text  # noqa: F401  (the one atomic write)


def atomic_torch_save(obj, path) -> None:
    with atomic_path(path) as tmp:
        torch.save(obj, tmp)
