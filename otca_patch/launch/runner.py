"""Execute a rewritten upstream file: as ``__main__`` (how torchrun runs it) or as an importable module."""
from __future__ import annotations

import os
import sys
import tokenize
import types

from ..config import OtcaConfig
from ..hooks.rewrite import RUNTIME_NAME, compile_target
from ..hooks.spec import TargetSpec
from ..targets.registry import target_of


def read_source(path: str) -> str:
    """The file's text, honouring a PEP 263 encoding line as Python itself would."""
    with tokenize.open(path) as handle:
        return handle.read()


def _install_runtime(spec: TargetSpec, config: OtcaConfig, namespace: dict):
    runtime = target_of(spec).install(config)
    namespace[RUNTIME_NAME] = runtime
    return runtime


def load_patched_module(path: str, spec: TargetSpec, config: OtcaConfig, module_name: str):
    """Import the upstream file at ``path`` as ``module_name`` with ``spec`` applied.

    The module-level code runs (definitions, imports) but not its ``__main__`` block. Raises
    ``PatchError`` before executing anything when an anchor does not hold.
    """
    path = os.path.abspath(path)
    code = compile_target(read_source(path), spec, path)
    module = types.ModuleType(module_name)
    module.__file__ = path
    sys.modules[module_name] = module
    _install_runtime(spec, config, module.__dict__)
    exec(code, module.__dict__)
    return module


def run_as_main(script: str, argv: list[str], spec: TargetSpec, config: OtcaConfig) -> None:
    """Run ``script`` with ``spec`` applied exactly as ``python script ARGS`` would run it."""
    path = os.path.abspath(script)
    code = compile_target(read_source(path), spec, path)  # PatchError here, before any training
    main = types.ModuleType("__main__")
    main.__file__ = path
    main.__builtins__ = __builtins__
    sys.modules["__main__"] = main
    sys.argv = [script, *argv]
    sys.path[0] = os.path.dirname(path)  # as for `python script`: the script's folder first
    runtime = _install_runtime(spec, config, main.__dict__)
    print(f"otca-patch: running {spec.file} rewritten by {os.path.relpath(spec.path)} "
          f"({len(spec.hooks)} hooks; {runtime.describe()})", file=sys.stderr, flush=True)
    exec(code, main.__dict__)
