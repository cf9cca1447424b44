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
                 options: dict | None = None, upstream_columns: Sequence[str] = ()):
        # a trainer with several rewards of its own (``upstream_columns``, e.g. VideoAlign's vq, mq, ta)
        # offers them as ``upstream.<column>``; plain ``upstream`` then stands for all of them
        self.upstream_columns = tuple(upstream_columns)
        names = tuple(names)
        if self.upstream_columns:
            names = tuple(n for name in names for n in
                          ([f"{UPSTREAM}.{c}" for c in self.upstream_columns] if name == UPSTREAM else [name]))
            offered = {f"{UPSTREAM}.{c}" for c in self.upstream_columns}
            wrong = [n for n in names if n.startswith(UPSTREAM + ".") and n not in offered]
            if wrong:
                raise ValueError(f"--otca_rewards: {', '.join(wrong)} is not a reward this trainer computes "
                                 f"(it offers {', '.join(sorted(offered))})")
            if len(set(names)) != len(names):
                raise ValueError(f"--otca_rewards: objectives repeat once 'upstream' is expanded: {', '.join(names)}")
        self.names = names
        registry_names = [name for name in self.names if not self._is_upstream(name)]
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
                                   for n in ((name,) if self._is_upstream(name) else
                                             [e for e in expanded if e == name or e.startswith(name + ".")]))

    def _is_upstream(self, name: str) -> bool:
        return name == UPSTREAM or (bool(self.upstream_columns) and name.startswith(UPSTREAM + "."))

    @property
    def needs_images(self) -> bool:
        return self.reward_set is not None

    def _upstream_columns(self, upstream) -> dict:
        """``{objective name: [B]}`` of upstream's reward(s): a tensor, or ``{column: [B]}`` for a
        trainer with ``upstream_columns``."""
        wanted = [n for n in self.names if self._is_upstream(n)]
        if not wanted:
            return {}
        if upstream is None:
            raise ValueError(f"objectives {', '.join(wanted)} requested but the trainer computed no reward")
        if not self.upstream_columns:
            return {UPSTREAM: upstream.detach().float().reshape(-1)}
        missing = [n for n in wanted if n.split(".", 1)[1] not in upstream]
        if missing:
            raise ValueError(f"the trainer's rewards lack {', '.join(missing)} (it gave {', '.join(upstream)})")
        return {n: torch.as_tensor(upstream[n.split(".", 1)[1]]).detach().float().reshape(-1) for n in wanted}

    def video_matrix(self, upstream, videos: Optional[torch.Tensor], prompts: Sequence[str],
                     frames: int) -> torch.Tensor:
        """``[B, K]`` float32 for a batch of videos ``[B, F, 3, H, W]`` in [0, 1]: video rewards of the
        registry score whole videos; image rewards score ``frames`` evenly spaced frames of each
        video, and a video's score is the mean over its frames."""
        columns = self._upstream_columns(upstream)
        if self.reward_set is not None:
            if videos is None or videos.dim() != 5:
                raise ValueError("objectives: registry rewards need the decoded videos [B, F, 3, H, W]")
            if videos.shape[0] != len(prompts):
                raise ValueError(f"objectives: {videos.shape[0]} decoded videos but {len(prompts)} prompts")
            batch, length = videos.shape[:2]
            picked = torch.linspace(0, length - 1, min(frames, length)).round().long()
            stills = videos[:, picked].flatten(0, 1)  # [B * n, 3, H, W], sample-major
            still_prompts = [p for p in prompts for _ in range(len(picked))]
            for model in self.reward_set.models:
                if getattr(model, "modality", "image") == "video":
                    scores = model.score_all(videos, list(prompts))
                else:
                    scores = model.score_all(stills, still_prompts).reshape(batch, len(picked), -1).mean(dim=1)
                for position, name in enumerate(model.outputs):
                    columns[name] = scores[:, position].float()
        device = next(iter(columns.values())).device
        return torch.stack([columns[name].to(device) for name in self.names], dim=1)

    def matrix(self, upstream: Optional[torch.Tensor], images, prompts: Sequence[str]) -> torch.Tensor:
        """``[B, K]`` float32: upstream's ``[B]`` reward and the registry's scores of ``images``."""
        columns = self._upstream_columns(upstream)
        if self.reward_set is not None:
            if len(images) != len(prompts):
                raise ValueError(f"objectives: {len(images)} decoded images but {len(prompts)} prompts")
            scores = self.reward_set.score(images, list(prompts))
            scores = scores[0] if isinstance(scores, tuple) else getattr(scores, "scores", scores)
            for position, name in enumerate(self.reward_set.names):
                columns[name] = scores[:, position].float()
        device = next(iter(columns.values())).device
        return torch.stack([columns[name].to(device) for name in self.names], dim=1)
