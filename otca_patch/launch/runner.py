"""Execute a rewritten upstream file: as ``__main__`` (how torchrun runs it) or as an importable module."""
from __future__ import annotations

import os
import sys
import types

from ..config import OtcaConfig
from ..files import shown_path
from ..hooks.prepare import Prepared, rewritten
from ..hooks.rewrite import RUNTIME_NAME
from ..hooks.spec import TargetSpec
from ..targets.registry import install_for_run


def disarm_step_guard() -> None:
    """This process is patched: the start-up hook's guard against unpatched optimizer steps
    (``startup/sitecustomize.py``, in a launch's processes) lets its steps through."""
    for finder in list(sys.meta_path):
        if getattr(finder, "otca_patch_step_guard", False):
            finder.disarm()


def say_identity(identity: str) -> None:
    """A file that is not the verified one gets one line saying it was checked."""
    if identity:
        print(f"otca-patch: {identity}", file=sys.stderr, flush=True)


def checked_code(path: str, spec: TargetSpec):
    """The rewritten file's code object; raises ``PatchError`` when a pin, hook point or name read
    does not hold (``hooks.prepare.rewritten``)."""
    code, identity = rewritten(path, spec)
    say_identity(identity)
    return code


def load_patched_module(path: str, spec: TargetSpec, config: OtcaConfig, module_name: str, chosen: str = ""):
    """Import the upstream file at ``path`` as ``module_name`` with ``spec`` applied.

    The module-level code runs (definitions, imports) but not its ``__main__`` block. Raises
    ``PatchError`` before executing anything when an anchor does not hold. ``chosen``: why ``spec``
    (``select.SpecChoice.reason``), printed and logged.
    """
    path = os.path.abspath(path)
    code = checked_code(path, spec)
    if chosen:
        print(f"otca-patch: {spec.file}: spec {shown_path(spec.path)} (target {spec.name}, upstream "
              f"{spec.upstream}): {chosen}", file=sys.stderr, flush=True)
    module = types.ModuleType(module_name)
    module.__file__ = path
    sys.modules[module_name] = module
    module.__dict__[RUNTIME_NAME] = install_for_run(spec, config, path, chosen)
    disarm_step_guard()
    exec(code, module.__dict__)
    return module


def main_namespace(script: str, argv: list[str], prepared: Prepared, runtime, module: str | None = None) -> dict:
    """Everything before the rewritten ``script`` runs as ``__main__`` with ``runtime`` installed: a
    fresh ``__main__``, ``sys.argv`` and ``sys.path[0]`` as ``python script ARGS`` sets them, or, for
    ``module`` (the file ``python -m MODULE`` runs), as ``python -m MODULE ARGS`` does (working directory
    first, parent package imported, ``__package__`` and ``__spec__`` set). Returns its namespace."""
    spec = prepared.spec
    path = os.path.abspath(script)
    main = types.ModuleType("__main__")
    main.__file__ = path
    main.__builtins__ = __builtins__
    if module is not None:
        import importlib
        import importlib.util

        sys.path[0] = os.getcwd()  # as for `python -m`: the working directory first
        main.__package__ = module.rpartition(".")[0]
        main.__spec__ = importlib.util.spec_from_file_location(module, path)
        if main.__package__:
            importlib.import_module(main.__package__)
    main.__dict__[RUNTIME_NAME] = runtime
    disarm_step_guard()
    sys.modules["__main__"] = main
    sys.argv = [path if module is not None else script, *argv]
    if module is None:
        sys.path[0] = os.path.dirname(path)  # as for `python script`: the script's folder first
    chosen = prepared.reason
    print(f"otca-patch: running {spec.file} rewritten by {shown_path(spec.path)} (target {spec.name}, "
          f"upstream {spec.upstream}{': ' + chosen if chosen else ''}; "
          f"{len(spec.hooks)} hooks, {len(spec.pins)} pins; {runtime.describe()})", file=sys.stderr, flush=True)
    return main.__dict__

