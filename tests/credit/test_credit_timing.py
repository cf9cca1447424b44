"""The map ``decided [K, T]`` (docs/credit.md 9.1-9.2) on constructed data whose answer is known in
closed form, its Fisher interval, and the shape of ``timing_weights``."""
from __future__ import annotations

import math

import pytest
import torch

from otca_patch.credit.timing import (decided, decided_by, decided_interval, decided_from_moments, timed_advantages,
                                      timing_moments, timing_weights)


def _orthonormal_within_groups(n_groups: int, size: int, count: int, seed: int) -> torch.Tensor:
    """``[n_groups * size, count]``: columns with zero mean inside every group, orthonormal over the
    whole batch (so their pooled within-group correlations are exactly 0, and each has unit norm)."""
    gen = torch.Generator().manual_seed(seed)
    raw = torch.randn(n_groups, size, count, generator=gen, dtype=torch.float64)
    raw = raw - raw.mean(1, keepdim=True)
    q, _ = torch.linalg.qr(raw.reshape(n_groups * size, count))  # columns stay group-centred
    return q


@pytest.mark.parametrize("theta", [0.0, 0.3, math.pi / 4, 1.2, math.pi / 2])
def test_rotated_score_is_decided_by_cos_squared_whatever_the_group_offsets(theta):
    """step = cos(theta) u + sin(theta) v + c_g, final = 2 u + d_g with u, v group-centred and
    orthonormal: the pooled within-group correlation is cos(theta), so decided = cos^2(theta);
    group offsets c_g, d_g and the scale of either score change nothing."""
    groups = torch.arange(20) // 5
    u, v = _orthonormal_within_groups(4, 5, 2, seed=1).unbind(1)
    offsets = torch.tensor([3.0, -1.0, 0.5, 7.0], dtype=torch.float64)[groups]
    step = math.cos(theta) * u + math.sin(theta) * v + offsets
    final = 2.0 * u - 4.0 * offsets
    value = decided(step.view(20, 1, 1), final.view(20, 1), groups)
    assert value.shape == (1, 1)
    assert float(value) == pytest.approx(math.cos(theta) ** 2, abs=1e-12)


def test_the_final_score_itself_is_fully_decided_and_group_level_variation_is_not():
    groups = torch.tensor([4, 4, 4, 9, 9, 9, 2, 2])  # arbitrary, unequal groups
    final = torch.tensor([[0.1], [0.5], [0.2], [0.9], [0.3], [0.4], [0.6], [0.0]], dtype=torch.float64)
    only_group_means = torch.tensor([1.0, 1.0, 1.0, 5.0, 5.0, 5.0, 2.0, 2.0], dtype=torch.float64)
    steps = torch.stack([only_group_means, final[:, 0], -3 * final[:, 0] + 1], dim=-1).unsqueeze(1)  # [B, 1, 3]
    value = decided(steps, final, groups)
    # constant within every group: no within-group information (0); the final itself, or any
    # affine function of it (sign dropped): 1
    assert value[0].tolist() == pytest.approx([0.0, 1.0, 1.0], abs=1e-12)


def test_objectives_are_independent_and_an_undecidable_one_is_nan():
    groups = torch.arange(8) // 4
    u, v = _orthonormal_within_groups(2, 4, 2, seed=2).unbind(1)
    final = torch.stack([u, torch.ones(8, dtype=torch.float64)], -1)  # objective 1: no within-group variation
    step = torch.stack([torch.stack([v, (u + v) / math.sqrt(2), u], -1), torch.stack([u, v, u], -1)], 1)  # [8, 2, 3]
    value = decided(step, final, groups)
    assert value[0].tolist() == pytest.approx([0.0, 0.5, 1.0], abs=1e-12)
    assert torch.isnan(value[1]).all()


def test_moments_pool_over_batches_as_one_batch_would():
    gen = torch.Generator().manual_seed(4)
    step, final = torch.randn(24, 2, 5, generator=gen), torch.randn(24, 2, generator=gen)
    groups = torch.arange(24) // 6
    whole = timing_moments(step, final, groups)
    parts = timing_moments(step[:12], final[:12], groups[:12]) + timing_moments(step[12:], final[12:], groups[12:])
    assert whole.dof == parts.dof == 20
    torch.testing.assert_close(decided_from_moments(parts), decided_from_moments(whole), atol=1e-12, rtol=0)


def test_a_map_that_dips_is_reported_as_measured_not_made_monotone():
    groups = torch.arange(10) // 5
    u, v = _orthonormal_within_groups(2, 5, 2, seed=5).unbind(1)
    step = torch.stack([u, v, 0.8 * u + 0.6 * v], -1).unsqueeze(1)
    value = decided(step, u.view(10, 1), groups)[0]
    assert value.tolist() == pytest.approx([1.0, 0.0, 0.64], abs=1e-12)


def test_fisher_interval_matches_its_formula_and_covers_the_truth():
    """One group of G = 8 at r = 0.5: [0, tanh(atanh(.5) + 1.96/sqrt(5))^2]; and by simulation the
    95% interval covers the true rho^2 of bivariate normal data in about 95% of batches."""
    groups = torch.zeros(8, dtype=torch.long)
    u, v = _orthonormal_within_groups(1, 8, 2, seed=6).unbind(1)
    step = 0.5 * u + math.sqrt(0.75) * v
    moments = timing_moments(step.view(8, 1, 1), u.view(8, 1), groups)
    low, high = decided_interval(moments)
    q = 1.959963984540054
    assert float(low) == 0.0
    assert float(high) == pytest.approx(math.tanh(math.atanh(0.5) + q / math.sqrt(5)) ** 2, abs=1e-9)

    gen, rho, covered, trials = torch.Generator().manual_seed(7), 0.6, 0, 400
    groups = torch.arange(32) // 8  # 4 groups of 8: dof 28
    for _ in range(trials):
        x, noise = torch.randn(32, generator=gen, dtype=torch.float64), torch.randn(32, generator=gen, dtype=torch.float64)
        y = rho * x + math.sqrt(1 - rho ** 2) * noise + torch.randn(4, generator=gen, dtype=torch.float64)[groups]
        lo, hi = decided_interval(timing_moments(x.view(32, 1, 1), y.view(32, 1), groups))
        covered += int(float(lo) <= rho ** 2 <= float(hi))
    assert 0.91 <= covered / trials <= 0.99  # binomial sd at 400 trials: 0.011


def test_decided_by_names_the_first_step_reaching_the_share():
    value = torch.tensor([[0.62, 0.7, 0.8, 0.9], [0.04, 0.2, 0.36, 1.0], [math.nan] * 4], dtype=torch.float64)
    assert decided_by(value, 0.8).tolist() == [3, 4, 0]
    assert decided_by(value, 0.5).tolist() == [1, 4, 0]


def test_timing_weights_have_mean_one_a_floor_and_follow_increments():
    value = torch.tensor([[0.2, 0.6, 0.6, 0.6], [0.5, 0.5, 0.5, 0.5], [0.0, 0.0, 0.0, 1.0], [math.nan] * 4],
                         dtype=torch.float64)
    weights = timing_weights(value, floor=0.5)
    torch.testing.assert_close(weights.mean(-1), torch.ones(4, dtype=torch.float64), atol=1e-12, rtol=0)
    assert float(weights.min()) >= 0.5 - 1e-12
    # objective 0: step 1's move fixes 0.4, step 4's 0.4 (what is left after the last prediction)
    assert weights[0].tolist() == pytest.approx([1.5, 0.5, 0.5, 1.5], abs=1e-4)
    # objective 2 jumps at step 4's prediction: step 3 made that state, step 4 changes nothing
    assert weights[2].tolist() == pytest.approx([0.5, 0.5, 2.5, 0.5], abs=1e-4)
    assert weights[3].tolist() == [1.0] * 4  # undefined: uniform
    assert torch.allclose(timing_weights(value, floor=1.0), torch.ones(4, 4, dtype=torch.float64), atol=1e-12)


def test_timed_advantages_are_computed_in_float64_from_float32_inputs():
    """``c @ W`` of float32 values whose float32 product would round: the result is float64 and
    matches the sum worked out exactly (every operand is a small dyadic number)."""
    contributions = torch.tensor([[1.0, 2.0 ** -30], [3.0, -1.0]], dtype=torch.float32)
    weights = torch.tensor([[1.0 + 2.0 ** -10, 0.5], [1.0, 1.5]], dtype=torch.float32)
    step_weights = torch.tensor([[1.0, 2.0], [0.5, 1.0]], dtype=torch.float32)
    got = timed_advantages(contributions, weights, step_weights)
    assert got.dtype == torch.float64
    expected = [[1.0 + 2.0 ** -10 + 2.0 ** -30, 2.0 * (0.5 + 1.5 * 2.0 ** -30)],
                [0.5 * (3.0 + 3.0 * 2.0 ** -10 - 1.0), 1.5 - 1.5]]
    torch.testing.assert_close(got, torch.tensor(expected, dtype=torch.float64), atol=1e-15, rtol=0)


@pytest.mark.parametrize("call, message", [
    (lambda: decided(torch.zeros(4, 2), torch.zeros(4, 2), torch.zeros(4, dtype=torch.long)), "step_scores: expected a float tensor with 3 dims"),
    (lambda: decided(torch.zeros(4, 2, 3), torch.zeros(4, 3), torch.zeros(4, dtype=torch.long)), "final_scores: expected shape [B, K] = [4, 2]"),
    (lambda: decided(torch.zeros(4, 2, 3), torch.zeros(4, 2), torch.zeros(3, dtype=torch.long)), "group_ids: expected [4] integer labels"),
    (lambda: decided_interval(timing_moments(torch.randn(4, 1, 2), torch.randn(4, 1), torch.tensor([0, 0, 1, 1]))), "dof: a Fisher interval needs"),
    (lambda: timed_advantages(torch.zeros(4, 2), torch.ones(3, 5), torch.ones(4, 5)), "objective_step_weights: expected a float tensor [2, ?], got torch.Size([3, 5])"),
    (lambda: timed_advantages(torch.zeros(4, 2), torch.ones(2, 5), torch.ones(4, 4)), "step_weights: expected a float tensor [4, 5]"),
    (lambda: timed_advantages(torch.zeros(4, 2, dtype=torch.long), torch.ones(2, 5), torch.ones(4, 5)), "contributions: expected a float tensor [?, ?]"),
])
def test_bad_inputs_are_named(call, message):
    with pytest.raises(ValueError) as info:
        call()
    assert message in str(info.value)
