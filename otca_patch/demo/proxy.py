"""Proxy validity of TCD's progress (spec section 7, the paper's appendix A.1 / Table 5).

Does the latent progress ``dS[i, t]`` (how far step t moved the latent towards the final one) track
the step's real contribution ``dR[i, t] = R(x_hat_t) - R(x_hat_{t-1})`` (the change of the reward of
the predicted clean sample)? Every metric is computed per trajectory over its T steps, then
averaged over trajectories. Pure tensor functions, vectorised over trajectories; inputs
``delta_s [N, T]`` and ``delta_r [N, T]``, any float dtype (computed in float64).

Conventions (**choices** where the paper is silent):
- Spearman uses average ranks for ties.
- Pairwise order agreement: over the pairs of steps ``s < t`` whose ``dR`` differ, the share ordered
  the same way by ``dS``; a pair tied in ``dS`` counts one half. A trajectory with ``dR`` constant
  has no such pair and is left out of the average (as are zero-variance trajectories for Pearson
  and Spearman); ``valid`` in the result counts the trajectories used.
- Recall@k: ``|top_k(dS) & top_k(dR)| / k``; among equal values the earlier step wins.
- Argmax distance: ``|argmax_t dS - argmax_t dR|`` in steps (the earlier step wins a tie).
"""
from __future__ import annotations

import math

import torch

#: The paper's Table 5 (FLUX, 16 steps, 511 trajectories).
PAPER_TABLE5 = {
    "pearson": 0.909, "spearman": 0.838, "pairwise_agreement": 0.843,
    "recall_at_3": 0.770, "recall_at_5": 0.892, "argmax_distance": 0.74,
}
METRIC_NAMES = tuple(PAPER_TABLE5)
_WORK = torch.float64


def _check_pair(delta_s, delta_r) -> tuple[torch.Tensor, torch.Tensor]:
    for name, value in (("delta_s", delta_s), ("delta_r", delta_r)):
        if not isinstance(value, torch.Tensor):
            raise ValueError(f"{name}: expected a torch.Tensor [N, T], got {type(value).__name__}")
        if value.dim() != 2 or value.shape[0] < 1 or value.shape[1] < 1:
            raise ValueError(f"{name}: expected shape [N, T] with N, T >= 1, got {tuple(value.shape)}")
        if not value.is_floating_point():
            raise ValueError(f"{name}: expected a floating-point tensor, got {value.dtype}")
        if not torch.isfinite(value).all():
            raise ValueError(f"{name}: contains non-finite values")
    if delta_s.shape != delta_r.shape:
        raise ValueError(f"delta_s {tuple(delta_s.shape)} and delta_r {tuple(delta_r.shape)} must have the same shape [N, T]")
    return delta_s.to(_WORK), delta_r.to(_WORK)


def pearson(delta_s: torch.Tensor, delta_r: torch.Tensor) -> torch.Tensor:
    """Per-trajectory Pearson correlation ``[N]``; NaN where either row is constant."""
    a, b = _check_pair(delta_s, delta_r)
    return _pearson(a, b)


def _pearson(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    centred_a, centred_b = a - a.mean(dim=1, keepdim=True), b - b.mean(dim=1, keepdim=True)
    norm_a, norm_b = torch.linalg.vector_norm(centred_a, dim=1), torch.linalg.vector_norm(centred_b, dim=1)
    # a row constant up to rounding (relative to its size) has no direction to correlate
    tiny = torch.finfo(_WORK).tiny
    flat = (norm_a <= 1e-12 * torch.linalg.vector_norm(a, dim=1).clamp(min=tiny)) | \
           (norm_b <= 1e-12 * torch.linalg.vector_norm(b, dim=1).clamp(min=tiny))
    corr = (centred_a * centred_b).sum(dim=1) / (norm_a * norm_b).clamp(min=tiny)
    return torch.where(flat, torch.full_like(corr, math.nan), corr.clamp(-1.0, 1.0))


def average_ranks(values: torch.Tensor) -> torch.Tensor:
    """Ranks 1..T per row with ties sharing their average rank: ``[N, T] -> [N, T]`` (O(T^2) per row)."""
    x = values.to(_WORK)
    below = (x.unsqueeze(2) > x.unsqueeze(1)).sum(dim=2)  # how many values lie strictly below each
    equal = (x.unsqueeze(2) == x.unsqueeze(1)).sum(dim=2)  # itself included
    return below.to(_WORK) + (equal.to(_WORK) + 1) / 2


def spearman(delta_s: torch.Tensor, delta_r: torch.Tensor) -> torch.Tensor:
    """Per-trajectory Spearman rank correlation ``[N]`` (Pearson of average ranks)."""
    a, b = _check_pair(delta_s, delta_r)
    return _pearson(average_ranks(a), average_ranks(b))


def pairwise_agreement(delta_s: torch.Tensor, delta_r: torch.Tensor) -> torch.Tensor:
    """Per-trajectory share of step pairs that ``dS`` orders as ``dR`` does ``[N]`` (see module doc)."""
    a, b = _check_pair(delta_s, delta_r)
    sign_s = torch.sign(a.unsqueeze(2) - a.unsqueeze(1))  # [N, T, T]
    sign_r = torch.sign(b.unsqueeze(2) - b.unsqueeze(1))
    upper = torch.triu(torch.ones(a.shape[1], a.shape[1], dtype=torch.bool), diagonal=1)
    counted = upper & (sign_r != 0)
    score = torch.where(sign_s == 0, 0.5, (sign_s == sign_r).to(_WORK))
    pairs = counted.sum(dim=(1, 2)).to(_WORK)
    agreed = (score * counted).sum(dim=(1, 2))
    return torch.where(pairs > 0, agreed / pairs.clamp(min=1), torch.full_like(agreed, math.nan))


def _top_k_mask(values: torch.Tensor, k: int) -> torch.Tensor:
    # stable descending order: the earlier step wins a tie, whatever topk's implementation does
    order = torch.sort(values, dim=1, descending=True, stable=True).indices[:, :k]
    return torch.zeros_like(values, dtype=torch.bool).scatter_(1, order, True)


def recall_at_k(delta_s: torch.Tensor, delta_r: torch.Tensor, k: int) -> torch.Tensor:
    """Per-trajectory ``|top_k(dS) & top_k(dR)| / k`` ``[N]``; needs ``1 <= k <= T``."""
    a, b = _check_pair(delta_s, delta_r)
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= a.shape[1]:
        raise ValueError(f"k: must be an integer in [1, T = {a.shape[1]}], got {k!r}")
    hits = (_top_k_mask(a, k) & _top_k_mask(b, k)).sum(dim=1)
    return hits.to(_WORK) / k


def argmax_distance(delta_s: torch.Tensor, delta_r: torch.Tensor) -> torch.Tensor:
    """Per-trajectory ``|argmax dS - argmax dR|`` in steps ``[N]`` (the earlier step wins a tie)."""
    a, b = _check_pair(delta_s, delta_r)
    first_max = lambda x: _top_k_mask(x, 1).to(torch.int64).argmax(dim=1)  # noqa: E731
    return (first_max(a) - first_max(b)).abs().to(_WORK)


def proxy_metrics(delta_s: torch.Tensor, delta_r: torch.Tensor) -> dict:
    """Every Table-5 metric averaged over trajectories, plus the count of trajectories each used.

    Returns ``{name: float}`` for ``METRIC_NAMES`` (NaN if no trajectory qualifies or, for Recall@k,
    if ``k > T``), ``valid_<name>`` counts, ``trajectories`` and ``steps``.
    """
    a, b = _check_pair(delta_s, delta_r)
    n, t = a.shape
    per_trajectory = {
        "pearson": _pearson(a, b),
        "spearman": _pearson(average_ranks(a), average_ranks(b)),
        "pairwise_agreement": pairwise_agreement(a, b),
        "recall_at_3": recall_at_k(a, b, 3) if t >= 3 else torch.full((n,), math.nan, dtype=_WORK),
        "recall_at_5": recall_at_k(a, b, 5) if t >= 5 else torch.full((n,), math.nan, dtype=_WORK),
        "argmax_distance": argmax_distance(a, b),
    }
    result: dict = {"trajectories": n, "steps": t}
    for name, values in per_trajectory.items():
        finite = torch.isfinite(values)
        result[name] = float(values[finite].mean()) if finite.any() else math.nan
        result[f"valid_{name}"] = int(finite.sum())
    return result


#: The short names of ``proxy.json`` rows, per metric.
ROW_KEYS = {"pearson": "pearson", "spearman": "spearman", "pairwise_agreement": "pairwise",
            "recall_at_3": "recall3", "recall_at_5": "recall5", "argmax_distance": "argmax_distance"}


def residual_pearson(delta_s: torch.Tensor, delta_r: torch.Tensor) -> float:
    """Pearson correlation of ``dS`` and ``dR`` over every (trajectory, step) pair after subtracting
    each step's mean over trajectories: how much of the per-trajectory variation ``dS`` explains,
    beyond a fixed per-step profile. ``[N, T] x [N, T] -> float`` (NaN if either residual is 0)."""
    a, b = _check_pair(delta_s, delta_r)
    a, b = (a - a.mean(dim=0, keepdim=True)).flatten(), (b - b.mean(dim=0, keepdim=True)).flatten()
    value = _pearson(a.unsqueeze(0), b.unsqueeze(0))[0]
    return float(value)


def control_proxies(delta_s: torch.Tensor, sigmas=None) -> dict:
    """Trajectory-blind stand-ins for ``dS [N, T]``, each ``[N, T]``: ``mean_dS_profile`` (the mean ``dS``
    of each step over the set) and, given ``sigmas [T+1]`` in sampling order, ``sigma_decrement``
    (``sigma_{t-1} - sigma_t``, the schedule's own step size). A proxy informs only where it beats them."""
    a = delta_s.to(_WORK)
    controls = {"mean_dS_profile": a.mean(dim=0, keepdim=True).expand_as(a)}
    if sigmas is not None:
        sigmas = torch.as_tensor(sigmas, dtype=_WORK).flatten()
        if sigmas.shape[0] != a.shape[1] + 1:
            raise ValueError(f"sigmas: expected T+1 = {a.shape[1] + 1} values, got {sigmas.shape[0]}")
        controls["sigma_decrement"] = (sigmas[:-1] - sigmas[1:]).unsqueeze(0).expand_as(a)
    return controls


def proxy_rows(delta_s: torch.Tensor, delta_r_by_definition: dict, sigmas=None) -> list:
    """``proxy.json`` rows: for every definition of ``dR`` (``{name: [N, T]}``), one row for ``dS`` and
    one per control of ``control_proxies``, each with the Table-5 metrics under their short names."""
    proxies = {"dS": delta_s} | control_proxies(delta_s, sigmas)
    rows = []
    for definition, delta_r in delta_r_by_definition.items():
        for proxy, values in proxies.items():
            metrics = proxy_metrics(values, delta_r)
            rows.append({"proxy": proxy, "definition": definition}
                        | {short: metrics[name] for name, short in ROW_KEYS.items()}
                        | {"trajectories": metrics["trajectories"], "steps": metrics["steps"]})
    return rows


def format_rows(rows: list, paper: dict = PAPER_TABLE5) -> str:
    """A markdown table of ``proxy_rows`` with the paper's Table 5 as the first line."""
    names = list(ROW_KEYS.values())
    lines = ["| proxy | dR definition | " + " | ".join(names) + " |", "|---|---|" + "---:|" * len(names),
             "| dS (paper, FLUX, Table 5) | paper | " + " | ".join(f"{paper[n]:.3f}" for n in ROW_KEYS) + " |"]
    for row in rows:
        lines.append(f"| {row['proxy']} | {row['definition']} | " + " | ".join(_fmt(row[n]) for n in names) + " |")
    return "\n".join(lines)


def format_against_paper(rows: dict, paper: dict = PAPER_TABLE5) -> str:
    """A markdown table: one column per row of ``rows`` (``{label: proxy_metrics(...)}``) beside the paper."""
    labels = list(rows)
    header = "| metric | paper (FLUX, Table 5) | " + " | ".join(labels) + " |"
    lines = [header, "|---|---:|" + "---:|" * len(labels)]
    for name in METRIC_NAMES:
        cells = [_fmt(rows[label].get(name)) for label in labels]
        lines.append(f"| {name} | {paper[name]:.3f} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _fmt(value) -> str:
    return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.3f}"
