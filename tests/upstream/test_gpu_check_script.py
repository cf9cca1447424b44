"""scripts/gpu_check.sh end to end on the CPU (``OTCA_GPU_CHECK_DEVICE=cpu``): the smoke run with
--otca, the run-log check against the credit engine (best-of-n: the whole group's credit, then the
kept rows) and the layer meter's line (``pytest -m upstream``)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.upstream

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu_check.sh"


def test_hunyuan_passes_the_gpu_check_pipeline_on_the_cpu(dancegrpo):
    done = subprocess.run([str(SCRIPT), "dancegrpo-hunyuan"], capture_output=True, text=True, timeout=900,
                          env={**os.environ, "OTCA_GPU_CHECK_DEVICE": "cpu", "OTCA_GPU_CHECK_RUN_S": "800",
                               "OTCA_UPSTREAM_DANCEGRPO": str(dancegrpo), "OTCA_PYTHON": sys.executable})
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    line = next(line for line in done.stdout.splitlines() if "dancegrpo-hunyuan" in line)
    assert line.startswith("PASS dancegrpo-hunyuan") and "credit matches the engine" in line
    assert "layer: time 0." in line and "of the step" in line
