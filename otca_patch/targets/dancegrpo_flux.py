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

import sys

import torch

from ..config import OtcaConfig
from ..credit import credit_from_progress, similarity_to_final, step_progress
from ..distributed import gather_rows, local_rows, world
from ..hooks.spec import TargetSpec
from ..objectives import Objectives
from ..runlog import RunLog

STEP_KEY = "otca_advantages"


def install(config: OtcaConfig, spec: TargetSpec, namespace: dict) -> "FluxRuntime":
    """Called by the runner before the rewritten module executes."""
    return FluxRuntime(config)


class FluxRuntime:
    """State of the layer inside one DanceGRPO FLUX process (one rank)."""

    def __init__(self, config: OtcaConfig):
        self.config = config
        self.credit_config = config.credit_config()
        device = config.otca_reward_device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.objectives = Objectives(config.otca_rewards, config.otca_reward_ckpt, device=device,
                                     options=config.otca_reward_opt)
        if config.otca_objective_weights is not None and len(config.otca_objective_weights) != len(self.objectives.names):
            raise ValueError(f"--otca_objective_weights: {len(config.otca_objective_weights)} weights for "
                             f"objectives {', '.join(self.objectives.names)}")
        self.log = RunLog(config.otca_log_dir)
        self.step = 0
        self._reset()

    def describe(self) -> str:
        kind = "observe (trains vanilla)" if self.config.otca_observe else f"mode {self.credit_config.mode}"
        return f"{kind}; objectives {', '.join(self.objectives.names)}; log {self.log.path}"

    def _reset(self) -> None:
        self.images, self.prompts = [], []
        self.record = None
        self.trained_steps = None

    # ---- hook: collect_decoded_images (sample_reference_model)
    def collect_images(self, decoded_images, captions) -> None:
        if self.objectives.needs_images:
            self.images.extend(decoded_images)
            self.prompts.extend(captions[:len(decoded_images)])

    # ---- hook: per_step_advantages (train_one_step)
    def assign_advantages(self, samples: dict, all_latents: torch.Tensor, upstream_advantages: torch.Tensor, args):
        """Returns the value upstream stores in ``samples["advantages"]`` and sets ``samples["otca_advantages"]``."""
        batch = all_latents.shape[0]
        kept_steps = samples["log_probs"].shape[1]  # S-1: upstream drops the last step
        rewards = self.objectives.matrix(samples.get("rewards"), self.images, self.prompts).to(all_latents.device)
        # TCD's similarities where the latents are; only [B, S] and [B, K] travel between ranks
        delta_s = step_progress(similarity_to_final(all_latents).double())
        group_ids = self._group_ids(batch, args, all_latents.device)
        credit = credit_from_progress(gather_rows(rewards), gather_rows(delta_s), gather_rows(group_ids),
                                      self.credit_config)
        local = {name: local_rows(value, batch) for name, value in credit.tensors().items()}
        if self.config.otca_observe:
            trained = upstream_advantages.reshape(batch, 1).expand(batch, kept_steps).clone()
            stored = upstream_advantages
        else:
            trained = local["advantages"][:, :kept_steps].to(upstream_advantages.dtype).contiguous()
            stored = local["combined"].to(upstream_advantages.dtype)
        samples[STEP_KEY] = trained
        self.record = {
            "group_ids": group_ids, "rewards": rewards, "delta_s": local["delta_s"],
            "step_weights": local["step_weights"], "mixture": local["mixture"], "combined": local["combined"],
            "lambdas": local["lambdas"], "objective_advantages": local["objective_advantages"],
            "advantages": trained, "upstream_advantages": upstream_advantages, "summary": credit.summary(),
        }
        return stored

    def _group_ids(self, batch: int, args, device) -> torch.Tensor:
        """DanceGRPO's layout: ``num_generations`` contiguous samples per prompt with ``--use_group``
        (groups never span ranks), else one group over the gathered batch (its global normalisation)."""
        rank, _ = world()
        if getattr(args, "use_group", False):
            size = args.num_generations
            if batch % size:
                raise ValueError(f"--num_generations {size} does not divide the per-rank batch {batch}")
            return torch.arange(batch, device=device) // size + rank * (batch // size)
        return torch.zeros(batch, dtype=torch.long, device=device)

    # ---- hook: record_step_order (train_one_step, after the permutation)
    def record_order(self, samples: dict, perms: torch.Tensor, args) -> None:
        train_timesteps = int(perms.shape[1] * args.timestep_fraction)
        self.trained_steps = perms[:, :train_timesteps]

    # ---- hook: log_each_step (module level)
    def wrap_train_step(self, train_one_step):
        runtime = self

        def train_one_step_with_otca(*args, **kwargs):
            runtime._reset()
            result = train_one_step(*args, **kwargs)
            runtime.step += 1
            runtime._write_log(result)
            return result

        train_one_step_with_otca.__wrapped__ = train_one_step
        return train_one_step_with_otca

    def _write_log(self, result) -> None:
        if self.record is None:
            print("otca-patch: warning: train_one_step returned without computing advantages", file=sys.stderr)
            return
        rank, size = world()
        loss, grad_norm = (result + (None, None))[:2] if isinstance(result, tuple) else (result, None)
        record = {
            "step": self.step, "rank": rank, "world_size": size, "mode": self.credit_config.mode,
            "observe": self.config.otca_observe, "config": self.credit_config.to_dict(),
            "objectives": list(self.objectives.names), **self.record,
            "trained_steps": self.trained_steps, "loss": loss, "grad_norm": grad_norm,
        }
        self.log.write(record)
        self._to_wandb(rank, record["summary"])

    def _to_wandb(self, rank: int, summary: dict) -> None:
        wandb = sys.modules.get("wandb")
        if rank != 0 or wandb is None or getattr(wandb, "run", None) is None:
            return
        scalars = {f"otca/{k}": v for k, v in summary.items() if isinstance(v, float)}
        scalars.update({f"otca/mixture_{name}": value for name, value in
                        zip(self.objectives.names, summary["mixture_mean_per_objective"])})
        wandb.log(scalars, commit=False)  # joins upstream's own wandb.log(step=step) of this step
