"""Test probe of the FlowGRPO smoke runs (``--probe tests/upstream/flowgrpo_trajectory_probe.py:TrajectoryRecorder``):
every step of every ``pipeline_with_logprob`` call, recorded by the test itself (not by the layer),
so a test can rebuild TCD's progress over the whole trajectory and find each call's window."""
import inspect

import torch


class TrajectoryRecorder:
    """Per call: the states ``[b, S+1, ...]`` (the first step's input, then each step's output),
    each step's timestep ``[S]`` and the timesteps the call returned (its window; ``None`` when the
    pipeline returns none)."""

    def __init__(self, module):
        self.calls = []
        sampler = module.pipeline_with_logprob
        namespace = inspect.unwrap(sampler).__globals__  # the pipeline module, under every wrapper
        step = namespace["sde_step_with_logprob"]
        current = {}

        def recording_step(scheduler, model_output, timestep, sample, *rest, **options):
            result = step(scheduler, model_output, timestep, sample, *rest, **options)
            if not current["states"]:
                current["states"].append(sample.detach().clone())
            current["states"].append(result[0].detach().clone())
            current["timesteps"].append(float(torch.as_tensor(timestep).flatten()[0]))
            return result

        def pipeline_with_logprob(*args, **kwargs):
            current.update(states=[], timesteps=[])
            result = sampler(*args, **kwargs)
            # the Fast pipelines return the window's timesteps last (one number per step); GRPO-Guard's
            # fourth value is each step's mean latents
            last = result[-1] if isinstance(result, tuple) else None
            window = last if isinstance(last, list) and last and torch.as_tensor(last[0]).numel() == 1 else None
            self.calls.append({"states": torch.stack(current["states"], dim=1),
                               "timesteps": torch.tensor(current["timesteps"]),
                               "window": None if window is None else torch.stack(list(window)).flatten().float()})
            return result

        namespace["sde_step_with_logprob"] = recording_step
        module.pipeline_with_logprob = pipeline_with_logprob

    def save(self, path):
        torch.save(self.calls, path)
