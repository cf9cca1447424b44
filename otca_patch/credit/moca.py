"""Multi-Objective Credit Allocation (spec sections 2-3): per-objective group advantages and their
minimum-norm fusion in advantage space with the exploration bias for positive samples (per sample,
or one mixture per group: spec 3.7)."""
from __future__ import annotations

import torch

from .groups import _group_sum, group_mean_std, group_normalize
from .simplex_qp import minimize_on_simplex

#: Objectives whose advantages span no more than this are tied: the mixture is uniform (spec 3.5).
TIE_SPAN = 1e-6


def objective_advantages(rewards, index, n_groups, weights, correction, adv_eps, std_scope="group", window_std=None):
    """``A[i, k] = s_k (r - mean_g) / (std_g + adv_eps)``: ``[B, K] -> [B, K]``.

    With ``window_std [K]`` (spec 2.1, ``reward_scale="window"``) the rewards were already rescaled
    by it: ``A[i, k] = s_k (r~[i, k] - mean_g r~[:, k])`` with ``r~ = rewards / window_std``, no group std.
    """
    if window_std is None:
        return weights * group_normalize(rewards, index, n_groups, correction, adv_eps, std_scope)
    rescaled = rescale_rewards(rewards, window_std)
    mean, _, _ = group_mean_std(rescaled, index, n_groups, correction)
    return weights * (rescaled - mean)


def window_reward_std(window: torch.Tensor, correction: int) -> torch.Tensor:
    """Per objective, the std (Bessel ``correction``) of ``window [N, K]`` raw rewards -> ``[K]``
    (0 for a column that is constant or has ``N <= correction`` values)."""
    n = window.shape[0]
    if n <= correction:
        return torch.zeros(window.shape[1], dtype=window.dtype, device=window.device)
    return (window - window.mean(dim=0)).pow(2).sum(dim=0).div(n - correction).sqrt()


def rescale_rewards(rewards: torch.Tensor, window_std: torch.Tensor) -> torch.Tensor:
    """``rewards [B, K] / window_std [K]``; a column with no spread (``window_std <= 0``) is left as it is."""
    spread = torch.where(window_std > 0, window_std, torch.ones_like(window_std))
    return rewards / spread


def exploration_bias(score, advantages, index, n_groups, correction, eps, explore, center=False, scale="absolute"):
    """``lambda = beta * tanh(|q| / (std_g(q) + eps))`` where ``mean_k A > 0``, else 0.

    ``center=True`` (spec 3.6) measures ``|q - mean_g(q)|`` instead of ``|q|``;
    ``scale="max_advantage"`` (spec 3.8) multiplies the bias by ``max_k A[i, k]`` (positive wherever
    the bias applies), so that ``lambda / 2`` keeps the positive samples' ranking instead of one value.
    Args: ``score [B]`` trajectory scores, ``advantages [B, K]``. Returns ``[B]``.
    """
    mean, spread, _ = group_mean_std(score, index, n_groups, correction)
    strength = (score - mean if center else score).abs() / (spread + eps)
    positive = advantages.mean(dim=-1) > 0
    bias = explore * torch.tanh(strength)
    if scale == "max_advantage":
        bias = bias * advantages.max(dim=-1).values
    return torch.where(positive, bias, torch.zeros_like(score))


def min_norm_fusion(advantages: torch.Tensor, lambdas: torch.Tensor):
    """Solve ``argmin_{z in [min_k A, max_k A]} z^2 - lambda z`` per sample and the mixture realising it.

    Args: ``advantages [B, K]``, ``lambdas [B]``.
    Returns: ``combined [B]`` and ``mixture [B, K]`` on the simplex with ``mixture @ A = combined``.
    """
    lowest, low_index = advantages.min(dim=-1)  # first index wins a tie
    highest, high_index = advantages.max(dim=-1)
    combined = torch.minimum(torch.maximum(lambdas / 2, lowest), highest)
    span = highest - lowest
    tied = span <= TIE_SPAN
    upper_mass = torch.where(tied, torch.zeros_like(span), (combined - lowest) / torch.where(tied, torch.ones_like(span), span))
    n_objectives = advantages.shape[-1]
    mixture = torch.zeros_like(advantages)
    mixture.scatter_add_(1, low_index.unsqueeze(1), (1 - upper_mass).unsqueeze(1))
    mixture.scatter_add_(1, high_index.unsqueeze(1), upper_mass.unsqueeze(1))
    uniform = torch.full_like(advantages, 1.0 / n_objectives)
    return combined, torch.where(tied.unsqueeze(1), uniform, mixture)


def group_fusion(advantages: torch.Tensor, lambdas: torch.Tensor, index: torch.Tensor, n_groups: int):
    """One mixture per group: ``c_g = argmin_{c in simplex} |A_g c|^2 - lambda_g^T A_g c`` (spec 3.7).

    Args: ``advantages [B, K]``, ``lambdas [B]``, ``index [B]`` dense group of each sample, G.
    Returns: ``combined [B]`` (``A_g c_g`` row by row) and ``mixture [B, K]`` (each member's ``c_g``).
    """
    outer = advantages.unsqueeze(-1) * advantages.unsqueeze(-2)  # [B, K, K]
    quadratic = _group_sum(outer, index, n_groups)  # A_g^T A_g: [G, K, K]
    linear = _group_sum(lambdas.unsqueeze(-1) * advantages, index, n_groups)  # A_g^T lambda_g: [G, K]
    mixture = minimize_on_simplex(quadratic, linear)[index]
    return (mixture * advantages).sum(dim=-1), mixture
