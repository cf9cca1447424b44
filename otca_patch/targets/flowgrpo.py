"""What FlowGRPO's trainers share (``scripts/train_*.py``, run by ``accelerate launch`` through absl):
objectives bound to upstream's ``config.reward_fn`` once its config is parsed, groups by prompt text
over all processes, TCD's progress from upstream's ``latents`` / ``next_latents`` layout, the ``[B, T]``
advantage of this process's rows, the trained-step check of the first epoch, and one run-log line
per epoch. ``WindowedFlowGrpoRuntime``: the trainers that sample an SDE window (``*_fast.py``,
Qwen-Image): TCD's progress over the whole recorded trajectory, each trained column read at its step.
"""
from __future__ import annotations

import torch

import functools
import inspect

from .. import rank_check
from ..credit import similarity_to_final, step_progress
from ..hooks.errors import PatchError
from ..invariants import TrainedStepCheck
from ..objective_set import UpstreamRewards
from .base import Runtime
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
    INTERNAL = Runtime.INTERNAL | {"trajectory"}

    def __init__(self, config):
        super().__init__(config)
        # upstream's compute_log_prob(transformer, pipeline, sample, j, ...) trains sample["latents"][:, j]
        self.step_check = TrainedStepCheck(parameters=("sample", "j"), reader="main",
                                           trained=lambda arguments: arguments["sample"]["latents"][:, arguments["j"]])

    def reset(self) -> None:
        super().reset()
        self.images, self.prompts, self.losses = [], [], []
        self.kept = None
        self.upstream_advantages = None

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
        """One sampling batch: ``images [b, 3, H, W]`` in [0, 1] and its prompts (registry objectives only)."""
        if self.objectives.needs_images:
            self.images.extend(images.detach().float())
            self.prompts.extend(prompts)

    # ---- hook: per_step_advantages (main, after upstream splits its advantages back)
    def assign_advantages(self, samples: dict, upstream_config, tokenizer, num_train_timesteps: int):
        """The value upstream stores in ``samples["advantages"]``: this process's ``[B, T]`` rows."""
        upstream_advantages = self.upstream_advantages = samples["advantages"]  # a reference: [B, T]
        batch, device = upstream_advantages.shape[0], upstream_advantages.device
        self.place_objectives(device)
        rewards = self.objectives.matrix(samples["rewards"], self.images or None, self.prompts).to(device)
        if upstream_config.per_prompt_stat_tracking:  # upstream's groups: the decoded prompt text
            labels = prompt_keys(tokenizer.batch_decode(samples["prompt_ids"], skip_special_tokens=True), device)
        else:  # upstream's global normalisation: one group over the gathered batch
            labels = torch.zeros(batch, dtype=torch.long, device=device)
        delta_s, trained_steps = self.trajectory(samples, num_train_timesteps)
        local, summary = self.credit(rewards, delta_s.to(device), labels)
        trained_steps = trained_steps.to(local["advantages"].device)
        trained = self.choose(local["advantages"].gather(1, trained_steps), upstream_advantages)
        # advantage_steps: the step of each logged advantage column (the run-log check reads them so)
        self.record = self.credit_record(local, summary, rewards, trained, upstream_advantages,
                                         trained_steps=trained_steps, advantage_steps=trained_steps)
        self.images, self.prompts = [], []
        self.step_check.store(samples)  # first epoch: each step's fingerprint, in the advantage's column order
        return trained

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
        in ``sum`` mode, vanilla's credit for A/B parity: there the rows vanilla keeps. Upstream's
        ``(r - mean) / (std + 1e-4)`` leaves ~1e-13 in a constant group (kept) where the layer
        computes exactly 0 (dropped), so the mask of upstream's own advantages decides."""
        if self.observing or self.credit_config.mode != "sum" or self.upstream_advantages is None:
            return mask
        return self.upstream_advantages.abs().sum(dim=1) != 0

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
        self.write_record(epoch=epoch, global_step=global_step, kept=self.kept, loss=loss)
        self.step_check.end_step()
        self.reset()



#: the module-level function upstream's windowed pipelines take every denoising step with (ODE
#: steps outside the window at noise level 0, SDE steps inside it)
STEP_FUNCTION = "sde_step_with_logprob"


class WindowedFlowGrpoRuntime(FlowGrpoRuntime):
    """The trainers that sample an SDE window (``sample.sde_window_size``): each sampling call
    returns only the window's latents, log-probs and timesteps, so the column ``j`` trained is the
    step ``window start + j`` of the trajectory. The layer records the whole trajectory while
    upstream samples (every step its pipeline takes), computes TCD's progress and the credit over
    all S steps, and stores each sample's advantage at the steps its columns train, as MixGRPO's
    sliding window is read."""

    INTERNAL = FlowGrpoRuntime.INTERNAL | {"window_start"}

    def reset(self) -> None:
        super().reset()
        self.windows = []  # per sampling batch: (delta_s [b, S] float64, window start)
        self.last_call = None  # (states [b, S+1, ...] as a list, timesteps [S]) of the latest sampling call

    def _invariant_error(self, problem: str) -> PatchError:
        spec = self.spec
        return PatchError(file=getattr(spec, "file", "<upstream>"), function="main",
                          anchor="run-time invariant: the trained window lies in the recorded trajectory",
                          problem=problem, verified_commit=getattr(spec, "verified_commit", "unknown"),
                          hook="record_trajectory", spec=getattr(spec, "path", ""), kind="invariant")

    # ---- hook: record_trajectory (module level, after upstream imports pipeline_with_logprob)
    def record_trajectory(self, pipeline_with_logprob):
        """Upstream's sampling function, watched: during each call its pipeline module's
        ``sde_step_with_logprob`` is seen at every step (its input latents, timestep and output:
        nothing it computes changes), so the whole trajectory is known, not only the window."""
        # the module of the function itself, under its decorators (``@torch.no_grad()``)
        namespace = getattr(inspect.unwrap(pipeline_with_logprob), "__globals__", {})
        if not callable(namespace.get(STEP_FUNCTION)):
            raise self._invariant_error(f"{getattr(pipeline_with_logprob, '__module__', '?')}.pipeline_with_logprob "
                                        f"takes no module-level {STEP_FUNCTION}: the layer cannot see its steps")
        runtime = self

        @functools.wraps(pipeline_with_logprob)
        def sampling_with_trajectory(*args, **kwargs):
            states, timesteps, step = [], [], namespace[STEP_FUNCTION]

            def recorded_step(scheduler, model_output, timestep, sample, *rest, **options):
                result = step(scheduler, model_output, timestep, sample, *rest, **options)
                if not states:
                    states.append(sample.detach())
                states.append(result[0].detach())
                timesteps.append(float(torch.as_tensor(timestep).flatten()[0]))
                return result

            namespace[STEP_FUNCTION] = recorded_step
            try:
                result = pipeline_with_logprob(*args, **kwargs)
            finally:
                namespace[STEP_FUNCTION] = step
            runtime.last_call = (states, timesteps)
            return result

        return sampling_with_trajectory

    # ---- hook: collect_window (main, sampling loop, after upstream submits the rewards)
    def collect_window(self, images: torch.Tensor, prompts, timesteps: torch.Tensor) -> None:
        """One sampling batch: its images and prompts (registry objectives), and the window's
        timesteps ``[b, W]`` upstream stored; the batch's whole trajectory is the call just recorded."""
        self.collect_images(images, prompts)
        if self.last_call is None:
            raise self._invariant_error("a sampling batch was stored without a recorded pipeline_with_logprob call")
        states, steps = self.last_call
        self.last_call = None
        trajectory = torch.stack(states, dim=1)  # [b, S+1, ...]
        delta_s = torch.cat([step_progress(similarity_to_final(trajectory[i:i + 1]).double())
                             for i in range(trajectory.shape[0])])
        self.windows.append((delta_s, self.window_start(timesteps, steps)))

    def window_start(self, timesteps: torch.Tensor, steps: list) -> int:
        """The trajectory step of the window's first column: where the window's timesteps ``[b, W]``
        (the same in every row) lie among the recorded steps' ``[S]``."""
        window = [float(t) for t in torch.as_tensor(timesteps)[0].flatten()]
        for start in range(len(steps) - len(window) + 1):
            if all(abs(a - b) <= 1e-6 * max(1.0, abs(b)) for a, b in zip(steps[start:], window)):
                return start
        raise self._invariant_error(f"the window's timesteps {window} are not consecutive steps of the trajectory "
                                    f"sampled ({steps})")

    def trajectory(self, samples: dict, num_train_timesteps: int):
        """``delta_s [B, S]`` over the recorded trajectories; column j of row i trains step
        ``start_i + j`` (each sampling batch has its own random window)."""
        if sum(d.shape[0] for d, _ in self.windows) != samples["latents"].shape[0]:
            raise self._invariant_error(f"{sum(d.shape[0] for d, _ in self.windows)} recorded trajectories for "
                                        f"{samples['latents'].shape[0]} samples")
        delta_s = torch.cat([d for d, _ in self.windows])
        starts = torch.cat([torch.full((d.shape[0],), start, dtype=torch.long) for d, start in self.windows])
        self.windows = []
        return delta_s, starts[:, None] + torch.arange(num_train_timesteps)
