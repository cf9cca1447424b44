"""DanceGRPO's real Stable Diffusion trainer (``main``: DDIM log-probs, accelerate) on the CPU,
rewritten by the layer (``pytest -m upstream``)."""
from pathlib import Path

import pytest
import torch

from otca_patch.smoke.dancegrpo_sd import PROMPTS

from .image_trainer_checks import ImageTrainerChecks

pytestmark = [pytest.mark.upstream, pytest.mark.xdist_group("dancegrpo-sd")]  # with its contract tests

#: the seed of upstream's DistributedSampler over ./assets/prompts.txt (train_grpo_sd.py)
SAMPLER_SEED = 123543


class TestStableDiffusion(ImageTrainerChecks):
    target = "dancegrpo-sd"
    upstream_file = "fastvideo/train_grpo_sd.py"
    sizes = ()  # the smoke's defaults: 4 DDIM steps, 3 kept columns, 2 trained, one optimizer step per epoch
    timestep_fraction = 0.75
    # one prompt x 4 images per epoch and rank, trained one image at a time with 4 accumulation steps:
    # upstream's per-call mean over one image divided by accelerate's 4 x 2 accumulation divisor
    ppo = {"gas": 4, "clip_range": 1e-4, "adv_clip_max": 5.0}
    probe = f"{Path(__file__).with_name('sd_probe.py')}:RolloutRecorder"
    mutation = ('samples["final_advantages"] = advantages', 'samples["final_advantages"] = advantages * 1')
    mutated_hook = ("per_step_advantages", "function main", "not found, expected exactly 1")
    # upstream trains under bf16 autocast (its launch config; the bf16 initial noise cannot even enter an
    # fp32 UNet): the 1e-6 rounding gap between upstream's float32 advantage (a group std of near-equal
    # rewards) and the engine's flips bf16 roundings in the backward pass, about 1e-4 of the gradient
    # norm. The second epoch samples with those slightly different weights: not comparable.
    grad_norm_rtol, grad_norm_steps = 1e-3, 1
    loss_rtol = 1e-5

    def rollout(self, run, rank=0, step=1):
        """The epoch's rewards (upstream's logged ``reward``, this rank's rows) and its DDIM trajectories."""
        terms = run.terms[rank]
        return {"rewards": terms["rollout_rewards"][step - 1], "latents": terms["rollout_latents"][step - 1]}

    def images(self, run, rank, step, batch):
        """The decoded ``[B, 3, H, W]`` the pipeline returned (upstream's JPEGs are resized and lossy)."""
        return run.terms[rank]["rollout_images"][step - 1]

    def prompts(self, rank, step, batch, world):
        """Upstream's DistributedSampler: a seeded permutation, every world-th prompt, one per epoch."""
        order = torch.randperm(len(PROMPTS), generator=torch.Generator().manual_seed(SAMPLER_SEED)).tolist()
        return [PROMPTS[order[rank::world][step - 1]]] * batch
