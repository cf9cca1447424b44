"""Where the tests find an upstream checkout: ``OTCA_UPSTREAM_<NAME>``, the populated git submodule
``upstream/<name>``, or the source snapshot of the pinned commit in ``../shared/upstream/`` (or
``$OTCA_SHARED/upstream/``), unpacked once into a temporary folder outside the repository.

Under CI (``CI=true``) a test that needs an upstream and finds none fails instead of skipping.
"""
from __future__ import annotations

import os
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
