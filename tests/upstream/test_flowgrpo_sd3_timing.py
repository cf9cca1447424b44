"""FlowGRPO's real ``scripts/train_sd3.py`` on the CPU with ``--otca_objective_timing probe``
(docs/credit.md 9.3): the pipeline's SDE steps give each step's predicted clean sample, the probe
decodes them as the pipeline decodes its last latents and scores them with upstream's own
``reward_fn`` and the registry; the run log holds the map each epoch's credit used, and that credit
is what an independent reference computes from the logged map (``pytest -m upstream``)."""
import pytest
import torch

from otca_patch.rehearsal.credit_check import check, logged_timing_map

from .conftest import cached_runs, run_flowgrpo_smoke
from .timing_checks import PROBE, assert_otca_credit_follows_the_logged_map

pytestmark = pytest.mark.upstream


@pytest.fixture(scope="module")
def runs(flow_grpo, tmp_path_factory):
    root = tmp_path_factory.mktemp("flowgrpo-timing")
    env = {"OTCA_TINY_SD3_DIR": str(root / "tiny_sd3")}
    return cached_runs(lambda name, *flags, **options: run_flowgrpo_smoke(flow_grpo, root / name, *flags, env=env,
                                                                         **options))


@pytest.fixture(scope="module")
def probed(runs):
    return runs("probe", "--steps", "3", *PROBE)


def test_the_map_exists_from_the_epoch_after_the_first_probe(probed):
    records = probed.log
    assert [r["step"] for r in records] == [1, 2, 3]
    assert records[0]["objective_timing"] is None
    sampling_steps = len(records[0]["delta_s"][0])
    for record, dof in zip(records[1:], (3, 6)):
        decided = logged_timing_map(record)
        assert decided.shape == (len(record["objectives"]), sampling_steps)
        assert record["objective_timing_dof"] == dof
        # both objectives measured: upstream's jpeg_compressibility by its own reward_fn, clip_t by the registry
        assert torch.isfinite(decided).all() and ((decided >= 0) & (decided <= 1)).all()
        # the last step's prediction is nearly the decoded sample the rewards score
        assert (decided[:, -1] > 0.5).all()
    assert all(r["probe"] and 0 < r["probe_seconds"] < r["step_seconds"] for r in records)


def test_the_logged_credit_is_the_reference_of_the_logged_map(probed):
    assert check(probed.out, 1, report=lambda line: None) == []
    for record in probed.log[1:]:  # column j trains step advantage_steps[:, j]
        assert_otca_credit_follows_the_logged_map(record, record["advantage_steps"])


def test_off_is_unchanged_and_the_probe_draws_no_random_numbers(runs, probed):
    off = runs("off", "--steps", "2", "--otca")
    assert all("objective_timing" not in r and "probe_seconds" not in r for r in off.log)
    assert probed.log[0]["advantages"] == off.log[0]["advantages"]  # epoch 1: no map yet, the mode's own rule
    trained_per_epoch = len(probed.log[0]["advantages"][0])
    assert probed.result["losses"][:trained_per_epoch] == off.result["losses"][:trained_per_epoch]
    assert probed.log[1]["rewards"] == off.log[1]["rewards"]  # epoch 2: the same rollout, credited by the map
    assert probed.log[1]["advantages"] != off.log[1]["advantages"]


def test_two_processes_pool_their_probes_into_one_map(runs):
    run = runs("two", "--steps", "2", *PROBE, nproc=2)
    assert check(run.out, 2, report=lambda line: None) == []  # the ranks logged one map, the credit uses it
    second = [run.record(2, rank) for rank in (0, 1)]
    assert second[0]["objective_timing"] == second[1]["objective_timing"] is not None
    assert second[0]["objective_timing_dof"] == 8 - len(set(sum((r["group_ids"] for r in second), [])))
