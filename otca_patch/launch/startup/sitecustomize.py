"""Startup hook that `scripts/otca_run.sh` puts on PYTHONPATH for every process a launcher starts.

Standard library only until it knows this process is targeted: the wrapper names the targeted
upstream files in ``$OTCA_PATCH_TARGETS`` ("/"-separated paths inside the checkout, joined by
``os.pathsep``), so any other process pays two environment lookups and a path comparison. A process
about to run a targeted file re-executes the interpreter (same PID, environment and options) as
``-m otca_patch.launch.worker SCRIPT ARGS``, which checks the hook points and runs the rewritten
script as ``__main__``. Once targeted, nothing fails open: if otca_patch cannot be imported or the
worker cannot start, the process exits with status 2 and says why (an exception here would be
printed as "Error in sitecustomize" and the script would then run unpatched).

This folder holds this file only, so nothing else becomes importable as a top-level module. Any
other sitecustomize on the path still runs.
"""
import os
import sys

ARGS_VARIABLE = "OTCA_PATCH_ARGS"
TARGETS_VARIABLE = "OTCA_PATCH_TARGETS"


def _targeted_file():
    """The targeted upstream file this process runs as its script, or None."""
    if not os.environ.get(ARGS_VARIABLE):
        return None
    script = sys.argv[0] if sys.argv else ""
    if not script.endswith(".py"):
        return None
    targets = os.environ.get(TARGETS_VARIABLE)
    if targets is None:  # not the wrapper's environment: fail closed only if the flags ask for the layer
        if _asks_for_layer(os.environ[ARGS_VARIABLE], script):
            _fail(f"${ARGS_VARIABLE} asks for the layer but ${TARGETS_VARIABLE} does not say which files it "
                  f"targets; start the launch through scripts/otca_run.sh (refusing to run {script} unpatched)")
        return None
    parts = os.path.abspath(script).split(os.sep)
    for target in filter(None, targets.split(os.pathsep)):
        want = target.split("/")
        if parts[-len(want):] == want:
            return target
    return None


def _asks_for_layer(args, script):
    import shlex

    try:
        return bool({"--otca", "--otca_observe"} & set(shlex.split(args)))
    except ValueError as exc:
        _fail(f"${ARGS_VARIABLE} cannot be read ({exc}); refusing to run {script}")


def _fail(message):
    sys.stderr.write(f"otca-patch: error: {message}\n")
    sys.stderr.flush()
    os._exit(2)


def _become_worker(target):
    try:
        from otca_patch.launch.reexec import become_worker
    except BaseException as exc:
        _fail(f"{sys.argv[0]} is the upstream file {target} that --otca patches, but this Python "
              f"({sys.executable}) cannot import otca_patch ({type(exc).__name__}: {exc}). Install otca-patch into "
              f"the environment the launcher starts (pip install -e <otca-patch>), or launch without --otca.")
    try:
        become_worker()
    except BaseException as exc:
        _fail(f"cannot start the layer's worker for {sys.argv[0]} ({type(exc).__name__}: {exc})")


def _chain_next_sitecustomize():
    here = os.path.dirname(os.path.abspath(__file__))
    saved_path = list(sys.path)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    module = sys.modules.pop("sitecustomize", None)
    try:
        __import__("sitecustomize")  # not importlib: importing it here would cost every process ~10 ms
    except ImportError:
        pass
    finally:
        sys.path[:] = saved_path
        if module is not None:
            sys.modules["sitecustomize"] = module


_target = _targeted_file()
if _target is not None:
    _become_worker(_target)
_chain_next_sitecustomize()
