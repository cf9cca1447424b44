"""Evaluation on a fixed prompt set with fixed noise (identical for every variant and seed): each
objective's mean reward, the oracle (the clean renders of the same prompts), the fraction of the
base-to-oracle gap a run closed, and the run's drift from the base model.

- Gap closed, per objective: ``(run - base) / (oracle - base)``: 0 is the base model, 1 the clean
  renders (every objective's known optimum), negative is worse than the base.
- Drift: the mean over evaluation samples and sampling steps of the Gaussian KL between the policy's
  SDE transition and the base model's at the policy's own states,
  ``mean_elements (mu_policy - mu_base)^2 / (2 std_t^2)`` (both share ``std_t``). It measures how far
  a run moved, whatever direction: a run that closed less of the gap *and* moved less has not
  "balanced" the objectives, it has only trained less.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from .config import DemoConfig
from .data import clean_render, sample_prompts
from .model import TinyFlux, unpack
from .pixel_rewards import objective_rewards
from .sampling import sample_trajectories, sde_transition, sigma_schedule


@dataclass
class EvalSet:
    prompt_ids: torch.Tensor  # [E, 4]
    noise: torch.Tensor  # [E, N, 4C] initial noise
    seed: int  # seed of the SDE noise, reset at every evaluation


def make_eval_set(config: DemoConfig, token_shape: tuple[int, int]) -> EvalSet:
    generator = torch.Generator().manual_seed(config.eval_seed)
    prompts = sample_prompts(config.eval_prompts, generator).repeat_interleave(config.eval_samples_per_prompt, 0)
    noise = torch.randn((prompts.shape[0],) + tuple(token_shape), generator=generator)
    return EvalSet(prompt_ids=prompts, noise=noise, seed=config.eval_seed + 1)


#: evaluation prompts whose samples the report shows (``samples.png``)
SHOWN_PROMPTS = 4


def shown_set(eval_set: EvalSet, config: DemoConfig) -> EvalSet:
    """The first ``SHOWN_PROMPTS`` evaluation prompts, one sample each with its fixed noise: what the
    report shows of every run, before and after training (the same prompts and noise for all)."""
    rows = torch.arange(0, eval_set.prompt_ids.shape[0], config.eval_samples_per_prompt)[:SHOWN_PROMPTS]
    return EvalSet(prompt_ids=eval_set.prompt_ids[rows], noise=eval_set.noise[rows], seed=eval_set.seed)


@torch.no_grad()
def sample_images(model: TinyFlux, eval_set: EvalSet, config: DemoConfig) -> list:
    """The policy's images of ``eval_set`` (the training SDE, its fixed noise) as ``[E][H][W][3]``
    integers 0-255 (kept in JSON with a run's other outputs)."""
    generator = torch.Generator().manual_seed(eval_set.seed)
    sigmas = sigma_schedule(config.sampling_steps, config.shift)
    rollout = sample_trajectories(model, eval_set.prompt_ids, eval_set.noise, sigmas, config.eta, generator)
    images = unpack(rollout.final_clean, config.image_size)  # [E, 3, H, W] in [-1, 1]
    return ((images.clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8).permute(0, 2, 3, 1).tolist()


def oracle_rewards(eval_set: EvalSet, config: DemoConfig) -> torch.Tensor:
    """``[E, K]`` rewards of the clean renders of the evaluation prompts (1 by construction)."""
    return objective_rewards(clean_render(eval_set.prompt_ids, config.image_size), eval_set.prompt_ids, config.objectives)


@dataclass
class Evaluation:
    rewards: torch.Tensor  # [E, K]
    drift: Optional[float]  # None without a reference model
    timing: list  # [K][T] the map decided (docs/credit.md 9.1) on the evaluation rollout; None where undefined


@torch.no_grad()
def evaluate(model: TinyFlux, eval_set: EvalSet, config: DemoConfig,
             reference: Optional[TinyFlux] = None) -> Evaluation:
    """Rewards of the policy's images on the evaluation set (the training SDE, fixed noise), the drift
    from ``reference``, and the map of when each objective is decided (groups: the evaluation prompts)."""
    from otca_patch.credit.timing import decided_from_moments

    from .timing_probe import rollout_moments

    generator = torch.Generator().manual_seed(eval_set.seed)
    sigmas = sigma_schedule(config.sampling_steps, config.shift)
    rollout = sample_trajectories(model, eval_set.prompt_ids, eval_set.noise, sigmas, config.eta, generator)
    rewards = objective_rewards(unpack(rollout.final_clean, config.image_size), eval_set.prompt_ids, config.objectives)
    groups = torch.arange(rewards.shape[0]) // config.eval_samples_per_prompt
    moments = rollout_moments(rollout, eval_set.prompt_ids, groups, rewards, config.image_size, config.objectives)
    timing = [[None if v != v else v for v in row] for row in decided_from_moments(moments).tolist()]
    drift = None if reference is None else gaussian_drift(model, reference, rollout.latents, eval_set.prompt_ids,
                                                          sigmas, config.eta)
    return Evaluation(rewards, drift, timing)


def gaussian_drift(model: TinyFlux, reference: TinyFlux, latents: torch.Tensor, prompt_ids: torch.Tensor,
                   sigmas: torch.Tensor, eta: float) -> float:
    """Mean per-step, per-element KL of ``model``'s SDE transition to ``reference``'s at ``latents
    [E, T+1, N, 4C]`` (states 0..T-1); both transitions share the std ``eta sqrt(sigma_t - sigma_t+1)``."""
    kls = []
    for t in range(latents.shape[1] - 1):
        z = latents[:, t]
        sigma, sigma_next = sigmas[t].expand(z.shape[0]), sigmas[t + 1].expand(z.shape[0])
        own = sde_transition(z, model(z, sigma, prompt_ids), sigma, sigma_next, eta)
        base = sde_transition(z, reference(z, sigma, prompt_ids), sigma, sigma_next, eta)
        var = (own.std ** 2).view(-1, 1, 1)
        kls.append(((own.mean - base.mean) ** 2 / (2 * var)).flatten(1).mean(1))
    return float(torch.stack(kls, 1).mean())


def gap_closed(run: torch.Tensor, base: torch.Tensor, oracle: torch.Tensor) -> torch.Tensor:
    """``[..., K]`` mean rewards -> ``[..., K]`` fraction of the base-to-oracle gap closed."""
    return (run - base) / (oracle - base).clamp(min=1e-8)
