"""Test-only recorder of what FlowGRPO's trainers sample (``--probe``): for each training rollout
(``pipeline_with_logprob``, Wan's ``wan_pipeline_with_logprob``, with a nonzero ``noise_level``; evaluation samples with 0) every state
the sampler passes through and each step's noise level, from ``sde_step_with_logprob``'s own
inputs and outputs (the whole trajectory, also where the trainer keeps only an SDE window, whose
steps are the ones with noise), and for each training reward call
(``multi_score``'s function with ``only_strict=True``) its images, prompts and returned rewards.
Nothing is read from the layer."""
import inspect

import torch


class RolloutRecorder:
    def __init__(self, module):
        self.trajectories, self.noise_levels, self.images, self.prompts, self.rewards = [], [], [], [], []
        recorder, states, noise_levels = self, [], []
        name = "pipeline_with_logprob" if hasattr(module, "pipeline_with_logprob") else "wan_pipeline_with_logprob"
        pipeline = getattr(module, name)
        globals_ = inspect.unwrap(pipeline).__globals__
        step = globals_["sde_step_with_logprob"]

        def recording_step(scheduler, model_output, timestep, sample, *args, **kwargs):
            out = step(scheduler, model_output, timestep, sample, *args, **kwargs)
            noise_levels.append(float(kwargs.get("noise_level", 0.7)))
            if not states:
                states.append(sample.detach().double().cpu())
            states.append(out[0].detach().double().cpu())
            return out

        def recording_pipeline(*args, **kwargs):
            states.clear()
            noise_levels.clear()
            result = pipeline(*args, **kwargs)
            if kwargs.get("noise_level", 0.7) != 0:
                recorder.trajectories.append(torch.stack(list(states), dim=1))
                recorder.noise_levels.append(torch.tensor(noise_levels))
            return result

        globals_["sde_step_with_logprob"] = recording_step
        setattr(module, name, recording_pipeline)
        rewards_module = module.flow_grpo.rewards
        multi_score = rewards_module.multi_score

        def recording_multi_score(*args, **kwargs):
            score = multi_score(*args, **kwargs)

            def recording_score(images, prompts, *args, **kwargs):
                scores, details = score(images, prompts, *args, **kwargs)
                if kwargs.get("only_strict", True):
                    recorder.images.append(torch.as_tensor(images).detach().float().cpu())
                    recorder.prompts.append(list(prompts))
                    recorder.rewards.append({k: torch.as_tensor(v).double() for k, v in scores.items()})
                return scores, details
            return recording_score

        rewards_module.multi_score = recording_multi_score

    def save(self, path):
        torch.save({"trajectories": self.trajectories, "noise_levels": self.noise_levels, "images": self.images, "prompts": self.prompts,
                    "rewards": self.rewards}, path)
