"""``Credit.summary()`` against batches small enough to work out by hand.

Hand derivation for ``constructed()`` (groups {0, 1} and {2, 3}, K = 3, T = 2, D = 2):

* A group of two rewards ``[a, b]``, ``a != b``, has unbiased std ``|a - b| / sqrt(2)``, so its
  advantages are ``+-c`` with ``c = (1/2) / (1/sqrt(2) + 1e-8) ~= 0.70710677``.
  objective 0: rewards [1, 0 | 1, 0] -> A = [+c, -c, +c, -c]
  objective 1: rewards [0, 1 | 1, 0] -> A = [-c, +c, +c, -c]
  objective 2: rewards [0, 0 | 2, 1] -> A = [ 0,  0, +c, -c]   (group {0, 1} constant -> 0)
  Samples 0 and 1 mix signs (conflict), samples 2 and 3 agree: conflict_share = 2 / 4.
* Trajectory "A" (samples 0, 1): z = (0,1), (1,1), (1,0): S = [0, 1/sqrt2, 1], dS = [0.7071, 0.2929],
  w = 0.5 + p = [1.2071, 0.7929]. Trajectory "B" (samples 2, 3): z = (0,1), (0,1), (1,0): S = [0, 0, 1],
  dS = [0, 1], w = [0.5, 1.5] (up to eps = 1e-6). Per-step batch mean: [0.85355, 1.14645]; max 1.5.
* Both members of each group have the same q, so std_g(q) = 0 and tanh(|q| / 1e-6) = 1: lambda = 1
  where mean_k A > 0 (sample 2 only; samples 0, 1 have mean exactly 0): explored_share = 0.25,
  lambda_mean = 0.25.
* z = clip(lambda / 2, min A, max A): samples 0, 1 -> 0 (alpha = 1/2 between their +c and -c
  objectives: mixture [1/2, 1/2, 0]); sample 2 -> c, sample 3 -> -c (tied: uniform 1/3 each).
  mixture mean per objective = [5/12, 5/12, 1/6]; combined mean 0, |combined| mean c / 2.
* advantages: only samples 2, 3 are non-zero, |c * w| summing to 2 c (0.5 + 1.5) = 4 c over 8 entries.
* objective_advantage_std (population over the batch): [c, c, c / sqrt(2)].
"""
from __future__ import annotations

import json
import math

import pytest
import torch

from otca_patch.credit import CreditConfig, compute_credit, credit_from_progress

C = 0.5 / (math.sqrt(0.5) + 1e-8)
ROOT_HALF = math.sqrt(0.5)


def constructed():
    rewards = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [1.0, 1.0, 2.0], [0.0, 0.0, 1.0]])
    trajectory_a = [[0.0, 1.0], [1.0, 1.0], [1.0, 0.0]]
    trajectory_b = [[0.0, 1.0], [0.0, 1.0], [1.0, 0.0]]
    latents = torch.tensor([trajectory_a, trajectory_a, trajectory_b, trajectory_b])
    return rewards, latents, torch.tensor([0, 0, 1, 1])


@pytest.fixture
def summary():
    return compute_credit(*constructed()).summary()


def test_conflict_share_counts_samples_whose_objectives_disagree_in_sign(summary):
    assert summary["conflict_share"] == pytest.approx(0.5, abs=1e-9)


def test_mixture_mean_per_objective(summary):
    assert summary["mixture_mean_per_objective"] == pytest.approx([5 / 12, 5 / 12, 1 / 6], abs=1e-6)


def test_step_weight_statistics(summary):
    means = summary["step_weight_mean_per_step"]
    assert len(means) == 2  # T
    w_a = [0.5 + ROOT_HALF, 1.5 - ROOT_HALF]
    assert means == pytest.approx([(w_a[0] + 0.5) / 2, (w_a[1] + 1.5) / 2], abs=1e-5)
    assert summary["step_weight_max"] == pytest.approx(1.5, abs=1e-5)


def test_exploration_statistics(summary):
    assert summary["explored_share"] == pytest.approx(0.25, abs=1e-9)
    assert summary["lambda_mean"] == pytest.approx(0.25, abs=1e-6)


def test_combined_and_advantage_statistics(summary):
    assert summary["combined_mean"] == pytest.approx(0.0, abs=1e-6)
    assert summary["combined_abs_mean"] == pytest.approx(C / 2, abs=1e-6)
    assert summary["advantage_abs_mean"] == pytest.approx(C / 2, abs=1e-5)
    assert summary["objective_advantage_std"] == pytest.approx([C, C, C * ROOT_HALF], abs=1e-6)


def test_summary_is_plain_json(summary):
    decoded = json.loads(json.dumps(summary))
    assert decoded == summary
    for key, value in summary.items():
        assert isinstance(value, (float, list)), key
        if isinstance(value, list):
            assert all(isinstance(v, float) for v in value), key


def test_a_zero_objective_is_no_conflict_and_takes_the_mass_under_pure_min_norm():
    """Objective 1 is constant (A = 0): [+c, 0] and [-c, 0] do not disagree in sign. With
    explore = 0, z = clip(0, min, max) = 0, realised entirely by the zero objective."""
    rewards = torch.tensor([[1.0, 5.0], [0.0, 5.0]])
    latents = torch.tensor([[[0.0, 1.0], [1.0, 1.0], [1.0, 0.0]]] * 2)
    summary = compute_credit(rewards, latents, [3, 3], CreditConfig(explore=0.0)).summary()
    assert summary["conflict_share"] == 0.0
    assert summary["mixture_mean_per_objective"] == pytest.approx([0.0, 1.0], abs=1e-6)
    assert summary["combined_abs_mean"] == pytest.approx(0.0, abs=1e-9)
    assert summary["explored_share"] == 0.0


def test_all_samples_in_conflict():
    rewards = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    latents = torch.tensor([[[0.0, 1.0], [1.0, 1.0], [1.0, 0.0]]] * 2)
    summary = compute_credit(rewards, latents, [0, 0]).summary()
    assert summary["conflict_share"] == 1.0
    assert summary["mixture_mean_per_objective"] == pytest.approx([0.5, 0.5], abs=1e-6)


def test_summary_of_a_credit_built_from_progress():
    rewards, latents, group_ids = constructed()
    full = compute_credit(rewards, latents, group_ids)
    from_progress = credit_from_progress(rewards, full.delta_s, group_ids)
    assert from_progress.similarity is None
    got, expected = from_progress.summary(), full.summary()
    assert set(got) == set(expected)
    for key in expected:
        assert got[key] == pytest.approx(expected[key], abs=1e-6), key
