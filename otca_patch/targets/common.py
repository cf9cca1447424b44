"""What every DanceGRPO target's runtime shares: the objectives, the one credit computation over
all ranks, DanceGRPO's group layout, the wrapped training step and its run-log line.

A target's runtime subclasses ``GrpoRuntime`` and adds the methods its spec's inserted code calls;
it fills ``self.record`` (the per-step fields of the run log) once per training step.
"""
from __future__ import annotations

import sys

import torch

from ..config import OtcaConfig
from ..credit import credit_from_progress, similarity_to_final, step_progress
from ..distributed import gather_rows, local_rows, world
from ..invariants import TrainedStepCheck
from ..objectives import Objectives
from ..runlog import RunLog

#: the samples key of the per-step advantage ``[B, S-1]``, permuted with the steps
STEP_KEY = "otca_advantages"


class GrpoRuntime:
    """State of the layer inside one DanceGRPO process (one rank)."""

    #: rewards the upstream trainer computes itself, offered as ``upstream.<column>`` (empty: one reward)
    upstream_columns: tuple = ()
    #: whether ``--otca_sync_grads`` means anything for this target
    supports_sync_grads = False
    #: the hook-point spec (set by the runner); names the file in run-time invariant errors
    spec = None

    def __init__(self, config: OtcaConfig):
        self.config = config
        if config.otca_sync_grads and not self.supports_sync_grads:
            raise ValueError(f"--otca_sync_grads: {type(self).__name__} trains a model that upstream already "
                             f"synchronises (FSDP); the flag is for DanceGRPO's Wan2.1 trainer only")
        self.credit_config = config.credit_config()
        device = config.otca_reward_device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.objectives = Objectives(config.otca_rewards, config.otca_reward_ckpt, device=device,
                                     options=config.otca_reward_opt, upstream_columns=self.upstream_columns)
        weights = config.otca_objective_weights
        if weights is not None and len(weights) != len(self.objectives.names):
            raise ValueError(f"--otca_objective_weights: {len(weights)} weights for "
                             f"objectives {', '.join(self.objectives.names)}")
        self.log = RunLog(config.otca_log_dir)
        self.step = 0
        self.step_check = TrainedStepCheck()
        self.reset()

    def describe(self) -> str:
        kind = "observe (trains vanilla)" if self.config.otca_observe else f"mode {self.credit_config.mode}"
        sync = "; gradients averaged over ranks (--otca_sync_grads)" if self.config.otca_sync_grads else ""
        return f"{kind}; objectives {', '.join(self.objectives.names)}; log {self.log.path}{sync}"

    def reset(self) -> None:
        """Forget the previous training step (called before each one)."""
        self.record = None
        self.trained_steps = None

    # ---- the credit, once per training step, over the samples of all ranks
    def credit(self, rewards: torch.Tensor, all_latents: torch.Tensor, group_ids: torch.Tensor):
        """This rank's rows of every credit tensor and the run's summary.

        rewards ``[B, K]``, all_latents ``[B, S+1, ...]`` (TCD's progress is computed here, where the
        latents are: only ``[B, S]`` and ``[B, K]`` travel between ranks), group_ids ``[B]``.
        """
        batch = all_latents.shape[0]
        delta_s = step_progress(similarity_to_final(all_latents).double())
        result = credit_from_progress(gather_rows(rewards.to(all_latents.device)), gather_rows(delta_s),
                                      gather_rows(group_ids.to(all_latents.device)), self.credit_config)
        local = {name: local_rows(value, batch) for name, value in result.tensors().items()}
        return local, result.summary()

    def assign_per_step(self, samples: dict, all_latents: torch.Tensor, rewards: torch.Tensor,
                        upstream_advantages: torch.Tensor, args):
        """The credit of one DanceGRPO rollout (groups as ``group_ids`` lays them out): stores the
        ``[B, S-1]`` per-step advantage under ``STEP_KEY`` and returns what upstream keeps in
        ``samples["advantages"]`` (the combined ``[B]``; upstream's own in observe mode)."""
        batch = all_latents.shape[0]
        kept_steps = samples["log_probs"].shape[1]  # S-1: upstream drops the last step
        group_ids = self.group_ids(torch.arange(batch, device=all_latents.device), batch, args)
        local, summary = self.credit(rewards, all_latents, group_ids)
        if self.config.otca_observe:
            trained = upstream_advantages.reshape(batch, 1).expand(batch, kept_steps).clone()
            stored = upstream_advantages
        else:
            trained = local["advantages"][:, :kept_steps].to(upstream_advantages.dtype).contiguous()
            stored = local["combined"].to(upstream_advantages.dtype)
        samples[STEP_KEY] = trained
        self.record = self.credit_record(local, summary, group_ids, rewards, trained, upstream_advantages)
        return stored

    def credit_record(self, local: dict, summary: dict, group_ids, rewards, trained, upstream_advantages) -> dict:
        """The run-log fields every target writes about one step's credit."""
        return {
            "group_ids": group_ids, "rewards": rewards, "delta_s": local["delta_s"],
            "step_weights": local["step_weights"], "mixture": local["mixture"], "combined": local["combined"],
            "lambdas": local["lambdas"], "objective_advantages": local["objective_advantages"],
            "advantages": trained, "upstream_advantages": upstream_advantages, "summary": summary,
        }

    @staticmethod
    def group_ids(rows: torch.Tensor, per_rank: int, args) -> torch.Tensor:
        """DanceGRPO's layout: ``num_generations`` contiguous samples per prompt with ``--use_group``
        (groups never span ranks), else one group over the gathered batch (its global normalisation).

        rows ``[B]``: each sample's position in this rank's rollout of ``per_rank`` samples.
        """
        rank, _ = world()
        if getattr(args, "use_group", False):
            size = args.num_generations
            if per_rank % size:
                raise ValueError(f"--num_generations {size} does not divide the per-rank batch {per_rank}")
            return rows // size + rank * (per_rank // size)
        return torch.zeros_like(rows)

    # ---- hook: record_step_order (after upstream permutes each sample's steps)
    def record_order(self, samples: dict, perms: torch.Tensor, args) -> None:
        """perms[i][j] is the original step of column j; the first ``train_timesteps`` are trained."""
        train_timesteps = int(perms.shape[1] * args.timestep_fraction)
        self.trained_steps = perms[:, :train_timesteps]

    # ---- hooks: permute_advantages_with_steps, watch_trained_step (module level), read_step_advantage
    def permuted_keys(self, samples: dict, keys: list) -> list:
        """Upstream's permuted keys plus the per-step advantage and its steps' fingerprints."""
        return self.step_check.permuted_keys(samples, list(keys) + [STEP_KEY])

    def watch_trained_step(self, grpo_one_step):
        """Upstream's one-step function, watched so the first training step can check its columns."""
        self.step_check.spec = self.spec
        return self.step_check.watch(grpo_one_step)

    def step_advantage(self, sample: dict, column) -> torch.Tensor:
        """The advantage of the step trained in ``column`` (checked against it at the first step)."""
        return self.step_check.read(sample, column, STEP_KEY)

    # ---- hook: log_each_step (module level)
    def wrap_train_step(self, train_one_step):
        runtime = self

        def train_one_step_with_otca(*args, **kwargs):
            runtime.reset()
            result = train_one_step(*args, **kwargs)
            runtime.step_check.end_step()
            runtime.step += 1
            runtime.write_log(result)
            return result

        train_one_step_with_otca.__wrapped__ = train_one_step
        return train_one_step_with_otca

    def write_log(self, result) -> None:
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


def frames_to_tensor(video) -> torch.Tensor:
    """One decoded video as DanceGRPO's ``VideoProcessor.postprocess_video`` gives it (numpy
    ``[F, H, W, 3]`` in [0, 1], or a list of F PIL frames) -> float32 ``[F, 3, H, W]`` in [0, 1]."""
    if isinstance(video, (list, tuple)):
        import numpy as np

        video = np.stack([np.asarray(frame, dtype=np.float32) / 255.0 for frame in video])
    frames = torch.as_tensor(video).float()
    if frames.dim() != 4 or frames.shape[-1] != 3:
        raise ValueError(f"a decoded video must be [F, H, W, 3], got {tuple(frames.shape)}")
    return frames.permute(0, 3, 1, 2).clamp(0.0, 1.0).contiguous()
