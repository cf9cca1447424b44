"""scripts/ab_compare.sh --smoke on the real DanceGRPO checkout (``pytest -m upstream``)."""
import os
import subprocess
import sys

import pytest

from sample_grid_checks import check_ab_samples

from .conftest import REPO

pytestmark = pytest.mark.upstream


def test_smoke_ab_run_produces_a_report_with_plots(dancegrpo, tmp_path):
    out = tmp_path / "ab"
    command = [str(REPO / "scripts" / "ab_compare.sh"), "--out", str(out), "--smoke", str(dancegrpo),
               "--steps", "2", "--otca_mode", "otca"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1200, cwd=tmp_path,
                          env=dict(os.environ, OTCA_PYTHON=sys.executable))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = (out / "compare" / "report.md").read_text()
    assert "| vanilla | vanilla, observed" in report and "| otca | OTCA, mode otca" in report
    assert "Objectives: upstream, clip_t." in report
    for name in ("reward_upstream.png", "reward_clip_t.png", "balanced_score.png", "step_weights_otca.png",
                 "mixture_otca.png"):
        assert (out / "compare" / name).stat().st_size > 0, name
    # both sides started from the same weights, prompts and noise: step 1's rollout rewards agree
    vanilla = (out / "vanilla" / "reward.txt").read_text().split()
    otca = (out / "otca" / "reward.txt").read_text().split()
    assert len(vanilla) == len(otca) == 2 and vanilla[0] == otca[0]
    # the samples open the report: both sides' step-1 samples alike, their step-2 samples not
    assert report.splitlines()[2] == "![samples](samples.png)"
    check_ab_samples(out, columns=4)
