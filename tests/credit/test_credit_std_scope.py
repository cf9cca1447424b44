"""``std_scope="batch"``: the group's mean over the whole batch's std (FlowGRPO's global_std option)."""
import numpy as np
import pytest
import torch

from otca_patch.config import parse_otca_args
from otca_patch.credit import CreditConfig, compute_credit


def _batch(seed=0, batch=12, objectives=2, steps=4):
    generator = torch.Generator().manual_seed(seed)
    rewards = torch.randn(batch, objectives, generator=generator, dtype=torch.float64)
    latents = torch.randn(batch, steps + 1, 6, generator=generator)
    group_ids = torch.tensor([3, 1, 3, 1, 7, 7, 3, 1, 7, 3, 1, 7])[:batch]
    return rewards, latents, group_ids


def test_batch_scope_divides_by_the_whole_batch_std():
    rewards, latents, group_ids = _batch()
    config = CreditConfig(mode="multi_grpo", std_scope="batch", std_correction=0, adv_eps=1e-4)
    credit = compute_credit(rewards, latents, group_ids, config)
    r = rewards.numpy()
    expected = np.empty_like(r)
    for label in np.unique(group_ids.numpy()):
        members = group_ids.numpy() == label
        expected[members] = (r[members] - r[members].mean(axis=0)) / (r.std(axis=0) + 1e-4)
    assert np.allclose(credit.objective_advantages.numpy(), expected, atol=1e-6)
    assert np.allclose(credit.combined.numpy(), expected.sum(axis=1), atol=1e-5)


def test_group_scope_is_the_default_and_differs():
    rewards, latents, group_ids = _batch(1)
    group = compute_credit(rewards, latents, group_ids, CreditConfig())
    assert CreditConfig().std_scope == "group"
    batch = compute_credit(rewards, latents, group_ids, CreditConfig(std_scope="batch"))
    assert not torch.allclose(group.objective_advantages, batch.objective_advantages)


def test_sum_mode_uses_the_scope_too():
    rewards, latents, group_ids = _batch(2)
    credit = compute_credit(rewards, latents, group_ids, CreditConfig(mode="sum", std_scope="batch"))
    total = rewards.sum(dim=1).numpy()
    expected = np.empty_like(total)
    for label in np.unique(group_ids.numpy()):
        members = group_ids.numpy() == label
        expected[members] = (total[members] - total[members].mean()) / (total.std(ddof=1) + 1e-8)
    assert np.allclose(credit.combined.numpy(), expected, atol=1e-5)


def test_unknown_scope_is_refused_and_the_flag_reaches_the_engine():
    with pytest.raises(ValueError, match="std_scope: must be one of group, batch"):
        CreditConfig(std_scope="prompt")
    config, _ = parse_otca_args(["--otca", "--otca_std_scope", "batch"])
    assert config.credit_config().std_scope == "batch"
