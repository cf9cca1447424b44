"""Test probe of the MixGRPO smoke runs (``--probe tests/upstream/mixgrpo_probe.py:MixRecorder``): the
DanceGRPO term recorder plus upstream's per-model rewards of each rollout (its ``rewards_dict``
values, or the summed reward under ``reward_aggr``), as the sampler returned them."""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from term_probe import TermRecorder  # noqa: E402


class MixRecorder(TermRecorder):
    def __init__(self, module, log_prob_index: int):
        super().__init__(module, log_prob_index)
        self.rollout_reward_dicts = []
        sample = module.sample_reference_model

        def sample_reference_model(*args, **kwargs):
            result = sample(*args, **kwargs)
            rewards = result[0]
            self.rollout_reward_dicts.append({k: v.detach().clone() for k, v in rewards.items()}
                                             if isinstance(rewards, dict) else {"": rewards.detach().clone()})
            return result

        module.sample_reference_model = sample_reference_model

    def save(self, path: Path) -> None:
        super().save(path)
        saved = torch.load(path, weights_only=True)
        saved["rollout_reward_dicts"] = self.rollout_reward_dicts
        torch.save(saved, path)
