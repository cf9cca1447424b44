"""DanceGRPO's real Wan2.1 ``train_one_step`` on the CPU with ``--otca_objective_timing probe``
(docs/credit.md 9.3): the probe decodes each step's predicted clean video as upstream decodes its
final latents and scores it (upstream's HPSv2 on the first frame, clip_t on ``--otca_video_frames``
frames); the run log holds the map each step's credit used, and that credit is what an independent
reference computes from the logged map (``pytest -m upstream``)."""
import pytest
import torch

from otca_patch.rehearsal.credit_check import check, logged_timing_map

from .conftest import cached_runs, run_smoke
from .timing_checks import PROBE, assert_otca_credit_follows_the_logged_map

pytestmark = pytest.mark.upstream

WAN = ["--target", "dancegrpo-wan"]


@pytest.fixture(scope="module")
def runs(dancegrpo, tmp_path_factory):
    root = tmp_path_factory.mktemp("wan-timing")
    return cached_runs(lambda name, *flags, **options: run_smoke(dancegrpo, root / name, *WAN, *flags, **options))


@pytest.fixture(scope="module")
def probed(runs):
    return runs("probe", "--steps", "3", *PROBE)


def test_the_map_exists_from_the_step_after_the_first_probe(probed):
    records = probed.log
    assert [r["step"] for r in records] == [1, 2, 3] and records[0]["objective_timing"] is None
    sampling_steps = len(records[0]["delta_s"][0])
    for record, dof in zip(records[1:], (3, 6)):
        decided = logged_timing_map(record)
        assert decided.shape == (2, sampling_steps) and record["objective_timing_dof"] == dof
        assert torch.isfinite(decided).all() and ((decided >= 0) & (decided <= 1)).all()
        # clip_t scores the decoded video itself, and the scored video is step T's own prediction
        assert decided[1, -1].item() == pytest.approx(1.0, abs=1e-6)
        assert decided[:, 0].tolist() == [0.0, 0.0]  # one noise per prompt group (init_same_noise)
    assert all(r["probe"] and 0 < r["probe_seconds"] < r["step_seconds"] for r in records)


def test_the_logged_credit_is_the_reference_of_the_logged_map(probed):
    assert check(probed.out, 1, report=lambda line: None) == []
    for record in probed.log[1:]:
        assert_otca_credit_follows_the_logged_map(record)


def test_off_is_unchanged(runs, probed):
    off = runs("off", "--steps", "2", "--otca")
    assert all("objective_timing" not in r for r in off.log)
    assert probed.log[0]["advantages"] == off.log[0]["advantages"] and probed.losses[0] == off.losses[0]
    assert probed.log[1]["rewards"] == off.log[1]["rewards"]
    assert probed.log[1]["advantages"] != off.log[1]["advantages"]
