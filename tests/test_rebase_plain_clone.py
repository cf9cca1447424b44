"""`otca-patch rebase REF` in a plain DanceGRPO clone (how a user who pip-installed otca-patch works):
a git repository made of the first-release snapshot (93ec253), the verified one (15cc71d) and a later
commit touching the FLUX trainer. The smoke command records which targets it ran for."""
import os
import shutil
import subprocess
import sys

import pytest

from upstream_snapshots import REPO, missing, unpack_snapshot

SPEC_FILES = {"dancegrpo-flux": "train_grpo_flux.py", "dancegrpo-flux-lora": "train_grpo_flux_lora.py",
              "dancegrpo-hunyuan": "train_grpo_hunyuan.py", "dancegrpo-qwenimage": "train_grpo_qwenimage.py",
              "dancegrpo-qwenimage-edit": "train_grpo_qwenimage_edit.py", "dancegrpo-sd": "train_grpo_sd.py",
              "dancegrpo-skyreels-i2v": "train_grpo_skyreels_i2v.py", "dancegrpo-wan": "train_grpo_wan_2_1.py"}


def git(cwd, *args):
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def commit_tree(repo, source, message, tag):
    for entry in repo.iterdir():
        if entry.name != ".git":
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    shutil.copytree(source, repo, dirs_exist_ok=True, symlinks=True)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    git(repo, "tag", tag)


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    first, verified = unpack_snapshot("DanceGRPO-93ec253.tar.gz"), unpack_snapshot("DanceGRPO-15cc71d.tar.gz")
    if first is None or verified is None:
        missing("the DanceGRPO snapshots are not under shared/upstream")
    identity = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                "GIT_COMMITTER_EMAIL": "t@t", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    os.environ.update(identity)
    repo = tmp_path_factory.mktemp("plain") / "DanceGRPO"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    commit_tree(repo, first, "first release (93ec253)", "first-release")
    commit_tree(repo, verified, "15cc71d", "verified")
    with open(repo / "fastvideo" / "train_grpo_flux.py", "a") as handle:
        handle.write("\n# a later commit touching the FLUX trainer\n")
    git(repo, "commit", "-q", "-am", "later")
    git(repo, "tag", "later")
    return repo


def rebase(repo, ref, marker):
    smoke = f'echo "$OTCA_TARGET" >> {marker}; test "$UPSTREAM_DIR" = "{repo}" && test -d "$SMOKE_OUT"'
    env = dict(os.environ, PYTHONPATH=str(REPO), OTCA_REBASE_SMOKE=smoke)
    env.pop("OTCA_PATCHES_DIR", None)
    return subprocess.run([sys.executable, "-m", "otca_patch.cli", "rebase", ref], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=600)


def target_line(stdout, name):
    [line] = [line for line in stdout.splitlines() if line.startswith(f"  {name} ")]
    return line


def test_a_later_commit_where_all_hold_smokes_the_changed_target_only(clone, tmp_path):
    marker = tmp_path / "smoked"
    done = rebase(clone, "later", marker)
    assert done.returncode == 0, done.stdout + done.stderr
    assert marker.read_text().split() == ["dancegrpo-flux"]
    assert "file changed since the verified commit; 12 hook points hold; smoke: passed" in target_line(
        done.stdout, "dancegrpo-flux")
    for name in SPEC_FILES:
        if name != "dancegrpo-flux":
            assert "verified file;" in target_line(done.stdout, name) and "smoke: not needed" in target_line(
                done.stdout, name)
    assert "need a new spec (0): none" in done.stdout and "later fits" in done.stdout
    assert max(len(line) for line in done.stdout.splitlines()) <= 110  # no 3,600-character line
    assert git(clone, "rev-parse", "--abbrev-ref", "HEAD") == "main" and not git(clone, "status", "--porcelain")


def test_the_first_release_is_reported_per_target_and_the_clone_restored(clone, tmp_path):
    marker = tmp_path / "smoked"
    done = rebase(clone, "first-release", marker)
    assert done.returncode == 1, done.stdout + done.stderr
    absent = ["dancegrpo-flux-lora", "dancegrpo-qwenimage", "dancegrpo-qwenimage-edit", "dancegrpo-skyreels-i2v",
              "dancegrpo-wan"]
    for name in absent:  # present now, absent at the first release: named, never silently dropped
        assert f"no file at first-release (fastvideo/{SPEC_FILES[name]})" in target_line(done.stdout, name)
    assert "no file at first-release (5):" in done.stdout
    assert "need a new spec" in target_line(done.stdout, "dancegrpo-hunyuan")
    assert "smoke: not run (its hook points fail)" in target_line(done.stdout, "dancegrpo-hunyuan")
    assert sorted(marker.read_text().split()) == ["dancegrpo-flux", "dancegrpo-sd"]  # hooks hold, files changed
    assert git(clone, "rev-parse", "--abbrev-ref", "HEAD") == "main" and not git(clone, "status", "--porcelain")


def test_local_changes_stop_it_before_anything_moves(clone, tmp_path):
    trainer = clone / "fastvideo" / "train_grpo_flux.py"
    original = trainer.read_text()
    trainer.write_text(original + "# my local edit\n")
    try:
        done = rebase(clone, "first-release", tmp_path / "smoked")
        assert done.returncode == 2 and "local changes to tracked files" in done.stderr
        assert trainer.read_text().endswith("# my local edit\n") and git(clone, "rev-parse", "--abbrev-ref", "HEAD") == "main"
    finally:
        trainer.write_text(original)
