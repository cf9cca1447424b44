"""Test probe of the DanceGRPO Stable Diffusion smoke run
(``--probe tests/upstream/sd_probe.py:RolloutRecorder``): what a test needs to rebuild every PPO loss
term and to recompute the credit's inputs (latents, rewards, images) independently of the layer."""
from pathlib import Path

import torch


class RolloutRecorder:
    """Test probe (not part of the layer): each rollout's latents, log-probs and images from
    ``pipeline_with_logprob``, each training call's new log-probs from ``ddim_step_with_logprob`` and
    the rewards upstream logs (``accelerator.log({"reward": ...})``, gathered over ranks)."""

    def __init__(self, module, calls_per_rollout: int):
        self.calls_per_rollout = calls_per_rollout
        self.calls, self.new_log_probs, self.rewards = [], [], []
        sample, ddim_step, accelerator_class = module.pipeline_with_logprob, module.ddim_step_with_logprob, module.Accelerator
        recorder = self

        def pipeline_with_logprob(*args, **kwargs):
            images, nsfw, latents, log_probs = sample(*args, **kwargs)
            recorder.calls.append((torch.stack(latents, 1).clone(), torch.stack(log_probs, 1).clone(),
                                   images.detach().float().clone()))
            return images, nsfw, latents, log_probs

        def ddim_step_with_logprob(*args, **kwargs):
            prev_sample, log_prob = ddim_step(*args, **kwargs)
            recorder.new_log_probs.append(log_prob.detach().clone())
            return prev_sample, log_prob

        class LoggingAccelerator(accelerator_class):
            def log(self, values, *args, **kwargs):
                if "reward" in values:
                    recorder.rewards.append(values["reward"].detach().clone())
                return super().log(values, *args, **kwargs)

        module.pipeline_with_logprob, module.ddim_step_with_logprob = pipeline_with_logprob, ddim_step_with_logprob
        module.Accelerator = LoggingAccelerator

    def save(self, path: Path) -> None:
        import torch.distributed as dist

        rank, calls_per_epoch = dist.get_rank(), self.calls_per_rollout
        epochs = [self.calls[i:i + calls_per_epoch] for i in range(0, len(self.calls), calls_per_epoch)]
        per_rank = sum(call[0].shape[0] for call in epochs[0]) if epochs else 0  # this rank's samples per epoch
        torch.save({"rollout_latents": [torch.cat([c[0] for c in e]) for e in epochs],
                    "rollout_log_probs": [torch.cat([c[1] for c in e]) for e in epochs],
                    "rollout_images": [torch.cat([c[2] for c in e]) for e in epochs],
                    "rollout_rewards": [r[rank * per_rank:(rank + 1) * per_rank] for r in self.rewards],
                    "new_log_probs": [t.reshape(-1) for t in self.new_log_probs]}, path)
