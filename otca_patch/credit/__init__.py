"""OTCA's credit math: pure tensor functions, no knowledge of any trainer (see ../shared/otca-spec.md)."""
from .config import MODES, STEP_WEIGHTED_MODES, CreditConfig
from .engine import Credit, compute_credit, credit_from_progress
from .groups import group_ids_from_size
from .tcd import similarity_to_final, step_progress

__all__ = [
    "MODES", "STEP_WEIGHTED_MODES", "CreditConfig", "Credit", "compute_credit", "credit_from_progress",
    "group_ids_from_size", "similarity_to_final", "step_progress",
]
