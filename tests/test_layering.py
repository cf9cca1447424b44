"""The package reads top-down: its import graph (every ``import`` statement of every module, parsed,
at any depth: lazy imports inside functions count too) has no cycle, and no module imports from a
higher layer than its own. ``import otca_patch.config`` loads no torch."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "otca_patch"

#: lowest first; a module may import its own layer and those below. Names are the first component
#: under otca_patch (a subpackage or a top-level module).
LAYERS = (
    ("__init__", "env_names", "suggest", "files", "devices", "help_text"),  # leaf utilities (the package's __init__: its version)
    ("sample_grid", "samples"),  # a grid of samples; the samples a run keeps beside its log
    ("flags",),  # the dataclass-to-flags generator
    ("credit",),  # the credit math: pure tensor functions
    ("config", "target_options"),  # OtcaConfig, the flags; the flags only some targets take
    ("rewards",),  # reward models, registry
    ("stand_ins", "tiny_models"),  # CPU stand-ins of what GPU trainers call; tiny models in the real layouts
    ("objective_set", "runlog"),  # a run's objectives; the run log
    ("verl_omni",),  # OTCA as VeRL-Omni advantage estimators (a plug-in; doctor checks its contract)
    ("hooks",),  # the hook engine: specs, anchors, rewrite, doctor
    ("targets",),  # the runtimes the inserted code calls, and what a rewritten run checks across ranks
    ("launch", "tools"),  # running a rewritten script; rebase
    ("smoke",),  # CPU smoke runs of real upstream steps
    ("rehearsal",),  # upstream launches run end to end under the wrapper
    ("analysis",),  # run logs to differences, intervals, verdicts
    ("ab", "demo", "evaluation"),  # commands built on all of the above
    ("cli",),  # the console command
)
RANK = {name: rank for rank, names in enumerate(LAYERS) for name in names}


def module_name(path: Path) -> str:
    parts = list(path.with_suffix("").relative_to(PACKAGE.parent).parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict:
    return {module_name(p): p for p in PACKAGE.rglob("*.py") if "patches" not in p.relative_to(PACKAGE).parts}


def imported_names(name: str, path: Path, known: dict) -> set:
    """The otca_patch modules ``path`` imports, as written (``from .x import y``: ``x.y`` when that
    is a module, else ``x``), resolved to absolute names; other packages' imports left out."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            found.update(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {target for target in found if target == "otca_patch" or target.startswith("otca_patch.")}


def imports(name: str, path: Path, known: dict) -> set:
    return {target for target in imported_names(name, path, known) if target != name}


def layer_of(name: str) -> str:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


@pytest.fixture(scope="module")
def graph() -> dict:
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()}


def test_every_import_names_a_module_of_the_package():
    """A relative import that misses (``from .rewards`` in a module moved one level down) fails here,
    not at run time in the one branch that takes it."""
    known = modules()
    missing = sorted(f"{name}: {target}" for name, path in known.items()
                     for target in imported_names(name, path, known) if target not in known)
    assert not missing, "imports of modules that do not exist:\n" + "\n".join(missing)


def test_every_module_has_a_layer(graph):
    unplaced = sorted({layer_of(name) for name in graph} - set(RANK))
    assert not unplaced, f"add these to LAYERS: {unplaced}"


def test_no_module_imports_from_a_higher_layer(graph):
    upward = sorted(f"{name} -> {dep}" for name, deps in graph.items() for dep in deps
                    if RANK[layer_of(dep)] > RANK[layer_of(name)])
    assert not upward, "imports from a higher layer:\n" + "\n".join(upward)


def cycles(graph: dict) -> list:
    """One cycle per strongly connected component with more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_import_graph_has_no_cycle(graph):
    assert not cycles(graph), cycles(graph)


def test_importing_the_config_loads_no_torch():
    probe = "import sys, otca_patch.config; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                          cwd=PACKAGE.parent)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
