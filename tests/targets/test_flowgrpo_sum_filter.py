"""FlowGRPO's zero-advantage filter: in ``sum`` mode exactly the rows vanilla keeps. Upstream's advantages
come from its own ``PerPromptStatTracker`` (the pinned snapshot), and the mask from its own expression."""
import sys
from types import SimpleNamespace

import pytest
import torch

from otca_patch.config import OtcaConfig
from otca_patch.targets.registry import runtime_for
from upstream_snapshots import missing, unpack_snapshot

STEPS = 3
PROMPTS = ["a"] * 3 + ["b"] * 4 + ["c"] * 3  # a, c: constant rewards; b varies
REWARDS = [0.1] * 3 + [0.2, 0.5, 0.1, 0.9] + [0.3] * 3


@pytest.fixture(scope="module")
def stat_tracker():
    root = unpack_snapshot("flow_grpo-ac4c86e.tar.gz")
    if root is None:
        missing("the flow_grpo snapshot is not in shared/upstream")
    sys.path.insert(0, str(root))
    try:
        from flow_grpo.stat_tracking import PerPromptStatTracker
    finally:
        sys.path.remove(str(root))
    return PerPromptStatTracker


class Tokenizer:
    def __init__(self, prompts):
        self.prompts = prompts

    def batch_decode(self, ids, skip_special_tokens=True):
        return [self.prompts[int(i)] for i in ids[:, 0]]


def one_epoch(tmp_path, stat_tracker, mode, prompts=PROMPTS, rewards=REWARDS):
    """Upstream's advantages, the layer's hook, then upstream's mask expression on what is trained."""
    runtime = runtime_for("flowgrpo-sd3", OtcaConfig(otca=True, otca_mode=mode, otca_log_dir=str(tmp_path / mode),
                                    otca_std_correction=0, otca_adv_eps=1e-4))
    runtime.bind_objectives(None, "cpu")
    rewards = torch.tensor(rewards, dtype=torch.float64)
    upstream = torch.as_tensor(stat_tracker().update(prompts, rewards.numpy()))
    upstream = upstream[:, None].repeat(1, STEPS).float()  # upstream repeats avg over the T steps
    generator = torch.Generator().manual_seed(0)
    latents = torch.randn(len(prompts), STEPS, 4, 8, 8, generator=generator)
    samples = {"advantages": upstream, "rewards": {"ori_avg": rewards.float(), "avg": upstream},
               "prompt_ids": torch.arange(len(prompts))[:, None], "latents": latents,
               "next_latents": torch.randn(len(prompts), STEPS, 4, 8, 8, generator=generator)}
    config = SimpleNamespace(per_prompt_stat_tracking=True)
    samples["advantages"] = runtime.assign_advantages(samples, config, Tokenizer(prompts), STEPS)
    mask = runtime.rows_to_train(samples["advantages"].abs().sum(dim=1) != 0)  # hook zero_advantage_filter
    return mask, upstream, samples["advantages"]


def test_sum_mode_keeps_exactly_the_rows_vanilla_keeps(tmp_path, stat_tracker):
    mask, upstream, trained = one_epoch(tmp_path, stat_tracker, "sum")
    vanilla = upstream.abs().sum(dim=1) != 0
    assert vanilla[:3].all() and not vanilla[7:].any()  # 0.1 x 3 leaves ~1e-13; 0.3 x 3 is exactly 0
    assert (upstream[:3].abs() < 1e-9).all()
    assert not trained[:3].any()  # the layer's sum is exactly 0 in a constant group
    assert mask.tolist() == vanilla.tolist()
    assert torch.allclose(trained, upstream, atol=1e-5)


def test_otca_mode_trains_the_rows_with_a_nonzero_credit(tmp_path, stat_tracker):
    mask, _, trained = one_epoch(tmp_path, stat_tracker, "otca")
    assert mask.tolist() == [False] * 3 + [True] * 4 + [False] * 3
    assert mask.tolist() == (trained.abs().sum(dim=1) != 0).tolist()


def test_a_rank_whose_every_credit_is_zero_trains_its_first_row_at_zero_instead_of_none(tmp_path, stat_tracker,
                                                                                          capsys):
    """Constant groups only: every row's credit is 0. Upstream's filter, then its own batching statements
    (train_sd3.py: the divisibility rule and the reshape into num_batches_per_epoch batches), would
    reshape 0 rows and raise; the layer keeps the first row, at advantage 0."""
    mask, _, trained = one_epoch(tmp_path, stat_tracker, "otca", ["a"] * 5 + ["c"] * 5, [0.1] * 5 + [0.3] * 5)
    assert not trained.any()
    assert mask.tolist() == [True] + [False] * 9
    assert "every row's credit is 0 in training step 1; its first row trains at advantage 0" in capsys.readouterr().err
    num_batches = 1
    kept = trained[mask]
    assert kept.reshape(-1, kept.shape[0] // num_batches, *kept.shape[1:]).shape == (1, 1, STEPS)
    with pytest.raises(RuntimeError, match="cannot reshape tensor of 0 elements"):
        empty = trained[trained.abs().sum(dim=1) != 0]  # upstream's own mask
        empty.reshape(-1, empty.shape[0] // num_batches, *empty.shape[1:])
