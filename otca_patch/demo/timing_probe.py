"""The demo's probe of when each objective is decided (docs/credit.md 9.1): every step's predicted
clean sample of a rollout, scored by each objective, pooled into the map's within-group moments."""
from __future__ import annotations

import torch

from otca_patch.credit.timing import TimingMoments, timing_moments

from .model import unpack
from .pixel_rewards import objective_rewards
from .sampling import Rollout


def step_scores(rollout: Rollout, prompt_ids: torch.Tensor, image_size: int, objectives) -> torch.Tensor:
    """``[B, K, T]``: objective k's score of step t's predicted clean sample (``rollout.clean[:, t]``, made
    from the state step t+1 starts from; the last one is the scored image)."""
    clean = rollout.clean[:, :-1]  # [B, T, N, C]
    batch, n_steps = clean.shape[:2]
    images = unpack(clean.reshape(batch * n_steps, *clean.shape[2:]), image_size)
    scores = objective_rewards(images, prompt_ids.repeat_interleave(n_steps, dim=0), objectives)
    return scores.view(batch, n_steps, -1).transpose(1, 2)


def rollout_moments(rollout: Rollout, prompt_ids: torch.Tensor, group_ids: torch.Tensor, final_scores: torch.Tensor,
                    image_size: int, objectives) -> TimingMoments:
    """The map's moments of one rollout: ``final_scores [B, K]`` are the scores the trainer used."""
    return timing_moments(step_scores(rollout, prompt_ids, image_size, objectives), final_scores, group_ids)
