"""DanceGRPO's real FLUX ``train_one_step`` on the CPU, rewritten by the layer (``pytest -m upstream``)."""
import shutil
import socket

import pytest
import torch

from otca_patch.credit import CreditConfig, credit_from_progress
from otca_patch.smoke.dancegrpo import trainer_named

from .conftest import (assert_same_update, cached_runs, float32_advantage_tolerance, ppo_terms, run_smoke,
                       with_startup_hook)

pytestmark = pytest.mark.upstream

STEPS = ["--steps", "2"]
TRAINER = trainer_named("dancegrpo-flux")
ARGS = TRAINER.upstream_args(TRAINER.sizes())  # what train_one_step reads in every run here (no size flag is changed)


@pytest.fixture(scope="module")
def runs(dancegrpo, tmp_path_factory):
    """The runs several tests compare, made once."""
    root = tmp_path_factory.mktemp("flux")
    return cached_runs(lambda name, *flags, **options: run_smoke(dancegrpo, root / name, *flags, **options))


def test_vanilla_parity_with_the_layer_present_but_not_asked_for(runs):
    """The smoke run takes its flags as a launched process does ($OTCA_PATCH_ARGS, with the startup
    hook on the path): without --otca the upstream file runs untouched; the same environment with
    --otca rewrites it (the control: these flags do reach the layer)."""
    vanilla = runs("vanilla", *STEPS, "--record_terms")
    present = runs("present", *STEPS, env=with_startup_hook("--otca_mode tcd"))
    assert present.losses == vanilla.losses and present.grad_norms == vanilla.grad_norms
    assert not (present.out / "run_log.jsonl").exists()
    asked = runs("asked", *STEPS, env=with_startup_hook("--otca --otca_mode tcd --otca_rewards upstream"))
    assert [r["mode"] for r in asked.log] == ["tcd", "tcd"]
    assert asked.losses != vanilla.losses


def test_observe_mode_trains_bit_identically_and_logs_the_credit(runs):
    vanilla = runs("vanilla", *STEPS, "--record_terms")
    observed = runs("observe", *STEPS, "--otca_observe")
    assert observed.losses == vanilla.losses and observed.grad_norms == vanilla.grad_norms
    assert [r["objectives"] for r in observed.log] == [["upstream", "clip_t"]] * 2
    for record in observed.log:  # the trainer used upstream's broadcast advantage
        used = torch.tensor(record["advantages"])
        assert torch.equal(used, torch.tensor(record["upstream_advantages"])[:, None].expand_as(used))


def test_sum_mode_over_upstreams_reward_equals_vanilla(runs):
    vanilla = runs("vanilla", *STEPS, "--record_terms")
    summed = runs("sum", *STEPS, "--record_terms", "--otca", "--otca_mode", "sum", "--otca_rewards", "upstream")
    record = summed.log[0]
    combined = torch.tensor(record["combined"], dtype=torch.float64)
    upstream_adv = torch.tensor(record["upstream_advantages"], dtype=torch.float64)
    assert_same_update(summed, vanilla, ARGS, torch.tensor(record["trained_steps"]), combined, upstream_adv,
                       float32_advantage_tolerance(record))


def test_otca_loss_is_vanilla_loss_reweighted_by_the_logged_step_weights(runs):
    vanilla = runs("vanilla", *STEPS, "--record_terms")
    tcd = runs("tcd", "--steps", "1", "--record_terms", "--otca", "--otca_mode", "tcd", "--otca_rewards", "upstream")
    record = tcd.log[0]
    trained = torch.tensor(record["trained_steps"])
    upstream_adv = torch.tensor(record["upstream_advantages"], dtype=torch.float64)
    weights = torch.tensor(record["step_weights"], dtype=torch.float64)
    # same weights, prompts, noise and step order: the new log-probs of step 1 are bit-identical
    first = len(tcd.terms[0]["new_log_probs"])
    assert torch.equal(torch.stack(tcd.terms[0]["new_log_probs"]), torch.stack(vanilla.terms[0]["new_log_probs"][:first]))
    vanilla_terms = ppo_terms(vanilla, ARGS, trained, upstream_adv)
    assert vanilla_terms.sum().item() == pytest.approx(vanilla.losses[0], abs=1e-6 * vanilla_terms.abs().sum().item())
    weighted = ppo_terms(vanilla, ARGS, trained, upstream_adv, weights)
    assert not torch.allclose(weights, torch.ones_like(weights)), "step weights are not all 1 here"
    assert tcd.losses[0] == pytest.approx(weighted.sum().item(), abs=1e-5 * weighted.abs().sum().item())
    # term by term, OTCA's loss is the vanilla term times the step weight of the step trained
    assert torch.allclose(weighted, vanilla_terms * weights.gather(1, trained), rtol=1e-12)


def test_logged_advantages_equal_the_credit_engine_on_the_logged_inputs(runs):
    otca = runs("otca", *STEPS, "--otca")
    assert [r["step"] for r in otca.log] == [1, 2]
    for record in otca.log:
        assert record["objectives"] == ["upstream", "clip_t"] and record["mode"] == "otca"
        credit = credit_from_progress(torch.tensor(record["rewards"]), torch.tensor(record["delta_s"]),
                                      torch.tensor(record["group_ids"]), CreditConfig(**record["config"]))
        kept = torch.tensor(record["advantages"])
        sampling_steps = len(record["delta_s"][0])
        assert kept.shape == (4, sampling_steps - 1)
        assert torch.allclose(kept, credit.advantages[:, :-1], atol=1e-6)
        assert torch.allclose(torch.tensor(record["step_weights"]), credit.step_weights, atol=1e-6)
        assert torch.allclose(torch.tensor(record["mixture"]), credit.mixture, atol=1e-6)
        trained = torch.tensor(record["trained_steps"])
        assert trained.shape == (4, int((sampling_steps - 1) * 0.6))
        assert all(len(set(row)) == len(row) for row in trained.tolist()) and trained.max() < sampling_steps - 1


def test_two_ranks_get_the_credit_one_process_would_give(dancegrpo, tmp_path):
    run = run_smoke(dancegrpo, tmp_path / "ranks", "--steps", "1", "--otca", nproc=2)
    by_rank = {r["rank"]: r for r in run.log if r["step"] == 1}
    assert sorted(by_rank) == [0, 1] and by_rank[0]["world_size"] == 2
    host = socket.gethostname()  # the rank check passed before the rollout, and its first line says so
    assert "all 2 ranks run the same layer" in run.completed.stderr
    assert [by_rank[rank]["rank_check"]["hosts"] for rank in (0, 1)] == [{"0": host, "1": host}] * 2
    gathered = {key: torch.cat([torch.tensor(by_rank[rank][key]) for rank in (0, 1)])
                for key in ("rewards", "delta_s", "group_ids")}
    assert gathered["group_ids"].tolist() == [0, 0, 0, 0, 1, 1, 1, 1]  # one prompt per rank
    credit = credit_from_progress(gathered["rewards"], gathered["delta_s"], gathered["group_ids"],
                                  CreditConfig(**by_rank[0]["config"]))
    for rank in (0, 1):
        rows = slice(4 * rank, 4 * rank + 4)
        assert torch.allclose(torch.tensor(by_rank[rank]["advantages"]), credit.advantages[rows, :-1], atol=1e-6)
        assert by_rank[rank]["summary"] == pytest.approx(by_rank[0]["summary"])


def test_a_mutated_upstream_file_stops_otca_and_doctor_reports_it(dancegrpo, tmp_path):
    copy = tmp_path / "DanceGRPO"
    shutil.copytree(dancegrpo / "fastvideo", copy / "fastvideo")
    trainer = copy / "fastvideo" / "train_grpo_flux.py"
    source = trainer.read_text()
    assert source.count('samples["advantages"] = advantages') == 2
    trainer.write_text(source.replace('samples["advantages"] = advantages', 'samples["advantages"] = advantages * 1', 1))
    run = run_smoke(copy, tmp_path / "out", "--otca", check=False)
    assert run.completed.returncode == 2 and run.result is None
    for part in ("fastvideo/train_grpo_flux.py", "function train_one_step", 'samples["advantages"] = advantages',
                 "found 1 times, expected exactly 2", "15cc71d53cc2e6e18a68ee607d5fb6ba9a99e344"):
        assert part in run.completed.stderr
    import subprocess
    import sys

    doctor = subprocess.run([sys.executable, "-m", "otca_patch.cli", "doctor", str(copy)], capture_output=True,
                            text=True, timeout=120)
    assert doctor.returncode == 1
    assert "per_step_advantages" in doctor.stdout and "FAIL: anchor found 1 times, expected exactly 2" in doctor.stdout
    assert "differs from the file the spec was verified on" in doctor.stdout


def test_doctor_passes_on_the_pinned_checkout(dancegrpo):
    import subprocess
    import sys

    doctor = subprocess.run([sys.executable, "-m", "otca_patch.cli", "doctor", str(dancegrpo)], capture_output=True,
                            text=True, timeout=120)
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert "identical to the file the spec was verified on" in doctor.stdout


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
