"""The launch rehearsal of DanceGRPO's FLUX trainer, end to end (``pytest -m upstream``): upstream's
``main()`` under its own torchrun line, 2 processes, its DataLoader workers, run with no wrapper,
under ``otca-patch launch`` and under ``--otca``; its line must be PASS with every field."""
import os
import re
import subprocess
import sys

import pytest

from .conftest import REPO

pytestmark = pytest.mark.upstream

LINE = re.compile(r"^(PASS|FAIL) dancegrpo-flux (.*)$", re.M)


def test_dancegrpo_flux_rehearses_end_to_end(dancegrpo, tmp_path):
    done = subprocess.run([sys.executable, "-m", "otca_patch.rehearsal", "--out", str(tmp_path), "dancegrpo-flux"],
                          cwd=REPO, env={**os.environ, "OTCA_UPSTREAM_DANCEGRPO": str(dancegrpo)},
                          capture_output=True, text=True, timeout=3600)
    found = LINE.search(done.stdout)
    assert found, done.stdout + done.stderr[-3000:]
    assert found.group(1) == "PASS", found.group(0)
    fields = dict(part.split("=", 1) for part in found.group(2).split())
    assert fields == {"ranks": "2", "dataloader_workers": "4", "steps": fields["steps"], "checkpoint": "yes",
                      "vanilla": "identical", "credit": "reference"}
    assert int(fields["steps"]) >= 3
    assert done.returncode == 0
    assert "launch rehearsal: passed (1 targets)" in done.stdout
    replaced = (tmp_path / "dancegrpo-flux" / "replacements.txt").read_text()
    assert "dist.init_process_group('nccl') -> gloo" in replaced
