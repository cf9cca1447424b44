"""FlowGRPO's objectives: columns of upstream's ``multi_score`` dictionary, plus registry models.

``multi_score`` returns one entry per ``config.reward_fn`` key and ``avg``, their weighted sum; so
an objective named like a ``reward_fn`` key (or ``upstream.<key>``) is upstream's reward, read from
that dictionary and never scored twice; ``upstream`` (or ``avg``) is the weighted ``avg`` upstream
trains on; any other name is a reward-registry model that scores the sampled images.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import torch

from ..objectives import UPSTREAM

#: upstream's key for the unweighted-by-steps [B] avg (upstream repeats "avg" itself to [B, T])
AVG_KEY = "ori_avg"


def upstream_key(name: str, reward_fn: Mapping) -> str | None:
    """The ``samples["rewards"]`` key of objective ``name``, or ``None`` for a registry model."""
    if name in (UPSTREAM, "avg"):
        return AVG_KEY
    key = name[len(UPSTREAM) + 1:] if name.startswith(UPSTREAM + ".") else name
    if key in reward_fn:
        return key
    if name.startswith(UPSTREAM + "."):
        raise ValueError(f"--otca_rewards: {name}: upstream's reward_fn has no {key!r} "
                         f"(it has {', '.join(reward_fn)})")
    return None


class FlowObjectives:
    """The ``[B, K]`` reward matrix of one epoch's samples, one column per ``--otca_rewards`` name."""

    def __init__(self, names: Sequence[str], reward_fn: Mapping, checkpoints: dict, options: dict, device):
        self.keys = {name: upstream_key(name, reward_fn) for name in names}
        registry = [name for name, key in self.keys.items() if key is None]
        self.reward_set = None
        self.names = tuple(names)
        if registry:
            from ..rewards import RewardSet

            unknown = (set(checkpoints) | set(options)) - set(registry)
            if unknown:
                raise ValueError(f"--otca_reward_ckpt/--otca_reward_opt name rewards that are not registry "
                                 f"objectives: {', '.join(sorted(unknown))}")
            self.reward_set = RewardSet(registry, checkpoints=checkpoints, device=device, options=options)
            expanded = tuple(self.reward_set.names)  # a multi-output model expands into several columns
            self.names = tuple(n for name in names for n in
                               ((name,) if self.keys[name] is not None else
                                [e for e in expanded if e == name or e.startswith(name + ".")]))

    @property
    def needs_images(self) -> bool:
        return self.reward_set is not None

    def matrix(self, rewards: Mapping[str, torch.Tensor], images, prompts: Sequence[str]) -> torch.Tensor:
        """``[B, K]`` float32 from upstream's reward dictionary and, for registry objectives, the
        sampled ``images [B, 3, H, W]`` in [0, 1] with their ``prompts``."""
        columns = {name: torch.as_tensor(rewards[key]).float().reshape(-1)
                   for name, key in self.keys.items() if key is not None}
        if self.reward_set is not None:
            if len(images) != len(prompts):
                raise ValueError(f"objectives: {len(images)} sampled images but {len(prompts)} prompts")
            scores = self.reward_set.score(images, list(prompts)).scores
            columns.update({name: scores[:, i].float() for i, name in enumerate(self.reward_set.names)})
        device = next(iter(columns.values())).device
        return torch.stack([columns[name].to(device) for name in self.names], dim=1)
