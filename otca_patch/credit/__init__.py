"""OTCA's credit math: pure tensor functions, no knowledge of any trainer (see docs/credit.md).

``CreditConfig`` and ``MODES`` import without torch (flag parsing in every launched process stays
cheap); the tensor functions load on first use.
"""
from . import modes
from .config import MODES, PEER_MODES, CreditConfig

_LAZY = {
    "Credit": "engine", "CreditBatch": "batch", "compute_credit": "engine", "credit_for": "engine",
    "credit_from_progress": "engine",
    "group_ids_from_size": "groups", "similarity_to_final": "tcd", "step_progress": "tcd",
}

__all__ = ["MODES", "PEER_MODES", "CreditConfig", "modes", *_LAZY]


def __getattr__(name):
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
