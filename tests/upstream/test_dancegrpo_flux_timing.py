"""DanceGRPO's real FLUX ``train_one_step`` on the CPU with ``--otca_objective_timing probe``
(docs/credit.md 9.3): the probe decodes and scores each step's predicted clean sample, the run log
holds the map each step's credit used, and that credit is what an independent reference computes
from the logged map (``pytest -m upstream``)."""
import numpy as np
import pytest
import torch

from otca_patch.rehearsal.credit_check import check, logged_timing_map

from .conftest import cached_runs, run_smoke
from .timing_checks import PROBE, assert_otca_credit_follows_the_logged_map

pytestmark = pytest.mark.upstream

STEPS = 3


@pytest.fixture(scope="module")
def runs(dancegrpo, tmp_path_factory):
    root = tmp_path_factory.mktemp("flux-timing")
    return cached_runs(lambda name, *flags, **options: run_smoke(dancegrpo, root / name, *flags, **options))


@pytest.fixture(scope="module")
def probed(runs):
    return runs("probe", "--steps", str(STEPS), *PROBE)


def test_the_map_exists_from_the_step_after_the_first_probe(probed):
    records = probed.log
    assert [r["step"] for r in records] == [1, 2, 3]
    assert records[0]["objective_timing"] is None and records[0]["objective_timing_dof"] == 0
    sampling_steps = len(records[0]["delta_s"][0])
    for record, dof in zip(records[1:], (3, 6)):  # 4 samples in 1 group per probe: 3 degrees of freedom each
        decided = logged_timing_map(record)
        assert decided.shape == (2, sampling_steps)  # objectives upstream (HPSv2), clip_t x steps
        assert record["objective_timing_dof"] == dof
        assert torch.isfinite(decided).all() and ((decided >= 0) & (decided <= 1)).all()
        # the scored image is step T's own prediction: the probe's score of it is the final score (its
        # HPSv2 is upstream's own reward, computed as upstream computes it)
        torch.testing.assert_close(decided[:, -1], torch.ones(2, dtype=torch.float64), atol=1e-6, rtol=0)
        # one noise per prompt group (init_same_noise): step 1's prediction does not vary within it
        assert decided[:, 0].tolist() == [0.0, 0.0]
    assert all(r["probe"] for r in records)
    assert all(0 < r["probe_seconds"] < r["step_seconds"] for r in records)


def test_the_logged_credit_is_the_reference_of_the_logged_map(probed):
    assert check(probed.out, 1, report=lambda line: None) == []  # the credit engine with the logged map
    for record in probed.log[1:]:  # upstream trains the leading columns (its permuted steps' advantages)
        assert_otca_credit_follows_the_logged_map(record)


def test_off_is_unchanged_and_the_probe_draws_no_random_numbers(runs, probed):
    off = runs("off", "--steps", "2", "--otca")
    assert all("objective_timing" not in r and "probe_seconds" not in r for r in off.log)
    # step 1 has no map yet: the mode's own rule, the same update as off
    assert probed.log[0]["advantages"] == off.log[0]["advantages"]
    assert probed.losses[0] == off.losses[0] and probed.grad_norms[0] == off.grad_norms[0]
    # step 2 rolls out the same samples (same rewards), credited by the map
    assert probed.log[1]["rewards"] == off.log[1]["rewards"]
    assert probed.log[1]["advantages"] != off.log[1]["advantages"]


def test_the_timing_command_draws_the_runs_last_map(probed, capsys):
    import json

    from otca_patch.analysis.timing import main

    assert main([str(probed.out)]) == 0
    summary = json.loads((probed.out / "timing.json").read_text())
    [drawn] = summary["maps"]
    last = probed.log[-1]
    assert drawn["label"] == f"run log, step {last['step']}" and drawn["objectives"] == last["objectives"]
    assert drawn["dof"] == last["objective_timing_dof"]
    np.testing.assert_allclose(drawn["decided"], logged_timing_map(last).numpy(), atol=1e-12)
    assert (probed.out / "timing.png").stat().st_size > 0
    assert "clip_t: 80% decided by step" in capsys.readouterr().out
