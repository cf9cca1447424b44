"""FlowGRPO ``scripts/train_wan2_1.py`` (9745241) — the runtime behind ``patches/flowgrpo/train_wan2_1.toml``.

Wan2.1 runs the SD3 loop on videos (the FlowGRPO family runtime), with one difference the layer
sees: upstream's advantage is ``[B, S]``, one column per sampling step (``avg.unsqueeze(-1) -
kl_reward * kl``, normalised per column), of which the loop trains columns ``0 .. T-1``. The layer
stores the engine's credit in that shape: column ``j`` is step ``j`` of the whole trajectory, for
every ``j < S``. Registry image objectives score ``--otca_video_frames`` frames of each video.
"""
from __future__ import annotations

import torch

from .flowgrpo import FlowGrpoRuntime, trajectory_progress


class WanRuntime(FlowGrpoRuntime):
    """Wan2.1: the FlowGRPO skeleton, with upstream's per-step advantage columns."""

    def trajectory(self, samples: dict, num_train_timesteps: int):
        """TCD's ``delta_s [B, S]`` and the step of each column of upstream's advantage, ``[B, S]``."""
        delta_s = trajectory_progress(samples["latents"], samples["next_latents"])
        columns = samples["advantages"].shape[1]
        if columns != delta_s.shape[1]:
            raise ValueError(f"{self.spec.file}: upstream's advantages have {columns} columns, not one per "
                             f"sampling step ({delta_s.shape[1]}): the spec's per_step_advantages no longer holds")
        return delta_s, torch.arange(columns).expand(delta_s.shape[0], -1)
