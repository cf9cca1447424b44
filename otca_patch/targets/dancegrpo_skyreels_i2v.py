"""DanceGRPO ``fastvideo/train_grpo_skyreels_i2v.py`` — the runtime behind ``patches/dancegrpo/train_grpo_skyreels_i2v.toml``.

A map of the upstream file and of what each hook point does there:

``sample_reference_model``  draws one first frame per prompt with a FLUX pipeline, encodes it with
    the HunyuanVideo VAE into first-frame latents (zero-padded over time, concatenated to the noise
    latents on the channels at every transformer call), rolls out B videos one at a time, decodes each,
    writes it to ``./videos/skyreels_<rank>_<index>.mp4`` and scores it with VideoAlign
    (``inferencer.reward``), which returns VQ, MQ and TA; upstream keeps MQ (``-1`` when the call fails).
    hook ``collect_videoalign_scores`` / ``collect_failed_videoalign``: keep VQ, MQ and TA of rollout
    ``index`` from the same call (all ``-1`` when it failed, like upstream's MQ).
    hook ``collect_decoded_videos``: keep each decoded video for registry objectives, if any are asked for.
``train_one_step``  builds ``samples`` (the last of S steps dropped: S-1 columns), group-normalises
    MQ into ``advantages`` ``[B]``, permutes each sample's steps with ``perms``, trains the first
    ``int((S-1) * timestep_fraction)`` columns with the PPO-clipped loss (clip range 1e-4, advantage
    clamp 5, both fixed in the file) and clips the gradient norm through FSDP.
    hook ``per_step_advantages``: both ``samples["advantages"] = advantages`` assignments go through
    ``assign_advantages``: the ``[B, K]`` rewards (``upstream.vq``, ``upstream.mq`` -- upstream's own
    ``samples["rewards"]`` --, ``upstream.ta`` and registry objectives over ``--otca_video_frames``
    frames) and TCD's progress on the noise latents ``all_latents`` are gathered over ranks, the credit
    is computed once, and this rank's ``[B, S-1]`` advantage becomes ``samples["otca_advantages"]``.
    hook ``permute_advantages_with_steps``: ``"otca_advantages"`` joins the permuted keys.
    hook ``record_step_order``: remember ``perms`` (the original step of each trained column).
    hook ``read_step_advantage``: the PPO loss reads the advantage of column ``_``.
module level  hook ``watch_trained_step``: the first training step checks each column read is the step trained.
    hook ``log_each_step``: ``train_one_step`` is wrapped to write one run-log line per call.
"""
from __future__ import annotations

import math

import torch

from ..objective_set import UpstreamRewards
from .dancegrpo import GrpoRuntime

#: VideoAlign's scores, as ``upstream.<column>`` objectives
COLUMNS = ("vq", "mq", "ta")


class SkyReelsRuntime(GrpoRuntime):
    """State of the layer inside one DanceGRPO SkyReels I2V process (one rank)."""

    # `upstream` is what upstream trains on (MQ); upstream.vq / upstream.ta come from the same call
    upstream_rewards = UpstreamRewards(columns=COLUMNS, plain="mq")

    def reset(self) -> None:
        super().reset()
        self.videoalign = {}  # rollout index -> {column: score}

    # ---- hooks: collect_videoalign_scores, collect_failed_videoalign (sample_reference_model)
    def collect_videoalign(self, index, result) -> None:
        """result: VideoAlign's return value for rollout ``index`` (a list of one ``{"VQ", "MQ", "TA",
        ...}``), or None when the call failed. Never raises: it runs inside upstream's ``try``, whose
        ``except`` would otherwise score the rollout -1 (and then this hook runs again, overwriting)."""
        try:
            scores = result[0] if result is not None else {c.upper(): -1.0 for c in COLUMNS}
            self.videoalign[int(index)] = {c: float(scores.get(c.upper(), math.nan)) for c in COLUMNS}
        except Exception:  # noqa: BLE001 - a malformed result: every column unknown
            self.videoalign[int(index)] = {c: math.nan for c in COLUMNS}

    # ---- hook: per_step_advantages (train_one_step)
    def assign_advantages(self, samples: dict, all_latents: torch.Tensor, upstream_advantages: torch.Tensor, args):
        """Returns the value upstream stores in ``samples["advantages"]`` and sets ``samples["otca_advantages"]``."""
        batch = all_latents.shape[0]
        if sorted(self.videoalign) != list(range(batch)):
            raise ValueError(f"otca-patch: VideoAlign scored rollouts {sorted(self.videoalign)} of {batch}")
        upstream = {c: torch.tensor([self.videoalign[i][c] for i in range(batch)]) for c in ("vq", "ta")}
        upstream["mq"] = samples["rewards"]  # what upstream trains on, exactly as it holds it
        unknown = [f"upstream.{c}" for c in ("vq", "ta")
                   if f"upstream.{c}" in self.objectives.names and torch.isnan(upstream[c]).any()]
        if unknown:
            raise ValueError(f"otca-patch: VideoAlign's reward() returned no {', '.join(unknown)} score for some videos")
        rewards = self.rewards(upstream, all_latents.device)
        return self.assign_per_step(samples, all_latents, rewards, upstream_advantages, args)
