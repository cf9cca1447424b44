"""The estimators ``otca`` and ``otca_<mode>``: VeRL-Omni's estimator interface in, the credit engine's
``[B, T]`` advantages out, with every call's inputs and credit in the run log."""
from __future__ import annotations

from typing import Optional

import torch

from ..credit import credit_from_progress
from ..credit import modes as credit_modes
from . import batch, binding, run_log, settings

PREFIX = "otca"


def estimator_names() -> dict:
    """name -> mode: ``otca`` (mode from ``algorithm.otca.mode``) and ``otca_<mode>`` for every other
    launchable mode; ours by their prefix, beside VeRL-Omni's ``flow_grpo`` and ``dance_grpo``."""
    names = {PREFIX: None}
    names.update({f"{PREFIX}_{mode}": mode for mode in credit_modes.names(launchable=True) if mode != PREFIX})
    return names


def repeated_over_steps(values: torch.Tensor, n_steps: int) -> torch.Tensor:
    """Each sample's row ``n_steps`` times: the engine's stds then follow VeRL-Omni's convention, a std
    over the ``[B, T]`` reward tensor (Bessel ``n*T - 1``; docs/credit.md, "Under VeRL-Omni")."""
    return values.repeat_interleave(n_steps, dim=0)


def credit(rewards: torch.Tensor, delta_s: torch.Tensor, groups: torch.Tensor, config):
    """The engine's credit for ``rewards [B, K]``, ``delta_s [B, T]``, ``groups [B]`` under VeRL-Omni's std
    convention: every sample entered T times, one copy of each read back. Returns the ``Credit`` of the
    copies and the ``[B, T]`` advantages."""
    n_steps = delta_s.shape[1]
    result = credit_from_progress(repeated_over_steps(rewards, n_steps), repeated_over_steps(delta_s, n_steps),
                                  repeated_over_steps(groups, n_steps), config)
    return result, result.advantages[::n_steps]


def make(name: str, mode: Optional[str]):
    """The estimator registered as ``name``: VeRL-Omni's ``compute_advantage`` calls it with
    ``sample_level_rewards [B, T]``, ``config`` (the ``algorithm`` node) and ``index`` (the uids)."""

    def estimate(sample_level_rewards: torch.Tensor, config=None, index=None, **others):
        if others:
            raise ValueError(f"{name}: compute_advantage passed {', '.join(sorted(others))}, which the plug-in was "
                             f"not verified with (only sample_level_rewards, config, index)")
        data = binding.current_batch(name)
        chosen = settings.from_algorithm(config, mode)
        n_steps = sample_level_rewards.shape[1]
        rewards = batch.rewards(data, chosen.objectives, sample_level_rewards[:, 0])
        groups = batch.group_ids(index)
        delta_s = batch.window_progress(data, n_steps)
        result, advantages = credit(rewards, delta_s, groups, chosen.credit)
        bound = chosen.adv_clip_max
        clipped = int((advantages.abs() > bound).sum())
        advantages = advantages.clamp(-bound, bound).to(device=sample_level_rewards.device,
                                                        dtype=sample_level_rewards.dtype)
        run_log.write(chosen, name, rewards, groups, delta_s, result, advantages, clipped)
        return advantages, advantages

    estimate.__name__ = estimate.__qualname__ = f"compute_{name}_advantage"
    estimate.__doc__ = f"OTCA credit ({mode or 'algorithm.otca.mode'}) as VeRL-Omni advantage estimator {name!r}."
    return estimate
