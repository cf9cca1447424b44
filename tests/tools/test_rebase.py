"""scripts/rebase_upstream.sh on a temporary superproject whose submodule is a synthetic upstream."""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

TRAINER = textwrap.dedent('''\
    def advantages_for(rewards):
        advantages = [r - sum(rewards) / len(rewards) for r in rewards]
        return advantages
''')

SPEC = textwrap.dedent('''\
    [target]
    name = "synthetic-trainer"
    upstream = "Synthetic"
    file = "trainer/train.py"
    runtime = "synthetic_runtime:Runtime"
    verified_commit = "0000000000000000000000000000000000000000"
    verified_sha256 = "0000000000000000000000000000000000000000000000000000000000000000"

    [[hooks]]
    name = "scale"
    function = "advantages_for"
    anchor = "return advantages"
    action = "replace"
    code = "return __otca__.scale(advantages)"
    reads = ["advantages"]

    [[hooks]]
    name = "mean_line"
    function = "advantages_for"
    anchor = "advantages = ..."
    action = "insert_after"
    code = "pass"
    reads = []
''')


def git(cwd, *args):
    return subprocess.run(["git", "-c", "protocol.file.allow=always", *args], cwd=cwd, check=True,
                          capture_output=True, text=True).stdout.strip()


def commit_trainer(clone, text, message):
    (clone / "trainer" / "train.py").write_text(text)
    git(clone, "add", "-A")
    git(clone, "commit", "-q", "-m", message)
    return git(clone, "rev-parse", "HEAD")


@pytest.fixture()
def repos(tmp_path, monkeypatch):
    """A clone of "upstream" (v1 pinned; later: `good` keeps the anchors, `broken` loses one) and a
    superproject with it as the submodule upstream/Synthetic."""
    identity = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                "GIT_COMMITTER_EMAIL": "t@t", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    for key, value in identity.items():  # the test's own git calls commit too
        monkeypatch.setenv(key, value)
    clone = tmp_path / "Synthetic"
    (clone / "trainer").mkdir(parents=True)
    git(clone, "init", "-q", "-b", "main")
    v1 = commit_trainer(clone, TRAINER, "v1")
    superproject = tmp_path / "super"
    superproject.mkdir()
    git(superproject, "init", "-q", "-b", "main")
    git(superproject, "submodule", "add", "-q", str(clone), "upstream/Synthetic")
    git(superproject, "commit", "-q", "-m", "pin v1")
    good = commit_trainer(clone, TRAINER.replace("def advantages_for", "# v2: a comment\ndef advantages_for"), "v2")
    git(clone, "tag", "good")
    broken = commit_trainer(clone, TRAINER.replace("return advantages", "return list(advantages)"), "v3")
    git(clone, "tag", "broken")
    patches = tmp_path / "patches"
    patches.mkdir()
    (patches / "synthetic.toml").write_text(SPEC)
    env = dict(os.environ, OTCA_PATCHES_DIR=str(patches), OTCA_PYTHON=sys.executable,
               PYTHONPATH=str(REPO), PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    env.pop("OTCA_REBASE_SMOKE", None)
    return {"clone": clone, "super": superproject, "env": env, "v1": v1, "good": good, "broken": broken}


def rebase(repos, *args, smoke="true"):
    env = dict(repos["env"], OTCA_REBASE_SMOKE=smoke) if smoke is not None else repos["env"]
    return subprocess.run([str(REPO / "scripts" / "rebase_upstream.sh"), *args], cwd=repos["super"], env=env,
                          capture_output=True, text=True, timeout=300)


def pinned(repos):
    return git(repos["super"], "ls-files", "--stage", "upstream/Synthetic").split()[1]


def checked_out(repos):
    return git(repos["super"] / "upstream" / "Synthetic", "rev-parse", "HEAD")


def test_a_commit_keeping_the_anchors_is_pinned(repos):
    done = rebase(repos, "good", str(repos["clone"]))
    assert done.returncode == 0, done.stdout + done.stderr
    assert pinned(repos) == checked_out(repos) == repos["good"]
    assert "still hold (2): synthetic-trainer:scale, synthetic-trainer:mean_line" in done.stdout
    assert "need a new spec (0): none" in done.stdout
    assert "synthetic-trainer  file changed since the verified commit; 2 hook points hold; smoke: passed" in done.stdout


def test_a_commit_breaking_an_anchor_leaves_the_pin_and_checkout_alone(repos):
    done = rebase(repos, "broken", str(repos["clone"]))
    assert done.returncode == 1, done.stdout + done.stderr
    assert pinned(repos) == checked_out(repos) == repos["v1"]
    assert "still hold (1): synthetic-trainer:mean_line" in done.stdout
    assert "need a new spec (1): synthetic-trainer:scale (anchor not found" in done.stdout
    assert "smoke: not run (its hook points fail)" in done.stdout  # not run on a checkout the layer refuses


def test_stay_keeps_the_broken_commit_checked_out_for_spec_work(repos):
    done = rebase(repos, "--stay", repos["broken"][:10], str(repos["clone"]))
    assert done.returncode == 1
    assert checked_out(repos) == repos["broken"] and pinned(repos) == repos["v1"]


def test_a_failing_smoke_run_leaves_the_pin_alone(repos, tmp_path):
    marker = tmp_path / "smoke_ran"
    done = rebase(repos, "good", str(repos["clone"]),
                  smoke=f'echo "$UPSTREAM_DIR" > {marker}; test -d "$SMOKE_OUT"; exit 3')
    assert done.returncode == 1, done.stdout + done.stderr
    assert "exit 3" in done.stdout and pinned(repos) == repos["v1"] == checked_out(repos)
    assert marker.read_text().strip() == str(repos["super"] / "upstream" / "Synthetic")


def test_bad_ref_and_unknown_submodule_are_clear_errors(repos):
    done = rebase(repos, "no-such-tag", str(repos["clone"]))
    assert done.returncode == 2 and "no-such-tag is not a commit, branch or tag" in done.stderr
    done = rebase(repos, "good", str(repos["clone"]), "--submodule", "upstream/Other")
    assert done.returncode == 2 and "upstream/Other is not a submodule" in done.stderr
    assert pinned(repos) == repos["v1"]


def otca_rebase(repos, cwd, *args):
    env = dict(repos["env"], OTCA_REBASE_SMOKE="true")
    return subprocess.run([sys.executable, "-m", "otca_patch.cli", "rebase", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def unpacked_release(repos, tmp_path, ref) -> Path:
    """The clone's tree at ``ref`` without its .git, as an unpacked release is."""
    git(repos["clone"], "checkout", "-q", ref)
    release = tmp_path / "release"
    (release / "trainer").mkdir(parents=True)
    (release / "trainer" / "train.py").write_text((repos["clone"] / "trainer" / "train.py").read_text())
    return release


def test_rebase_in_an_unpacked_release_says_the_one_command_that_checks_it(repos, tmp_path):
    release = unpacked_release(repos, tmp_path, "good")
    done = otca_rebase(repos, release, "good")
    assert done.returncode == 2
    assert "not in a git repository" in done.stderr and "`otca-patch rebase --from .`" in done.stderr
    assert "fatal:" not in done.stderr
    checked = otca_rebase(repos, release, "--from", ".")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "synthetic-trainer  file changed since the verified commit; 2 hook points hold; smoke: passed" in checked.stdout
    assert checked.stdout.strip().splitlines()[-1] == "rebase: release fits: every target it has holds"


def test_rebase_from_a_release_that_breaks_an_anchor_names_it(repos, tmp_path):
    release = unpacked_release(repos, tmp_path, "broken")
    done = otca_rebase(repos, tmp_path, "--from", "release")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "need a new spec (1): synthetic-trainer:scale (anchor not found" in done.stdout
    assert not (release / ".git").exists()  # nothing was made a repository
