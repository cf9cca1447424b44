"""MixGRPO ``fastvideo/train_grpo_flux.py`` — the runtime behind ``patches/mixgrpo/train_grpo_flux.toml``.

A DanceGRPO-derived FLUX trainer (same path; the layer tells the two apart by the file's content).
A map of the upstream file and of what each hook point does there:

``sample_reference_model``  rolls out B samples one at a time (ODE steps outside the SDE window
    under ``--training_strategy part``; DPM-solver steps after it with the Flash variants), decodes
    each and scores it with every reward model (``compute_reward``: the weighted sum and a
    per-model ``rewards_dict``). hook ``collect_decoded_images``: keep the image upstream scored.
``train_one_step``  hook ``bind_upstream_rewards``: the reward models upstream built are the
    objectives ``upstream.<model>`` (``reward_weights``' keys, their order; under
    ``--multi_reward_mix reward_aggr`` the one summed reward ``upstream``) and, unless
    ``--otca_objective_weights`` is given, upstream's normalised ``reward_weights`` their weights.
    hooks ``per_step_advantages`` / ``per_step_advantages_summed``: each ``samples["advantages"]``
    assignment goes through ``assign_advantages``: rewards ``[B, K]`` and TCD's progress on the whole
    trajectory ``all_latents`` (ODE and SDE steps alike) are gathered over ranks, the credit is
    computed once, this rank's ``[B, S-1]`` advantage becomes ``samples["otca_advantages"]`` and
    ``samples["advantages"]`` OTCA's combined per-sample advantage: what upstream's scalar uses of it
    (the debug ``.item()`` print, ``advantage_rerange_strategy``'s sign balance) now read.
    hook ``permute_advantages_with_steps`` (``all``): the advantage is permuted with the steps.
    hook ``record_trained_steps``: each sample's trained steps (``perms`` columns under ``all``, the
    window under ``part``) and the order samples train in, for the run log.
    hook ``read_step_advantage``: the PPO loss reads the advantage of the step column ``_`` holds.
module level  hooks ``watch_trained_step``, ``log_each_step`` as in DanceGRPO.
Upstream's trimming (``--trimmed_ratio``), KL term, window schedule, clipping and optimizer are untouched.
"""
from __future__ import annotations

import sys

import torch

from .distributed import world
from .invariants import FINGERPRINT_KEY, fingerprints
from ..objective_set import UpstreamRewards
from .dancegrpo import GrpoRuntime

#: the reward models MixGRPO's ``main`` can build (``rewards_dict`` keys: their class names)
REWARD_MODELS = ("HPSClipRewardModel", "CLIPScoreRewardModel", "ImageRewardModel", "PickScoreRewardModel",
                 "UnifiedRewardModel")
#: the samples key of each sample's row in the rollout, carried through the sign balance's reordering
ROWS_KEY = "otca_rows"
SCALAR_MEANING = ("samples['advantages'] (upstream's .item() print and sign balance) is OTCA's combined "
                  "per-sample advantage (exact zeros keep upstream's sign at the smallest float)")


class MixFluxRuntime(GrpoRuntime):
    """State of the layer inside one MixGRPO process (one rank)."""

    upstream_rewards = UpstreamRewards(columns=REWARD_MODELS)  # until the first step names the built ones
    rewards_known_at_install = False

    def describe(self) -> str:
        text = super().describe()
        if getattr(self, "_bound_upstream", None) is None:  # before the first step: upstream's models unknown
            text = text.replace(", ".join(f"upstream.{m}" for m in REWARD_MODELS),
                                "upstream.<each reward model MixGRPO builds, from its first step>")
        return f"{text}; {SCALAR_MEANING}"

    # ---- hook: bind_upstream_rewards (train_one_step, before the rollout)
    def bind_upstream_rewards(self, reward_weights: dict, args) -> None:
        """Objectives and weights from the reward models upstream built (``{class name: weight}``)."""
        summed = args.multi_reward_mix == "reward_aggr"
        upstream = UpstreamRewards() if summed else UpstreamRewards(columns=tuple(reward_weights))
        if self.rebind_upstream(upstream, None if summed else dict(reward_weights)) and world()[0] == 0:
            print(f"otca-patch: objectives {', '.join(self.objectives.names)}; weights "
                  f"{self.credit_config.objective_weights or 'all 1'}"
                  + ("" if self.config.otca_objective_weights or summed else " (upstream's reward_weights)")
                  + ("; --trimmed_ratio: OTCA's group statistics are untrimmed (upstream drops the lowest "
                     "trimmed_ratio of each group before its mean and std)" if args.trimmed_ratio > 0 else ""),
                  file=sys.stderr, flush=True)

    # ---- hooks: per_step_advantages, per_step_advantages_summed (train_one_step)
    def assign_advantages(self, samples: dict, all_latents: torch.Tensor, upstream_advantages: torch.Tensor, args):
        rows = torch.arange(all_latents.shape[0], device=all_latents.device)
        samples[ROWS_KEY] = rows  # each sample's dict keeps its row when the sign balance reorders them
        # the trained-step check also under `part`, where upstream permutes nothing
        samples[FINGERPRINT_KEY] = fingerprints(samples["latents"])
        combined = super().assign_advantages(samples, all_latents, upstream_advantages, args)
        if self.observing:
            return combined
        # The loss reads samples["otca_advantages"]; this scalar only feeds the print and the sign
        # balance, which drops samples whose advantage is exactly 0. MOCA gives exactly 0 where a
        # sample's objectives conflict: such a sample keeps upstream's side, at the smallest magnitude.
        nudge = torch.sign(upstream_advantages).to(combined.dtype) * torch.finfo(combined.dtype).tiny
        return torch.where(combined == 0, nudge, combined)

    # ---- hook: record_trained_steps (train_one_step, before the training loop)
    def record_trained(self, train_timesteps, perms, samples_batched_list: list) -> None:
        """``train_timesteps``: the columns trained; ``perms [B, S-1]`` the original step of each column
        (``None`` under ``part``: column = step); the list's order: the order samples train in."""
        columns = torch.as_tensor(list(train_timesteps), dtype=torch.long)
        batch = len(samples_batched_list)
        self.trained_steps = columns.expand(batch, -1) if perms is None else perms[:, columns.to(perms.device)]
        if self.record is not None:
            self.record["train_order"] = [int(sample[ROWS_KEY]) for sample in samples_batched_list]
