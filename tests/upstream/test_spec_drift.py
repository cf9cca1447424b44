"""Drifts of DanceGRPO's FLUX trainer that keep every anchor but break what the inserted code relies
on: a renamed local it reads, another column order for the trained step. `doctor`, the wrapper's
pre-flight and the worker refuse them before any rollout; a drift no static check sees is stopped
by the run-time invariant at the first training step."""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO, run_smoke

pytestmark = pytest.mark.upstream
FLUX = "fastvideo/train_grpo_flux.py"


@pytest.fixture(scope="module")
def pinned():
    from upstream_snapshots import upstream_checkout

    return upstream_checkout("DanceGRPO", "OTCA_UPSTREAM_DANCEGRPO", FLUX)


def in_train_one_step(source: str, edit) -> str:
    """``source`` with ``edit`` applied to the text of ``train_one_step`` only."""
    start = source.index("def train_one_step(")
    end = source.index("\ndef ", start + 1)
    return source[:start] + edit(source[start:end]) + source[end:]


def rename(name: str, new: str):
    return lambda text: re.sub(rf"\b{name}\b", new, text)


def reverse_columns(text: str) -> str:
    """Train each sample's steps in the reverse column order, consistently for latents, log-probs and
    timesteps (the advantage the layer reads would then belong to another step)."""
    text = text.replace("        for _ in range(train_timesteps):\n",
                        "        for _ in range(train_timesteps):\n            j = train_timesteps - 1 - _\n")
    for key in ("latents", "next_latents", "log_probs", "timesteps"):
        text = text.replace(f'sample["{key}"][:,_]', f'sample["{key}"][:,j]')
    return text.replace("perms[i][_]", "perms[i][j]")


DRIFTS = {
    "renamed all_latents": (rename("all_latents", "trajectory"), ["per_step_advantages", "'all_latents'"]),
    "renamed perms": (rename("perms", "orders"), ["record_step_order", "'perms'"]),
    "reordered columns": (reverse_columns, ["trained_latents_column", "trained_log_probs_column"]),
}


def drifted_copy(pinned: Path, tmp_path: Path, edit) -> Path:
    copy = tmp_path / "DanceGRPO"
    shutil.copytree(pinned / "fastvideo", copy / "fastvideo")
    trainer = copy / FLUX
    source = trainer.read_text()
    changed = in_train_one_step(source, edit)
    assert changed != source
    compile(changed, str(trainer), "exec")  # still valid Python: only the layer's assumptions broke
    trainer.write_text(changed)
    return copy


@pytest.mark.parametrize("drift", sorted(DRIFTS))
def test_doctor_refuses_the_drift(pinned, tmp_path, drift):
    edit, expected = DRIFTS[drift]
    copy = drifted_copy(pinned, tmp_path, edit)
    doctor = subprocess.run([sys.executable, "-m", "otca_patch.cli", "doctor", str(copy)], capture_output=True,
                            text=True, timeout=120, cwd=REPO)
    assert doctor.returncode == 1, doctor.stdout
    failing = [line for line in doctor.stdout.splitlines() if "FAIL" in line]
    for part in expected:
        assert any(part in line for line in failing), (part, failing)
    assert "differs from the file the spec was verified on" in doctor.stdout


@pytest.mark.parametrize("drift", sorted(DRIFTS))
def test_the_worker_and_the_preflight_refuse_the_drift_before_any_rollout(pinned, tmp_path, drift):
    edit, expected = DRIFTS[drift]
    copy = drifted_copy(pinned, tmp_path, edit)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    worker = subprocess.run([sys.executable, "-m", "otca_patch.cli", "run", FLUX, "--otca"], cwd=copy, env=env,
                            capture_output=True, text=True, timeout=120)
    assert worker.returncode == 2, worker.stderr
    assert expected[0] in worker.stderr and "Traceback" not in worker.stderr
    launch = copy / "launch.sh"
    launch.write_text(f"python {FLUX} --seed 1\n")
    wrapper = subprocess.run([str(REPO / "scripts" / "otca_run.sh"), str(launch), "--otca"], cwd=copy,
                             env=dict(env, OTCA_PYTHON=sys.executable), capture_output=True, text=True, timeout=120)
    assert wrapper.returncode == 2, wrapper.stderr
    assert expected[0] in wrapper.stderr


def test_a_drift_no_static_check_sees_stops_at_the_first_training_step(pinned, tmp_path):
    """Each sample's steps reversed inside the loop: every anchor and pin holds, but the layer's
    advantage column no longer belongs to the step trained."""
    flip = ("        sample = {k: (v.flip(1) if k in ('latents', 'next_latents', 'log_probs', 'timesteps') else v) "
            "for k, v in sample.items()}\n")
    copy = drifted_copy(pinned, tmp_path, lambda text: text.replace(
        "        for _ in range(train_timesteps):\n", flip + "        for _ in range(train_timesteps):\n"))
    doctor = subprocess.run([sys.executable, "-m", "otca_patch.cli", "doctor", str(copy)], capture_output=True,
                            text=True, timeout=120, cwd=REPO)
    assert doctor.returncode == 0, doctor.stdout
    run = run_smoke(copy, tmp_path / "out", "--otca", "--steps", "1", check=False)
    assert run.completed.returncode == 2 and run.result is None
    assert "invariant 'trained_step_matches_advantage_column'" in run.completed.stderr
    assert "final loss" not in run.completed.stdout, "it must stop before the first loss is computed"
