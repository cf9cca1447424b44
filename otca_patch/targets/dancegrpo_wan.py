"""DanceGRPO ``fastvideo/train_grpo_wan_2_1.py`` — the runtime behind ``patches/dancegrpo/train_grpo_wan_2_1.toml``.

A map of the upstream file and of what each hook point does there:

``sample_reference_model``  rolls out B videos one at a time, decodes each with the Wan VAE, writes it
    to ``./videos/wan_2_1_<rank>_<index>.mp4`` and scores HPSv2.1 on its first frame (re-read from the mp4).
    hook ``collect_decoded_videos``: keep each decoded video ``[F, H, W, 3]`` and its caption, so registry
    objectives score the batch once, after the rollout: image rewards (CLIP-T, aesthetic, HPS, ...) on
    ``--otca_video_frames`` evenly spaced frames, averaged per video; video rewards (VideoAlign) on the video.
``train_one_step``  builds ``samples`` (the last of S steps dropped: S-1 columns), computes group
    advantages ``[B]``, permutes each sample's steps with ``perms``, trains the first
    ``int((S-1) * timestep_fraction)`` columns with the PPO-clipped loss, and every
    ``gradient_accumulation_steps`` samples clips the gradient norm and steps the optimizer.
    hook ``per_step_advantages``: both ``samples["advantages"] = advantages`` assignments go through
    ``assign_advantages``: the ``[B, K]`` rewards (``upstream`` = upstream's first-frame HPS) and TCD's
    progress on ``all_latents`` are gathered over ranks, the credit is computed once, and this rank's
    ``[B, S-1]`` advantage is stored as ``samples["otca_advantages"]``; ``samples["advantages"]`` becomes
    the combined ``[B]`` value so upstream's prints keep working.
    hook ``permute_advantages_with_steps``: ``"otca_advantages"`` joins the permuted keys.
    hook ``record_step_order``: remember ``perms`` (the original step of each trained column).
    hook ``read_step_advantage``: the PPO loss reads ``sample["otca_advantages"][:, _]``.
    hook ``synchronise_gradients``: before upstream's ``clip_grad_norm_``, with ``--otca_sync_grads``,
    every gradient is averaged over ranks. Upstream's ``main`` wraps the transformer in neither FSDP nor
    DDP, so without it each rank steps on its own gradient and the replicas drift apart (DanceGRPO
    issue #110). Without the flag the hook does nothing: vanilla stays vanilla.
module level  hook ``log_each_step``: ``train_one_step`` is wrapped to write one run-log line per call.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from ..config import OtcaConfig
from ..distributed import world
from ..hooks.spec import TargetSpec
from .video import VideoGrpoRuntime


def install(config: OtcaConfig, spec: TargetSpec, namespace: dict) -> "WanRuntime":
    """Called by the runner before the rewritten module executes."""
    return WanRuntime(config)


class WanRuntime(VideoGrpoRuntime):
    """State of the layer inside one DanceGRPO Wan2.1 process (one rank)."""

    supports_sync_grads = True

    # ---- hook: per_step_advantages (train_one_step)
    def assign_advantages(self, samples: dict, all_latents: torch.Tensor, upstream_advantages: torch.Tensor, args):
        """Returns the value upstream stores in ``samples["advantages"]`` and sets ``samples["otca_advantages"]``."""
        rewards = self.video_rewards(samples.get("rewards")).to(all_latents.device)
        return self.assign_per_step(samples, all_latents, rewards, upstream_advantages, args)

    # ---- hook: synchronise_gradients (train_one_step, before clip_grad_norm_)
    def synchronise_gradients(self, model: torch.nn.Module) -> None:
        """With ``--otca_sync_grads``: every gradient becomes its mean over ranks (what DDP would do),
        so the gradient norm is clipped and the step taken on the same gradient everywhere."""
        _, size = world()
        if not self.config.otca_sync_grads or size == 1:
            return
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        if not grads:
            return
        flat = torch.cat([g.reshape(-1) for g in grads])  # one collective, not one per tensor
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        flat /= size
        offset = 0
        for grad in grads:
            grad.copy_(flat[offset:offset + grad.numel()].view_as(grad))
            offset += grad.numel()
