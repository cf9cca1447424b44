"""`otca-patch rebase REF` in a plain DanceGRPO clone (how a user who pip-installed otca-patch works):
a git repository made of the first-release snapshot (93ec253), the verified one (15cc71d) and a later
commit touching the FLUX trainer. The smoke command records which targets it ran for."""
import os
import subprocess
import sys

import pytest

from upstream_snapshots import REPO, build_flowgrpo_clone, commit_tree, git, missing, unpack_snapshot

SPEC_FILES = {"dancegrpo-flux": "train_grpo_flux.py", "dancegrpo-flux-lora": "train_grpo_flux_lora.py",
              "dancegrpo-hunyuan": "train_grpo_hunyuan.py", "dancegrpo-qwenimage": "train_grpo_qwenimage.py",
              "dancegrpo-qwenimage-edit": "train_grpo_qwenimage_edit.py", "dancegrpo-sd": "train_grpo_sd.py",
              "dancegrpo-skyreels-i2v": "train_grpo_skyreels_i2v.py", "dancegrpo-wan": "train_grpo_wan_2_1.py"}


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
    assert "file changed since the verified commit; 15 hook points hold; smoke: passed" in target_line(
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


# ---- FlowGRPO: a clone at the pinned ac4c86e, then 9745241 (upstream's next state) as the next commit

#: every FlowGRPO GRPO target: SD3 first (its file changed at 9745241), then the specs verified on 9745241
FLOWGRPO_TARGETS = ("flowgrpo-sd3", "flowgrpo-sd3-guard", "flowgrpo-sd3-fast", "flowgrpo-flux", "flowgrpo-flux-fast",
                    "flowgrpo-flux-kontext", "flowgrpo-qwenimage", "flowgrpo-qwenimage-edit", "flowgrpo-wan2-1")


@pytest.fixture(scope="module")
def flowgrpo_clone(tmp_path_factory):
    return build_flowgrpo_clone(tmp_path_factory.mktemp("plain"))


def test_flowgrpo_rebase_onto_9745241_names_every_target_smokes_the_changed_one_and_restores(flowgrpo_clone, tmp_path):
    marker = tmp_path / "smoked"
    before = git(flowgrpo_clone, "rev-parse", "HEAD")
    done = rebase(flowgrpo_clone, "9745241", marker)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "rebase: 9745241 fits: every target it has holds" in done.stdout
    # SD3's file changed at 9745241 (its structure holds): its smoke runs; the newer trainers' specs
    # are verified on 9745241 itself: their files are the verified ones
    assert "file changed since the verified commit; 16 hook points hold; smoke: passed" in target_line(
        done.stdout, "flowgrpo-sd3")
    for name in FLOWGRPO_TARGETS[1:]:
        assert "verified file;" in target_line(done.stdout, name) and "smoke: not needed" in target_line(done.stdout, name)
    assert marker.read_text().split() == ["flowgrpo-sd3"]
    assert "need a new spec (0): none" in done.stdout
    lines = done.stdout.splitlines()
    for file in ("scripts/train_sd3_dpo.py", "scripts/train_sd3_sft.py"):
        assert f"  {file}: not a GRPO trainer: launch it without --otca" in lines
    # Bagel is the one GRPO trainer without a spec (docs/flowgrpo-trainers.md says why)
    assert "trainer files no spec covers (3):" in lines
    assert "  scripts/train_bagel.py: a GRPO trainer without a spec yet: it needs a spec of its own" in lines
    assert max(len(line) for line in lines) <= 110
    assert git(flowgrpo_clone, "rev-parse", "HEAD") == before
    assert git(flowgrpo_clone, "rev-parse", "--abbrev-ref", "HEAD") == "main"
    assert not git(flowgrpo_clone, "status", "--porcelain")


def test_flowgrpo_rebase_back_to_ac4c86e_names_the_targets_it_lacks(flowgrpo_clone, tmp_path):
    """The other way (a user on 9745241 trying the pinned commit): the newer trainers have no file
    there, and are named; SD3's verified file holds."""
    git(flowgrpo_clone, "checkout", "-q", "9745241")
    try:
        done = rebase(flowgrpo_clone, "ac4c86e", tmp_path / "smoked")
        assert done.returncode == 0, done.stdout + done.stderr
        assert "verified file; 16 hook points hold" in target_line(done.stdout, "flowgrpo-sd3")
        for name in FLOWGRPO_TARGETS[1:]:
            assert "no file at ac4c86e" in target_line(done.stdout, name)
        assert not (tmp_path / "smoked").exists()
        assert git(flowgrpo_clone, "rev-parse", "HEAD") == git(flowgrpo_clone, "rev-parse", "9745241")
    finally:
        git(flowgrpo_clone, "checkout", "-q", "main")
