"""DanceGRPO's unchanged Wan trainer on a two-expert Wan2.2 checkpoint (tiny, diffusers' real Wan
classes, written locally), through the layer's hooks (``pytest -m upstream``)."""
import json
import math

import pytest
import torch

from otca_patch.credit import CreditConfig, credit_from_progress

from otca_patch.smoke.dancegrpo_wan22 import Sizes, upstream_args

from .conftest import assert_ranks_get_the_gathered_credit, cached_runs, ppo_terms, refused_mutation, run_smoke

pytestmark = pytest.mark.upstream

WAN22 = ["--target", "dancegrpo-wan22"]
SAMPLING_STEPS, SHIFT = 6, 3.0  # the smoke run's defaults


@pytest.fixture(scope="module")
def runs(dancegrpo, tmp_path_factory):
    root = tmp_path_factory.mktemp("wan22")
    return cached_runs(lambda name, *flags, **options: run_smoke(dancegrpo, root / name, *flags, **options))


def _checkpoint(run, rank=0):
    return next((run.out / "tiny_rewards").glob(f"Wan2.2-T2V-tiny-rank{rank}"))


def diffusers_expert(folder, timestep: float) -> str:
    """``WanPipeline``'s rule, from the checkpoint's own files: the high-noise ``transformer`` for
    ``t >= boundary_ratio * num_train_timesteps``, else ``transformer_2``."""
    ratio = json.loads((folder / "model_index.json").read_text())["boundary_ratio"]
    train_steps = json.loads((folder / "scheduler" / "scheduler_config.json").read_text())["num_train_timesteps"]
    return "transformer" if timestep >= ratio * train_steps else "transformer_2"


def sampled_timesteps():
    """Upstream's timesteps, recomputed: ``int(1000 * shifted sigma)`` of ``linspace(1, 0, S + 1)``."""
    sigmas = torch.linspace(1, 0, SAMPLING_STEPS + 1)
    sigmas = SHIFT * sigmas / (1 + (SHIFT - 1) * sigmas)
    return [int(s * 1000) for s in sigmas][:SAMPLING_STEPS]


def test_every_forward_goes_to_the_expert_diffusers_would_pick(runs):
    run = runs("otca", *WAN22, "--otca", "--record_terms")
    folder, timesteps = _checkpoint(run), sampled_timesteps()
    served = set()
    for record in run.log:
        assert record["sampled_experts"] == {str(t): diffusers_expert(folder, t) for t in timesteps}
        for steps, experts in zip(record["trained_steps"], record["trained_experts"]):
            assert experts == [diffusers_expert(folder, timesteps[s]) for s in steps]
            served.update(experts)
    assert served == {"transformer", "transformer_2"}, "the run trained steps of both experts"


def test_each_expert_gets_gradients_only_from_its_own_steps(runs):
    run = runs("otca", *WAN22, "--otca", "--record_terms")
    folder = _checkpoint(run)
    calls = json.loads((run.out / "gradients_rank0.json").read_text())
    assert len(calls) == 2 * 4 * 3  # steps x samples x trained columns
    for call in calls:
        assert set(call["experts"]) <= {diffusers_expert(folder, call["timestep"])}, call
    assert {e for call in calls for e in call["experts"]} == {"transformer", "transformer_2"}
    norms = run.result["expert_update_norms"]
    assert norms["transformer"] > 0 and norms["transformer_2"] > 0


def test_both_experts_are_saved_in_the_wan22_layout(runs):
    from diffusers import WanTransformer3DModel

    run = runs("otca", *WAN22, "--otca", "--record_terms")
    for name, norm in run.result["expert_update_norms"].items():
        initial = WanTransformer3DModel.from_pretrained(str(_checkpoint(run)), subfolder=name)
        saved = WanTransformer3DModel.from_pretrained(str(run.out / "checkpoint-2-0"), subfolder=name)
        change = torch.cat([(b.double() - a.double()).reshape(-1)
                            for a, b in zip(initial.parameters(), saved.parameters())]).norm().item()
        assert change == pytest.approx(norm, rel=1e-6)


def test_logged_credit_spans_the_whole_trajectory_across_the_switch(runs):
    run = runs("otca", *WAN22, "--otca", "--record_terms")
    for record in run.log:
        credit = credit_from_progress(torch.tensor(record["rewards"]), torch.tensor(record["delta_s"]),
                                      torch.tensor(record["group_ids"]), CreditConfig(**record["config"]))
        assert torch.allclose(torch.tensor(record["advantages"]), credit.advantages[:, :-1], atol=1e-6)
        assert len(record["step_weights"][0]) == SAMPLING_STEPS


def test_observe_trains_both_experts_on_upstreams_broadcast_advantage(runs):
    run = runs("observe", *WAN22, "--steps", "1", "--otca_observe", "--record_terms")
    record = run.log[0]
    upstream = torch.tensor(record["upstream_advantages"], dtype=torch.float64)
    used = torch.tensor(record["advantages"], dtype=torch.float64)
    assert torch.equal(used, upstream[:, None].expand_as(used))
    terms = ppo_terms(run, upstream_args(Sizes()), torch.tensor(record["trained_steps"]), upstream)
    assert run.losses[0] == pytest.approx(terms.sum().item(), abs=1e-6 * terms.abs().sum().item())
    norms = run.result["expert_update_norms"]
    assert norms["transformer"] > 0 and norms["transformer_2"] > 0


def test_training_one_expert_leaves_the_other_as_loaded(runs):
    run = runs("low", *WAN22, "--steps", "1", "--otca", "--otca_wan22_train", "transformer_2")
    norms = run.result["expert_update_norms"]
    assert norms["transformer"] == 0 and norms["transformer_2"] > 0
    assert any("transformer" in row for r in run.log for row in r["trained_experts"]), "it still served its steps"


def test_two_ranks_equal_one_process(dancegrpo, tmp_path):
    run = run_smoke(dancegrpo, tmp_path / "two", *WAN22, "--steps", "1", "--otca", "--otca_sync_grads", nproc=2)
    weights = [json.loads((run.out / f"weights_rank{rank}.json").read_text()) for rank in (0, 1)]
    assert weights[0] == pytest.approx(weights[1], rel=1e-9, abs=1e-9)
    assert_ranks_get_the_gathered_credit(run)
    assert all(not math.isnan(v) and v > 0 for v in run.result["expert_update_norms"].values())


def test_a_mutated_upstream_file_stops_wan22(dancegrpo, tmp_path):
    refused_mutation(dancegrpo, tmp_path, "fastvideo/train_grpo_wan_2_1.py",
                     "transformer = WanTransformer3DModel.from_pretrained(",
                     "model = WanTransformer3DModel.from_pretrained(", *WAN22, failing="load_experts",
                     stderr=("function main", "not found, expected exactly 1"))
