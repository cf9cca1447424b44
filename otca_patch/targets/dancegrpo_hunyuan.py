"""DanceGRPO ``fastvideo/train_grpo_hunyuan.py`` — the runtime behind ``patches/dancegrpo/train_grpo_hunyuan.toml``.

A map of the upstream file and of what each hook point does there:

``sample_reference_model``  rolls out B videos one at a time, decodes each, writes it to
    ``./videos/hunyuan_<rank>_<index>.mp4`` and scores it with VideoAlign (``inferencer.reward``), which
    returns VQ, MQ and TA; upstream keeps VQ and MQ (``-1`` for both when the call fails).
    hook ``collect_text_alignment`` / ``collect_failed_text_alignment``: keep TA from the same call
    (``-1`` when it failed, like upstream's VQ and MQ), one value per rollout, in rollout order.
    hook ``collect_decoded_videos``: keep each decoded video for registry objectives, if any are asked for.
``train_one_step``  group-normalises VQ and MQ separately (``vq_advantages``, ``mq_advantages`` ``[B]``),
    ranks the samples by ``vq_coef * vq_adv + mq_coef * mq_adv`` and keeps the ``bestofn // 2`` best and
    worst (in a shuffled order; all B when ``bestofn == num_generations``), permutes each kept
    sample's steps with ``perms``, and trains the first ``int((S-1) * timestep_fraction)`` columns with
    two PPO-clipped losses, ``vq_coef * vq_loss + mq_coef * mq_loss``.
    hook ``mark_rollout_rows``: ``samples["otca_rows"] = arange(B)``, selected by best-of-n with every
    other key, so afterwards it names the rollout each kept row came from; the runtime also keeps a
    reference to every rollout's VQ and MQ (best-of-n replaces ``samples``' tensors, never changes them).
    hook ``per_step_advantages``: after the selection, the credit is computed over the whole group, as
    upstream's own normalisation is: the ``[B, K]`` rewards of every rollout upstream scored
    (``upstream.vq``, ``upstream.mq``, ``upstream.ta`` and registry objectives) and TCD's progress of
    every rollout's latents are gathered over ranks, grouped by prompt; only then are the kept rows
    taken, and this rank's ``[B_kept, S-1]`` advantage becomes ``samples["otca_advantages"]``.
    TCD's progress comes from all rollouts' latents: upstream keeps every rollout in ``all_latents``
    (best-of-n selects ``samples`` only), so nothing is copied and every rollout that sets the group's
    reward statistics also has its progress; a kept row's step weights are its own either way.
    hook ``permute_advantages_with_steps``: ``"otca_advantages"`` joins the permuted keys.
    hook ``record_step_order``: remember ``perms`` (the original step of each trained column).
    hook ``one_loss_on_the_step_advantage``: ``vq_coef * vq_loss + mq_coef * mq_loss`` is replaced by
    one PPO-clipped loss on the advantage of the step trained, with upstream's ``clip_range``,
    ``adv_clip_max`` and normaliser; in observe mode upstream's own sum is returned untouched.
module level  hook ``log_each_step``: ``train_one_step`` is wrapped to write one run-log line per call.
"""
from __future__ import annotations

import math

import torch

from ..objective_set import UpstreamRewards
from .dancegrpo import GrpoRuntime

ROWS_KEY = "otca_rows"


class HunyuanRuntime(GrpoRuntime):
    """State of the layer inside one DanceGRPO HunyuanVideo process (one rank)."""

    upstream_rewards = UpstreamRewards(columns=("vq", "mq", "ta"))  # `upstream` = all three

    def reset(self) -> None:
        super().reset()
        self.text_alignment = []
        self.rollout_rewards = None

    # ---- hooks: collect_text_alignment, collect_failed_text_alignment (sample_reference_model)
    def collect_text_alignment(self, value) -> None:
        """Never raises: an exception here would land in upstream's ``except`` and double its rows."""
        try:
            self.text_alignment.append(float(value))
        except (TypeError, ValueError):
            self.text_alignment.append(math.nan)

    # ---- hook: mark_rollout_rows (train_one_step, before best-of-n)
    def mark_rows(self, samples: dict) -> None:
        rewards = samples["vq_rewards"]
        samples[ROWS_KEY] = torch.arange(rewards.shape[0], device=rewards.device)
        # references, not copies: best-of-n rebinds samples' keys to new, indexed tensors
        self.rollout_rewards = {"vq": samples["vq_rewards"], "mq": samples["mq_rewards"]}

    # ---- hook: per_step_advantages (train_one_step, after best-of-n)
    def assign_advantages(self, samples: dict, all_latents: torch.Tensor, args) -> None:
        """Sets ``samples["otca_advantages"]`` ``[B_kept, S-1]`` for the rows best-of-n kept, from the
        credit of every rollout (``all_latents`` ``[B, S+1, ...]``: all of this rank's rollouts)."""
        rows, rollouts = samples[ROWS_KEY], all_latents.shape[0]
        if self.rollout_rewards is None:
            raise RuntimeError("otca-patch: fastvideo/train_grpo_hunyuan.py, train_one_step: hook "
                               "per_step_advantages ran before mark_rollout_rows")
        scored = self.rollout_rewards["vq"].shape[0]
        if scored != rollouts:
            raise RuntimeError(f"otca-patch: fastvideo/train_grpo_hunyuan.py, train_one_step, hook "
                               f"per_step_advantages: all_latents holds {rollouts} rollouts but upstream "
                               f"scored {scored}; the credit needs every rollout's latents")
        if len(self.text_alignment) != rollouts:
            raise ValueError(f"otca-patch: {len(self.text_alignment)} VideoAlign TA scores for {rollouts} rollouts")
        text_alignment = torch.tensor(self.text_alignment, dtype=torch.float32)
        if torch.isnan(text_alignment).any() and "upstream.ta" in self.objectives.names:
            raise ValueError("otca-patch: VideoAlign's reward() returned no 'TA' score for some videos")
        rewards = self.rewards({**self.rollout_rewards, "ta": text_alignment}, all_latents.device)
        by_objective = torch.stack([samples["vq_advantages"], samples["mq_advantages"]], dim=1)
        combined = args.vq_coef * by_objective[:, 0] + args.mq_coef * by_objective[:, 1]
        self.assign_per_step(samples, all_latents, rewards, combined, args, rows=rows, kept_rows=rows,
                             upstream_objective_advantages=by_objective,
                             coefficients=[float(args.vq_coef), float(args.mq_coef)])

    # ---- hook: one_loss_on_the_step_advantage (train_one_step, inner loop)
    def policy_loss(self, upstream_loss, ratio, advantage, clip_range, adv_clip_max, normaliser):
        """PPO-clipped loss of one column on its OTCA advantage ``[1]``; upstream's loss in observe mode."""
        if self.observing:
            return upstream_loss
        advantage = torch.clamp(advantage, -adv_clip_max, adv_clip_max)
        clipped_ratio = torch.clamp(ratio, 1.0 - clip_range, 1.0 + clip_range)
        return torch.mean(torch.maximum(-advantage * ratio, -advantage * clipped_ratio)) / normaliser
