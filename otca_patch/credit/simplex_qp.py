"""Exact minimisation of a convex quadratic over the probability simplex, batched over problems.

``minimize_on_simplex(M, b)`` returns ``argmin_{c in simplex(K)} c^T M c - b^T c`` for each of G
problems (``M`` symmetric positive semi-definite). MOCA's group fusion (spec 3.7) uses it with
``M = A_g^T A_g`` and ``b = A_g^T lambda_g``; the minimiser need not be unique (only ``A_g c`` is),
and any minimiser is returned.

Two exact methods:
- up to ``ENUMERATE_MAX_K`` objectives, every face of the simplex at once (vectorised over problems
  and faces): the stationary point of each face's affine hull from its KKT system, the feasible
  ones compared by their objective. The smallest face holding a minimiser has a non-singular KKT
  system (otherwise a line of minimisers would cross its boundary), so the optimum is a candidate.
- above it, Wolfe's minimum-norm-point active-set method per problem (finite; works on the Gram
  form ``Q = M - (b 1^T + 1 b^T) / 2``, which equals the objective on the simplex).
"""
from __future__ import annotations

import itertools

import torch

#: Up to this many objectives every face is enumerated (2^K - 1 small KKT systems per problem).
ENUMERATE_MAX_K = 5
#: A face's stationary point counts as feasible down to this (relative) negative coordinate.
_FEASIBLE = 1e-10
#: Objectives within this relative distance of the best are ties: the largest support wins, so an
#: all-zero problem gives the uniform mixture (as the per-sample fusion does for tied objectives).
_TIE = 1e-12


def minimize_on_simplex(quadratic: torch.Tensor, linear: torch.Tensor) -> torch.Tensor:
    """``argmin_{c in simplex} c^T M c - b^T c`` per problem.

    Args:
        quadratic: ``[G, K, K]`` symmetric PSD ``M`` (float64 recommended).
        linear: ``[G, K]`` ``b``.
    Returns:
        ``[G, K]`` minimisers, each on the simplex (non-negative, summing to 1).
    """
    if quadratic.shape[-1] <= ENUMERATE_MAX_K:
        return _by_faces(quadratic, linear)
    # a loop of small steps that branch on values: on the CPU (no device sync per step)
    gram = (quadratic - (linear.unsqueeze(-1) + linear.unsqueeze(-2)) / 2).cpu()
    if not gram.shape[0]:
        return linear.new_zeros(linear.shape)
    return torch.stack([_wolfe(q) for q in gram]).to(linear.device)


def objective(quadratic: torch.Tensor, linear: torch.Tensor, mixture: torch.Tensor) -> torch.Tensor:
    """``c^T M c - b^T c``: ``[..., K, K], [..., K], [..., K] -> [...]``."""
    return (mixture * (quadratic @ mixture.unsqueeze(-1)).squeeze(-1)).sum(-1) - (linear * mixture).sum(-1)


def _faces(n_objectives: int, device) -> torch.Tensor:
    """Every non-empty subset of the K objectives as a mask ``[F, K]`` (F = 2^K - 1)."""
    masks = list(itertools.product((False, True), repeat=n_objectives))[1:]
    return torch.tensor(masks, dtype=torch.bool, device=device)


def _by_faces(quadratic: torch.Tensor, linear: torch.Tensor) -> torch.Tensor:
    groups, k = linear.shape
    faces = _faces(k, linear.device)  # [F, K]
    on = faces.to(linear.dtype)
    pair = on.unsqueeze(-1) * on.unsqueeze(-2)  # [F, K, K]: both objectives on the face
    # KKT system per (problem, face): 2 M_SS c_S + nu 1 = b_S, c_j = 0 off the face, 1^T c_S = 1.
    system = linear.new_zeros((groups, faces.shape[0], k + 1, k + 1))
    system[..., :k, :k] = 2 * quadratic.unsqueeze(1) * pair + torch.diag_embed(1 - on)
    system[..., :k, k] = on
    system[..., k, :k] = on
    rhs = torch.cat([linear.unsqueeze(1) * on, linear.new_ones((groups, faces.shape[0], 1))], dim=-1)
    solution = (torch.linalg.pinv(system, hermitian=True) @ rhs.unsqueeze(-1)).squeeze(-1)[..., :k]
    feasible = (solution >= -_FEASIBLE).all(dim=-1)  # [G, F]
    candidates = solution.clamp(min=0) * on
    candidates = candidates / candidates.sum(-1, keepdim=True).clamp(min=torch.finfo(linear.dtype).tiny)
    values = objective(quadratic.unsqueeze(1), linear.unsqueeze(1), candidates)  # [G, F]
    values = torch.where(feasible & torch.isfinite(values), values, torch.full_like(values, float("inf")))
    best = values.min(dim=-1, keepdim=True).values
    tied = values <= best + _TIE * (1 + best.abs())
    support = faces.sum(-1).to(values.dtype)  # [F]
    choice = torch.where(tied, -support, torch.full_like(values, float("inf"))).argmin(dim=-1)  # [G]
    return candidates[torch.arange(groups, device=linear.device), choice]


def _wolfe(gram: torch.Tensor, max_iterations: int = 10_000) -> torch.Tensor:
    """Wolfe's minimum-norm-point method on ``c^T Q c`` over the simplex; ``[K, K] -> [K]``.

    ``Q`` need only be PSD on ``{sum(c) = 0}`` (true for the Gram form of a PSD ``M``).
    """
    k = gram.shape[0]
    scale = float(gram.abs().max()) or 1.0
    tol = 1e-14 * scale
    support = [int(gram.diagonal().argmin())]
    weights = gram.new_ones(1)
    for _ in range(max_iterations):
        gradient = gram[:, support] @ weights  # (Q c)_j for every j
        value = float(weights @ gradient[support])
        entering = int(gradient.argmin())
        if float(gradient[entering]) >= value - tol or entering in support:
            break  # KKT: (Q c)_j >= c^T Q c for every j
        support.append(entering)
        weights = torch.cat([weights, weights.new_zeros(1)])
        while True:  # minor cycle: move towards the affine minimiser, dropping points that leave
            affine = _affine_minimiser(gram[support][:, support])
            if bool((affine > 1e-15).all()):
                weights = affine
                break
            leaving = affine <= 1e-15
            step = torch.where(leaving & (weights - affine > 0), weights / (weights - affine),
                               torch.full_like(weights, float("inf"))).min().clamp(0, 1)
            weights = weights + step * (affine - weights)
            keep = weights > 1e-15
            keep[int(torch.where(leaving, weights, torch.full_like(weights, float("inf"))).argmin())] = False
            if not bool(keep.any()):
                keep[int(affine.argmax())] = True
            support = [s for s, kept in zip(support, keep.tolist()) if kept]
            weights = weights[keep] / weights[keep].sum()
    mixture = gram.new_zeros(k)
    mixture[support] = weights
    return mixture


def _affine_minimiser(gram: torch.Tensor) -> torch.Tensor:
    """``argmin c^T Q c`` subject to ``sum(c) = 1`` only: ``[S, S] -> [S]``."""
    size = gram.shape[0]
    system = gram.new_zeros((size + 1, size + 1))
    system[:size, :size] = 2 * gram
    system[:size, size] = 1
    system[size, :size] = 1
    rhs = gram.new_zeros(size + 1)
    rhs[size] = 1
    return (torch.linalg.pinv(system, hermitian=True) @ rhs)[:size]
