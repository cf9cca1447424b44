"""FlowGRPO ``scripts/train_sd3_GRPO_Guard.py`` (9745241 on) — the runtime behind
``patches/flowgrpo/train_sd3_GRPO_Guard.toml``.

SD3's trainer (``flowgrpo_sd3``'s map holds) with GRPO-Guard's ratio: under ``config.rationorm``
the sampling call also returns each step's ``prev_sample_mean`` (stored per column), and the PPO
ratio of column j is ``exp((log_prob - old_log_prob + bias) * sqrt(dt) * sigma_t)`` with the
mean-shift ``bias`` of that column; the policy loss is divided by ``sqrt(dt)^2``. The advantage is
read as in SD3 (``sample["advantages"][:, j]``, clamped), so OTCA's ``[B, T]`` credit enters the
normalised loss through the same column: the family runtime does it all.
"""
from __future__ import annotations

from .descriptor import Target
from .flowgrpo import FlowGrpoRuntime


class Sd3GuardRuntime(FlowGrpoRuntime):
    """FlowGRPO's GRPO-Guard trainer: the family runtime does it all."""


TARGET = Target("flowgrpo-sd3-guard", Sd3GuardRuntime, outputs=("logs", "checkpoints"),
                smoke="otca_patch.smoke.flowgrpo_sd3_guard", smoke_objectives=("jpeg_compressibility", "clip_t"))
