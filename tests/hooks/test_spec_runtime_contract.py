"""Every spec in patches/ against its runtime: each ``__otca__.<name>`` its hook code uses exists on
the runtime class its target names, and each public runtime method is called by some hook (or is
marked ``INTERNAL``: the runtime, its family or tools call it). A typo in a spec fails here, not on
a GPU node."""
import ast
import inspect
import shutil
import textwrap
from pathlib import Path

import pytest

from otca_patch.hooks.rewrite import RUNTIME_NAME
from otca_patch.hooks.spec import load_spec, load_specs
from otca_patch.targets.registry import runtime_class


def runtime_uses(spec) -> dict:
    """``{attribute: [hook names]}`` of every ``__otca__.<attribute>`` in the spec's hook code."""
    uses: dict = {}
    for hook in spec.hooks:
        for node in ast.walk(ast.parse(textwrap.dedent(hook.code))):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == RUNTIME_NAME:
                uses.setdefault(node.attr, []).append(hook.name)
    return uses


def missing_on_runtime(spec, runtime: type) -> list:
    return [f"{spec.path}: hook {', '.join(hooks)} calls __otca__.{name}, which {runtime.__name__} lacks"
            for name, hooks in runtime_uses(spec).items() if not hasattr(runtime, name)]


def public_methods(runtime: type) -> dict:
    """``{name: defining class}`` of the runtime's public methods and properties."""
    found = {}
    for name, _ in inspect.getmembers(runtime):
        if name.startswith("_"):
            continue
        owner = next(c for c in runtime.__mro__ if name in c.__dict__)
        value = owner.__dict__[name]
        if inspect.isfunction(value) or isinstance(value, (property, staticmethod, classmethod)):
            found[name] = owner
    return found


def unused_methods(pairs) -> list:
    """Methods no spec of a runtime that has them calls, and not marked INTERNAL."""
    problems = []
    for spec, runtime in pairs:
        for name, owner in public_methods(runtime).items():
            if name in getattr(runtime, "INTERNAL", ()):
                continue
            callers = [s for s, r in pairs if issubclass(r, owner) and name in runtime_uses(s)]
            if not callers:
                problems.append(f"{owner.__module__}.{owner.__name__}.{name}: no hook of any spec calls it "
                                f"(add it to INTERNAL if the runtime calls it itself)")
    return sorted(set(problems))


@pytest.fixture(scope="module")
def shipped():
    specs = load_specs()
    assert specs, "patches/ holds no spec"
    return [(spec, runtime_class(spec)) for spec in specs]


def test_every_runtime_attribute_a_spec_uses_exists(shipped):
    problems = [p for spec, runtime in shipped for p in missing_on_runtime(spec, runtime)]
    assert not problems, "\n".join(problems)


def test_every_public_runtime_method_is_called_by_a_hook_or_marked_internal(shipped):
    problems = unused_methods(shipped)
    assert not problems, "\n".join(problems)


def test_internal_names_are_real_methods(shipped):
    for _, runtime in shipped:
        assert set(runtime.INTERNAL) <= set(public_methods(runtime)), runtime.__name__


def test_a_typo_in_a_spec_is_caught(shipped, tmp_path):
    """In a copy of the patches folder, a typo in the skeleton a spec extends reaches that spec."""
    spec, runtime = shipped[0]
    copy = tmp_path / "patches"
    shutil.copytree(Path(spec.path).parents[1], copy)
    name = next(iter(runtime_uses(spec)))
    hook = next(h for h in spec.hooks if f"__otca__.{name}(" in h.code)
    written = copy / Path(hook.origin).relative_to(Path(spec.path).parents[1])  # the spec or its skeleton
    written.write_text(written.read_text().replace(f"__otca__.{name}(", f"__otca__.{name}_typo(", 1))
    typo = load_spec(copy / Path(spec.path).relative_to(Path(spec.path).parents[1]))
    assert any(f"__otca__.{name}_typo" in p for p in missing_on_runtime(typo, runtime))


def test_a_method_no_hook_calls_is_caught(shipped):
    spec, runtime = shipped[0]
    orphan = type("Orphan", (runtime,), {"forgotten_hook": lambda self: None})
    assert any("Orphan.forgotten_hook" in p for p in unused_methods(shipped + [(spec, orphan)]))
