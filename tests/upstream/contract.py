"""The contract every target with a smoke run keeps, read from the shipped specs: a target's spec
brings these tests with it (``test_contract.py``), with no test file of its own.

- doctor holds on the checkout the spec was verified on;
- a copy of that checkout whose upstream file has one hook point's statement written twice is
  refused by the layer before the rollout, and doctor names the hook point;
- with the layer present but not asked for (the startup hook on the path, no ``--otca``), upstream
  trains exactly as without it, and writes no run log;
- observe mode trains exactly as upstream does and logs the credit of the spec's objectives.

Each target's smoke runs are made once per test session (``target_runs`` in conftest.py) and shared
by every test of the target that reads them, here and in the target's own test file: those tests
are grouped by target (``xdist_group``), so one xdist worker runs them all.
"""
from __future__ import annotations

import ast
import importlib.util
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

import upstream_snapshots as snapshots
from otca_patch.hooks import pattern
from otca_patch.hooks.spec import MODULE_SCOPE, Hook, TargetSpec, load_specs

from .conftest import (REPO, TERM_PROBE, require_flowgrpo_packages, require_upstream_packages,
                       run_flowgrpo_smoke, run_smoke)

HERE = Path(__file__).parent
#: the rollout recorder of FlowGRPO's trainers other than SD3's
FLOWGRPO_PROBE = f"{HERE / 'flowgrpo_probe.py'}:RolloutRecorder"
#: smoke.json keys that say how a run was configured, not what it trained
CONFIGURATION_KEYS = ("otca", "observe", "mode")


# ---- which targets, grouped per xdist worker

def contract_specs(directory=None) -> list[TargetSpec]:
    """Every target spec under ``directory`` (default: the shipped specs) with a smoke run of its own."""
    return [spec for spec in load_specs(directory) if spec.smoke.runs]


def contract_params(directory=None) -> list:
    """One pytest parameter per contract target, named by the target and grouped with the target's
    own tests (``xdist_group``: under ``--dist loadgroup`` one worker makes its runs once)."""
    return [pytest.param(spec, id=spec.name, marks=pytest.mark.xdist_group(spec.name))
            for spec in contract_specs(directory)]


# ---- how a family's smoke runs are launched

@dataclass(frozen=True)
class Flags:
    """The flags of a target's contract runs: ``steps`` in every run, ``vanilla`` the plain run the
    target's own tests compare with (with the recording its checks read); ``refused``: the exit
    status of a refused run (None: a launcher's own non-zero status)."""

    steps: tuple
    vanilla: tuple
    refused: int | None = 2


def dancegrpo_runner(spec: TargetSpec, probe: str):
    """DanceGRPO and MixGRPO: ``python -m otca_patch.smoke`` (one process unless ``nproc``), one
    thread per process (on a loaded machine several threads per process are slower by an order of
    magnitude); ``--record_terms`` loads the family's recording probe. The trainer's imports are
    found as its own launch finds them (``trainer_path``)."""
    def run(checkout, out, *flags, env=None, **options):
        flags = [part for flag in flags for part in (["--probe", probe] if flag == "--record_terms" else [flag])]
        env = {"OMP_NUM_THREADS": "1", **(env or {})}
        path = trainer_path(checkout, spec)
        if path:
            env["PYTHONPATH"] = os.pathsep.join([*path[:-1], *filter(None, [env.get("PYTHONPATH")]), str(REPO), path[-1]])
        return run_smoke(checkout, out, "--target", spec.name, *flags, env=env, **options)
    return run


def trainer_path(checkout: Path, spec: TargetSpec) -> list:
    """What a trainer importing top-level packages that sit beside it (a fork's vendored ai-toolkit,
    ``from toolkit... import``) needs on ``PYTHONPATH``: its folder first (as its own launch puts it),
    and last, after the environment's packages, the stand-ins of what that code imports and the
    snapshot lacks (``ai_toolkit_stand_ins``: used nowhere a smoke run goes). [] for every other trainer."""
    trainer = checkout / spec.file
    nodes = list(ast.walk(ast.parse(trainer.read_text())))
    imported = {alias.name.split(".")[0] for node in nodes if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module.split(".")[0] for node in nodes
                 if isinstance(node, ast.ImportFrom) and node.module and not node.level}
    beside = [name for name in imported if (trainer.parent / name / "__init__.py").is_file()
              and not (checkout / name).exists()]
    return [str(trainer.parent), str(HERE / "ai_toolkit_stand_ins")] if beside else []


def qwen_transformers() -> list:
    """The folder to import a Qwen2.5-VL transformers from ([] when this environment has one):
    ``$OTCA_QWEN_TRANSFORMERS`` or ``.venv/qwen-transformers`` (scripts/setup.sh fills it)."""
    if importlib.util.find_spec("transformers.models.qwen2_5_vl") is not None:
        return []
    folder = os.environ.get("OTCA_QWEN_TRANSFORMERS") or str(REPO / ".venv" / "qwen-transformers")
    if os.path.isdir(os.path.join(folder, "transformers", "models", "qwen2_5_vl")):
        return [folder]
    snapshots.missing("Qwen-Image needs transformers with Qwen2.5-VL (4.49+): this environment's is older and "
                      "neither $OTCA_QWEN_TRANSFORMERS nor .venv/qwen-transformers holds one (scripts/setup.sh)")


def flowgrpo_runner(spec: TargetSpec, models: Path):
    """FlowGRPO: the SD3 trainers on one process (their tests add ``nproc=2``); the others on two
    processes under the spec's launcher, always with the rollout-recording probe. The tiny pipeline
    is built once per session in ``models`` (``$OTCA_TINY_<MODEL>_DIR``)."""
    from otca_patch.smoke.flowgrpo import MODELS

    model = {MODELS[spec.smoke.model].env: str(models / spec.smoke.model)}
    if spec.smoke.model == "sd3":
        def run(checkout, out, *flags, env=None, **options):
            return run_flowgrpo_smoke(checkout, out, *flags, env={**model, **(env or {})}, target=spec.name, **options)
        return run
    python_path = qwen_transformers() if spec.smoke.model.startswith("qwenimage") else []

    def run(checkout, out, *flags, env=None, check=True):
        env = {"OMP_NUM_THREADS": "1", **model, **(env or {})}
        if python_path:
            env["PYTHONPATH"] = os.pathsep.join([*python_path, *filter(None, [env.get("PYTHONPATH")])])
        return run_flowgrpo_smoke(checkout, out, "--probe", FLOWGRPO_PROBE, *flags, env=env, check=check,
                                  target=spec.name, nproc=2, launcher=spec.smoke.launcher)
    return run


#: the recording probe of each DanceGRPO-style smoke (harness or module), for ``--record_terms``
DANCEGRPO_PROBES = {"dancegrpo": TERM_PROBE,
                    "otca_patch.smoke.dancegrpo_sd": f"{HERE / 'sd_probe.py'}:RolloutRecorder",
                    "otca_patch.smoke.mixgrpo_flux": f"{HERE / 'mixgrpo_probe.py'}:MixRecorder"}


def family(spec: TargetSpec, models: Path):
    """``(run, Flags)`` of ``spec``'s family; a smoke this does not know is an error naming it."""
    smoke = spec.smoke.harness or spec.smoke.module
    if smoke == "flowgrpo":
        return flowgrpo_runner(spec, models), Flags(steps=(), vanilla=(), refused=None)
    if smoke in DANCEGRPO_PROBES:
        steps = () if smoke.endswith("mixgrpo_flux") else ("--steps", "2")  # MixGRPO's smoke trains 2 by default
        return dancegrpo_runner(spec, DANCEGRPO_PROBES[smoke]), Flags(steps=steps, vanilla=(*steps, "--record_terms"))
    raise AssertionError(f"tests/upstream/contract.py: target {spec.name}'s smoke {smoke!r} has no launcher here")


def checkout(spec: TargetSpec) -> Path:
    """The checkout ``spec`` was verified on (its upstream's packages present, or the test skips/fails)."""
    if spec.upstream == "flow_grpo":
        require_flowgrpo_packages()
    else:
        require_upstream_packages()
    return snapshots.verified_checkout(spec.upstream, spec.verified_commit, spec.file)


# ---- what a run trained

def trained(run) -> list:
    """What training did on every process (each ``smoke.json`` / ``smoke_rank<r>.json`` less how the
    run was configured): losses, clipped gradient norms and, where recorded, the trained weights."""
    results = []
    for path in [run.out / "smoke.json", *sorted(run.out.glob("smoke_rank*.json"))]:
        result = json.loads(path.read_text())
        results.append({key: value for key, value in result.items() if key not in CONFIGURATION_KEYS})
    return results


def named_objectives(logged: list, spec: TargetSpec) -> list:
    """The objectives of a run log record, as a spec names them: upstream's reward split into its
    parts (``upstream.vq``, ...) is ``upstream`` where the spec does not name the parts."""
    return list(dict.fromkeys(name if not name.startswith("upstream.") or name in spec.smoke.objectives
                              else "upstream" for name in logged))


# ---- a mutated copy

def written_twice(source: str, spec: TargetSpec) -> tuple[str, Hook]:
    """``source`` with the statement holding the first match of the spec's first checked entry (pins,
    then hooks; entries anchored at module level, on a ``def`` or ``within`` a region left aside)
    written twice, one after the other: that entry then finds more matches than it expects.
    Returns the new source and the entry."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    for entry in (*spec.pins, *spec.hooks):
        if entry.function == MODULE_SCOPE or entry.within or entry.anchor.startswith("def "):
            continue
        function = next(pattern.iter_functions(tree, entry.function))
        anchor = pattern.parse_anchor(entry.anchor, statement=entry.action not in ("replace", "pin"))
        found = pattern.find(anchor, function)
        if not found:
            continue
        node = found[0].node
        statement = min((s for s in ast.walk(function) if isinstance(s, ast.stmt) and s is not function
                         and s.lineno <= node.lineno and s.end_lineno >= node.end_lineno),
                        key=lambda s: s.end_lineno - s.lineno)
        first = lines[statement.lineno - 1]
        if len(first) - len(first.lstrip()) != statement.col_offset:
            continue  # not the first statement of its line
        block = lines[statement.lineno - 1:statement.end_lineno]
        return "".join(lines[:statement.end_lineno] + block + lines[statement.end_lineno:]), entry
    raise AssertionError(f"{spec.path}: no pin or hook point of {spec.file} has a statement to write twice")


def mutated_copy(checkout: Path, folder: Path, spec: TargetSpec) -> tuple[Path, Hook]:
    """A copy of ``checkout`` (hard links where the file system allows) whose ``spec.file`` has one
    hook point's statement written twice (``written_twice``)."""
    def link_or_copy(source, target):
        try:
            os.link(source, target)
        except OSError:
            shutil.copy2(source, target)

    copy = folder / checkout.name
    shutil.copytree(checkout, copy, symlinks=True, copy_function=link_or_copy)
    trainer = copy / spec.file
    source, entry = written_twice(trainer.read_text(), spec)
    trainer.unlink()  # a hard link: the checkout's own file stays as it is
    trainer.write_text(source)
    return copy, entry


def doctor_section(stdout: str, spec: TargetSpec) -> str:
    """Doctor's report of ``spec``'s file (from its heading to the blank line after it)."""
    heading = f"{spec.name}: {spec.file}"
    assert heading in stdout, stdout
    return stdout.split(heading, 1)[1].split("\n\n")[0]


def trainer_spec(name: str) -> TargetSpec:
    """The shipped spec of contract target ``name``."""
    return next(spec for spec in contract_specs() if spec.name == name)
