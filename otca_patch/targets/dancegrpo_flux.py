"""DanceGRPO ``fastvideo/train_grpo_flux.py`` — the runtime behind ``patches/dancegrpo/train_grpo_flux.toml``.

A map of the upstream file and of what each hook point does there:

``sample_reference_model``  rolls out B samples one at a time, decodes each, scores upstream's reward.
    hook ``collect_final_prediction``: keep each chunk's last predicted clean sample (``latents``
    as ``run_sample_step`` returns it, before it is decoded) for ``--otca_final_state prediction``.
    hook ``collect_decoded_images``: keep each decoded PIL image and its caption, so registry
    objectives score the batch once, after the rollout.
``train_one_step``  builds ``samples`` (the last of S steps dropped: S-1 columns), computes group
    advantages ``[B]``, permutes each sample's steps with ``perms``, trains the first
    ``int((S-1) * timestep_fraction)`` columns of each sample's order with the PPO-clipped loss.
    hook ``per_step_advantages``: both ``samples["advantages"] = advantages`` assignments go through
    ``assign_advantages``: the ``[B, K]`` rewards and TCD's progress on ``all_latents`` (computed
    where the latents are) are gathered over ranks, the credit is computed once, and this rank's
    ``[B, S-1]`` advantage is stored as ``samples["otca_advantages"]``; ``samples["advantages"]``
    becomes the combined ``[B]`` value so upstream's debug print keeps working.
    hook ``permute_advantages_with_steps``: ``"otca_advantages"`` joins the permuted keys.
    hook ``record_step_order``: remember ``perms`` (the original step of each trained column).
    hook ``read_step_advantage``: the PPO loss reads ``sample["otca_advantages"][:, _]``, the
    advantage of the step being trained.
module level  hook ``log_each_step``: ``train_one_step`` is wrapped to write one run-log line per call.
"""
from __future__ import annotations

import torch

from ..config import OtcaConfig
from ..hooks.spec import TargetSpec
from .common import GrpoRuntime


def install(config: OtcaConfig, spec: TargetSpec, namespace: dict) -> "FluxRuntime":
    """Called by the runner before the rewritten module executes."""
    return FluxRuntime(config)


class FluxRuntime(GrpoRuntime):
    """State of the layer inside one DanceGRPO FLUX process (one rank)."""

    supports_final_prediction = True

    def reset(self) -> None:
        super().reset()
        self.images, self.prompts = [], []

    # ---- hook: collect_decoded_images (sample_reference_model)
    def collect_images(self, decoded_images, captions) -> None:
        if self.objectives.needs_images:
            self.images.extend(decoded_images)
            self.prompts.extend(captions[:len(decoded_images)])

    # ---- hook: per_step_advantages (train_one_step)
    def assign_advantages(self, samples: dict, all_latents: torch.Tensor, upstream_advantages: torch.Tensor, args):
        """Returns the value upstream stores in ``samples["advantages"]`` and sets ``samples["otca_advantages"]``."""
        rewards = self.objectives.matrix(samples.get("rewards"), self.images, self.prompts).to(all_latents.device)
        return self.assign_per_step(samples, all_latents, rewards, upstream_advantages, args)
