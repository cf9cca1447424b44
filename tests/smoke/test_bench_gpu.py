"""``scripts/bench_gpu.py`` end to end: ``--tiny`` on the CPU, and a clean exit without CUDA."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_gpu.py"


def run(*flags, env=None):
    return subprocess.run([sys.executable, str(SCRIPT), *flags], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})


def test_tiny_mode_measures_the_step_and_every_credit_option(tmp_path):
    out = tmp_path / "bench.json"
    completed = run("--tiny", "--repeats", "1", "--json", str(out))
    assert completed.returncode == 0, completed.stderr[-3000:]
    result = json.loads(out.read_text())
    work, sizes = result["work"], result["sizes"]
    passes = sizes["batch"] * sizes["steps"]
    assert work["parameters"] > 0 and work["forward_s"] > 0 and work["forward_backward_s"] > 0
    assert work["work_s"] == pytest.approx(passes * (work["forward_s"] + work["forward_backward_s"]))
    assert set(result["credit"]) == {"default", "fusion=group", "weight_scope=batch", "explore_center",
                                     "final_state=prediction"}
    for row in result["credit"].values():
        assert row["percent_of_step"] == pytest.approx(100 * row["seconds"] / work["work_s"])
    assert "% of the step" in completed.stdout


def test_without_cuda_it_says_so_and_exits_cleanly():
    completed = run(env={"CUDA_VISIBLE_DEVICES": ""})
    assert completed.returncode == 0
    assert "no CUDA device here" in completed.stdout
