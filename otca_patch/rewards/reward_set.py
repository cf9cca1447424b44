"""``RewardSet``: K named objectives scored together into ``[B, K]`` -- what the credit engine consumes.

Multi-objective models contribute one column per objective (``videoalign`` -> ``videoalign.vq``,
``videoalign.mq``, ``videoalign.ta``), so K counts columns, not models.
"""
from __future__ import annotations

from typing import List, Mapping, NamedTuple, Optional, Sequence, Union

import torch

from .base import RewardModel
from .registry import load


class RewardScores(NamedTuple):
    """``scores``: float32 ``[B, K]``; ``names``: the K column names in order. Unpacks as a 2-tuple."""

    scores: torch.Tensor
    names: List[str]


class RewardSet:
    """Several reward models, loaded once, scored on the same batch.

    models: reward names (loaded through ``registry.load``) or ready ``RewardModel`` instances.
    checkpoints: ``{name: path}``; names without one fall back to their ``OTCA_CKPT_*`` variable.
    options: ``{name: {option: value}}`` passed to that model's loader.
    """

    def __init__(self, models: Sequence[Union[str, RewardModel]], checkpoints: Optional[Mapping[str, str]] = None,
                 device: Union[str, torch.device] = "cpu", dtype: Optional[torch.dtype] = None,
                 options: Optional[Mapping[str, Mapping]] = None):
        if isinstance(models, (str, RewardModel)):
            models = [models]
        if not models:
            raise ValueError("RewardSet needs at least one reward model")
        checkpoints, options = dict(checkpoints or {}), dict(options or {})
        unknown = (set(checkpoints) | set(options)) - {m for m in models if isinstance(m, str)}
        if unknown:
            raise ValueError(f"checkpoints/options given for rewards not in the set: {sorted(unknown)}")
        self.device = torch.device(device)
        self.models: List[RewardModel] = [
            m if isinstance(m, RewardModel)
            else load(m, checkpoint=checkpoints.get(m), device=device, dtype=dtype, **dict(options.get(m, {})))
            for m in models]
        self.names: List[str] = [col for m in self.models for col in m.outputs]
        if len(set(self.names)) != len(self.names):
            raise ValueError(f"duplicate reward columns: {self.names}")

    def to(self, device: Union[str, torch.device]) -> "RewardSet":
        """Move every model (and where scores are returned) to ``device``."""
        self.device = torch.device(device)
        for model in self.models:
            model.to(self.device)
        return self

    def __len__(self) -> int:
        return len(self.names)

    def score(self, images, prompts: Sequence[str]) -> RewardScores:
        """All K columns for B samples: ``RewardScores(scores [B, K] float32 on self.device, names)``."""
        columns = [m.score_all(images, prompts).to(self.device) for m in self.models]
        return RewardScores(torch.cat(columns, dim=1), list(self.names))
