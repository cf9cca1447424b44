"""The demo's GRPO mathematics on hand-computable cases: sigma schedule, SDE step, Gaussian
log-probability, PPO-clipped loss, step order, data and objectives."""
import math

import pytest
import torch

from otca_patch.demo.config import DemoConfig, tiny_config
from otca_patch.demo.data import (
    COLOUR_NAMES, SHAPES, box_blur, clean_render, colour_table, corrupted_render, sample_prompts, template_mask,
)
from otca_patch.demo.grpo import ppo_clipped_loss, trained_step_order
from otca_patch.demo.model import pack, unpack
from otca_patch.demo.pixel_rewards import OBJECTIVES, objective_rewards
from otca_patch.demo.sampling import gaussian_log_prob, sde_transition, sigma_schedule, time_shift


def test_sigma_schedule_without_shift_is_linspace():
    assert torch.allclose(sigma_schedule(4, 1.0), torch.tensor([1.0, 0.75, 0.5, 0.25, 0.0]))


def test_sigma_schedule_shift_matches_the_formula_and_keeps_the_ends():
    sigmas = sigma_schedule(4, 3.0)
    expected = [3 * s / (1 + 2 * s) for s in (1.0, 0.75, 0.5, 0.25, 0.0)]
    assert sigmas.tolist() == pytest.approx(expected, abs=1e-7)
    assert sigmas[0] == 1 and sigmas[-1] == 0
    assert (sigmas[1:] < sigmas[:-1]).all()
    assert time_shift(torch.tensor(0.5), 3.0).item() == pytest.approx(0.75)


def test_sde_transition_matches_hand_computation():
    z, v = torch.tensor([[0.4]]), torch.tensor([[1.0]])
    sigma, sigma_next, eta = torch.tensor([0.5]), torch.tensor([0.25]), 0.3
    step = sde_transition(z, v, sigma, sigma_next, eta)
    clean = 0.4 - 0.5 * 1.0  # x_hat = z - sigma v = -0.1
    score = -(0.4 - 0.5 * clean) / 0.25  # -(z - (1 - sigma) x_hat) / sigma^2 = -1.8
    mean = 0.4 + (-0.25) * 1.0 - 0.5 * 0.09 * score * (-0.25)
    assert step.clean.item() == pytest.approx(clean)
    assert step.mean.item() == pytest.approx(mean)
    assert step.std.item() == pytest.approx(0.3 * math.sqrt(0.25))


def test_gaussian_log_prob_is_the_mean_of_elementwise_normal_densities():
    generator = torch.Generator().manual_seed(0)
    sample, mean = torch.randn(3, 4, 5, generator=generator), torch.randn(3, 4, 5, generator=generator)
    std = torch.tensor([0.1, 0.5, 2.0])
    expected = torch.distributions.Normal(mean, std.view(-1, 1, 1)).log_prob(sample).flatten(1).mean(1)
    assert torch.allclose(gaussian_log_prob(sample, mean, std), expected, atol=1e-5)
    at_mean = gaussian_log_prob(mean, mean, std)
    assert torch.allclose(at_mean, -torch.log(std) - 0.5 * math.log(2 * math.pi))


def test_ppo_loss_with_ratio_one_is_minus_the_clipped_advantage():
    advantages = torch.tensor([2.0, -1.0, 7.0, -9.0])
    logp = torch.tensor([0.3, -1.2, 0.0, 4.0])
    loss = ppo_clipped_loss(logp, logp, advantages, clip_range=1e-4, adv_clip_max=5.0)
    assert loss.tolist() == pytest.approx([-2.0, 1.0, -5.0, 5.0])
    assert loss.mean().item() == pytest.approx(-advantages.clamp(-5, 5).mean().item())


def test_ppo_loss_takes_the_pessimistic_side_of_the_clip():
    old = torch.zeros(4)
    new = torch.log(torch.tensor([1.5, 1.5, 0.5, 0.5]))
    adv = torch.tensor([1.0, -1.0, 1.0, -1.0])
    loss = ppo_clipped_loss(new, old, adv, clip_range=0.2, adv_clip_max=5.0)
    # A>0, r=1.5: clipped -1.2; A<0, r=1.5: unclipped 1.5; A>0, r=0.5: unclipped -0.5; A<0, r=0.5: clipped 0.8
    assert loss.tolist() == pytest.approx([-1.2, 1.5, -0.5, 0.8])
    new = new.clone().requires_grad_(True)
    ppo_clipped_loss(new, old, adv, 0.2, 5.0).sum().backward()
    assert new.grad[0] == 0 and new.grad[3] == 0  # clipped entries carry no gradient
    assert new.grad[1] != 0 and new.grad[2] != 0


def test_trained_step_order_is_a_random_subset_per_sample():
    order = trained_step_order(5, 9, 5, torch.Generator().manual_seed(1))
    assert order.shape == (5, 5)
    for row in order.tolist():
        assert len(set(row)) == 5 and all(0 <= s < 9 for s in row)
    assert len({tuple(r) for r in order.tolist()}) > 1  # each sample its own order


def test_pack_and_unpack_are_inverse():
    images = torch.randn(2, 3, 8, 8)
    tokens = pack(images)
    assert tokens.shape == (2, 16, 12)
    assert torch.equal(unpack(tokens, 8), images)
    assert torch.equal(unpack(torch.stack([tokens, tokens], 1), 8)[:, 1], images)


def test_the_clean_render_is_the_joint_optimum_of_every_objective():
    generator = torch.Generator().manual_seed(0)
    prompts = sample_prompts(64, generator)
    assert (prompts[:, 0] != prompts[:, 2]).all()
    images = clean_render(prompts, 12)
    assert images.shape == (64, 3, 12, 12) and images.min() >= -1 and images.max() <= 1
    rewards = objective_rewards(images, prompts)
    assert rewards.shape == (64, len(OBJECTIVES))
    assert torch.allclose(rewards, torch.ones_like(rewards), atol=1e-5)
    noisy = images + 0.3 * torch.randn(images.shape, generator=generator)
    assert (objective_rewards(noisy, prompts) < 1 - 1e-3).all()  # every objective is hurt by noise
    assert (objective_rewards(noisy, prompts) >= 0).all()


def test_each_corruption_lowers_the_objective_it_targets():
    generator = torch.Generator().manual_seed(1)
    prompts = sample_prompts(256, generator)
    clean = objective_rewards(clean_render(prompts, 12), prompts)
    corrupted = objective_rewards(corrupted_render(prompts, 12, 1.0, generator), prompts)
    assert (corrupted.mean(0) < clean.mean(0) - 0.02).all()
    untouched = objective_rewards(corrupted_render(prompts, 12, 0.0, generator), prompts)
    assert torch.allclose(untouched, clean)
    blurred = objective_rewards(box_blur(clean_render(prompts, 12)), prompts)
    palette, shape, edges = (OBJECTIVES.index(k) for k in ("palette", "shape", "edges"))
    assert blurred[:, edges].mean() < 0.8 and blurred[:, shape].mean() > blurred[:, edges].mean()


def test_objectives_conflict_on_some_samples():
    """A blurred correct shape beats an over-large sharp one on shape-agreement... no: on edges it loses,
    and the sharp wrong-size one loses on shape: opposite orders on two objectives."""
    small = torch.tensor([[0, len(COLOUR_NAMES), 2, len(COLOUR_NAMES) + len(SHAPES)]])  # a small red circle on blue
    large = small.clone()
    large[0, 3] += 1
    blurred_right = box_blur(clean_render(small, 12))
    sharp_wrong = clean_render(large, 12)
    a, b = objective_rewards(blurred_right, small)[0], objective_rewards(sharp_wrong, small)[0]
    shape, edges = OBJECTIVES.index("shape"), OBJECTIVES.index("edges")
    assert a[shape] > b[shape] and a[edges] < b[edges]
    assert colour_table().shape == (len(COLOUR_NAMES), 3)
    assert template_mask(large, 12).sum() > template_mask(small, 12).sum()


@pytest.mark.parametrize("overrides, flag", [
    ({"modes": "sum,bogus"}, "--modes"),
    ({"grpo_steps": -1}, "--grpo_steps"),
    ({"sampling_steps": 1}, "--sampling_steps"),
    ({"eta": 0.0}, "--eta"),
    ({"group_size": 1}, "--group_size"),
    ({"micro_batch": 3}, "--micro_batch"),
    ({"timestep_fraction": 1.5}, "--timestep_fraction"),
    ({"image_size": 7}, "--image_size"),
    ({"corrupt_prob": 1.5}, "--corrupt_prob"),
    ({"seeds": "1,x"}, "--seeds"),
    ({"seeds": "2,2"}, "--seeds"),
])
def test_bad_config_names_the_flag(overrides, flag):
    with pytest.raises(ValueError, match=flag):
        tiny_config(**overrides)


def test_base_model_key_depends_on_base_fields_only():
    assert DemoConfig().base_model_key() == DemoConfig(seeds="7", grpo_steps=3).base_model_key()
    assert DemoConfig().base_model_key() != DemoConfig(base_seed=1).base_model_key()
