"""Test probe of the DanceGRPO smoke runs (``--probe tests/upstream/term_probe.py:TermRecorder``):
records what a test needs to rebuild every PPO loss term of upstream's first training step."""
from pathlib import Path

import torch


class TermRecorder:
    """Records each rollout's log-probs and each training call's new log-probs by wrapping the
    upstream module's functions, so a test can rebuild every loss term.

    log_prob_index: where ``all_log_probs [B, S]`` sits in ``sample_reference_model``'s result.
    """

    def __init__(self, module, log_prob_index: int):
        self.rollout_log_probs, self.new_log_probs, self.rollout_rewards = [], [], []
        self.sampled = []  # DanceGRPO's run_sample_step: (trajectory, last predicted clean sample) per chunk
        sample, grpo = module.sample_reference_model, module.grpo_one_step
        if hasattr(module, "run_sample_step"):
            sampler = module.run_sample_step

            def run_sample_step(*args, **kwargs):
                result = sampler(*args, **kwargs)  # z, predicted clean sample, all_latents, log-probs
                self.sampled.append((result[2].detach().clone(), result[1].detach().clone()))
                return result

            module.run_sample_step = run_sample_step

        def sample_reference_model(*args, **kwargs):
            result = sample(*args, **kwargs)
            self.rollout_log_probs.append(result[log_prob_index].detach().clone())
            if torch.is_tensor(result[0]):  # the image trainers' samplers return their rewards first (the video ones, videos)
                self.rollout_rewards.append(result[0].detach().clone())
            return result

        def grpo_one_step(*args, **kwargs):
            new = grpo(*args, **kwargs)
            self.new_log_probs.append(new.detach().clone())
            return new

        module.sample_reference_model, module.grpo_one_step = sample_reference_model, grpo_one_step

    def save(self, path: Path) -> None:
        torch.save({"rollout_log_probs": self.rollout_log_probs,
                    "new_log_probs": [t.reshape(-1) for t in self.new_log_probs], "rollout_rewards": self.rollout_rewards,
                    "trajectories": [t for t, _ in self.sampled], "predictions": [p for _, p in self.sampled]}, path)
