"""DanceGRPO ``fastvideo/train_grpo_flux.py`` — the runtime behind ``patches/dancegrpo/train_grpo_flux.toml``.

A map of the upstream file and of what each hook point does there:

``sample_reference_model``  rolls out B samples one at a time, decodes each, scores upstream's reward.
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

from .dancegrpo import GrpoRuntime
from .descriptor import Target


class FluxRuntime(GrpoRuntime):
    """DanceGRPO's FLUX trainer follows the DanceGRPO skeleton: the family runtime does it all."""


TARGET = Target("dancegrpo-flux", FluxRuntime, outputs=("images", "reward.txt"), flags=("otca_final_state",),
                smoke="otca_patch.smoke.dancegrpo_flux", smoke_objectives=("upstream", "clip_t"))
