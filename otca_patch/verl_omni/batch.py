"""What the credit needs, read from VeRL-Omni's batch (a ``DataProto``) at advantage time: each
objective's reward, the groups, and TCD's progress over the SDE window."""
from __future__ import annotations

import math

import numpy as np
import torch

from ..credit import tcd
from .settings import UPSTREAM

LATENTS = "all_latents"


def reward_key(name: str) -> str:
    """Where ``MultiVisualRewardManager`` leaves an objective's score in ``non_tensor_batch``."""
    return f"reward/{name}"


def rewards(data, objectives: tuple, summed: torch.Tensor) -> torch.Tensor:
    """``[B, K]`` float64: ``upstream`` is ``summed`` (VeRL-Omni's reward, ``sample_level_rewards[:, 0]``),
    any other name its ``reward/<name>``. A key absent from the batch, or a sample without a finite
    value for it, stops the run naming both: it never counts as 0."""
    columns = []
    for name in objectives:
        if name == UPSTREAM:
            columns.append(summed.detach().to("cpu", torch.float64))
            continue
        key = reward_key(name)
        if key not in data.non_tensor_batch:
            present = sorted(k for k in data.non_tensor_batch if k.startswith("reward/") and k.count("/") == 1)
            raise ValueError(f"otca: {key} is not in the batch (its rewards: {', '.join(present) or 'none'}); "
                             f"objective {name} of algorithm.otca.rewards has no score")
        column = []
        for sample, value in enumerate(data.non_tensor_batch[key]):
            try:
                number = float(value)
            except (TypeError, ValueError):
                number = math.nan
            if not math.isfinite(number):
                raise ValueError(f"otca: sample {sample} has no finite {key} (got {value!r}); a missing score "
                                 f"never counts as 0")
            column.append(number)
        columns.append(torch.tensor(column, dtype=torch.float64))
    return torch.stack(columns, dim=1)


def group_ids(index) -> torch.Tensor:
    """``[B]`` integer labels from VeRL-Omni's ``index`` (the ``uid`` strings compute_advantage passes)."""
    if index is None:
        raise ValueError("otca: the batch has no uid, so no groups (compute_advantage passes index only with uid)")
    _, labels = np.unique(np.asarray(index, dtype=object).astype(str), return_inverse=True)
    return torch.as_tensor(labels.reshape(-1), dtype=torch.long)


def window_progress(data, n_steps: int) -> torch.Tensor:
    """TCD's ``dS [B, T]`` over the trained steps from ``all_latents [B, T+1, ...]``, the SDE window's
    states (docs/credit.md, "Under VeRL-Omni": the window's last state stands for the final one)."""
    if LATENTS not in data.batch.keys():
        raise ValueError(f"otca: the batch has no {LATENTS} (VeRL-Omni's rollout states), so no step progress")
    latents = data.batch[LATENTS]
    if latents.dim() < 3 or latents.shape[1] != n_steps + 1:
        raise ValueError(f"otca: {LATENTS} has shape {tuple(latents.shape)}, but the advantages have "
                         f"{n_steps} trained steps: expected [B, {n_steps + 1}, ...] (one state before and after each)")
    return tcd.step_progress(tcd.similarity_to_final(latents).to(torch.float64))
