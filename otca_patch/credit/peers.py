"""Step credit of two comparison methods (docs/credit.md section 8; not part of OTCA): CoCA's
contribution-based shaping and TempFlow-GRPO's noise-aware step weights. Pure tensor functions;
what each paper defines, the reading taken and every gap filled are in the spec."""
from __future__ import annotations

import torch

from .groups import _group_sum


def coca_step_contributions(similarity: torch.Tensor, window: int, eps: float) -> torch.Tensor:
    """CoCA's per-step contribution ``s [B, T]`` from ``similarity [B, T+1]``, the cosine of the
    predicted clean sample at each state ``z_0 .. z_{T-1}`` (and the final sample, last) to the final
    sample.

    The states ``1 .. T`` are cut into windows of ``window`` steps (``window`` divides T); window j's
    gain is its mean similarity minus the previous window's (the first: minus state 0's); each step
    of window j gets ``gain_j / (window * sum_j gain_j)``, so ``s`` sums to 1 over the steps. Gains
    are not clipped (a step may have negative contribution). Where ``|sum_j gain_j| <= eps`` the
    contributions are uniform ``1 / T``.
    """
    batch, n_steps = similarity.shape[0], similarity.shape[1] - 1
    means = similarity[:, 1:].reshape(batch, n_steps // window, window).mean(dim=-1)  # [B, J]
    previous = torch.cat([similarity[:, :1], means[:, :-1]], dim=1)
    gains = means - previous
    total = gains.sum(dim=-1, keepdim=True)
    flat = total.abs() <= eps
    shares = gains / torch.where(flat, torch.ones_like(total), total * window)
    shares = torch.where(flat, torch.full_like(shares, 1.0 / n_steps), shares)
    return shares.repeat_interleave(window, dim=1)


def coca_advantages(combined: torch.Tensor, contributions: torch.Tensor, alpha: float, index: torch.Tensor,
                    n_groups: int, eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """CoCA's shaped advantage: ``A[i] * (alpha + (1 - alpha) * R[i, t])`` with ``R`` the reverse
    cumulative sum of the contributions (``R[:, t] = sum_{tau >= t} s[:, tau]``, so ``R[:, 0] = 1``),
    then standardised per group over all its (sample, step) values: ``(x - mean_g) / (std_g + eps)``,
    population std.

    Args: ``combined [B]`` per-sample advantage, ``contributions [B, T]``, ``index [B]`` dense groups.
    Returns: ``(advantages [B, T], shaping [B, T])`` where ``shaping = alpha + (1 - alpha) * R``.
    """
    reverse_cumsum = contributions.flip(-1).cumsum(-1).flip(-1)
    shaping = alpha + (1 - alpha) * reverse_cumsum
    shaped = combined.unsqueeze(-1) * shaping  # [B, T]
    n_steps = shaped.shape[1]
    counts = _group_sum(torch.ones_like(combined), index, n_groups) * n_steps  # values per group
    mean = _group_sum(shaped.sum(dim=-1), index, n_groups) / counts
    centred = shaped - mean[index].unsqueeze(-1)
    std = (_group_sum((centred * centred).sum(dim=-1), index, n_groups) / counts).sqrt()
    return centred / (std[index].unsqueeze(-1) + eps), shaping


def tempflow_weights(step_noise: torch.Tensor, batch: int) -> torch.Tensor:
    """TempFlow-GRPO's noise-aware step weights: each step's share of the sampler's injected noise std,
    ``w[:, t] = std_t / mean_tau std_tau`` (mean 1 over the steps, as TCD's weights).

    Args: ``step_noise`` ``[T]`` (one schedule) or ``[B, T]``: the std of each SDE transition
    (``sigma_t sqrt(dt)`` in TempFlow-GRPO's sampler, ``eta sqrt(sigma_t - sigma_{t+1})`` in DanceGRPO's).
    Returns ``[B, T]``.
    """
    noise = step_noise.expand(batch, -1) if step_noise.dim() == 1 else step_noise
    return noise / noise.mean(dim=-1, keepdim=True)
