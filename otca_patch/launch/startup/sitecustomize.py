"""Startup hook that ``otca-patch launch`` puts on PYTHONPATH for every process a launcher starts.

Standard library only until it knows this process is targeted: the wrapper names the targeted
upstream files in ``$OTCA_PATCH_TARGETS`` ("/"-separated paths inside the checkout, joined by
``os.pathsep``), so any other process pays two environment lookups and a path comparison. A process
about to run a targeted file re-executes the interpreter (same PID, environment and options) as
``-m otca_patch.launch.worker SCRIPT ARGS``, which checks the hook points and runs the rewritten
script as ``__main__``. Once targeted, nothing fails open: if otca_patch cannot be imported or the
worker cannot start, the process exits with status 2 and says why (an exception here would be
printed as "Error in sitecustomize" and the script would then run unpatched).

A script that is not targeted but is a copy of a targeted trainer (it defines every function a
spec hooks, and most of its lines are that trainer's) would train unpatched: it stops with status 2,
naming the spec and ``--otca_target``. The wrapper hands each spec's hooked functions and the
trainer file in ``$OTCA_PATCH_SHAPES``; only a script defining all of them is compared line by line.
Every other script the launch runs is appended to ``$OTCA_PATCH_RECORD``, so the wrapper can name
them when no targeted process ever started.

This folder holds this file only, so nothing else becomes importable as a top-level module. Any
other sitecustomize on the path still runs.
"""
import os
import sys

ARGS_VARIABLE = "OTCA_PATCH_ARGS"
TARGETS_VARIABLE = "OTCA_PATCH_TARGETS"
SHAPES_VARIABLE = "OTCA_PATCH_SHAPES"
RECORD_VARIABLE = "OTCA_PATCH_RECORD"
COMMAND_VARIABLE = "OTCA_PATCH_COMMAND"
#: a copy shares at least this share of its trainer's distinct lines
COPY_SHARE = 0.5


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
                  f"targets; start the launch through `otca-patch launch` (refusing to run {script} unpatched)")
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
    sys.stderr.write(f"{os.environ.get(COMMAND_VARIABLE) or 'otca-patch'}: error: {message}\n")
    sys.stderr.flush()
    _record_error(message)
    os._exit(2)


def _record_error(message):
    """The launch relays the first error (the same JSON line as ``launch.worker.record_error``)."""
    record = os.environ.get(RECORD_VARIABLE)
    if record:
        import json
        import socket

        try:
            with open(record, "a") as handle:
                handle.write(json.dumps({"event": "error", "pid": os.getpid(), "host": socket.gethostname(),
                                         "rank": os.environ.get("RANK"), "script": sys.argv[0] if sys.argv else "",
                                         "message": message}) + "\n")
        except OSError:
            pass


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


def _untargeted_script():
    """The script (or ``-m module``) of a process in an active launch that is not targeted, else None."""
    if not os.environ.get(TARGETS_VARIABLE) or not os.environ.get(ARGS_VARIABLE):
        return None
    script = sys.argv[0] if sys.argv else ""
    if script.endswith(".py"):
        return script
    options = getattr(sys, "orig_argv", [])[1:]
    if script == "-m" and "-m" in options and options.index("-m") + 1 < len(options):
        return "-m " + options[options.index("-m") + 1]
    return None


def _record(script):
    record = os.environ.get(RECORD_VARIABLE)
    if record:
        try:
            with open(record, "a") as handle:  # one short append: atomic with O_APPEND
                handle.write(f"ran\t{os.path.abspath(script) if script.endswith('.py') else script}\n")
        except OSError:
            pass  # the record only serves the wrapper's summary; never stop a process for it


def _defined_functions(lines):
    """Names of the top-level ``def``s (what a spec hooks, ``<module>`` aside)."""
    names = set()
    for line in lines:
        if line.startswith(("def ", "async def ")):
            names.add(line.split("def ", 1)[1].split("(", 1)[0].strip())
    return names


def _distinct_lines(lines):
    return {line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")}


def _resembled(script):
    """``(spec name, trainer file, share of its lines)`` of the trainer ``script`` is a copy of, or None.

    Each ``$OTCA_PATCH_SHAPES`` line is ``NAME<TAB>FILE<TAB>FUNCTIONS<TAB>TRAINER_PATH``: the spec, its
    upstream file, the functions it hooks (comma-separated) and that file in this launch's checkout
    (empty if absent). A script defining every hooked function is a copy when it shares at least
    ``COPY_SHARE`` of the trainer's distinct lines; without the trainer at hand, when the spec hooks
    two functions or more (``main`` alone says nothing)."""
    shapes = os.environ.get(SHAPES_VARIABLE)
    if not shapes:
        return None
    try:
        with open(script, errors="replace") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return None
    defined = _defined_functions(lines)
    best, mine = None, None
    for entry in shapes.splitlines():
        fields = entry.split("\t")
        if len(fields) != 4:
            continue
        name, file, functions, trainer = fields
        hooked = set(filter(None, functions.split(",")))
        if not hooked or not hooked <= defined:
            continue
        share = None
        if trainer:
            try:
                with open(trainer, errors="replace") as handle:
                    theirs = _distinct_lines(handle.read().splitlines())
            except OSError:
                theirs = None
            if theirs:
                mine = _distinct_lines(lines) if mine is None else mine
                share = len(theirs & mine) / len(theirs)
                if share < COPY_SHARE:
                    continue
        if share is None and len(hooked) < 2:
            continue
        if best is None or (share or 0) > (best[2] or 0):
            best = (name, file, share)
    return best


def _stop_copy(script, resembled):
    name, file, share = resembled
    shown = os.path.relpath(script) if not os.path.isabs(script) else script
    how = f"{share:.0%} of its lines" if share is not None else "every function its spec hooks"
    _fail(f"{shown} is not a file the layer targets but a copy of {file} (spec {name}: {how}), so it would "
          f"train unpatched; run it patched with --otca_target {name}={shown} among the otca-patch flags, "
          f"or launch without --otca")


_target = _targeted_file()
if _target is not None:
    _become_worker(_target)
_script = _untargeted_script()
if _script is not None:
    _record(_script)
    _resembles = _resembled(_script) if _script.endswith(".py") else None
    if _resembles is not None:
        _stop_copy(_script, _resembles)
_chain_next_sitecustomize()
