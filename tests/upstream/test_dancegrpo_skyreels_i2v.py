"""DanceGRPO's real SkyReels image-to-video ``train_one_step`` on the CPU (tiny upstream HunyuanVideo
transformer with 32 input channels, tiny FLUX pipeline for the first frames, VideoAlign stubbed),
rewritten by the layer (``pytest -m upstream``)."""
import os

import pytest
import torch

from otca_patch.env_names import ARGS
from otca_patch.credit import CreditConfig, credit_from_progress, similarity_to_final, step_progress
from otca_patch.launch.wrapper import STARTUP_DIR
from otca_patch.smoke.dancegrpo import trainer_named
from otca_patch.stand_ins.video_align import StubVideoAlign

from .conftest import REPO, cached_runs, ppo_terms, refused_mutation, run_smoke

pytestmark = pytest.mark.upstream

SKYREELS = ["--target", "dancegrpo-skyreels-i2v"]
STEPS = [*SKYREELS, "--steps", "2"]
PRESENT = {ARGS: "--otca_mode tcd", "PYTHONPATH": os.pathsep.join([str(STARTUP_DIR), str(REPO)])}
VIDEOALIGN = ["upstream.vq", "upstream.mq", "upstream.ta"]
TRAINER = trainer_named("dancegrpo-skyreels-i2v")
ARGS = TRAINER.upstream_args(TRAINER.sizes())  # what train_one_step reads in every run here (no size flag is changed)
FIXED = {"clip_range": 1e-4, "adv_clip_max": 5.0}  # fixed in upstream's train_one_step, not arguments


@pytest.fixture(scope="module")
def runs(dancegrpo, tmp_path_factory):
    """The runs several tests compare, made once."""
    root = tmp_path_factory.mktemp("skyreels")
    return cached_runs(lambda name, *flags, **options: run_smoke(dancegrpo, root / name, *flags, **options))


def test_vanilla_parity_with_the_layer_present_but_not_asked_for(runs):
    vanilla = runs("vanilla", *STEPS, "--record_terms")
    present = runs("present", *STEPS, env=PRESENT)
    assert present.losses == vanilla.losses and present.grad_norms == vanilla.grad_norms
    assert not (present.out / "run_log.jsonl").exists()


def test_observe_mode_trains_bit_identically_and_logs_videoalign_and_frame_objectives(runs):
    vanilla = runs("vanilla", *STEPS, "--record_terms")
    observed = runs("observe", *STEPS, "--otca_observe")
    assert observed.losses == vanilla.losses and observed.grad_norms == vanilla.grad_norms
    assert [r["objectives"] for r in observed.log] == [[*VIDEOALIGN, "clip_t"]] * 2
    for record in observed.log:
        used = torch.tensor(record["advantages"])
        assert torch.equal(used, torch.tensor(record["upstream_advantages"])[:, None].expand_as(used))
        rewards = torch.tensor(record["rewards"])
        assert rewards.shape == (4, 4) and (rewards.std(dim=0) > 0).all()


def test_sum_mode_over_upstreams_reward_equals_vanilla(runs):
    vanilla = runs("vanilla", *STEPS, "--record_terms")
    summed = runs("sum", *STEPS, "--otca", "--otca_mode", "sum", "--otca_rewards", "upstream")
    for ours, theirs in zip(summed.grad_norms, vanilla.grad_norms):
        assert ours == pytest.approx(theirs, rel=1e-6)
    record = summed.log[0]
    # plain `upstream` is upstream's own reward (MQ): the advantage is upstream's group advantage (upstream
    # normalises in float32, the engine in float64: equal to float32 rounding of the group's spread)
    combined = torch.tensor(record["combined"], dtype=torch.float64)
    assert torch.allclose(combined, torch.tensor(record["upstream_advantages"], dtype=torch.float64), atol=1e-4)
    # the loss is vanilla's PPO terms (its recorded log-probs) on that advantage, summed in float64
    terms = ppo_terms(vanilla, ARGS, torch.tensor(record["trained_steps"]), combined, **FIXED)
    assert summed.losses[0] == pytest.approx(terms.sum().item(), abs=1e-6 * terms.abs().sum().item())


def test_otca_loss_is_vanilla_loss_reweighted_by_the_logged_step_weights(runs):
    vanilla = runs("vanilla", *STEPS, "--record_terms")
    tcd = runs("tcd", *SKYREELS, "--steps", "1", "--record_terms", "--otca", "--otca_mode", "tcd",
               "--otca_rewards", "upstream.mq")
    record = tcd.log[0]
    trained = torch.tensor(record["trained_steps"])
    upstream_adv = torch.tensor(record["upstream_advantages"], dtype=torch.float64)
    weights = torch.tensor(record["step_weights"], dtype=torch.float64)
    first = len(tcd.terms[0]["new_log_probs"])
    assert torch.equal(torch.stack(tcd.terms[0]["new_log_probs"]), torch.stack(vanilla.terms[0]["new_log_probs"][:first]))
    vanilla_terms = ppo_terms(vanilla, ARGS, trained, upstream_adv, **FIXED)
    assert vanilla_terms.sum().item() == pytest.approx(vanilla.losses[0], abs=1e-6 * vanilla_terms.abs().sum().item())
    weighted = ppo_terms(vanilla, ARGS, trained, upstream_adv, weights, **FIXED)
    assert not torch.allclose(weights, torch.ones_like(weights)), "step weights are not all 1 here"
    assert tcd.losses[0] == pytest.approx(weighted.sum().item(), abs=1e-5 * weighted.abs().sum().item())


def test_logged_advantages_equal_the_engine_on_recomputed_inputs(runs):
    otca = runs("otca", *SKYREELS, "--steps", "1", "--record_terms", "--otca", "--otca_rewards", ",".join(VIDEOALIGN))
    record = otca.log[0]
    assert record["objectives"] == VIDEOALIGN and record["mode"] == "otca"
    latents = torch.cat(otca.terms[0]["trajectories"][:4]).float()  # the 4 rollouts of step 1, [4, S+1, ...]
    delta_s = step_progress(similarity_to_final(latents).double())
    assert torch.allclose(delta_s.float(), torch.tensor(record["delta_s"]), atol=1e-5)
    caption = "a red ball rolling on grass"  # rank 0, step 1 of the smoke loader
    scored = StubVideoAlign().reward([str(otca.out / "videos" / f"skyreels_0_{i}.mp4") for i in range(4)], [caption] * 4)
    rewards = torch.tensor([[s["VQ"], s["MQ"], s["TA"]] for s in scored])
    assert torch.allclose(rewards, torch.tensor(record["rewards"]), atol=1e-5)
    credit = credit_from_progress(rewards, delta_s, torch.zeros(4, dtype=torch.long), CreditConfig(**record["config"]))
    kept = torch.tensor(record["advantages"])
    assert kept.shape == (4, delta_s.shape[1] - 1)
    assert torch.allclose(kept, credit.advantages[:, :-1].float(), atol=1e-5)
    assert not torch.allclose(kept, kept[:, :1].expand_as(kept)), "OTCA's advantage varies over steps"


def test_two_ranks_get_the_credit_one_process_computes_over_both(dancegrpo, tmp_path):
    run = run_smoke(dancegrpo, tmp_path / "two", *SKYREELS, "--steps", "1", "--otca", nproc=2)
    by_rank = {r["rank"]: r for r in run.log if r["step"] == 1}
    assert sorted(by_rank) == [0, 1]
    gathered = {key: torch.cat([torch.tensor(by_rank[rank][key]) for rank in (0, 1)])
                for key in ("rewards", "delta_s", "group_ids")}
    assert gathered["group_ids"].tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    credit = credit_from_progress(gathered["rewards"], gathered["delta_s"], gathered["group_ids"],
                                  CreditConfig(**by_rank[0]["config"]))
    for rank in (0, 1):
        rows = slice(4 * rank, 4 * rank + 4)
        assert torch.allclose(torch.tensor(by_rank[rank]["advantages"]), credit.advantages[rows, :-1], atol=1e-6)
    # FSDP keeps the replicas equal: both ranks clipped the same gradient norm
    assert len({r["grad_norm"] for r in by_rank.values()}) == 1


def test_a_mutated_upstream_file_stops_otca_and_doctor_reports_it(dancegrpo, tmp_path):
    _, checked = refused_mutation(
        dancegrpo, tmp_path, "fastvideo/train_grpo_skyreels_i2v.py", "reward = torch.tensor(reward[0]['MQ']).to(device)",
        "reward = torch.tensor(reward[0]['Overall']).to(device)", *SKYREELS, failing="collect_videoalign_scores",
        stderr=("function sample_reference_model", "not found, expected exactly 1", "15cc71d53cc2e6e18a68ee607d5fb6ba9a99e344"))
    assert "FAIL: anchor not found" in checked.stdout
