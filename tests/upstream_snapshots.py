"""Where the tests find an upstream checkout: ``OTCA_UPSTREAM_<NAME>``, the populated git submodule
``upstream/<name>``, or the source snapshot of the pinned commit in ``../shared/upstream/`` (or
``$OTCA_SHARED/upstream/``), unpacked once into a temporary folder outside the repository.

Under CI (``CI=true``) a test that needs an upstream and finds none fails instead of skipping.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

#: the snapshot of each pinned upstream commit (the one the hook specs are verified on)
PINNED_SNAPSHOTS = {"DanceGRPO": "DanceGRPO-15cc71d.tar.gz", "flow_grpo": "flow_grpo-ac4c86e.tar.gz",
                    "MixGRPO": "MixGRPO-e5cdd6a.tar.gz"}
#: the snapshots of the newer upstream commits some specs are verified on (FlowGRPO 9745241: the
#: FLUX, Qwen-Image, Wan, SD3-Fast and GRPO-Guard trainers); ``OTCA_UPSTREAM_<NAME>_<COMMIT>`` overrides
NEWER_SNAPSHOTS = {("flow_grpo", "9745241"): "flow_grpo-9745241.tar.gz"}


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def missing(reason: str):
    """Skip with ``reason``; under CI, fail: CI must run every test."""
    if in_ci():
        pytest.fail(f"CI=true and {reason}", pytrace=False)
    pytest.skip(reason)


def shared_dir() -> Path:
    return Path(os.environ.get("OTCA_SHARED") or REPO.parent / "shared")


def unpack_snapshot(archive_name: str) -> Path | None:
    """The folder that ``shared/upstream/<archive_name>`` unpacks to (``DanceGRPO/``, ``flow_grpo/``, ``MixGRPO/``),
    unpacked once per machine under the temporary directory (the launch rehearsal's own unpacking,
    ``otca_patch.rehearsal.upstreams.unpack``); None when the archive is not there."""
    from otca_patch.rehearsal.upstreams import unpack

    archive = shared_dir() / "upstream" / archive_name
    return unpack(archive) if archive.is_file() else None


def upstream_checkout(name: str, env_var: str, marker_file: str) -> Path:
    """The checkout of upstream ``name`` (``DanceGRPO``, ``flow_grpo`` or ``MixGRPO``) holding ``marker_file``."""
    candidates = [Path(os.environ[env_var])] if os.environ.get(env_var) else []
    candidates.append(REPO / "upstream" / name)
    for candidate in candidates:
        if (candidate / marker_file).is_file():
            return candidate.resolve()
    snapshot = unpack_snapshot(PINNED_SNAPSHOTS[name]) if name in PINNED_SNAPSHOTS else None
    if snapshot is not None and (snapshot / marker_file).is_file():
        return snapshot.resolve()
    missing(f"no {name} checkout: set {env_var}, populate upstream/{name} (git submodule update --init "
            f"upstream/{name}) or put ../shared/upstream/{PINNED_SNAPSHOTS.get(name, name)} beside the repository")


def newer_checkout(name: str, commit: str, marker_file: str) -> Path:
    """The checkout of upstream ``name`` at the newer ``commit`` (``NEWER_SNAPSHOTS``) holding ``marker_file``:
    ``$OTCA_UPSTREAM_<NAME>_<COMMIT>`` or the snapshot beside the repository."""
    env_var = f"OTCA_UPSTREAM_{name.upper()}_{commit.upper()}"
    if os.environ.get(env_var) and (Path(os.environ[env_var]) / marker_file).is_file():
        return Path(os.environ[env_var]).resolve()
    archive = NEWER_SNAPSHOTS[(name, commit)]
    snapshot = unpack_snapshot(archive)
    if snapshot is not None and (snapshot / marker_file).is_file():
        return snapshot.resolve()
    missing(f"no {name} checkout at {commit}: set {env_var} or put ../shared/upstream/{archive} beside the repository")


def verified_checkout(name: str, commit: str, marker_file: str) -> Path:
    """The checkout of upstream ``name`` at ``commit`` (a spec's ``upstream`` and ``verified_commit``)
    holding ``marker_file``: the pinned checkout (``upstream_checkout``) when ``commit`` is the pinned
    one, else ``$OTCA_UPSTREAM_<NAME>_<COMMIT>`` or the snapshot ``<name>-<commit>.tar.gz`` beside the
    repository (``<COMMIT>``: the first 7 hex digits)."""
    short = commit[:7]
    archive = f"{name}-{short}.tar.gz"
    if PINNED_SNAPSHOTS.get(name) == archive:
        return upstream_checkout(name, f"OTCA_UPSTREAM_{name.upper().replace('-', '_')}", marker_file)
    env_var = f"OTCA_UPSTREAM_{name.upper().replace('-', '_')}_{short.upper()}"
    given = os.environ.get(env_var)
    folder = Path(given) if given else unpack_snapshot(archive)
    if folder is not None and (folder / marker_file).is_file():
        return folder.resolve()
    missing(f"no {name} checkout at {short}: set {env_var} or put ../shared/upstream/{archive} beside the repository")


# ---- plain git clones made of snapshots (the rebase tests)


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


def build_flowgrpo_clone(folder):
    """What CI builds from the two snapshots: commit ac4c86e's tree, then 9745241's tree as the next
    commit (tag 9745241), and the clone checked out at the former, as a user pinned to it has it."""
    pinned, newer = unpack_snapshot("flow_grpo-ac4c86e.tar.gz"), unpack_snapshot("flow_grpo-9745241.tar.gz")
    if pinned is None or newer is None:
        missing("the FlowGRPO snapshots are not under shared/upstream")
    os.environ.update({"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                       "GIT_COMMITTER_EMAIL": "t@t", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"})
    repo = folder / "flow_grpo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    commit_tree(repo, pinned, "ac4c86e", "ac4c86e")
    commit_tree(repo, newer, "9745241", "9745241")
    git(repo, "reset", "-q", "--hard", "ac4c86e")
    return repo
