"""FlowGRPO ``scripts/train_sd3.py`` — the runtime behind ``patches/flowgrpo/train_sd3.toml``.

A map of the upstream file and of what each hook point does there. Everything happens in
``main(_)``, run as ``__main__`` through absl by every process ``accelerate launch`` starts:

setup  builds the ``Accelerator``, then ``set_seed(config.seed, device_specific=True)``.
    hook ``bind_objectives`` (just before the seed): the ``--otca_rewards`` names are matched to
    ``config.reward_fn``'s keys (upstream's rewards) or loaded as registry models on
    ``accelerator.device``; loading before upstream seeds keeps vanilla's random stream intact.
sampling  per batch: ``pipeline_with_logprob`` gives ``images [b, 3, H, W]``, ``latents`` (S+1
    states, noise first) and ``log_probs [b, S]``; ``multi_score`` is submitted to a thread pool.
    hook ``collect_images``: keep the batch's images and prompts (registry objectives only).
advantages  ``samples`` collates the batches (``latents`` / ``next_latents [B, S, ...]``, the
    ``rewards`` dictionary, ``prompt_ids``); ``avg`` is repeated to ``[B, T]`` (T =
    ``num_train_timesteps``), gathered, normalised per prompt (``PerPromptStatTracker`` over the
    decoded gathered prompts) or globally, and split back:
    ``advantages.reshape(num_processes, -1, T)[process_index]``.
    hook ``per_step_advantages`` (right after that split): rewards ``[B, K]`` from the dictionary
    (and the registry), TCD's ``delta_s [B, S]`` from this process's latents, and a prompt key
    ``[B]`` are gathered (nothing larger travels), the credit is computed over the gathered batch
    (the same on every process), and this process's rows (rank-major, as upstream splits) of its
    first T steps replace ``samples["advantages"]``.
filter  samples whose advantages are all zero are dropped (on the advantages above).
    hook ``record_kept_samples``: log the mask.
training  for each batch, ``j = 0 .. T-1`` in order, the PPO loss reads ``sample["advantages"][:, j]``
    (so step j trains with OTCA's advantage of step j; upstream's clamp and ratio clip apply).
    hook ``record_loss``: the epoch's mean loss for the log.
end of epoch  hook ``log_each_epoch`` (before ``epoch += 1``): one run-log line per epoch and process.
"""
from __future__ import annotations

import sys

import torch

from ..config import OtcaConfig
from ..credit import credit_from_progress, similarity_to_final, step_progress
from ..distributed import gather_rows, local_rows, world
from ..hooks.spec import TargetSpec
from ..runlog import RunLog
from .flowgrpo_groups import group_ids_from_keys, prompt_keys
from .flowgrpo_objectives import FlowObjectives


def install(config: OtcaConfig, spec: TargetSpec, namespace: dict) -> "FlowGrpoRuntime":
    """Called by the runner before the rewritten module executes."""
    return FlowGrpoRuntime(config)


def trajectory_progress(latents: torch.Tensor, next_latents: torch.Tensor) -> torch.Tensor:
    """TCD's ``delta_s [B, S]`` float64 from upstream's ``latents`` (state before each step) and
    ``next_latents`` (state after it); one sample at a time, so no batch-sized copy is made."""
    rows = [step_progress(similarity_to_final(torch.cat([latents[i:i + 1], next_latents[i:i + 1, -1:]], dim=1))
                          .double()) for i in range(latents.shape[0])]
    return torch.cat(rows, dim=0)


class FlowGrpoRuntime:
    """State of the layer inside one FlowGRPO process."""

    def __init__(self, config: OtcaConfig):
        self.config = config
        if config.otca_final_state != "latent":  # FlowGRPO's z_T is what it decodes and scores
            raise ValueError("--otca_final_state prediction: only for DanceGRPO's samplers (spec 1.7)")
        self.credit_config = config.credit_config()
        self.objectives = None  # bound inside main(), once upstream's config is parsed
        self.log = RunLog(config.otca_log_dir)
        self.step = 0
        self.reset()

    def describe(self) -> str:
        kind = "observe (trains vanilla)" if self.config.otca_observe else f"mode {self.credit_config.mode}"
        return f"{kind}; objectives {', '.join(self.config.otca_rewards)}; log {self.log.path}"

    def reset(self) -> None:
        self.images, self.prompts, self.losses = [], [], []
        self.record = None
        self.kept = None

    # ---- hook: bind_objectives (main, before set_seed)
    def bind(self, upstream_config, accelerator) -> None:
        device = self.config.otca_reward_device or accelerator.device
        self.objectives = FlowObjectives(self.config.otca_rewards, dict(upstream_config.reward_fn),
                                         self.config.otca_reward_ckpt, self.config.otca_reward_opt, device)
        weights = self.config.otca_objective_weights
        if weights is not None and len(weights) != len(self.objectives.names):
            raise ValueError(f"--otca_objective_weights: {len(weights)} weights for objectives "
                             f"{', '.join(self.objectives.names)}")

    # ---- hook: collect_images (main, sampling loop)
    def collect_batch(self, images: torch.Tensor, prompts) -> None:
        if self.objectives.needs_images:
            self.images.append(images.detach().float())
            self.prompts.extend(prompts)

    # ---- hook: per_step_advantages (main, after upstream splits its advantages back)
    def assign_advantages(self, samples: dict, upstream_config, tokenizer, num_train_timesteps: int):
        """The value upstream stores in ``samples["advantages"]``: this process's ``[B, T]`` rows."""
        upstream_advantages = samples["advantages"]
        batch, device = upstream_advantages.shape[0], upstream_advantages.device
        images = torch.cat(self.images) if self.images else None
        rewards = self.objectives.matrix(samples["rewards"], images, self.prompts).to(device)
        if upstream_config.per_prompt_stat_tracking:  # upstream's groups: the decoded prompt text
            keys = prompt_keys(tokenizer.batch_decode(samples["prompt_ids"], skip_special_tokens=True), device)
        else:  # upstream's global normalisation: one group over the gathered batch
            keys = torch.zeros(batch, dtype=torch.long, device=device)
        delta_s = trajectory_progress(samples["latents"], samples["next_latents"]).to(device)
        group_ids = group_ids_from_keys(gather_rows(keys))
        credit = credit_from_progress(gather_rows(rewards), gather_rows(delta_s), group_ids, self.credit_config)
        local = {name: local_rows(value, batch) for name, value in credit.tensors().items()}
        if self.config.otca_observe:
            trained = upstream_advantages
        else:
            trained = local["advantages"][:, :num_train_timesteps].to(device=device, dtype=upstream_advantages.dtype)
        self.record = {
            "group_ids": local_rows(group_ids, batch), "rewards": rewards, "delta_s": local["delta_s"],
            "step_weights": local["step_weights"], "mixture": local["mixture"], "combined": local["combined"],
            "lambdas": local["lambdas"], "objective_advantages": local["objective_advantages"],
            "advantages": trained, "upstream_advantages": upstream_advantages, "summary": credit.summary(),
            # every sample trains steps 0 .. T-1 in sampling order (DanceGRPO's logs name a random order)
            "trained_steps": torch.arange(num_train_timesteps).expand(batch, num_train_timesteps),
        }
        self.images, self.prompts = [], []
        return trained

    # ---- hook: record_kept_samples (main, after the zero-advantage filter)
    def record_kept(self, mask: torch.Tensor) -> None:
        self.kept = mask.detach().clone()

    # ---- hook: record_loss (main, training loop)
    def record_loss(self, loss: torch.Tensor) -> None:
        self.losses.append(loss.detach())

    # ---- hook: log_each_epoch (main, end of the epoch)
    def end_epoch(self, epoch: int, global_step: int) -> None:
        if self.record is None:
            print("otca-patch: warning: an epoch ended without computing advantages", file=sys.stderr)
            self.reset()
            return
        self.step += 1
        rank, size = world()
        loss = float(torch.stack(self.losses).float().mean()) if self.losses else None
        record = {
            "step": self.step, "epoch": epoch, "global_step": global_step, "rank": rank, "world_size": size,
            "mode": self.credit_config.mode, "observe": self.config.otca_observe,
            "config": self.credit_config.to_dict(), "objectives": list(self.objectives.names), **self.record,
            "kept": self.kept, "loss": loss,
        }
        self.log.write(record)
        self._to_wandb(rank, record["summary"], global_step)
        self.reset()

    def _to_wandb(self, rank: int, summary: dict, global_step: int) -> None:
        wandb = sys.modules.get("wandb")
        if rank != 0 or wandb is None or getattr(wandb, "run", None) is None:
            return
        scalars = {f"otca/{k}": v for k, v in summary.items() if isinstance(v, float)}
        scalars.update({f"otca/mixture_{name}": value for name, value in
                        zip(self.objectives.names, summary["mixture_mean_per_objective"])})
        wandb.log(scalars, step=global_step)
