"""DanceGRPO's real Wan2.1 ``train_one_step`` on the CPU (diffusers' own Wan classes, tiny configs),
rewritten by the layer (``pytest -m upstream``)."""
import json

import pytest
import torch

from otca_patch.credit import CreditConfig, credit_from_progress
from otca_patch.smoke.dancegrpo import trainer_named

from .conftest import (assert_same_update, cached_runs, float32_advantage_tolerance, ppo_terms, refused_mutation,
                       run_smoke, with_startup_hook)

pytestmark = pytest.mark.upstream

WAN = ["--target", "dancegrpo-wan"]
STEPS = [*WAN, "--steps", "2"]
TRAINER = trainer_named("dancegrpo-wan")
ARGS = TRAINER.upstream_args(TRAINER.sizes())  # what train_one_step reads in every run here (no size flag is changed)


@pytest.fixture(scope="module")
def runs(dancegrpo, tmp_path_factory):
    """The runs several tests compare, made once."""
    root = tmp_path_factory.mktemp("wan")
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


def test_observe_mode_trains_bit_identically_and_scores_frames_with_several_objectives(runs):
    vanilla = runs("vanilla", *STEPS, "--record_terms")
    observed = runs("observe", *STEPS, "--otca_observe")
    assert observed.losses == vanilla.losses and observed.grad_norms == vanilla.grad_norms
    assert [r["objectives"] for r in observed.log] == [["upstream", "clip_t"]] * 2
    for record in observed.log:
        used = torch.tensor(record["advantages"])
        assert torch.equal(used, torch.tensor(record["upstream_advantages"])[:, None].expand_as(used))
        rewards = torch.tensor(record["rewards"])
        assert rewards.shape == (4, 2) and rewards[:, 1].std() > 0  # CLIP-T over frames varies per video


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
    tcd = runs("tcd", *WAN, "--steps", "1", "--record_terms", "--otca", "--otca_mode", "tcd",
               "--otca_rewards", "upstream")
    record = tcd.log[0]
    trained = torch.tensor(record["trained_steps"])
    upstream_adv = torch.tensor(record["upstream_advantages"], dtype=torch.float64)
    weights = torch.tensor(record["step_weights"], dtype=torch.float64)
    first = len(tcd.terms[0]["new_log_probs"])
    assert torch.equal(torch.stack(tcd.terms[0]["new_log_probs"]), torch.stack(vanilla.terms[0]["new_log_probs"][:first]))
    vanilla_terms = ppo_terms(vanilla, ARGS, trained, upstream_adv)
    assert vanilla_terms.sum().item() == pytest.approx(vanilla.losses[0], abs=1e-6 * vanilla_terms.abs().sum().item())
    weighted = ppo_terms(vanilla, ARGS, trained, upstream_adv, weights)
    assert not torch.allclose(weights, torch.ones_like(weights)), "step weights are not all 1 here"
    assert tcd.losses[0] == pytest.approx(weighted.sum().item(), abs=1e-5 * weighted.abs().sum().item())
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
    by_rank = {r["rank"]: r for r in synced.log if r["step"] == 1}
    assert sorted(by_rank) == [0, 1]
    gathered = {key: torch.cat([torch.tensor(by_rank[rank][key]) for rank in (0, 1)])
                for key in ("rewards", "delta_s", "group_ids")}
    assert gathered["group_ids"].tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    credit = credit_from_progress(gathered["rewards"], gathered["delta_s"], gathered["group_ids"],
                                  CreditConfig(**by_rank[0]["config"]))
    for rank in (0, 1):
        rows = slice(4 * rank, 4 * rank + 4)
        assert torch.allclose(torch.tensor(by_rank[rank]["advantages"]), credit.advantages[rows, :-1], atol=1e-6)


def test_sync_grads_is_refused_where_upstream_already_synchronises(dancegrpo, tmp_path):
    run = run_smoke(dancegrpo, tmp_path / "flux", "--target", "dancegrpo-flux", "--steps", "1", "--otca",
                    "--otca_sync_grads", check=False)
    assert run.completed.returncode != 0 and "--otca_sync_grads" in run.completed.stderr


def test_a_mutated_upstream_file_stops_otca_and_doctor_reports_it(dancegrpo, tmp_path):
    _, checked = refused_mutation(
        dancegrpo, tmp_path, "fastvideo/train_grpo_wan_2_1.py", "grad_norm = torch.nn.utils.clip_grad_norm_(",
        "grad_norm = torch.nn.utils.clip_grad_norm(", *WAN, failing="synchronise_gradients",
        stderr=("function train_one_step", "clip_grad_norm_(...)", "not found, expected exactly 1",
                "15cc71d53cc2e6e18a68ee607d5fb6ba9a99e344"))
    assert "FAIL: anchor not found" in checked.stdout and "train_grpo_wan_2_1.py: sha256" in checked.stdout
    assert "differs from the file the spec was verified on" in checked.stdout
