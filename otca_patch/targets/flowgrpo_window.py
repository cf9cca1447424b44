"""FlowGRPO's SDE-window trainers (``train_flux_fast.py``, ``train_qwenimage.py``, ...): the sampler
runs ODE steps outside a window of ``sde_window_size`` steps whose start it draws per call
(``random.randint`` in ``pipeline_with_logprob``), and the trainer keeps only the window's states
(``latents [b, W+1, ...]``), log-probs and timesteps; its loop trains columns ``0 .. W-1``.

TCD needs the whole trajectory, so the sampler is watched: during each ``pipeline_with_logprob``
call, the ``sde_step_with_logprob`` its module calls is wrapped to record each step's input and
output (every state, ODE and SDE steps alike; nothing upstream computes changes). When a sampling
batch is collected, the window is located in that trajectory, and it must be there exactly (the
states upstream keeps are the recorded ones), or the run stops with a ``PatchError``. The credit
is the engine's ``[B, S]`` over the whole trajectory; trained column ``j`` of a sample whose window
starts at ``s`` reads step ``s + j`` (as MixGRPO's sliding window).
"""
from __future__ import annotations

import functools
import inspect

import torch

from ..hooks.errors import PatchError
from .flowgrpo import FlowGrpoRuntime, trajectory_progress

#: the one-step function upstream's samplers call, by its name in their module
STEP_FUNCTION = "sde_step_with_logprob"


class WindowedFlowRuntime(FlowGrpoRuntime):
    """A FlowGRPO trainer that trains an SDE window of the trajectory."""

    INTERNAL = FlowGrpoRuntime.INTERNAL | {"window_error"}

    def reset(self) -> None:
        super().reset()
        self.sampled = None  # the last sampler call's states [b, S+1, ...]
        self.rollouts = []  # per sampling batch: (trajectory [b, S+1, ...], window start [b])

    def window_error(self, function: str, problem: str) -> PatchError:
        spec = self.spec
        return PatchError(file=getattr(spec, "file", "<upstream>"), function=function,
                          anchor="run-time invariant: the states the trainer keeps are a window of the sampled trajectory",
                          problem=problem, verified_commit=getattr(spec, "verified_commit", "unknown"),
                          hook="window_in_trajectory", spec=getattr(spec, "path", ""), kind="invariant")

    # ---- hook: watch_rollout (module level)
    def watch_rollout(self, pipeline):
        """Upstream's ``pipeline_with_logprob``, recording every state its steps pass through."""
        step_globals = inspect.unwrap(pipeline).__globals__
        if not callable(step_globals.get(STEP_FUNCTION)):
            raise self.window_error("pipeline_with_logprob", f"its module ({step_globals.get('__name__')}) has no "
                                    f"{STEP_FUNCTION} to watch: the whole trajectory cannot be recorded")

        @functools.wraps(pipeline)
        def watched(*args, **kwargs):
            step, states = step_globals[STEP_FUNCTION], []

            def recording(scheduler, model_output, timestep, sample, *rest, **options):
                out = step(scheduler, model_output, timestep, sample, *rest, **options)
                if not states:
                    states.append(sample.detach())
                states.append(out[0].detach())
                return out

            step_globals[STEP_FUNCTION] = recording
            try:
                result = pipeline(*args, **kwargs)
            finally:
                step_globals[STEP_FUNCTION] = step
            self.sampled = torch.stack(states, dim=1) if states else None
            return result

        return watched

    # ---- hook: collect_rollout (main, sampling loop)
    def collect_rollout(self, images, prompts, latents: torch.Tensor) -> None:
        """One sampling batch: its images and prompts (registry objectives), and the window
        ``latents [b, W+1, ...]`` the trainer keeps, located in the recorded trajectory."""
        self.collect_images(images, prompts)
        trajectory, self.sampled = self.sampled, None
        if trajectory is None or trajectory.shape[0] != latents.shape[0]:
            raise self.window_error("main", "no sampler trajectory was recorded for this sampling batch")
        width = latents.shape[1]
        starts = [s for s in range(trajectory.shape[1] - width + 1)
                  if torch.equal(trajectory[:, s:s + width].to(latents.dtype), latents)]
        if len(starts) != 1:
            raise self.window_error("main", f"the {width} states the trainer keeps match {len(starts)} windows of "
                                    f"the {trajectory.shape[1]} states the sampler passed through (expected 1)")
        start = torch.full((latents.shape[0],), starts[0], dtype=torch.long, device=latents.device)
        self.rollouts.append((trajectory, start))

    def trajectory(self, samples: dict, num_train_timesteps: int):
        """TCD's ``delta_s [B, S]`` over each sample's whole sampled trajectory, and the step each
        trained column is, ``[B, W]``: column ``j`` of a sample whose window starts at ``s`` is step ``s + j``.
        Takes the sampling batches collected since the last call."""
        rollouts, self.rollouts, batch = self.rollouts, [], samples["advantages"].shape[0]
        if sum(t.shape[0] for t, _ in rollouts) != batch:
            raise self.window_error("main", f"{len(rollouts)} sampling batches were collected, "
                                    f"not the {batch} samples being assigned")
        trajectories = torch.cat([t for t, _ in rollouts])
        starts = torch.cat([s for _, s in rollouts])
        steps = starts[:, None] + torch.arange(num_train_timesteps, device=starts.device)
        return trajectory_progress(trajectories[:, :-1], trajectories[:, 1:]), steps
