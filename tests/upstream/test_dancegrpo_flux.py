"""DanceGRPO's real FLUX ``train_one_step`` on the CPU, rewritten by the layer (``pytest -m upstream``)."""
import socket

import pytest
import torch

from otca_patch.credit import CreditConfig, credit_from_progress
from otca_patch.smoke.dancegrpo import trainer_named

from .conftest import (assert_flags_in_the_environment_reach_the_layer, assert_logged_credit,
                       assert_ranks_get_the_gathered_credit, assert_same_update, assert_tcd_reweights_vanilla,
                       float32_advantage_tolerance, run_smoke)

pytestmark = [pytest.mark.upstream, pytest.mark.xdist_group("dancegrpo-flux")]  # with its contract tests

STEPS = ["--steps", "2"]
TRAINER = trainer_named("dancegrpo-flux")
ARGS = TRAINER.upstream_args(TRAINER.sizes())  # what train_one_step reads in every run here (no size flag is changed)


@pytest.fixture(scope="module")
def runs(target_runs):
    """The runs several tests compare, made once (shared with the contract suite)."""
    return target_runs("dancegrpo-flux")


def test_flags_in_the_environment_reach_the_layer(runs):
    assert_flags_in_the_environment_reach_the_layer(runs, runs("vanilla", *STEPS, "--record_terms"), *STEPS)


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
    # term by term, OTCA's loss is the vanilla term times the step weight of the step trained
    assert torch.allclose(weighted, vanilla_terms * weights, rtol=1e-12)


def test_logged_advantages_equal_the_credit_engine_on_the_logged_inputs(runs):
    otca = runs("otca", *STEPS, "--otca")
    assert_logged_credit(otca, ["upstream", "clip_t"])
    for record in otca.log:
        credit = credit_from_progress(torch.tensor(record["rewards"]), torch.tensor(record["delta_s"]),
                                      torch.tensor(record["group_ids"]), CreditConfig(**record["config"]))
        assert torch.allclose(torch.tensor(record["mixture"]), credit.mixture, atol=1e-6)
        sampling_steps, trained = len(record["delta_s"][0]), torch.tensor(record["trained_steps"])
        assert trained.shape == (4, int((sampling_steps - 1) * 0.6))
        assert all(len(set(row)) == len(row) for row in trained.tolist()) and trained.max() < sampling_steps - 1


def test_two_ranks_get_the_credit_one_process_would_give(dancegrpo, tmp_path):
    run = run_smoke(dancegrpo, tmp_path / "ranks", "--steps", "1", "--otca", nproc=2)
    by_rank = assert_ranks_get_the_gathered_credit(run)
    assert by_rank[0]["world_size"] == 2
    host = socket.gethostname()  # the rank check passed before the rollout, and its first line says so
    assert "all 2 ranks run the same layer" in run.completed.stderr
    assert [by_rank[rank]["rank_check"]["hosts"] for rank in (0, 1)] == [{"0": host, "1": host}] * 2
    assert by_rank[1]["summary"] == pytest.approx(by_rank[0]["summary"])



def test_final_state_prediction_measures_progress_towards_the_scored_sample(runs):
    """--otca_final_state prediction: TCD's z_T is the last predicted clean sample (what upstream
    decodes and scores); the logged delta_s is recomputed here from the sampler's own outputs.
    The credit options ride along: recorded in the run log, and the trained advantages follow them."""
    run = runs("prediction", "--steps", "1", "--record_terms", "--otca", "--otca_final_state", "prediction",
               "--otca_fusion", "group", "--otca_explore_center")
    record = run.log[0]
    assert record["final_state"] == "prediction"
    assert record["config"]["fusion"] == "group" and record["config"]["explore_center"] is True
    terms = run.terms[0]
    batch = len(record["delta_s"])
    trajectories = torch.cat(terms["trajectories"][:batch]).double()  # [B, S+1, tokens, channels]
    predictions = torch.cat(terms["predictions"][:batch]).double()  # [B, tokens, channels]
    states = torch.cat([trajectories[:, :-1], predictions[:, None]], dim=1).flatten(2)
    final = predictions.flatten(1)[:, None]
    similarity = (states * final).sum(-1) / (states.norm(dim=-1) * final.norm(dim=-1))
    logged = torch.tensor(record["delta_s"], dtype=torch.float64)
    assert torch.allclose(logged, similarity.diff(dim=1), atol=1e-5)
    # the noisy last latent is not the prediction: the default would have logged other progress
    last = trajectories[:, -1:].flatten(2)
    default = ((trajectories.flatten(2) * last).sum(-1) / (trajectories.flatten(2).norm(dim=-1) * last.norm(dim=-1)))
    assert (logged - default.diff(dim=1)).abs().max() > 1e-3
    # and the advantages are the engine's on those inputs
    credit = credit_from_progress(torch.tensor(record["rewards"]), logged, torch.tensor(record["group_ids"]),
                                  CreditConfig(**record["config"]))
    assert torch.allclose(torch.tensor(record["advantages"]), credit.advantages[:, :-1], atol=1e-6)
    mixture = torch.tensor(record["mixture"])  # one mixture per prompt group
    assert torch.equal(mixture, mixture[:1].expand_as(mixture))
