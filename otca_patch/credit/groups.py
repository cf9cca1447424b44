"""Per-group statistics over integer group labels, vectorised (no loop over groups or samples)."""
from __future__ import annotations

import torch


def group_ids_from_size(batch_size: int, group_size: int, device=None) -> torch.Tensor:
    """Contiguous groups as DanceGRPO lays them out (``repeat_interleave``).

    Returns ``[batch_size]`` int64 labels ``0,0,..,1,1,..``. ``batch_size`` must be a multiple
    of ``group_size``.
    """
    if group_size < 1:
        raise ValueError(f"group_size: must be >= 1, got {group_size}")
    if batch_size < 1 or batch_size % group_size:
        raise ValueError(f"batch_size: {batch_size} is not a positive multiple of group_size {group_size}")
    return torch.arange(batch_size // group_size, device=device).repeat_interleave(group_size)


def dense_groups(group_ids: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Map arbitrary labels ``[B]`` to ``0..G-1``; returns (index ``[B]``, G) (G = 0 for no labels)."""
    _, index = torch.unique(group_ids, return_inverse=True)
    return index, int(index.max().item()) + 1 if index.numel() else 0


def check_std_sizes(group_ids: torch.Tensor, correction: int, batch_std: bool = False) -> None:
    """Refuse groups (or, with ``batch_std``, a batch) too small for a std with this correction.

    A std over ``n <= correction`` values is undefined: the rewards of such a group would silently
    normalise to 0. A group of one sample is exempt (its value is its mean: its advantage is 0
    whatever the std, spec 2). With the default correction 1 nothing is checked (no cost).

    Raises:
        ValueError naming the group's label and size (or the batch size).
    """
    if correction < 2:
        return
    batch = group_ids.shape[0]
    if batch_std and 2 <= batch <= correction:
        raise ValueError(f"std_correction: {correction} needs more than {correction} samples for the batch std "
                         f"(std_scope=batch); the batch has {batch}")
    labels, counts = torch.unique(group_ids, return_counts=True)
    small = (counts >= 2) & (counts <= correction)
    if bool(small.any()):
        first = int(small.nonzero()[0, 0])
        raise ValueError(f"std_correction: {correction} needs groups of more than {correction} samples; group "
                         f"{labels[first].item()} has {int(counts[first])} (use a smaller correction or larger groups)")


def _group_sum(values: torch.Tensor, index: torch.Tensor, n_groups: int) -> torch.Tensor:
    """Sum ``values [B, ...]`` per group -> ``[G, ...]``."""
    out = values.new_zeros((n_groups,) + tuple(values.shape[1:]))
    return out.index_add_(0, index, values)


def _group_mean(values: torch.Tensor, index: torch.Tensor, n_groups: int):
    """Each group's mean of ``values [B, ...]`` -> ``[G, ...]``, and each group's count ``[G]``."""
    ones = torch.ones(index.shape[0], dtype=values.dtype, device=values.device)
    counts = _group_sum(ones, index, n_groups)
    return _group_sum(values, index, n_groups) / counts.view((-1,) + (1,) * (values.dim() - 1)), counts


def group_mean_std(values: torch.Tensor, index: torch.Tensor, n_groups: int, correction: int):
    """Per-sample group mean and std of ``values [B, ...]``, broadcast back to ``[B, ...]``.

    The std uses ``correction`` (1 = unbiased); groups with ``count <= correction`` get std 0.
    Also returns the per-sample group count ``[B]``.
    """
    shape = (-1,) + (1,) * (values.dim() - 1)
    mean, counts = _group_mean(values, index, n_groups)
    centred = values - mean[index]
    dof = (counts - correction).clamp(min=0)
    var = _group_sum(centred * centred, index, n_groups) / dof.clamp(min=1).view(shape)
    var = torch.where(dof.view(shape) > 0, var, torch.zeros_like(var))
    return mean[index], var.sqrt()[index], counts[index]


def group_normalize(values: torch.Tensor, index: torch.Tensor, n_groups: int, correction: int, adv_eps: float,
                    std_scope: str = "group"):
    """``(v - mean_g) / (std_g + adv_eps)`` per group, over ``values [B]`` or ``[B, K]``.

    ``std_scope="batch"`` divides by the std over the whole batch instead of the group's (FlowGRPO's
    ``global_std``); the mean is always the group's. A group whose values are all equal (per
    column) gives exactly 0 rather than rounding noise divided by ``adv_eps``; so does a group too
    small for the std's correction.
    """
    normalised, keep = _normalised_and_kept(values, index, n_groups, correction, adv_eps, std_scope)
    return torch.where(keep, normalised, torch.zeros_like(normalised))


def group_normalize_parts(parts: torch.Tensor, index: torch.Tensor, n_groups: int, correction: int, adv_eps: float,
                          std_scope: str = "group") -> torch.Tensor:
    """``[B, K]``: objective k's share of ``group_normalize`` of the row sums of ``parts [B, K]``,
    ``(parts[i, k] - mean_g parts[:, k]) / (std_g(sum) + adv_eps)`` (0 where the sum's group is
    constant or too small), so the shares of a sample add up to its normalised sum."""
    total = parts.sum(-1)
    _, keep = _normalised_and_kept(total, index, n_groups, correction, adv_eps, std_scope)
    mean_parts = group_mean_std(parts, index, n_groups, correction)[0]
    _, std, _ = group_mean_std(total, torch.zeros_like(index) if std_scope == "batch" else index,
                               1 if std_scope == "batch" else n_groups, correction)
    shares = (parts - mean_parts) / (std + adv_eps).unsqueeze(-1)
    return torch.where(keep.unsqueeze(-1), shares, torch.zeros_like(shares))


def _normalised_and_kept(values: torch.Tensor, index: torch.Tensor, n_groups: int, correction: int, adv_eps: float,
                         std_scope: str):
    """``group_normalize`` before its zeroing, and where it keeps the value (not a constant group, not
    a group too small for the std)."""
    mean, std, counts = group_mean_std(values, index, n_groups, correction)
    if std_scope == "batch":
        whole = torch.zeros_like(index)
        std = group_mean_std(values, whole, 1, correction)[1]
    normalised = (values - mean) / (std + adv_eps)
    too_small = (counts <= correction).view((-1,) + (1,) * (values.dim() - 1))
    return normalised, ~(_constant_in_group(values, index, n_groups) | too_small)


def group_centred(values: torch.Tensor, index: torch.Tensor, n_groups: int) -> torch.Tensor:
    """``values [B, ...]`` minus their group's mean; exactly 0 where a group's values (per column) are
    all equal, not rounding noise."""
    centred = values - _group_mean(values, index, n_groups)[0][index]
    return torch.where(_constant_in_group(values, index, n_groups), torch.zeros_like(centred), centred)


def _constant_in_group(values: torch.Tensor, index: torch.Tensor, n_groups: int) -> torch.Tensor:
    """``[B, ...]`` bool: whether the sample's group holds one value only (per column)."""
    big = torch.finfo(values.dtype).max
    shape = (n_groups,) + tuple(values.shape[1:])
    spread_index = index.view((-1,) + (1,) * (values.dim() - 1)).expand_as(values)
    highest = values.new_full(shape, -big).scatter_reduce_(0, spread_index, values, "amax")
    lowest = values.new_full(shape, big).scatter_reduce_(0, spread_index, values, "amin")
    return (highest == lowest)[index]
