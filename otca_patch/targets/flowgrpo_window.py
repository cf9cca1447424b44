"""FlowGRPO's SDE-window trainers (``train_sd3_fast.py``, ``train_flux_fast.py``, Qwen-Image): the
sampler runs ODE steps outside a window of ``sample.sde_window_size`` steps whose start it draws per
call (``random.randint`` in ``pipeline_with_logprob``), and the trainer keeps only the window's
states (``latents [b, W+1, ...]``), log-probs and timesteps; its loop trains columns ``0 .. W-1``.

TCD needs the whole trajectory, so the sampler is watched: during each ``pipeline_with_logprob``
call the ``sde_step_with_logprob`` of its module is wrapped to record each step's input and output
(every state, ODE and SDE steps alike; nothing upstream computes changes). When a sampling batch is
collected, the window is located in that trajectory, exactly (the states upstream keeps are the
recorded ones), or the run stops with a ``PatchError``. The credit is the engine's ``[B, S]`` over
the whole trajectory; trained column ``j`` of a sample whose window starts at ``s`` reads step
``s + j``, as MixGRPO's sliding window is read. (Hook names and signatures as on the
``flowgrpo-flux`` branch's module of the same name, so either serves every windowed spec.)
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
        self.last_trajectory = None  # the last sampler call's states [b, S+1, ...]
        self.rollouts = []  # per sampling batch: (delta_s [b, S] float64, window start)

    def window_error(self, function: str, problem: str) -> PatchError:
        spec = self.spec
        return PatchError(file=getattr(spec, "file", "<upstream>"), function=function,
                          anchor="run-time invariant: the states the trainer keeps are a window of the sampled trajectory",
                          problem=problem, verified_commit=getattr(spec, "verified_commit", "unknown"),
                          hook="window_in_trajectory", spec=getattr(spec, "path", ""), kind="invariant")

    # ---- hook: watch_rollout (module level, after upstream imports pipeline_with_logprob)
    def watch_rollout(self, pipeline):
        """Upstream's ``pipeline_with_logprob``, recording every state its steps pass through."""
        step_globals = inspect.unwrap(pipeline).__globals__  # its module, under @torch.no_grad()
        if not callable(step_globals.get(STEP_FUNCTION)):
            raise self.window_error("pipeline_with_logprob", f"its module ({step_globals.get('__name__')}) has no "
                                    f"{STEP_FUNCTION} to watch: the whole trajectory cannot be recorded")
        runtime = self

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
            runtime.last_trajectory = torch.stack(states, dim=1) if states else None
            return result

        return watched

    # ---- hook: collect_rollout (main, sampling loop, after upstream submits the rewards)
    def collect_rollout(self, images, prompts, latents: torch.Tensor) -> None:
        """One sampling batch: its images and prompts (registry objectives), and the window
        ``latents [b, W+1, ...]`` the trainer keeps, located in the recorded trajectory."""
        self.collect_images(images, prompts)
        trajectory, self.last_trajectory = self.last_trajectory, None
        if trajectory is None or trajectory.shape[0] != latents.shape[0]:
            raise self.window_error("main", "no sampler trajectory was recorded for this sampling batch")
        width = latents.shape[1]
        starts = [s for s in range(trajectory.shape[1] - width + 1)
                  if torch.equal(trajectory[:, s:s + width].to(latents.dtype), latents)]
        if len(starts) != 1:
            raise self.window_error("main", f"the {width} states the trainer keeps match {len(starts)} windows of "
                                    f"the {trajectory.shape[1]} states the sampler passed through (expected 1)")
        # TCD's progress now, one sample at a time: only [b, S] is kept until the advantages
        self.rollouts.append((trajectory_progress(trajectory[:, :-1], trajectory[:, 1:]), starts[0]))

    def trajectory(self, samples: dict, num_train_timesteps: int):
        """``delta_s [B, S]`` over the recorded trajectories; column j of row i trains step
        ``start_i + j`` (each sampling batch has its own window)."""
        batch = samples["advantages"].shape[0]
        if sum(d.shape[0] for d, _ in self.rollouts) != batch:
            raise self.window_error("main", f"{sum(d.shape[0] for d, _ in self.rollouts)} sampled rows were "
                                    f"collected, not the {batch} samples being assigned")
        delta_s = torch.cat([d for d, _ in self.rollouts])
        starts = torch.cat([torch.full((d.shape[0],), start, dtype=torch.long) for d, start in self.rollouts])
        self.rollouts = []
        return delta_s, starts[:, None] + torch.arange(num_train_timesteps)
