"""The objectives of a patched run: upstream's own reward plus reward-registry models, in flag order."""
from __future__ import annotations

from typing import Optional, Sequence

import torch

#: The objective name for the reward that the upstream trainer computes itself (never recomputed).
UPSTREAM = "upstream"


class Objectives:
    """Builds the ``[B, K]`` reward matrix of a batch, one column per ``--otca_rewards`` name.

    Registry models are loaded once, when the layer is installed (so a missing checkpoint stops the
    run before training), and score a whole batch of decoded images at once.
    """

    def __init__(self, names: Sequence[str], checkpoints: dict, device: str | torch.device = "cpu",
                 options: dict | None = None):
        self.names = tuple(names)
        registry_names = [name for name in self.names if name != UPSTREAM]
        self.reward_set = None
        if registry_names:
            from .rewards import RewardSet

            unknown = (set(checkpoints) | set(options or {})) - set(registry_names)
            if unknown:
                raise ValueError(f"--otca_reward_ckpt/--otca_reward_opt name rewards that are not objectives: "
                                 f"{', '.join(sorted(unknown))} (objectives: {', '.join(self.names)})")
            self.reward_set = RewardSet(registry_names, checkpoints=checkpoints, device=device, options=options)
            expanded = tuple(self.reward_set.names)
            if len(expanded) != len(registry_names):  # a multi-output model expands into several columns
                self.names = tuple(n for name in self.names
                                   for n in ((name,) if name == UPSTREAM else
                                             [e for e in expanded if e == name or e.startswith(name + ".")]))

    @property
    def needs_images(self) -> bool:
        return self.reward_set is not None

    def matrix(self, upstream: Optional[torch.Tensor], images, prompts: Sequence[str]) -> torch.Tensor:
        """``[B, K]`` float32: upstream's ``[B]`` reward and the registry's scores of ``images``."""
        columns = {}
        if UPSTREAM in self.names:
            if upstream is None:
                raise ValueError("objective 'upstream' requested but the trainer computed no reward")
            columns[UPSTREAM] = upstream.detach().float().reshape(-1)
        if self.reward_set is not None:
            if len(images) != len(prompts):
                raise ValueError(f"objectives: {len(images)} decoded images but {len(prompts)} prompts")
            scores = self.reward_set.score(images, list(prompts))
            scores = scores[0] if isinstance(scores, tuple) else getattr(scores, "scores", scores)
            for position, name in enumerate(self.reward_set.names):
                columns[name] = scores[:, position].float()
        device = next(iter(columns.values())).device
        return torch.stack([columns[name].to(device) for name in self.names], dim=1)
