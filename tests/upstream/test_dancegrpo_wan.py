"""DanceGRPO's real Wan2.1 ``train_one_step`` on the CPU (diffusers' own Wan classes, tiny configs),
rewritten by the layer (``pytest -m upstream``)."""
import json

import pytest
import torch

from otca_patch.credit import CreditConfig, credit_from_progress
from otca_patch.smoke.dancegrpo import trainer_named

from .conftest import (assert_flags_in_the_environment_reach_the_layer, assert_logged_credit,
                       assert_ranks_get_the_gathered_credit, assert_same_update, assert_tcd_reweights_vanilla,
                       float32_advantage_tolerance, run_smoke)

pytestmark = [pytest.mark.upstream, pytest.mark.xdist_group("dancegrpo-wan")]  # with its contract tests

WAN = ["--target", "dancegrpo-wan"]
STEPS = ["--steps", "2"]  # the shared runs name their target themselves
TRAINER = trainer_named("dancegrpo-wan")
ARGS = TRAINER.upstream_args(TRAINER.sizes())  # what train_one_step reads in every run here (no size flag is changed)


@pytest.fixture(scope="module")
def runs(target_runs):
    """The runs several tests compare, made once (shared with the contract suite)."""
    return target_runs("dancegrpo-wan")


def test_flags_in_the_environment_reach_the_layer(runs):
    assert_flags_in_the_environment_reach_the_layer(runs, runs("vanilla", *STEPS, "--record_terms"), *STEPS)


def test_observe_mode_scores_frames_with_several_objectives(runs):
    """Beyond the contract's observe mode: CLIP-T over a video's frames varies per video."""
    observed = runs("observe", *STEPS, "--otca_observe")
    for record in observed.log:
        rewards = torch.tensor(record["rewards"])
        assert rewards.shape == (4, 2) and rewards[:, 1].std() > 0


def test_sum_mode_over_upstreams_reward_equals_vanilla(runs):
    vanilla = runs("vanilla", *STEPS, "--record_terms")
    summed = runs("sum", *STEPS, "--record_terms", "--otca", "--otca_mode", "sum", "--otca_rewards", "upstream")
    record = summed.log[0]
    combined = torch.tensor(record["combined"], dtype=torch.float64)
    upstream_adv = torch.tensor(record["upstream_advantages"], dtype=torch.float64)
    assert_same_update(summed, vanilla, ARGS, torch.tensor(record["trained_steps"]), combined, upstream_adv,
                       float32_advantage_tolerance(record))


def test_otca_loss_is_vanilla_loss_reweighted_by_the_logged_step_weights(runs):
    tcd = runs("tcd", "--steps", "1", "--record_terms", "--otca", "--otca_mode", "tcd", "--otca_rewards", "upstream")
    weighted, vanilla_terms, weights = assert_tcd_reweights_vanilla(runs("vanilla", *STEPS, "--record_terms"), tcd, ARGS)
    assert torch.allclose(weighted, vanilla_terms * weights, rtol=1e-12)


def test_logged_advantages_equal_the_credit_engine_on_the_logged_inputs(runs):
    assert_logged_credit(runs("otca", *STEPS, "--otca"), ["upstream", "clip_t"])


def _weights(run):
    return [json.loads((run.out / f"weights_rank{rank}.json").read_text()) for rank in (0, 1)]


def test_two_ranks_drift_apart_as_upstream_and_stay_equal_with_sync_grads(dancegrpo, tmp_path):
    """DanceGRPO issue #110: without a DDP/FSDP wrapper each rank steps on its own gradient."""
    apart = run_smoke(dancegrpo, tmp_path / "apart", *WAN, "--steps", "1", "--otca_observe", nproc=2)
    synced = run_smoke(dancegrpo, tmp_path / "synced", *WAN, "--steps", "1", "--otca", "--otca_sync_grads", nproc=2)
    rank0, rank1 = _weights(apart)
    assert rank0 != rank1, "upstream's ranks were expected to diverge"
    rank0, rank1 = _weights(synced)
    assert rank0 == pytest.approx(rank1, rel=1e-9, abs=1e-9)
    assert_ranks_get_the_gathered_credit(synced)


def test_sync_grads_is_refused_where_upstream_already_synchronises(dancegrpo, tmp_path):
    run = run_smoke(dancegrpo, tmp_path / "flux", "--target", "dancegrpo-flux", "--steps", "1", "--otca",
                    "--otca_sync_grads", check=False)
    assert run.completed.returncode != 0 and "--otca_sync_grads" in run.completed.stderr
