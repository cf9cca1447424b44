"""MixGRPO's real FLUX ``train_one_step`` on the CPU, rewritten by the layer (``pytest -m upstream``).

Expected values never come from the layer: upstream's per-model rewards are what its sampler
returned (recorded by the probe), its advantages are rebuilt here from them as its
``advantage_aggr`` code reads, TCD's progress from the trajectories its sampler drew, and the
objective weights from the launch's ``--*_weight`` flags normalised as its ``main`` does.
"""
from pathlib import Path

import pytest
import torch

from otca_patch.ab.workdir import cwd_outputs
from otca_patch.credit import CreditConfig, credit_from_progress
from otca_patch.hooks.spec import load_spec
from otca_patch.smoke.mixgrpo_flux import Sizes, upstream_args

from .conftest import REPO, doctor, ppo_terms, refused_mutation
from .contract import dancegrpo_runner, trainer_spec
from .image_trainer_checks import progress_from_latents

pytestmark = [pytest.mark.upstream, pytest.mark.xdist_group("mixgrpo-flux")]  # with its contract tests

PROBE = f"{Path(__file__).with_name('mixgrpo_probe.py')}:MixRecorder"
#: the models MixGRPO's main builds for --reward_model multi_reward, in its order
MULTI_REWARD = ["HPSClipRewardModel", "ImageRewardModel", "PickScoreRewardModel", "UnifiedRewardModel"]
OBJECTIVES = [f"upstream.{name}" for name in MULTI_REWARD]
GROUP = 4
WEIGHTED = ["--hps_weight", "2", "--unified_reward_weight", "0.5"]  # normalised: 2, 1, 1, 0.5 over 4.5
MIX_ARGS = upstream_args(Sizes())


#: a run outside the shared ones, launched as the contract suite launches this target's
smoke = dancegrpo_runner(trainer_spec("mixgrpo-flux"), PROBE)


@pytest.fixture(scope="module")
def runs(target_runs):
    """The runs several tests compare, made once (shared with the contract suite)."""
    return target_runs("mixgrpo-flux")


def vanilla(runs):
    return runs("vanilla", "--record_terms")


def rollout(run, rank=0, step=1):
    """Upstream's per-model rewards ``{model: [B]}`` and trajectories ``[B, S+1, ...]`` of one rollout."""
    terms = run.terms[rank]
    rewards = terms["rollout_reward_dicts"][step - 1]
    batch = next(iter(rewards.values())).shape[0]
    latents = torch.cat(terms["trajectories"][(step - 1) * batch:step * batch])
    return rewards, latents


def normalised(weights: dict) -> dict:
    total = sum(weights.values())
    return {name: w / total for name, w in weights.items()}


def advantage_aggr(rewards: dict, weights: dict, trimmed_ratio: float = 0.0) -> torch.Tensor:
    """MixGRPO's ``advantage_aggr`` in float64: per model, ``(r - mean) / (std + 1e-8)`` over each group
    (mean and std of the group without its lowest ``trimmed_ratio`` share), weighted and summed."""
    total = 0
    for name, values in rewards.items():
        groups = values.double().reshape(-1, GROUP)
        kept = groups.sort(dim=1).values[:, min(int(GROUP * trimmed_ratio), GROUP - 1):] if trimmed_ratio > 0 else groups
        total = total + weights[name] * ((groups - kept.mean(1, keepdim=True)) / (kept.std(1, keepdim=True) + 1e-8)).reshape(-1)
    return total


def recomputed_credit(run, record, weights: dict, ranks=(0,)):
    """The engine on upstream's rewards and TCD's progress on upstream's trajectories (all ``ranks``)."""
    rewards, delta_s = [], []
    for rank in ranks:
        by_model, latents = rollout(run, rank, record["step"])
        rewards.append(torch.stack([by_model[name].double() for name in weights], dim=1))
        delta_s.append(progress_from_latents(latents))
    rewards, delta_s = torch.cat(rewards), torch.cat(delta_s)
    config = CreditConfig(**{**record["config"], "objective_weights": tuple(weights.values())})
    return credit_from_progress(rewards, delta_s, torch.arange(rewards.shape[0]) // GROUP, config), delta_s


def test_doctor_and_ab_pick_mixgrpo_on_mixgrpo_and_dancegrpo_on_dancegrpo(mixgrpo, dancegrpo, tmp_path):
    for checkout, ours, theirs, outputs in ((mixgrpo, "mixgrpo-flux", "dancegrpo-flux", ["data/outputs"]),
                                            (dancegrpo, "dancegrpo-flux", "mixgrpo-flux", ["images", "reward.txt"])):
        checked = doctor(checkout)
        assert checked.returncode == 0, checked.stdout + checked.stderr
        section = checked.stdout.split(f"{ours}: fastvideo/train_grpo_flux.py")[1].split("\n\n")[0]
        assert "picked: the file is the one the spec was verified on" in section and "FAIL" not in section
        assert f"{ours} (fastvideo/train_grpo_flux.py): holds" in checked.stdout
        # the other upstream's FLUX spec is neither reported nor checked here (its siblings, e.g.
        # dancegrpo-flux-lora, may be listed among the specs of other upstreams)
        assert f"{theirs}:" not in checked.stdout and f"{theirs} (" not in checked.stdout
        if ours == "mixgrpo-flux":
            assert "specs of other upstreams" in checked.stdout and "dancegrpo-flux-lora (DanceGRPO" in checked.stdout
        launch = tmp_path / f"{ours}.sh"
        launch.write_text("torchrun fastvideo/train_grpo_flux.py --seed 1\n")
        assert cwd_outputs(checkout, launch) == outputs
        if ours == "mixgrpo-flux":  # every hook point and pin of its spec named, each holding
            spec = load_spec(REPO / "patches" / "mixgrpo" / "train_grpo_flux.toml")
            named = [line.split()[1] for line in section.splitlines() if line.split()[:1] in (["hook"], ["pin"])]
            assert named == [p.name for p in spec.pins] + [h.name for h in spec.hooks]


def test_a_copy_that_neither_spec_holds_on_is_refused_before_the_rollout_naming_both(mixgrpo, tmp_path):
    anchor = 'samples["advantages"] = merged_advantages'
    run, checked = refused_mutation(
        mixgrpo, tmp_path, "fastvideo/train_grpo_flux.py", anchor, f"{anchor} * 1", "--target", "mixgrpo-flux",
        failing="per_step_advantages", stderr=("none of the 2 specs for this path holds", "dancegrpo-flux", "mixgrpo-flux",
                                               "function train_one_step", anchor, "e5cdd6a427778d8c8b2e7a48ce16972141adbe7c"))
    assert not list((tmp_path / "out").rglob("*.png")), "the rollout started"
    assert "none of the 2 specs for this path holds" in checked.stdout
    assert "FAIL: anchor not found, expected exactly 1" in checked.stdout.split("mixgrpo-flux: ")[1]



def test_observe_mode_logs_each_reward_model_of_upstream(runs):
    """Beyond the contract's observe mode (the 'part' strategy): upstream's reward is its models' rewards."""
    observed = runs("observe", "--otca_observe")
    assert [r["objectives"] for r in observed.log] == [OBJECTIVES] * 2


def test_observe_mode_with_the_all_strategy_trains_bit_identically_and_logs_the_credit(runs):
    flags = ("--training_strategy", "all")
    plain, observed = runs("vanilla-all", *flags), runs("observe-all", *flags, "--otca_observe")
    assert observed.losses == plain.losses and observed.grad_norms == plain.grad_norms
    assert [r["objectives"] for r in observed.log] == [OBJECTIVES] * 2
    assert all(r["spec"]["target"] == "mixgrpo-flux" and r["spec"]["upstream"] == "MixGRPO" for r in observed.log)
    for record in observed.log:
        used = torch.tensor(record["advantages"])
        assert torch.equal(used, torch.tensor(record["upstream_advantages"])[:, None].expand_as(used))


def test_multi_grpo_reproduces_upstreams_advantage_aggr_with_its_weights(runs):
    run = runs("multi_grpo", *WEIGHTED, "--record_terms", "--otca", "--otca_mode", "multi_grpo")
    weights = normalised({"HPSClipRewardModel": 2.0, "ImageRewardModel": 1.0, "PickScoreRewardModel": 1.0,
                          "UnifiedRewardModel": 0.5})
    assert "upstream's reward_weights" in run.completed.stderr
    for record in run.log:
        assert record["objectives"] == OBJECTIVES
        assert record["config"]["objective_weights"] == pytest.approx(list(weights.values()), rel=1e-12)
        rewards = rollout(run, 0, record["step"])[0]
        assert all(values.reshape(-1, GROUP).std(1).min() > 1e-2 for values in rewards.values()), "a reward has no signal"
        expected = advantage_aggr(rewards, weights)
        assert torch.allclose(torch.tensor(record["upstream_advantages"], dtype=torch.float64), expected, atol=1e-6)
        combined = torch.tensor(record["combined"], dtype=torch.float64)
        assert torch.allclose(combined, expected, atol=1e-6)
        trained = torch.tensor(record["advantages"], dtype=torch.float64)  # not step-weighted: every column the same
        assert torch.allclose(trained, combined[:, None].expand_as(trained), atol=1e-7)


def test_with_trimming_multi_grpo_differs_from_upstream_exactly_by_the_trimmed_statistics(runs):
    run = runs("trimmed", "--trimmed_ratio", "0.25", "--record_terms", "--otca", "--otca_mode", "multi_grpo")
    weights = normalised(dict.fromkeys(MULTI_REWARD, 1.0))
    assert "OTCA's group statistics are untrimmed" in run.completed.stderr
    record = run.log[0]
    rewards = rollout(run)[0]
    upstream, combined = (torch.tensor(record[key], dtype=torch.float64) for key in ("upstream_advantages", "combined"))
    assert torch.allclose(upstream, advantage_aggr(rewards, weights, trimmed_ratio=0.25), atol=1e-6)
    assert torch.allclose(combined, advantage_aggr(rewards, weights), atol=1e-6)
    assert (upstream - combined).abs().max() > 1e-3


def test_reward_aggr_objective_is_upstreams_summed_reward(runs):
    run = runs("reward_aggr", "--multi_reward_mix", "reward_aggr", "--record_terms", "--otca", "--otca_mode", "multi_grpo")
    record = run.log[0]
    assert record["objectives"] == ["upstream"] and record["config"]["objective_weights"] is None
    summed = rollout(run)[0][""].double()
    assert torch.allclose(torch.tensor(record["rewards"], dtype=torch.float64)[:, 0], summed, atol=0)
    groups = summed.reshape(-1, GROUP)
    expected = ((groups - groups.mean(1, keepdim=True)) / (groups.std(1, keepdim=True) + 1e-8)).reshape(-1)
    assert torch.allclose(torch.tensor(record["combined"], dtype=torch.float64), expected, atol=1e-6)


def test_otca_loss_is_vanilla_loss_reweighted_by_the_logged_step_weights(runs):
    plain = vanilla(runs)
    tcd = runs("tcd", "--steps", "1", "--record_terms", "--otca", "--otca_mode", "tcd")
    record = tcd.log[0]
    trained = torch.tensor(record["trained_steps"])
    assert trained.tolist() == [[0, 1]] * GROUP  # the first SDE window, every sample
    weights = torch.tensor(record["step_weights"], dtype=torch.float64)
    assert not torch.allclose(weights, torch.ones_like(weights))
    upstream = advantage_aggr(rollout(plain)[0], normalised(dict.fromkeys(MULTI_REWARD, 1.0)))
    first = len(tcd.terms[0]["new_log_probs"])
    assert torch.equal(torch.stack(tcd.terms[0]["new_log_probs"]), torch.stack(plain.terms[0]["new_log_probs"][:first]))
    vanilla_terms = ppo_terms(plain, MIX_ARGS, trained, upstream)
    assert vanilla_terms.sum().item() == pytest.approx(plain.losses[0], abs=1e-5 * vanilla_terms.abs().sum().item())
    weighted = ppo_terms(plain, MIX_ARGS, trained, upstream, weights)
    assert tcd.losses[0] == pytest.approx(weighted.sum().item(), abs=1e-5 * weighted.abs().sum().item())
    assert torch.allclose(weighted, vanilla_terms * weights.gather(1, trained), rtol=1e-12)


@pytest.mark.parametrize("name, flags", [
    ("otca-part", ()),
    ("otca-all", ("--training_strategy", "all", "--flow_grpo_sampling", "--kl_coeff", "0.1")),
    ("otca-flash-balance", ("--dpm_algorithm_type", "dpmsolver++", "--sampling_steps", "8",
                            "--advantage_rerange_strategy", "balance")),
])
def test_logged_credit_equals_the_engine_on_recomputed_inputs(runs, name, flags):
    run = runs(name, "--record_terms", "--otca", *flags)
    weights = normalised(dict.fromkeys(MULTI_REWARD, 1.0))
    assert [r["step"] for r in run.log] == [1, 2]
    for record in run.log:
        assert record["objectives"] == OBJECTIVES and record["mode"] == "otca"
        credit, delta_s = recomputed_credit(run, record, weights)
        assert torch.allclose(torch.tensor(record["delta_s"], dtype=torch.float64), delta_s, atol=1e-5)
        logged = torch.tensor(record["advantages"], dtype=torch.float64)
        assert logged.shape == (GROUP, delta_s.shape[1] - 1)  # the whole trajectory, ODE and SDE steps
        assert torch.allclose(logged, credit.advantages[:, :-1].double(), atol=1e-5)
        trained = torch.tensor(record["trained_steps"])
        if "all" in name:  # each sample's own shuffled steps: distinct, int((S-1) * 0.6) of them
            assert trained.shape == (GROUP, int((delta_s.shape[1] - 1) * 0.6))
            assert all(len(set(row)) == len(row) for row in trained.tolist())
        else:  # the sliding window: steps 0-1, then 2-3, for every sample
            assert trained.tolist() == [[2 * record["step"] - 2, 2 * record["step"] - 1]] * GROUP
        assert sorted(record["train_order"]) == list(range(GROUP))
    if "balance" in name:  # the sign balance read OTCA's combined advantage: alternating signs, smaller side first
        for record in run.log:
            signs = [1 if record["combined"][row] > 0 or (record["combined"][row] == 0 and
                                                          record["upstream_advantages"][row] > 0) else -1
                     for row in record["train_order"]]
            assert all(a != b for a, b in zip(signs, signs[1:min(len(signs), 2 * min(signs.count(1), signs.count(-1)))]))


@pytest.mark.parametrize("strategy", ["part", "all"])
def test_two_ranks_get_the_credit_one_process_would_give(mixgrpo, tmp_path, strategy):
    run = smoke(mixgrpo, tmp_path / "ranks", "--steps", "1", "--training_strategy", strategy, "--record_terms", "--otca",
                nproc=2)
    by_rank = {r["rank"]: r for r in run.log if r["step"] == 1}
    assert sorted(by_rank) == [0, 1] and by_rank[0]["world_size"] == 2
    assert [g for rank in (0, 1) for g in by_rank[rank]["group_ids"]] == [0] * 4 + [1] * 4
    credit, _ = recomputed_credit(run, by_rank[0], normalised(dict.fromkeys(MULTI_REWARD, 1.0)), ranks=(0, 1))
    for rank in (0, 1):
        rows = slice(GROUP * rank, GROUP * (rank + 1))
        assert torch.allclose(torch.tensor(by_rank[rank]["advantages"], dtype=torch.float64),
                              credit.advantages[rows, :-1].double(), atol=1e-5)
        assert by_rank[rank]["summary"] == pytest.approx(by_rank[0]["summary"])
