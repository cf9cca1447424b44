"""Rebasing for real: DanceGRPO's first public release (93ec253, May 2025). Its FLUX trainer keeps
every hook point of the pinned spec but its ``train_one_step`` takes one argument fewer; its
HunyuanVideo trainer is structured differently. `doctor`, the FLUX smoke run (vanilla and --otca)
and scripts/rebase_upstream.sh run on it."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import upstream_snapshots as snapshots

from .conftest import REPO, require_upstream_packages, run_smoke

pytestmark = pytest.mark.upstream
FIRST_RELEASE = "DanceGRPO-93ec253.tar.gz"
HUNYUAN_BROKEN = ["pin trained_log_probs_column", "hook collect_text_alignment", "hook collect_failed_text_alignment",
                  "hook mark_rollout_rows", "hook per_step_advantages", "hook record_step_order",
                  "hook permute_advantages_with_steps", "hook one_loss_on_the_step_advantage",
                  "hook watch_trained_step"]


@pytest.fixture(scope="module")
def first_release() -> Path:
    checkout = snapshots.unpack_snapshot(FIRST_RELEASE)
    if checkout is None:
        snapshots.missing(f"no ../shared/upstream/{FIRST_RELEASE} (or $OTCA_SHARED/upstream/)")
    return checkout


def doctor(checkout: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "otca_patch.cli", "doctor", str(checkout)], capture_output=True,
                          text=True, timeout=120, cwd=REPO, env=env)


def test_doctor_names_exactly_the_hook_points_that_need_a_new_spec(first_release):
    done = doctor(first_release)
    assert done.returncode == 1, done.stdout + done.stderr
    from otca_patch.targets.registry import spec_named

    flux = spec_named("dancegrpo-flux")  # its skeletons' entries included
    every_point = len(flux.hooks) + len(flux.pins)  # all of the pinned spec's points hold there
    assert f"dancegrpo-flux (fastvideo/train_grpo_flux.py): holds ({every_point} hook points and pins)" in done.stdout
    verdict = next(line for line in done.stdout.splitlines() if line.strip().startswith("dancegrpo-hunyuan ("))
    assert verdict.split(": ", 1)[1] == f"needs a new spec for 9 of 14: {', '.join(HUNYUAN_BROKEN)}"
    assert "train_grpo_flux.py: sha256" in done.stdout and "its structure still matches" in done.stdout


def test_the_flux_smoke_runs_on_the_first_release_vanilla_and_with_otca(first_release, tmp_path):
    require_upstream_packages()
    vanilla = run_smoke(first_release, tmp_path / "vanilla", "--steps", "1")
    otca = run_smoke(first_release, tmp_path / "otca", "--steps", "1", "--otca")
    assert vanilla.result["otca"] is False and otca.result["otca"] is True
    assert len(vanilla.result["steps"]) == len(otca.result["steps"]) == 1
    assert len(otca.log) == 1 and otca.log[0]["objectives"] == ["upstream", "clip_t"]
    # the changed file runs only after its hook points held, and says so in one line
    assert "differs from the file the spec was verified on" in otca.completed.stderr
    assert "structure still matches" in otca.completed.stderr


def git(cwd, *args):
    return subprocess.run(["git", "-c", "protocol.file.allow=always", *args], cwd=cwd, check=True,
                          capture_output=True, text=True).stdout.strip()


@pytest.fixture()
def history(tmp_path, monkeypatch):
    """A clone holding the pinned commit, then the first release as a later commit (tag first-release),
    and a superproject pinning the submodule upstream/DanceGRPO to the former."""
    identity = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                "GIT_COMMITTER_EMAIL": "t@t", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    for key, value in identity.items():
        monkeypatch.setenv(key, value)
    pinned = snapshots.unpack_snapshot(snapshots.PINNED_SNAPSHOTS["DanceGRPO"])
    first = snapshots.unpack_snapshot(FIRST_RELEASE)
    if pinned is None or first is None:
        snapshots.missing("the DanceGRPO snapshots are not in ../shared/upstream/")
    clone = tmp_path / "DanceGRPO"
    shutil.copytree(pinned, clone)
    git(clone, "init", "-q", "-b", "main")
    git(clone, "add", "-A")
    git(clone, "commit", "-q", "-m", "pinned")
    for entry in clone.iterdir():
        if entry.name != ".git":
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    shutil.copytree(first, clone, dirs_exist_ok=True)
    git(clone, "add", "-A")
    git(clone, "commit", "-q", "-m", "first release")
    git(clone, "tag", "first-release")
    superproject = tmp_path / "super"
    superproject.mkdir()
    git(superproject, "init", "-q", "-b", "main")
    git(superproject, "-c", "advice.detachedHead=false", "submodule", "add", "-q", str(clone), "upstream/DanceGRPO")
    git(superproject / "upstream" / "DanceGRPO", "checkout", "-q", "HEAD~1")
    git(superproject, "add", "upstream/DanceGRPO")
    git(superproject, "commit", "-q", "-m", "pin")
    env = dict(os.environ, OTCA_PYTHON=sys.executable,
               PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    return clone, superproject, env


def rebase(superproject, env, *args):
    return subprocess.run([str(REPO / "scripts" / "rebase_upstream.sh"), *args], cwd=superproject, env=env,
                          capture_output=True, text=True, timeout=900)


def test_rebase_to_the_first_release_names_the_hook_points_that_need_a_new_spec(history):
    clone, superproject, env = history
    pin = git(superproject, "ls-files", "--stage", "upstream/DanceGRPO").split()[1]
    done = rebase(superproject, env, "--smoke", "skip", "first-release", str(clone))
    assert done.returncode == 1, done.stdout + done.stderr
    # the per-target report: hunyuan's line, then each hook point that needs a new spec
    hunyuan = next(line for line in done.stdout.splitlines() if line.strip().startswith("dancegrpo-hunyuan "))
    assert "9 of 14 hook points need a new spec" in hunyuan, done.stdout
    assert all(f"dancegrpo-hunyuan:{point.split()[1]} (" in done.stdout for point in HUNYUAN_BROKEN), done.stdout
    assert git(superproject, "ls-files", "--stage", "upstream/DanceGRPO").split()[1] == pin


def test_rebase_of_the_flux_spec_alone_moves_the_pin_after_a_real_smoke_run(history, tmp_path):
    """With only the FLUX spec (what a FLUX-only user ships), every hook point holds on the first
    release, the default smoke run (the real train_one_step, --otca) passes and the pin moves."""
    require_upstream_packages()
    clone, superproject, env = history
    patches = tmp_path / "patches"
    (patches / "dancegrpo").mkdir(parents=True)
    for skeleton_or_spec in [*(REPO / "patches" / "dancegrpo").glob("_*.toml"), REPO / "patches" / "dancegrpo" / "train_grpo_flux.toml"]:
        shutil.copy(skeleton_or_spec, patches / "dancegrpo")  # the spec and the family skeletons it extends
    env = dict(env, OTCA_PATCHES_DIR=str(patches))
    env.pop("OTCA_REBASE_SMOKE", None)
    done = rebase(superproject, env, "first-release", str(clone))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "smoke: passed" in done.stdout
    assert git(superproject, "ls-files", "--stage", "upstream/DanceGRPO").split()[1] == git(clone, "rev-parse", "HEAD")


def test_flowgrpo_rebase_onto_9745241_runs_the_real_smoke_of_the_changed_target(tmp_path_factory):
    """ac4c86e -> 9745241 in a plain clone with the default smoke (the real train_sd3.py main(), --otca):
    the run a user gets (its printed report is docs/flowgrpo-commits.md's example)."""
    from upstream_snapshots import build_flowgrpo_clone

    clone = build_flowgrpo_clone(tmp_path_factory.mktemp("flowgrpo_rebase"))
    env = dict(os.environ, PYTHONPATH=str(REPO), WANDB_MODE="disabled")
    env.pop("OTCA_REBASE_SMOKE", None)
    env.pop("OTCA_PATCHES_DIR", None)
    done = subprocess.run([sys.executable, "-m", "otca_patch.cli", "rebase", "9745241"], cwd=clone, env=env,
                          capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "16 hook points hold; smoke: passed" in done.stdout
    assert not git(clone, "status", "--porcelain") and git(clone, "rev-parse", "--abbrev-ref", "HEAD") == "main"
