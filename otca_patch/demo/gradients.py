"""Gradient-space quantities of the demo's update, on flattened parameter gradients ``[P]``: the
gradient-conflict diagnostic every variant logs, and MARBLE's combination of per-objective policy
gradients (a comparison method, docs/credit.md section 8.3; not part of OTCA).

Each objective's gradient is the gradient of the PPO loss of the same update with that objective's
group advantage ``A[:, k]`` alone, broadcast over steps: the update Multi-GRPO would make for that
objective. The *applied* update is the gradient the optimizer receives (before norm clipping, which
only scales it).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

import torch

from otca_patch.credit.simplex_qp import minimize_on_simplex

#: A gradient whose norm is at most this is treated as absent (no direction: no cosine, no MGDA vertex).
GRAD_EPS = 1e-12
#: MARBLE's EMA rate of the objective weights (``w <- rho w_prev + (1 - rho) w_new``).
MARBLE_EMA = 0.7


def nanmean(values) -> float:
    """The mean of the values that are not NaN (NaN if none is)."""
    kept = [v for v in values if not math.isnan(v)]
    return sum(kept) / len(kept) if kept else math.nan


def conflict_diagnostic(objective_grads: torch.Tensor, applied: torch.Tensor) -> dict:
    """Cosine of each objective's gradient with the applied update.

    Args: ``objective_grads [K, P]``, ``applied [P]``.
    Returns: ``cosines`` (K floats, NaN where a gradient or the update is zero), ``conflict`` (some
    objective's cosine is negative), ``worst`` (the smallest cosine; NaN if none is defined).
    """
    grads, update = objective_grads.double(), applied.double()
    norms, update_norm = grads.norm(dim=1), update.norm()
    defined = (norms > GRAD_EPS) & (update_norm > GRAD_EPS)
    cosines = torch.where(defined, grads @ update / (norms * update_norm).clamp(min=GRAD_EPS),
                          torch.full_like(norms, math.nan))
    valid = cosines[defined]
    return {"cosines": cosines.tolist(), "conflict": bool((valid < 0).any()),
            "worst": float(valid.min()) if valid.numel() else math.nan}


def min_norm_weights(unit_grads: torch.Tensor) -> torch.Tensor:
    """MGDA: ``argmin_{a in simplex} |sum_k a_k g_k|^2`` over ``unit_grads [K, P]`` -> ``[K]`` (exact)."""
    grads = unit_grads.double()
    gram = (grads @ grads.T).unsqueeze(0)
    return minimize_on_simplex(gram, torch.zeros(1, grads.shape[0], dtype=gram.dtype))[0]


@dataclass
class MarbleCombiner:
    """MARBLE's update from per-objective gradients, with its state (the EMA of the weights).

    Per update: drop zero gradients; unit-normalise the rest; MGDA weights over the unit gradients;
    ``w = rho * w_prev + (1 - rho) * w_new`` (the first update takes ``w_new``); the update is
    ``sum_k w_k g_k / |g_k|`` times the mean norm of the kept gradients (MARBLE's rescaling).
    """

    rho: float = MARBLE_EMA
    weights: Optional[torch.Tensor] = field(default=None)  # [K], the EMA

    def combine(self, objective_grads: torch.Tensor) -> torch.Tensor:
        """``objective_grads [K, P]`` -> applied update ``[P]``; updates ``self.weights``."""
        grads = objective_grads.double()
        norms = grads.norm(dim=1)
        valid = norms > GRAD_EPS
        fresh = torch.zeros(grads.shape[0], dtype=torch.float64)
        if int(valid.sum()) == 1:
            fresh[valid] = 1.0
        elif bool(valid.any()):
            fresh[valid] = min_norm_weights(grads[valid] / norms[valid].unsqueeze(1))
        self.weights = fresh if self.weights is None else self.rho * self.weights + (1 - self.rho) * fresh
        if not bool(valid.any()):
            return torch.zeros_like(objective_grads[0])
        units = torch.where(valid.unsqueeze(1), grads / norms.clamp(min=GRAD_EPS).unsqueeze(1), torch.zeros_like(grads))
        update = (self.weights.unsqueeze(1) * units).sum(dim=0) * norms[valid].mean()
        return update.to(objective_grads.dtype)
