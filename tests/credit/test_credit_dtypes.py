"""Latent dtypes: bfloat16 (what FLUX / HunyuanVideo trainers keep), float16, float32, float64.

Two different comparisons, with different tolerances:

* bf16 latents vs **the same values upcast exactly** to float32 (``x_bf16.float()``): the engine
  promises float32 (or wider) compute, so the result must agree to float32 rounding (1e-6). An
  engine that reduced in bfloat16 would miss this by ~1e-2.
* bf16 latents vs **the float32 trajectory they were rounded from**: the honest question a user
  asks ("does storing latents in bf16 change my credit?"). Round-to-nearest bfloat16 keeps 8
  significant bits, so each element moves by at most u = 2^-8 relative and a whole state ``a`` by
  ``||e|| <= u ||a||``; the angle between ``a`` and ``a + e`` is then at most ``arcsin(u)`` and the
  cosine, 1-Lipschitz in the angle, moves by at most ``2 arcsin(u) ~= 7.8e-3`` for *any* input.
  Hence the hard bound 1e-2 on similarity. On realistic trajectories (D in the thousands) the
  rounding errors are independent and average out (~ u / sqrt(D) ~ 1e-4 at D = 4096), so there
  the test also demands 2e-3 on similarity and 1e-2 of max |advantage| on the advantages (the step
  weights amplify similarity changes by at most ~ (1 - w_min) * T / sum_t max(0, dS_t) ~ 5).
"""
from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from otca_patch.credit import CreditConfig, compute_credit, group_ids_from_size, similarity_to_final

BF16_UNIT_ROUNDOFF = 2.0 ** -8
HARD_SIMILARITY_BOUND = 1e-2  # >= 2 * arcsin(2^-8) + float32 compute error, see module docstring


def trajectory(seed: int, batch=8, n_steps=10, shape=(4, 32, 32), scale=1.0) -> torch.Tensor:
    """A flow-matching-like float32 trajectory ``[B, T+1, *shape]`` from noise to a sample."""
    gen = torch.Generator().manual_seed(seed)
    sample = torch.randn(batch, 1, *shape, generator=gen)
    noise = torch.randn(batch, n_steps + 1, *shape, generator=gen)
    sigma = torch.linspace(1, 0, n_steps + 1).view(1, -1, *([1] * len(shape)))
    jitter = torch.randn(batch, n_steps + 1, *shape, generator=gen)
    return ((1 - sigma) * sample + sigma * noise + 0.3 * sigma * (1 - sigma) * jitter) * scale


def rewards_for(batch: int, seed: int, k: int = 3) -> torch.Tensor:
    return torch.randn(batch, k, generator=torch.Generator().manual_seed(seed + 10_000), dtype=torch.float64)


def reference_similarity(latents: torch.Tensor) -> torch.Tensor:
    flat = latents.double().reshape(latents.shape[0], latents.shape[1], -1)
    final = flat[:, -1:]
    return (flat * final).sum(-1) / (flat.norm(dim=-1) * final.norm(dim=-1)).clamp(min=1e-12)


@pytest.mark.parametrize("low", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("mode", ["otca", "tcd"])
def test_low_precision_latents_compute_like_their_exact_float32_upcast(low, mode):
    latents = trajectory(0).to(low)
    group_ids = group_ids_from_size(8, 4)
    config = CreditConfig(mode=mode)
    rewards = rewards_for(8, 0)
    from_low = compute_credit(rewards, latents, group_ids, config)
    from_upcast = compute_credit(rewards, latents.float(), group_ids, config)
    for name, tensor in from_low.tensors().items():
        assert tensor.dtype == torch.float32, name
        torch.testing.assert_close(tensor, getattr(from_upcast, name), atol=1e-6, rtol=0, msg=name)
    # And float32 compute means the float64 cosine of the very same values, to float32 rounding.
    torch.testing.assert_close(from_low.similarity.double(), reference_similarity(latents), atol=1e-5, rtol=0)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_bf16_latents_agree_with_the_float32_trajectory_they_were_rounded_from(seed):
    latents = trajectory(seed)  # D = 4096 per state
    bf16 = latents.to(torch.bfloat16)
    group_ids = group_ids_from_size(8, 4)
    rewards = rewards_for(8, seed)
    exact = compute_credit(rewards, latents, group_ids)
    rounded = compute_credit(rewards, bf16, group_ids)

    sim_error = (rounded.similarity - exact.similarity).abs().max()
    assert sim_error <= 2e-3, f"similarity moved by {sim_error:.3g}"
    adv_error = (rounded.advantages - exact.advantages).abs().max()
    assert adv_error <= 1e-2 * exact.advantages.abs().max(), f"advantages moved by {adv_error:.3g}"
    # The reward side does not see the latents at all; lambda only through the saturating tanh.
    torch.testing.assert_close(rounded.objective_advantages, exact.objective_advantages, atol=0, rtol=0)
    torch.testing.assert_close(rounded.combined, exact.combined, atol=1e-3, rtol=0)
    torch.testing.assert_close(rounded.step_weights.mean(-1), torch.ones(8), atol=1e-5, rtol=0)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1), n_steps=st.integers(1, 6), dim=st.integers(1, 40),
       log_scale=st.floats(-3, 3))
def test_bf16_similarity_within_the_worst_case_rounding_bound(seed, n_steps, dim, log_scale):
    latents = trajectory(seed, batch=3, n_steps=n_steps, shape=(dim,), scale=10.0 ** log_scale)
    bf16 = latents.to(torch.bfloat16)
    # Premise of the bound: every element moved by at most u relative (round to nearest).
    assert bool(((bf16.float() - latents).abs() <= BF16_UNIT_ROUNDOFF * latents.abs()).all())
    error = (similarity_to_final(bf16) - reference_similarity(latents)).abs().max()
    assert error <= HARD_SIMILARITY_BOUND


@pytest.mark.parametrize("latent_dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64])
@pytest.mark.parametrize("rewards_kind", ["float32", "float64", "int64", "int32", "list"])
def test_every_float_dtype_is_accepted_and_outputs_are_float32(latent_dtype, rewards_kind):
    latents = trajectory(5, batch=4, n_steps=4, shape=(2, 3, 5)).to(latent_dtype)
    raw = [[1, 0], [3, 2], [2, 2], [0, 5]]
    rewards = raw if rewards_kind == "list" else torch.tensor(raw, dtype=getattr(torch, rewards_kind))
    credit = compute_credit(rewards, latents, [7, 7, 9, 9])
    shapes = {"similarity": (4, 5), "delta_s": (4, 4), "step_share": (4, 4), "step_weights": (4, 4),
              "objective_advantages": (4, 2), "trajectory_score": (4,), "lambdas": (4,), "mixture": (4, 2),
              "combined": (4,), "advantages": (4, 4)}
    tensors = credit.tensors()
    assert set(tensors) == set(shapes)
    for name, tensor in tensors.items():
        assert tensor.dtype == torch.float32, name
        assert tuple(tensor.shape) == shapes[name], name
        assert bool(torch.isfinite(tensor).all()), name
    torch.testing.assert_close(credit.similarity.double(), reference_similarity(latents), atol=1e-5, rtol=0)
    # Group (7): rewards [1, 3] and [0, 2] -> A = -/+ 1/sqrt(2) for both objectives.
    half = 2 ** -0.5
    torch.testing.assert_close(credit.objective_advantages[:2].double(),
                               torch.tensor([[-half, -half], [half, half]], dtype=torch.float64), atol=1e-6, rtol=0)


def test_float64_latents_keep_float32_accuracy_over_magnitudes():
    """Cosine is scale-free while the norm product stays above the spec's floor of 1e-12."""
    latents = trajectory(7, batch=2, n_steps=5, shape=(64,)).double()
    for scale in (1e-5, 1.0, 1e15):
        torch.testing.assert_close(similarity_to_final(latents * scale).double(), reference_similarity(latents),
                                   atol=1e-5, rtol=0, msg=f"scale {scale}")


def test_tiny_latents_follow_the_spec_norm_product_floor():
    """Spec 1.1 [choice]: the norm product is clamped below at 1e-12, so a trajectory whose norms
    multiply to less than that gets a proportionally shrunk similarity (not the scale-free cosine)."""
    latents = trajectory(8, batch=2, n_steps=5, shape=(64,)).double() * 1e-8  # norm product ~ 6e-15
    flat = latents.reshape(2, 6, -1)
    product = flat.norm(dim=-1) * flat[:, -1:].norm(dim=-1)
    assert bool((product < 1e-12).all())
    expected = (flat * flat[:, -1:]).sum(-1) / 1e-12
    got = similarity_to_final(latents).double()
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-3)
    assert float(got[:, -1].max()) < 0.1  # far from the unclamped S[:, T] = 1
