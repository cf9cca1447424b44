"""Evaluation on a fixed prompt set with fixed noise (identical for every mode and seed), and the
balanced score that summarises K objectives in one number.

Balanced score: the mean over objectives of the z-score of the mean evaluation reward relative to
the base model, ``mean_k (mean_reward_k - base_mean_k) / base_std_k``, where ``base_mean_k`` and
``base_std_k`` are the mean and the across-sample std of objective k over the base model's
evaluation samples. The base model scores 0; +1 is "one base-model standard deviation better on
average over the objectives". Each objective counts equally whatever its units.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .config import DemoConfig
from .data import sample_prompts
from .model import TinyFlux, unpack
from .objectives import objective_rewards
from .sampling import sample_trajectories, sigma_schedule


@dataclass
class EvalSet:
    prompt_ids: torch.Tensor  # [E, 3]
    noise: torch.Tensor  # [E, N, 4C] initial noise
    seed: int  # seed of the SDE noise, reset at every evaluation


def make_eval_set(config: DemoConfig, token_shape: tuple[int, int]) -> EvalSet:
    generator = torch.Generator().manual_seed(config.eval_seed)
    prompts = sample_prompts(config.eval_prompts, generator).repeat_interleave(config.eval_samples_per_prompt, 0)
    noise = torch.randn((prompts.shape[0],) + tuple(token_shape), generator=generator)
    return EvalSet(prompt_ids=prompts, noise=noise, seed=config.eval_seed + 1)


def evaluate(model: TinyFlux, eval_set: EvalSet, config: DemoConfig) -> torch.Tensor:
    """Rewards ``[E, K]`` of the policy's images on the evaluation set (the training SDE, fixed noise)."""
    generator = torch.Generator().manual_seed(eval_set.seed)
    sigmas = sigma_schedule(config.sampling_steps, config.shift)
    rollout = sample_trajectories(model, eval_set.prompt_ids, eval_set.noise, sigmas, config.eta, generator)
    return objective_rewards(unpack(rollout.final_clean, config.image_size), eval_set.prompt_ids)


def balanced_score(mean_rewards: torch.Tensor, base_mean: torch.Tensor, base_std: torch.Tensor) -> torch.Tensor:
    """``[..., K]`` mean rewards -> ``[...]`` balanced score (see the module docstring)."""
    return ((mean_rewards - base_mean) / base_std.clamp(min=1e-8)).mean(dim=-1)


def steps_to_reach(iterations: list, scores: list, target: float):
    """The first evaluated iteration whose score is >= ``target``, or ``None`` if never reached."""
    for iteration, score in zip(iterations, scores):
        if score >= target:
            return iteration
    return None
