"""``CreditBatch``: one batch's credit input, checked once when built (shapes, finiteness, the timing
map's range), then read by the engine without any further check."""
import dataclasses
import math

import pytest
import torch

from otca_patch.credit import CreditBatch, CreditConfig, compute_credit, credit_for, credit_from_progress
from otca_patch.credit import batch as batch_module


def _inputs():
    generator = torch.Generator().manual_seed(11)
    return (torch.randn(6, 2, generator=generator), torch.randn(6, 5, 3, generator=generator),
            torch.tensor([4, 4, 4, 9, 9, 9]))


def test_built_from_latents_the_batch_holds_checked_float64_progress_and_the_similarity():
    rewards, latents, groups = _inputs()
    batch = CreditBatch(rewards.tolist(), groups.tolist(), latents=latents)
    assert batch.config == CreditConfig()
    assert batch.rewards.dtype == batch.delta_s.dtype == torch.float64
    assert batch.group_ids.tolist() == groups.tolist() and batch.similarity.shape == (6, 5)
    torch.testing.assert_close(batch.delta_s, (batch.similarity[:, 1:] - batch.similarity[:, :-1]).double(),
                               atol=1e-7, rtol=0)
    assert batch.inputs == {} and batch.reward_window is None and batch.timing_map is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        batch.rewards = rewards


def test_the_engine_checks_nothing_again(monkeypatch):
    """Every finiteness check runs while the batch is built; ``credit_for`` runs none, and gives what
    ``compute_credit`` gives for the same arguments."""
    rewards, latents, groups = _inputs()
    checked = []
    real = batch_module.check_finite
    monkeypatch.setattr(batch_module, "check_finite", lambda name, values: (checked.append(name), real(name, values)))
    batch = CreditBatch(rewards, groups, CreditConfig(mode="tcd"), delta_s=torch.rand(6, 4, dtype=torch.float64))
    assert checked == ["rewards", "delta_s"]
    credit = credit_for(batch)
    assert checked == ["rewards", "delta_s"]
    again = credit_from_progress(rewards, batch.delta_s, groups, CreditConfig(mode="tcd"))
    for name, tensor in credit.tensors().items():
        assert torch.equal(tensor, again.tensors()[name]), name


@pytest.mark.parametrize("arguments, message", [
    ({"delta_s": torch.rand(6, 4), "latents": torch.rand(6, 5, 3)}, "delta_s: give the latents or their progress"),
    ({"delta_s": torch.rand(6, 4), "final": torch.rand(6, 3)}, "final: replaces the latents' last state"),
    ({"delta_s": torch.rand(6, 4), "inputs": {"noise": torch.rand(4)}}, "noise: no credit mode takes this input"),
    ({"delta_s": torch.tensor([[0.1, math.inf, 0.0, 0.2]] * 6)}, "delta_s: non-finite value inf at index [0, 1]"),
    ({"delta_s": torch.rand(5, 4)}, "delta_s: shape (5, 4) does not fit rewards' B = 6"),
    ({"latents": torch.rand(6, 1, 3)}, "latents: need T+1 >= 2 states per trajectory"),
    ({"delta_s": torch.rand(6, 4), "config": CreditConfig(objective_timing="probe"),
      "timing_map": torch.tensor([[0.2] * 4, [0.3, 0.4, -math.inf, 1.0]])},
     "timing_map: every value must lie in [0, 1] (NaN: undefined); objective 1, step 3 holds -inf"),
])
def test_a_malformed_batch_is_refused_naming_the_argument(arguments, message):
    rewards, _, groups = _inputs()
    with pytest.raises(ValueError) as info:
        CreditBatch(rewards, groups, **arguments)
    assert str(info.value).startswith(message), str(info.value)


def test_compute_credit_is_the_credit_of_its_batch():
    rewards, latents, groups = _inputs()
    config = CreditConfig(mode="moca", fusion="group")
    direct = compute_credit(rewards, latents, groups, config, chunk_bytes=16)
    batch = credit_for(CreditBatch(rewards, groups, config, latents=latents, chunk_bytes=16))
    for name, tensor in direct.tensors().items():
        assert torch.equal(tensor, batch.tensors()[name]), name
