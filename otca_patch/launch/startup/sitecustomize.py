"""Startup hook that `scripts/otca_run.sh` puts on PYTHONPATH for every process a launcher starts.

It costs one environment lookup unless ``$OTCA_PATCH_ARGS`` asks for the layer. Then, when this
process is about to run an upstream script that a hook-point spec targets, it re-executes the
interpreter (same PID, environment and flags) as ``-m otca_patch.launch.worker SCRIPT ARGS``, which
runs the rewritten script as ``__main__``. Any other sitecustomize on the path still runs.
"""
import os
import sys


def _chain_next_sitecustomize() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    saved_path = list(sys.path)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    module = sys.modules.pop("sitecustomize", None)
    try:
        import importlib

        importlib.import_module("sitecustomize")
    except ImportError:
        pass
    finally:
        sys.path[:] = saved_path
        if module is not None:
            sys.modules["sitecustomize"] = module


def _maybe_become_worker() -> None:
    script = sys.argv[0] if sys.argv else ""
    if not script.endswith(".py") or not os.path.isfile(script):
        return
    from otca_patch.launch.startup.reexec import reexec_if_targeted

    reexec_if_targeted(script)


if os.environ.get("OTCA_PATCH_ARGS"):
    _maybe_become_worker()
_chain_next_sitecustomize()
