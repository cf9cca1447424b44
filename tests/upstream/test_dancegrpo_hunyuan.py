"""DanceGRPO's real HunyuanVideo ``train_one_step`` on the CPU (flash-attention kernel and VideoAlign's
Qwen2-VL stubbed, see otca_patch/smoke/dancegrpo_hunyuan.py), rewritten by the layer (``pytest -m upstream``)."""

import pytest
import torch

from otca_patch.credit import CreditConfig, credit_from_progress

from otca_patch.smoke.dancegrpo import trainer_named

from .conftest import ppo_terms, run_smoke

pytestmark = [pytest.mark.upstream, pytest.mark.xdist_group("dancegrpo-hunyuan")]  # with its contract tests

HY = ["--target", "dancegrpo-hunyuan"]
VQ_MQ = ["--otca_rewards", "upstream.vq,upstream.mq"]
TRAINER = trainer_named("dancegrpo-hunyuan")
ARGS = TRAINER.upstream_args(TRAINER.sizes())  # what train_one_step reads in every run here (no size flag is changed)
UPSTREAM_CLIPS = dict(clip_range=1e-4, adv_clip_max=5.0)  # fixed in upstream's train_one_step, not arguments


@pytest.fixture(scope="module")
def runs(target_runs):
    """The runs several tests compare, made once (shared with the contract suite)."""
    return target_runs("dancegrpo-hunyuan")


def vanilla(runs):
    return runs("vanilla", "--steps", "2", "--record_terms")


def test_observe_mode_logs_vq_mq_ta(runs):
    """Beyond the contract's observe mode: upstream's reward is VideoAlign's three scores, TA kept."""
    observed = runs("observe", "--steps", "2", "--otca_observe")
    assert [r["objectives"] for r in observed.log] == [["upstream.vq", "upstream.mq", "upstream.ta"]] * 2
    for record in observed.log:
        assert torch.tensor(record["rewards"])[:, 2].std() > 0  # TA was kept from VideoAlign's call


def _upstream_loss_terms(run, record):
    """Upstream's vq_loss + mq_loss of step 1, term by term, from its two logged advantages."""
    trained, rows = torch.tensor(record["trained_steps"]), torch.tensor(record["kept_rows"])
    by_objective = torch.tensor(record["upstream_objective_advantages"], dtype=torch.float64)
    return sum(coef * ppo_terms(run, ARGS, trained, by_objective[:, k], rows=rows, **UPSTREAM_CLIPS)
               for k, coef in enumerate(record["coefficients"]))


def test_multi_grpo_on_vq_and_mq_reproduces_upstreams_combined_update(runs):
    multi = runs("multi", "--steps", "1", "--otca", "--otca_mode", "multi_grpo", *VQ_MQ)
    record = multi.log[0]
    assert torch.allclose(torch.tensor(record["combined"]), torch.tensor(record["upstream_advantages"]),
                          rtol=1e-6, atol=1e-6)
    assert multi.grad_norms[0] == pytest.approx(vanilla(runs).grad_norms[0], rel=1e-6)
    scale = _upstream_loss_terms(vanilla(runs), record).abs().sum().item()
    assert multi.losses[0] == pytest.approx(vanilla(runs).losses[0], abs=1e-6 * scale)


def test_otca_loss_is_upstreams_loss_reweighted_by_the_logged_step_weights(runs):
    tcd = runs("tcd", "--steps", "1", "--record_terms", "--otca", "--otca_mode", "tcd", *VQ_MQ)
    record = tcd.log[0]
    trained, rows = torch.tensor(record["trained_steps"]), torch.tensor(record["kept_rows"])
    weights = torch.tensor(record["step_weights"], dtype=torch.float64)
    base = vanilla(runs)
    first = len(tcd.terms[0]["new_log_probs"])  # same weights, noise and order: same log-probs
    assert torch.equal(torch.stack(tcd.terms[0]["new_log_probs"]), torch.stack(base.terms[0]["new_log_probs"][:first]))
    upstream_terms = _upstream_loss_terms(base, record)
    assert upstream_terms.sum().item() == pytest.approx(base.losses[0], abs=1e-6 * upstream_terms.abs().sum().item())
    combined = torch.tensor(record["upstream_advantages"], dtype=torch.float64)
    weighted = ppo_terms(base, ARGS, trained, combined, weights, rows=rows, **UPSTREAM_CLIPS)
    assert not torch.allclose(weights, torch.ones_like(weights)), "step weights are not all 1 here"
    assert tcd.losses[0] == pytest.approx(weighted.sum().item(), abs=1e-5 * weighted.abs().sum().item())
    assert torch.allclose(weighted, upstream_terms * weights.gather(1, trained), rtol=1e-5, atol=1e-12)


def test_two_ranks_credit_the_best_of_n_samples_in_their_groups(dancegrpo, tmp_path):
    run = run_smoke(dancegrpo, tmp_path / "ranks", *HY, "--steps", "1", "--bestofn", "2", "--otca", nproc=2)
    by_rank = {r["rank"]: r for r in run.log if r["step"] == 1}
    assert sorted(by_rank) == [0, 1] and by_rank[0]["objectives"] == ["upstream.vq", "upstream.mq", "upstream.ta"]
    for record in by_rank.values():
        kept = record["kept_rows"]
        assert len(kept) == 2 and len(set(kept)) == 2 and max(kept) < 4  # best and worst of 4 rollouts
        assert torch.tensor(record["advantages"]).shape == (2, len(record["delta_s"][0]) - 1)
        upstream = torch.tensor(record["upstream_advantages"])
        assert upstream.max() > upstream.min()  # one of the best and one of the worst
    kept_groups = torch.cat([torch.tensor(by_rank[rank]["group_ids"]) for rank in (0, 1)])
    assert kept_groups.tolist() == [0, 0, 1, 1]  # kept samples stay in their prompt's group
    # the credit is computed over every rollout of both ranks, then each rank takes its kept rows
    gathered = {key: torch.cat([torch.tensor(by_rank[rank][key]) for rank in (0, 1)])
                for key in ("rollout_rewards", "rollout_delta_s", "rollout_group_ids")}
    assert gathered["rollout_group_ids"].tolist() == [0] * 4 + [1] * 4
    credit = credit_from_progress(gathered["rollout_rewards"], gathered["rollout_delta_s"],
                                  gathered["rollout_group_ids"], CreditConfig(**by_rank[0]["config"]))
    for rank in (0, 1):
        rows = 4 * rank + torch.tensor(by_rank[rank]["kept_rows"])
        assert torch.allclose(torch.tensor(by_rank[rank]["advantages"]), credit.advantages[rows, :-1].float(), atol=1e-6)
        assert torch.allclose(torch.tensor(by_rank[rank]["step_weights"]), credit.step_weights[rows].float(), atol=1e-6)
