"""Execute a rewritten upstream file: as ``__main__`` (how torchrun runs it) or as an importable module."""
from __future__ import annotations

import os
import sys
import types

from .. import rank_check
from ..config import OtcaConfig
from ..files import shown_path
from ..hooks.doctor import identity_line
from ..hooks.rewrite import RUNTIME_NAME, check, compile_target
from ..hooks.source import file_sha256, read_source
from ..hooks.spec import TargetSpec
from ..targets.registry import install


def disarm_step_guard() -> None:
    """This process is patched: the start-up hook's guard against unpatched optimizer steps
    (``startup/sitecustomize.py``, in a launch's processes) lets its steps through."""
    for finder in list(sys.meta_path):
        if getattr(finder, "otca_patch_step_guard", False):
            finder.disarm()


def _install_runtime(spec: TargetSpec, config: OtcaConfig, namespace: dict, path: str, chosen: str = ""):
    runtime = install(spec, config)
    disarm_step_guard()
    runtime.spec_chosen = chosen  # why this spec (several upstreams share a path): in the run log
    namespace[RUNTIME_NAME] = runtime
    # every rank or none: checked once the trainer's process group exists, before any rollout
    rank_check.arm(rank_check.entry(config, spec, path), config.otca_rank_check_timeout, spec.file)
    return runtime


def checked_code(path: str, spec: TargetSpec):
    """The rewritten file's code object; raises ``PatchError`` when a pin, hook point or name read
    does not hold. A file that is not the verified one gets one line saying it was checked."""
    source = read_source(path)
    code = compile_target(source, spec, path)
    digest = file_sha256(path)
    if digest != spec.verified_sha256:
        tails = {status.hook.name: status.tails for status in check(source, spec, path)}
        print(f"otca-patch: {identity_line(spec, digest, tails=tails)}", file=sys.stderr, flush=True)
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
    _install_runtime(spec, config, module.__dict__, path, chosen)
    exec(code, module.__dict__)
    return module


def prepare_main(script: str, argv: list[str], spec: TargetSpec, config: OtcaConfig, chosen: str = "",
                 module: str | None = None):
    """Everything before ``script`` runs as ``__main__`` with ``spec`` applied: the checked code, a
    fresh ``__main__`` with the runtime installed, ``sys.argv`` and ``sys.path[0]`` as ``python script
    ARGS`` sets them, or, for ``module`` (the file ``python -m MODULE`` runs), as ``python -m MODULE ARGS``
    does (working directory first, parent package imported, ``__package__`` and ``__spec__`` set).
    Returns (code, namespace); raises (``PatchError``, ``ValueError``, ...) before any upstream code runs."""
    path = os.path.abspath(script)
    code = checked_code(path, spec)
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
    runtime = _install_runtime(spec, config, main.__dict__, path, chosen)
    sys.modules["__main__"] = main
    sys.argv = [path if module is not None else script, *argv]
    if module is None:
        sys.path[0] = os.path.dirname(path)  # as for `python script`: the script's folder first
    print(f"otca-patch: running {spec.file} rewritten by {shown_path(spec.path)} (target {spec.name}, "
          f"upstream {spec.upstream}{': ' + chosen if chosen else ''}; "
          f"{len(spec.hooks)} hooks, {len(spec.pins)} pins; {runtime.describe()})", file=sys.stderr, flush=True)
    return code, main.__dict__


def run_as_main(script: str, argv: list[str], spec: TargetSpec, config: OtcaConfig) -> None:
    """Run ``script`` with ``spec`` applied exactly as ``python script ARGS`` would run it."""
    code, namespace = prepare_main(script, argv, spec, config)
    exec(code, namespace)
