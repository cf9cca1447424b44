"""DanceGRPO's real SkyReels image-to-video ``train_one_step`` on the CPU (tiny upstream HunyuanVideo
transformer with 32 input channels, tiny FLUX pipeline for the first frames, VideoAlign stubbed),
rewritten by the layer (``pytest -m upstream``)."""
import pytest
import torch

from otca_patch.credit import CreditConfig, credit_from_progress, similarity_to_final, step_progress
from otca_patch.smoke.dancegrpo import trainer_named
from otca_patch.stand_ins.video_align import StubVideoAlign

from .conftest import assert_ranks_get_the_gathered_credit, assert_tcd_reweights_vanilla, ppo_terms, run_smoke

pytestmark = [pytest.mark.upstream, pytest.mark.xdist_group("dancegrpo-skyreels-i2v")]  # with its contract tests

SKYREELS = ["--target", "dancegrpo-skyreels-i2v"]
STEPS = ["--steps", "2"]  # the shared runs name their target themselves
VIDEOALIGN = ["upstream.vq", "upstream.mq", "upstream.ta"]
TRAINER = trainer_named("dancegrpo-skyreels-i2v")
ARGS = TRAINER.upstream_args(TRAINER.sizes())  # what train_one_step reads in every run here (no size flag is changed)
FIXED = {"clip_range": 1e-4, "adv_clip_max": 5.0}  # fixed in upstream's train_one_step, not arguments


@pytest.fixture(scope="module")
def runs(target_runs):
    """The runs several tests compare, made once (shared with the contract suite)."""
    return target_runs("dancegrpo-skyreels-i2v")


def test_observe_mode_logs_videoalign_and_frame_objectives(runs):
    """Beyond the contract's observe mode: VideoAlign's three scores and CLIP-T over frames, each varying."""
    observed = runs("observe", *STEPS, "--otca_observe")
    for record in observed.log:
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
    tcd = runs("tcd", "--steps", "1", "--record_terms", "--otca", "--otca_mode", "tcd", "--otca_rewards", "upstream.mq")
    assert_tcd_reweights_vanilla(runs("vanilla", *STEPS, "--record_terms"), tcd, ARGS, **FIXED)


def test_logged_advantages_equal_the_engine_on_recomputed_inputs(runs):
    otca = runs("otca", "--steps", "1", "--record_terms", "--otca", "--otca_rewards", ",".join(VIDEOALIGN))
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
    by_rank = assert_ranks_get_the_gathered_credit(run)
    # FSDP keeps the replicas equal: both ranks clipped the same gradient norm
    assert len({r["grad_norm"] for r in by_rank.values()}) == 1
