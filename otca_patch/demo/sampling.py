"""DanceGRPO's FLUX sampler, written from its equations: a time-shifted sigma schedule and the SDE
step with noise level eta, whose Gaussian transition density gives the policy's log-probability.

Conventions (rectified flow): ``z_sigma = (1 - sigma) x + sigma noise``, the model predicts the
velocity ``v = noise - x``, so the predicted clean sample is ``x_hat = z - sigma v``. Sampling runs
sigma from 1 (noise) to 0 (image).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional

import torch


def time_shift(sigma: torch.Tensor, shift: float) -> torch.Tensor:
    """SD3's resolution shift ``shift * s / (1 + (shift - 1) * s)``: keeps 0 and 1 fixed and, for
    ``shift > 1``, spends more of the steps at high noise."""
    return shift * sigma / (1 + (shift - 1) * sigma)


def sigma_schedule(steps: int, shift: float) -> torch.Tensor:
    """``[steps + 1]`` float32 sigmas, ``linspace(1, 0)`` then shifted; ``sigmas[0] = 1``, ``sigmas[-1] = 0``."""
    return time_shift(torch.linspace(1.0, 0.0, steps + 1, dtype=torch.float64), shift).float()


@dataclass
class Transition:
    """One SDE step's Gaussian ``N(mean, std^2)`` for ``z_next`` and the predicted clean sample."""

    mean: torch.Tensor  # [B, ...]
    std: torch.Tensor  # [B] (one scalar per sample)
    clean: torch.Tensor  # [B, ...] x_hat = z - sigma v


def sde_transition(z: torch.Tensor, velocity: torch.Tensor, sigma: torch.Tensor, sigma_next: torch.Tensor,
                   eta: float) -> Transition:
    """The step ``z_sigma -> z_sigma_next`` of DanceGRPO's ``flux_step`` with the SDE correction.

    Euler mean ``z + (sigma_next - sigma) v``, plus the score term
    ``-eta^2 / 2 * score * (sigma_next - sigma)`` with ``score = -(z - (1 - sigma) x_hat) / sigma^2``
    (the score of ``z`` given ``x_hat``), and std ``eta * sqrt(sigma - sigma_next)``.

    Args: ``z``, ``velocity`` ``[B, ...]``; ``sigma``, ``sigma_next`` ``[B]`` (per sample, so one call
    can mix steps, as the shuffled update does); ``eta`` > 0 for a stochastic step.
    """
    shape = (-1,) + (1,) * (z.dim() - 1)
    s, s_next = sigma.to(z.dtype).view(shape), sigma_next.to(z.dtype).view(shape)
    d_sigma = s_next - s  # negative: sampling moves towards sigma = 0
    clean = z - s * velocity
    score = -(z - (1 - s) * clean) / (s * s)
    mean = z + d_sigma * velocity - 0.5 * eta * eta * score * d_sigma
    std = eta * (sigma - sigma_next).clamp(min=0).sqrt().to(z.dtype)
    return Transition(mean=mean, std=std, clean=clean)


def gaussian_log_prob(sample: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """Log density of ``sample`` under ``N(mean, std^2)`` per element, averaged over all but the batch
    dimension (DanceGRPO's convention: a mean, not a sum, so ratios stay near 1).

    ``[B, ...] x [B, ...] x [B] -> [B]``.
    """
    shape = (-1,) + (1,) * (sample.dim() - 1)
    var = (std * std).view(shape)
    elementwise = -((sample - mean) ** 2) / (2 * var) - torch.log(std).view(shape) - 0.5 * math.log(2 * math.pi)
    return elementwise.flatten(1).mean(dim=1)


@dataclass
class Rollout:
    """Sampled trajectories (in sampling order, ``latents[:, 0]`` the initial noise)."""

    latents: torch.Tensor  # [B, T+1, N, 4C]
    log_probs: torch.Tensor  # [B, T] log-probability of each transition under the sampling policy
    clean: torch.Tensor  # [B, T+1, N, 4C] predicted clean sample at each state (the last: the sample itself)
    sigmas: torch.Tensor  # [T+1]

    @property
    def final_clean(self) -> torch.Tensor:
        """``[B, N, 4C]``: the image the trainer scores, the last step's predicted clean sample (as
        DanceGRPO decodes ``pred_original`` of the last step, not the noisy ``z_T``)."""
        return self.clean[:, -2]


VelocityFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


@torch.no_grad()
def sample_trajectories(velocity_fn: VelocityFn, prompt_ids: torch.Tensor, noise: torch.Tensor,
                        sigmas: torch.Tensor, eta: float, generator: torch.Generator,
                        progress: Optional[Callable] = None) -> Rollout:
    """Roll out the SDE from ``noise [B, N, 4C]`` for every prompt ``[B, 3]`` (batched over samples).

    The step noise is drawn from ``generator``, so identical generators give identical noise to
    every credit mode.
    """
    n_steps = sigmas.shape[0] - 1
    batch = noise.shape[0]
    z = noise
    latents, log_probs, clean = [z], [], []
    steps = range(n_steps) if progress is None else progress(range(n_steps))
    for t in steps:
        sigma = sigmas[t].expand(batch)
        sigma_next = sigmas[t + 1].expand(batch)
        step = sde_transition(z, velocity_fn(z, sigma, prompt_ids), sigma, sigma_next, eta)
        eps = torch.randn(z.shape, generator=generator, dtype=z.dtype)
        z = step.mean + step.std.view(-1, 1, 1) * eps
        latents.append(z)
        log_probs.append(gaussian_log_prob(z, step.mean, step.std))
        clean.append(step.clean)
    clean.append(z)  # at sigma = 0 the state is its own clean sample
    return Rollout(latents=torch.stack(latents, 1), log_probs=torch.stack(log_probs, 1),
                   clean=torch.stack(clean, 1), sigmas=sigmas)
