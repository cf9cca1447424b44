"""What FlowGRPO's trainers share (``scripts/train_*.py``, run by ``accelerate launch`` through absl):
objectives bound to upstream's ``config.reward_fn`` once its config is parsed, groups by prompt text
over all processes, TCD's progress from upstream's ``latents`` / ``next_latents`` layout, the ``[B, T]``
advantage of this process's rows, the trained-step check of the first epoch, and one run-log line
per epoch. The trainers that sample an SDE window build on it in ``flowgrpo_window``.
"""
from __future__ import annotations

import sys
import time

import torch

from . import rank_check
from ..credit import modes, similarity_to_final, step_progress
from .invariants import TrainedStepCheck
from ..objective_set import UpstreamRewards
from .base import Runtime
from .distributed import world
from .flowgrpo_groups import group_ids_from_keys, prompt_keys

#: upstream's key for the unweighted-by-steps [B] avg (upstream repeats "avg" itself to [B, T])
AVG_KEY = "ori_avg"


def upstream_rewards(reward_fn) -> UpstreamRewards:
    """``multi_score`` returns one entry per ``config.reward_fn`` key and ``avg``, their weighted sum:
    an objective named like a key (or ``upstream.<key>``) reads that entry; ``upstream`` (or ``avg``)
    is the weighted ``avg`` upstream trains on; any other name is a registry model."""
    return UpstreamRewards(columns=tuple(reward_fn), plain=AVG_KEY, aliases={"avg": AVG_KEY}, bare_keys=True)


def trajectory_progress(latents: torch.Tensor, next_latents: torch.Tensor) -> torch.Tensor:
    """TCD's ``delta_s [B, S]`` float64 from upstream's ``latents`` (state before each step) and
    ``next_latents`` (state after it); one sample at a time, so no batch-sized copy is made."""
    rows = [step_progress(similarity_to_final(torch.cat([latents[i:i + 1], next_latents[i:i + 1, -1:]], dim=1))
                          .double()) for i in range(latents.shape[0])]
    return torch.cat(rows, dim=0)


class FlowGrpoRuntime(Runtime):
    """State of the layer inside one FlowGRPO process."""

    upstream_rewards = upstream_rewards({})
    INTERNAL = Runtime.INTERNAL | {"trajectory", "labels"}

    def __init__(self, config, spec):
        super().__init__(config, spec)
        # upstream's compute_log_prob(transformer, pipeline, sample, j, ...) trains sample["latents"][:, j]
        self.step_check = TrainedStepCheck(parameters=("sample", "j"), reader="main",
                                           trained=lambda arguments: arguments["sample"]["latents"][:, arguments["j"]])

    def reset(self) -> None:
        super().reset()
        self.images, self.prompts, self.losses = [], [], []
        self.kept = None
        self.upstream_advantages = None
        self.epoch_started = None  # the epoch's first training rollout (evaluation before it is not timed)
        self.probe_armed, self.probe_calls = False, 0

    # ---- hooks: probe_sde_steps (module level), arm_probe and probe_decode (main, the sampling loop)
    def probe_sde_steps(self, pipeline_with_logprob) -> None:
        """Under ``--otca_objective_timing probe``: the SDE step the sampling pipeline calls (a global of
        its module) is wrapped to keep, while armed, each step's predicted clean sample ``x - sigma v``
        (flow matching: ``x_t = (1 - sigma) x_0 + sigma eps``, ``v = eps - x_0``); it calls upstream's
        step unchanged. Evaluation's sampling is never armed."""
        if not self.timing_probe.active:
            return
        scope = vars(sys.modules[pipeline_with_logprob.__module__])  # it is wrapped by torch.no_grad
        if not callable(scope.get("sde_step_with_logprob")):
            raise RuntimeError(f"objective-timing probe: {pipeline_with_logprob.__module__} has no sde_step_with_logprob "
                               "to keep each step's prediction from; the probe hook no longer matches this trainer")
        original, runtime = scope["sde_step_with_logprob"], self

        def sde_step_with_logprob(scheduler, model_output, timestep, sample, *args, **kwargs):
            if runtime.probe_armed:
                steps = [scheduler.index_for_timestep(t) for t in timestep]
                sigma = scheduler.sigmas[steps].to(sample.device, torch.float32)
                sigma = sigma.view(-1, *([1] * (sample.dim() - 1)))
                runtime.timing_probe.keep(sample.float() - sigma * model_output.float(), runtime.probe_calls)
                runtime.probe_calls += 1
            return original(scheduler, model_output, timestep, sample, *args, **kwargs)

        sde_step_with_logprob.__wrapped__ = original
        scope["sde_step_with_logprob"] = sde_step_with_logprob

    def arm_probe(self) -> None:
        """The next sampling call is a training rollout: its steps' predictions are kept on a probe epoch."""
        self.probe_armed, self.probe_calls = self.timing_probe.probing, 0
        if self.epoch_started is None:
            self.epoch_started = time.perf_counter()

    def score_step_predictions(self, decode, prompts, upstream_reward, autocast) -> None:
        """The sampling batch just rolled out: its kept step predictions are decoded by ``decode`` (the
        pipeline's own decoding of its final latents, under upstream's sampling ``autocast``) and
        scored with each objective; upstream's ``upstream_reward(images, rows)`` is its ``reward_fn``
        on them (a dictionary with ``avg``)."""
        self.probe_armed = False

        def decoded(latents):
            with autocast():
                return decode(latents)

        def scored(images, rows):
            rewards = dict(upstream_reward(torch.stack(list(images)), rows))
            rewards.setdefault(AVG_KEY, rewards.get("avg"))
            return rewards

        self.timing_probe.score(decoded, prompts, self.objectives, self.config.otca_video_frames, upstream=scored)

    def number_groups(self, labels: torch.Tensor) -> torch.Tensor:
        return group_ids_from_keys(labels)  # prompt keys -> 0, 1, ... in order of first appearance

    # ---- hook: bind_objectives (main, before set_seed)
    def bind(self, upstream_config, accelerator) -> None:
        """Objectives are upstream's ``reward_fn`` keys or registry models, loaded on the trainer's device
        before upstream seeds its random stream (vanilla's stream stays untouched)."""
        rank_check.ensure()  # accelerate built the group: every rank must run the layer before any rollout
        self.bind_objectives(upstream_rewards(dict(upstream_config.reward_fn)), accelerator.device)

    # ---- hook: collect_images (main, sampling loop)
    def collect_images(self, images: torch.Tensor, prompts) -> None:
        """One sampling batch: ``images [b, 3, H, W]`` (Wan: videos ``[b, F, 3, H, W]``) in [0, 1] and
        its prompts (registry objectives only; image models score ``--otca_video_frames`` of a video)."""
        self.keep_samples(images, prompts)
        if self.objectives.needs_images:
            self.images.extend(images.detach().float())
            self.prompts.extend(prompts)

    # ---- hook: per_step_advantages (main, after upstream splits its advantages back)
    def assign_advantages(self, samples: dict, upstream_config, tokenizer, num_train_timesteps: int):
        """The value upstream stores in ``samples["advantages"]``: this process's ``[B, T]`` rows, column
        ``j`` of a row the credit of the step ``trajectory`` says it trains."""
        upstream_advantages = self.upstream_advantages = samples["advantages"]  # a reference: [B, T]
        device = upstream_advantages.device
        delta_s, steps = self.trajectory(samples, num_train_timesteps)
        steps = steps.to(device)
        rewards = self.objective_matrix(samples["rewards"], self.images, device)
        # advantage_steps: the step of each logged advantage column (the run-log check reads them so)
        _, trained = self.assign_credit(rewards, delta_s.to(device), self.labels(samples, upstream_config, tokenizer),
                                        steps, upstream_advantages, upstream_advantages, trained_steps=steps,
                                        advantage_steps=steps)
        self.images, self.prompts = [], []
        self.step_check.store(samples)  # first epoch: each step's fingerprint, in the advantage's column order
        return trained

    @staticmethod
    def labels(samples: dict, upstream_config, tokenizer) -> torch.Tensor:
        """Each sample's group label ``[B]``: upstream's groups are the decoded prompt text; without
        ``per_prompt_stat_tracking`` (upstream's global normalisation) one group over the gathered batch."""
        device = samples["advantages"].device
        if upstream_config.per_prompt_stat_tracking:
            return prompt_keys(tokenizer.batch_decode(samples["prompt_ids"], skip_special_tokens=True), device)
        return torch.zeros(samples["advantages"].shape[0], dtype=torch.long, device=device)

    def trajectory(self, samples: dict, num_train_timesteps: int):
        """TCD's ``delta_s [B, S]`` and the step each trained column ``j`` is, ``[B, T]``. Here the
        samples hold every step (``latents`` / ``next_latents``) and column j trains step j."""
        delta_s = trajectory_progress(samples["latents"], samples["next_latents"])
        return delta_s, torch.arange(num_train_timesteps).expand(delta_s.shape[0], -1)

    # ---- hooks: watch_trained_step (module level), read_step_advantage (main, training loop)
    def watch_trained_step(self, compute_log_prob):
        """Upstream's one-step log-prob function, watched so the first epoch can check its columns."""
        self.step_check.spec = self.spec
        return self.step_check.watch(compute_log_prob)

    def step_advantage(self, sample: dict, column) -> torch.Tensor:
        """``sample["advantages"][:, column]``: checked, in the first epoch, against the step trained."""
        return self.step_check.read(sample, column, "advantages")

    # ---- hook: zero_advantage_filter (main, upstream's mask of the rows to train)
    def rows_to_train(self, mask: torch.Tensor) -> torch.Tensor:
        """Upstream's mask ``[B]`` (rows with a nonzero advantage, on the advantages trained), except
        in a mode that is vanilla's credit (``sum``), for A/B parity: there the rows vanilla keeps. Upstream's
        ``(r - mean) / (std + 1e-4)`` leaves ~1e-13 in a constant group (kept) where the layer
        computes exactly 0 (dropped), so the mask of upstream's own advantages decides. Where the mask
        keeps no row of this rank, its first row (see below)."""
        if self.observing:
            return mask
        if modes.get(self.credit_config.mode).vanilla and self.upstream_advantages is not None:
            return self.upstream_advantages.abs().sum(dim=1) != 0
        if mask.numel() and not bool(mask.any()):
            # Every row's credit is 0 here (MOCA zeroes a row whose objectives disagree, so with several
            # objectives this is far likelier than vanilla's all-constant groups). Upstream would keep no
            # row: its reshape of 0 rows raises on this rank and the other ranks wait in their next
            # collective. The first row trains at its zero advantage instead, as the rows upstream's own
            # rule adds to fill its batches do.
            mask = mask.clone()
            mask[0] = True
            print(f"otca-patch: rank {world()[0]}: every row's credit is 0 in training step {self.step + 1}; its "
                  f"first row trains at advantage 0 (upstream's filter would leave this rank no row to train)",
                  file=sys.stderr, flush=True)
        return mask

    # ---- hook: record_kept_samples (main, after the zero-advantage filter)
    def record_kept(self, mask: torch.Tensor) -> None:
        self.kept = mask.detach().clone()

    # ---- hook: record_loss (main, training loop)
    def record_loss(self, loss: torch.Tensor) -> None:
        self.losses.append(loss.detach())

    # ---- hook: log_each_epoch (main, end of the epoch)
    def end_epoch(self, epoch: int, global_step: int) -> None:
        """The epoch's record; on wandb it joins the row still open, upstream's last training log of
        the epoch (``wandb.log(info, step=global_step)`` before ``global_step += 1``): ``step=global_step``
        would be the next epoch's row, and the epoch's sampling row is already closed."""
        loss = float(torch.stack(self.losses).float().mean()) if self.losses else None
        timed = {"step_seconds": time.perf_counter() - self.epoch_started} \
            if self.timing_probe.active and self.epoch_started is not None else {}
        self.write_record(epoch=epoch, global_step=global_step, kept=self.kept, loss=loss, **timed)
        self.step_check.end_step()
        self.reset()


