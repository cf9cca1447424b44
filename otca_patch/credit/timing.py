"""When each objective is decided (docs/credit.md section 9): the map ``decided [K, T]``, its
uncertainty, and the per-objective step weights of the option ``objective_timing="probe"``.

Pure tensor functions, vectorised over objectives and steps, float64 inside. Step ``t`` (1-based in
the docs, column ``t - 1`` here) is the ``t``-th denoising step, step 1 the noise side; its
*predicted clean sample* is the one the sampler computes from the state the step starts from.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .groups import dense_groups, group_centred

_WORK = torch.float64


@dataclass(frozen=True)
class TimingMoments:
    """Within-group sums behind the map, pooled over groups; two batches' moments add (``+``).

    ``cross [K, T]``: ``sum_i x[i, k, t] y[i, k]``; ``step_square [K, T]``: ``sum_i x^2``;
    ``final_square [K]``: ``sum_i y^2``, where ``x`` and ``y`` are the step and final scores minus
    their group means; ``dof``: samples minus groups (the within-group degrees of freedom).
    """

    cross: torch.Tensor
    step_square: torch.Tensor
    final_square: torch.Tensor
    dof: int

    def __add__(self, other: "TimingMoments") -> "TimingMoments":
        if self.cross.shape != other.cross.shape:
            raise ValueError(f"timing moments: shapes {tuple(self.cross.shape)} and {tuple(other.cross.shape)} "
                             "differ (the same K objectives and T steps are needed to pool)")
        return TimingMoments(self.cross + other.cross, self.step_square + other.step_square,
                             self.final_square + other.final_square, self.dof + other.dof)


def timing_moments(step_scores: torch.Tensor, final_scores: torch.Tensor, group_ids: torch.Tensor) -> TimingMoments:
    """The within-group moments of one batch.

    Args:
        step_scores: ``[B, K, T]`` objective k's score of step t's predicted clean sample.
        final_scores: ``[B, K]`` objective k's score of the sample the trainer scores.
        group_ids: ``[B]`` integer group labels (need not be contiguous).
    Returns:
        ``TimingMoments`` (float64). A group whose values of one column are all equal contributes
        exactly 0 to that column (no rounding noise).
    """
    step, final, index, n_groups = _check(step_scores, final_scores, group_ids)
    batch, n_obj, n_steps = step.shape
    x = group_centred(step.reshape(batch, n_obj * n_steps), index, n_groups).view(batch, n_obj, n_steps)
    y = group_centred(final, index, n_groups)
    return TimingMoments(cross=(x * y.unsqueeze(-1)).sum(0), step_square=(x * x).sum(0),
                         final_square=(y * y).sum(0), dof=batch - n_groups)


def decided_from_moments(moments: TimingMoments) -> torch.Tensor:
    """``[K, T]``: the squared pooled within-group correlation of step t's score with the final one,
    in [0, 1]; 0 where step t's score has no within-group variation; NaN for an objective whose
    final score has none (nothing to decide)."""
    final = moments.final_square.unsqueeze(-1).expand_as(moments.cross)
    both = (final > 0) & (moments.step_square > 0)
    ratio = moments.cross ** 2 / (moments.step_square * final).clamp(min=torch.finfo(_WORK).tiny)
    value = torch.where(both, ratio.clamp(0.0, 1.0), torch.zeros_like(ratio))
    return torch.where(final > 0, value, torch.full_like(value, math.nan))


def decided(step_scores: torch.Tensor, final_scores: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """``[K, T]`` float64: how much of objective k's final within-group variation step t's predicted
    clean sample already fixes (``decided_from_moments`` of ``timing_moments``)."""
    return decided_from_moments(timing_moments(step_scores, final_scores, group_ids))


def pooled_correlation(moments: TimingMoments) -> torch.Tensor:
    """``[K, T]``: the signed pooled within-group correlation (NaN where ``decided`` is NaN, 0 where
    step t's score has no within-group variation)."""
    final = moments.final_square.unsqueeze(-1).expand_as(moments.cross)
    denom = (moments.step_square * final).sqrt().clamp(min=torch.finfo(_WORK).tiny)
    value = torch.where(moments.step_square > 0, (moments.cross / denom).clamp(-1.0, 1.0),
                        torch.zeros_like(moments.cross))
    return torch.where(final > 0, value, torch.full_like(value, math.nan))


def decided_interval(moments: TimingMoments, level: float = 0.95) -> tuple[torch.Tensor, torch.Tensor]:
    """``(low [K, T], high [K, T])``: Fisher-z interval of ``decided`` at ``level``.

    ``z = atanh(r)``, standard error ``1 / sqrt(dof - 2)`` (``dof`` = samples minus groups; one group
    of G samples: ``1 / sqrt(G - 3)``); the interval of ``r`` is ``tanh(z -+ q se)`` and that of
    ``r^2`` its square (0 below when it straddles 0). Needs ``dof >= 3``; NaN where ``decided`` is.
    """
    return correlation_interval(pooled_correlation(moments), moments.dof, level)


def correlation_interval(r: torch.Tensor, dof: int, level: float = 0.95) -> tuple[torch.Tensor, torch.Tensor]:
    """The interval of ``decided = r^2`` from the pooled correlation ``r`` (either sign: ``sqrt(decided)``
    gives the same interval) with ``dof`` within-group degrees of freedom (see ``decided_interval``)."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"level: must lie in (0, 1), got {level}")
    if dof < 3:
        raise ValueError(f"dof: a Fisher interval needs samples minus groups >= 3, got {dof}")
    r = r.to(_WORK)
    quantile = math.sqrt(2.0) * torch.special.erfinv(torch.tensor(level, dtype=_WORK)).item()
    half = quantile / math.sqrt(dof - 2)
    z = torch.atanh(r.clamp(-1 + 1e-15, 1 - 1e-15))
    low_r, high_r = torch.tanh(z - half), torch.tanh(z + half)
    straddles = (low_r < 0) & (high_r > 0)
    low = torch.where(straddles, torch.zeros_like(r), torch.minimum(low_r ** 2, high_r ** 2))
    high = torch.maximum(low_r ** 2, high_r ** 2)
    return low, high


def decided_by(decided_map: torch.Tensor, share: float = 0.8) -> torch.Tensor:
    """``[K]`` int64: the first step (1-based) at which ``decided >= share`` (its last step T where
    none reaches it; 0 for an objective whose map is undefined)."""
    reached = torch.nan_to_num(decided_map, nan=-1.0) >= share
    first = torch.where(reached.any(-1), reached.to(torch.int64).argmax(-1) + 1,
                        torch.full(reached.shape[:1], decided_map.shape[-1], dtype=torch.int64))
    undefined = torch.isnan(decided_map).all(-1)
    return torch.where(undefined, torch.zeros_like(first), first)


def checked_timing_map(timing_map, n_objectives: int, n_steps: int) -> torch.Tensor:
    """``timing_map [K, T]`` (the map ``decided`` a probe measured) as float64, once checked: a float
    tensor of that shape whose every value is NaN (undefined) or lies in [0, 1]; +-inf is out of
    range like any other value. ``ValueError`` naming ``timing_map`` otherwise."""
    if not isinstance(timing_map, torch.Tensor) or not timing_map.is_floating_point() or \
            tuple(timing_map.shape) != (n_objectives, n_steps):
        raise ValueError(f"timing_map: expected a float map [K, T] = [{n_objectives}, {n_steps}] (decided per "
                         f"objective and step), got {getattr(timing_map, 'shape', type(timing_map).__name__)}")
    outside = ~torch.isnan(timing_map) & ((timing_map < 0) | (timing_map > 1))
    if bool(outside.any()):
        objective, step = (int(i) for i in outside.nonzero()[0])
        raise ValueError(f"timing_map: every value must lie in [0, 1] (NaN: undefined); objective {objective}, "
                         f"step {step + 1} holds {timing_map[objective, step].item()}")
    return timing_map.to(_WORK)


def timing_weights(decided_map: torch.Tensor, floor: float, eps: float = 1e-6) -> torch.Tensor:
    """``[K, T]`` step weights per objective from ``decided [K, T]`` (docs/credit.md 9.3), a map
    ``checked_timing_map`` accepts.

    ``M = cummax_t decided`` (a step cannot un-decide); step t is credited with what its own move
    fixes, ``g[k, t] = M[k, t+1] - M[k, t]`` for t < T and ``g[k, T] = 1 - M[k, T]``; shares
    ``p = (g + eps) / sum_t (g + eps)``; ``W = floor + (1 - floor) T p`` (mean 1 over steps, none below
    ``floor``). An objective whose row holds a NaN (never measured, or no final variation) gets 1.
    """
    values = decided_map.to(_WORK)
    n_steps = values.shape[-1]
    defined = ~torch.isnan(values).any(-1, keepdim=True)
    curve = torch.cummax(torch.nan_to_num(values, nan=0.0).clamp(0.0, 1.0), dim=-1).values
    after = torch.cat([curve[..., 1:], torch.ones_like(curve[..., :1])], dim=-1)
    gain = (after - curve).clamp(min=0.0) + eps
    weights = floor + (1.0 - floor) * n_steps * gain / gain.sum(-1, keepdim=True)
    return torch.where(defined, weights, torch.ones_like(weights))


def timed_advantages(contributions: torch.Tensor, objective_step_weights: torch.Tensor,
                     step_weights: torch.Tensor) -> torch.Tensor:
    """``A~[i, t] = w[i, t] sum_k W[k, t] c[i, k]``: ``contributions [B, K]`` (each objective's share of
    the mode's combined advantage), ``objective_step_weights [K, T]``, the mode's ``step_weights
    [B, T]`` (TCD's, or ones). Returns ``[B, T]`` float64, whatever the inputs' float dtype."""
    batch, n_objectives = _float_matrix("contributions", contributions, (None, None))
    _, n_steps = _float_matrix("objective_step_weights", objective_step_weights, (n_objectives, None))
    _float_matrix("step_weights", step_weights, (batch, n_steps))
    return step_weights.to(_WORK) * (contributions.to(_WORK) @ objective_step_weights.to(_WORK))


def _float_matrix(name: str, value, shape: tuple) -> tuple:
    """The shape of ``value``, a 2-D float tensor whose dims equal ``shape``'s (``None``: any)."""
    if not isinstance(value, torch.Tensor) or not value.is_floating_point() or value.dim() != 2 or \
            any(want is not None and got != want for got, want in zip(value.shape, shape)):
        want = ", ".join("?" if n is None else str(n) for n in shape)
        raise ValueError(f"{name}: expected a float tensor [{want}], got "
                         f"{getattr(value, 'shape', type(value).__name__)} {getattr(value, 'dtype', '')}".rstrip())
    return tuple(value.shape)


def _check(step_scores, final_scores, group_ids):
    for name, value, dims in (("step_scores", step_scores, 3), ("final_scores", final_scores, 2)):
        if not isinstance(value, torch.Tensor) or not value.is_floating_point() or value.dim() != dims:
            raise ValueError(f"{name}: expected a float tensor with {dims} dims, got "
                             f"{getattr(value, 'shape', type(value).__name__)}")
        if not bool(torch.isfinite(value).all()):
            raise ValueError(f"{name}: contains non-finite values")
    if tuple(final_scores.shape) != tuple(step_scores.shape[:2]):
        raise ValueError(f"final_scores: expected shape [B, K] = {list(step_scores.shape[:2])} to match step_scores "
                         f"[B, K, T], got {list(final_scores.shape)}")
    if not isinstance(group_ids, torch.Tensor) or group_ids.is_floating_point() or group_ids.dim() != 1 \
            or group_ids.shape[0] != step_scores.shape[0]:
        raise ValueError(f"group_ids: expected [{step_scores.shape[0]}] integer labels, got "
                         f"{getattr(group_ids, 'shape', type(group_ids).__name__)}")
    index, n_groups = dense_groups(group_ids)
    return step_scores.to(_WORK), final_scores.to(_WORK), index.to(step_scores.device), n_groups
