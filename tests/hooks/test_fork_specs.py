"""Trainers from public forks, each registered by its spec alone and verified on the fork's own commit.

A fork's code is never committed here, so what can be checked without it runs everywhere: the spec
loads, extends its family's skeleton and lists exactly what its family lists, and the spec file names
nothing else. Doctor and the family's smoke, plain and with ``--otca``, run on the fork's snapshot
beside the repository (``../shared/upstream/<upstream>-<commit>.tar.gz``, as every upstream's), or on
the checkout ``$OTCA_FORK_<NAME>`` names (``Fork.env_var``); without either a test fails under CI.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

from otca_patch.config import OtcaConfig
from otca_patch.hooks.spec import load_specs
from otca_patch.targets.registry import runtime_class, runtime_for, spec_named
from upstream.conftest import TERM_PROBE, require_upstream_packages
from upstream.contract import dancegrpo_runner
from upstream_snapshots import PINNED_SNAPSHOTS, REPO, verified_checkout


@dataclass(frozen=True)
class Fork:
    target: str  # the spec's target name
    family: str  # a shipped target that is its family's skeleton as it is
    repository: str
    commit: str  # the fork's commit the spec is verified on
    env_var: str  # names a checkout of the fork at that commit


FORKS = (
    Fork("dancegrpo-flux-kontext", "dancegrpo-flux", "https://github.com/yaoliliu/DanceGRPO-kontext",
         "fcc4583ce43b0dcd99f137489864c90800a0d744", "OTCA_FORK_DANCEGRPO_KONTEXT"),
)
#: what a spec that follows its family may state of its own: no hook point, pin, flag or runtime
OWN_KEYS = {"name", "upstream", "file", "verified_commit", "verified_sha256", "description", "smoke"}


def test_every_spec_of_an_upstream_without_snapshots_is_a_fork_listed_here():
    """The upstream tests check each spec on its upstream's snapshot; a spec verified elsewhere is a fork's."""
    elsewhere = {spec.name for spec in load_specs() if spec.upstream not in PINNED_SNAPSHOTS}
    assert elsewhere == {fork.target for fork in FORKS}


@pytest.mark.parametrize("fork", FORKS, ids=lambda fork: fork.target)
def test_a_fork_that_follows_its_family_is_its_spec_alone(fork, tmp_path):
    spec, family = spec_named(fork.target), spec_named(fork.family)
    raw = tomllib.loads(Path(spec.path).read_text())
    assert set(raw) == {"extends", "target"} and set(raw["target"]) <= OWN_KEYS, raw
    assert raw["extends"] in {str(Path(p).relative_to(Path(spec.path).parents[1])) for p in family.extends}
    # every hook point, pin, output, flag, the runtime and smoke objectives of the family, in its order
    assert (spec.hooks, spec.pins) == (family.hooks, family.pins) and spec.hooks and spec.pins
    assert (spec.runtime, spec.outputs, spec.flags, spec.smoke.objectives) == (
        family.runtime, family.outputs, family.flags, family.smoke.objectives)
    assert spec.file != family.file and spec.smoke.module == ""  # no smoke module of its own
    # its smoke: the family's harness on its own file
    assert raw["target"].get("smoke", {}) in ({}, {"harness": family.smoke.harness})
    assert spec.smoke.harness == family.smoke.harness and spec.smoke.file == spec.file
    # where it comes from: the fork's repository is its upstream, its commit the verified one
    assert spec.upstream == fork.repository.rsplit("/", 1)[1] and spec.verified_commit == fork.commit
    assert fork.repository in Path(spec.path).read_text()
    # its runtime is the family's class, built for this target; the family's flag is accepted
    config = OtcaConfig(otca=True, otca_log_dir=str(tmp_path / "logs"), otca_final_state="prediction")
    runtime = runtime_for(fork.target, config)
    assert type(runtime) is runtime_class(family) and runtime.spec.name == fork.target


def fork_checkout(fork: Fork) -> Path:
    """``$OTCA_FORK_<NAME>``'s checkout, else the fork's snapshot (its upstream and commit: its spec's)."""
    spec = spec_named(fork.target)
    if not os.environ.get(fork.env_var):
        require_upstream_packages()
        return verified_checkout(spec.upstream, fork.commit, spec.file)
    path = Path(os.environ[fork.env_var])
    if not (path / spec.file).is_file():
        pytest.fail(f"${fork.env_var}={path} holds no {spec.file}; point it at a checkout of {fork.repository}")
    return path


@pytest.mark.upstream
@pytest.mark.parametrize("fork", FORKS, ids=lambda fork: fork.target)
def test_doctor_on_the_fork_says_its_hook_points_hold(fork):
    checkout = fork_checkout(fork)
    spec = spec_named(fork.target)
    digest = hashlib.sha256((checkout / spec.file).read_bytes()).hexdigest()
    assert digest == spec.verified_sha256, f"{spec.file} at ${fork.env_var} is not the file of {fork.commit[:12]}"
    done = subprocess.run([sys.executable, "-m", "otca_patch.cli", "doctor", str(checkout)], capture_output=True,
                          text=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    points = len(spec.hooks) + len(spec.pins)
    assert f"  {spec.name} ({spec.file}): holds ({points} hook points and pins)" in done.stdout.splitlines()
    assert f"identical to the file the spec was verified on (upstream commit {fork.commit[:12]})" in done.stdout
    # the fork's trainer is covered: not among the trainer files no spec covers (its copies in
    # fastvideo_edited/ are, each named with the --otca_target that would run it)
    uncovered = [line.strip() for line in done.stdout.splitlines() if line.startswith("  ") and " (" in line]
    assert not any(line.startswith(f"{spec.file} (") for line in uncovered), done.stdout
    assert f"fastvideo_edited/{Path(spec.file).name} (a copy of {spec.file}" in done.stdout


@pytest.mark.upstream
@pytest.mark.parametrize("fork", FORKS, ids=lambda fork: fork.target)
def test_the_fork_is_a_smoke_target_of_its_own_and_trains_with_and_without_the_layer(fork, tmp_path):
    """Its spec's ``[target.smoke]`` names the family's harness: the fork's own file runs as it is, and
    rewritten by its spec. Its trainer imports ai-toolkit's ``toolkit`` from its ``fastvideo/`` (as the
    fork's launch puts it on the path; two modules that code imports and the fork lacks are stood in,
    ``tests/upstream/ai_toolkit_stand_ins``: neither runs in a smoke run)."""
    checkout, spec = fork_checkout(fork), spec_named(fork.target)
    run = dancegrpo_runner(spec, TERM_PROBE)
    plain = run(checkout, tmp_path / "plain", "--steps", "1")
    assert plain.completed.stdout.strip().splitlines()[-1].startswith(f"smoke: passed: {fork.target}, vanilla")
    assert not plain.log and len(plain.result["steps"]) == 1
    otca = run(checkout, tmp_path / "otca", "--steps", "1", "--otca")
    assert otca.completed.stdout.strip().splitlines()[-1].startswith(f"smoke: passed: {fork.target}, --otca")
    # the fork's file, rewritten by the fork's spec (the run log's record of which spec was applied)
    assert [(r["spec"]["target"], r["spec"]["file"]) for r in otca.log] == [(fork.target, spec.file)]
    assert otca.losses != plain.losses  # the layer's advantage trained, not upstream's
