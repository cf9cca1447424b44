"""Startup hook that ``otca-patch launch`` puts on PYTHONPATH for every process a launcher starts.

Standard library only until it knows this process is targeted, so a process that is not pays a few
environment lookups, one short append to the launch record and a meta-path entry (see
``scripts/bench_startup.py``). In an active launch (``$OTCA_PATCH_ARGS`` and ``$OTCA_PATCH_TARGETS``
set by the wrapper) every process:

- **checks in**: appends ``checkin<TAB>PID<TAB>START TIME<TAB>PROGRAM<TAB>SCRIPT`` to
  ``$OTCA_PATCH_RECORD`` (PROGRAM, ``FD:NAME``, names a close-on-exec memory file this process holds:
  an exec in place, which keeps the pid and start time, closes it). The wrapper watches its process
  tree and stops the launch when a Python process that has not checked in loads torch (``python -I``,
  ``-E``, ``-S``, ``env -i``: interpreters this hook never reaches). A process forked from this one (a DataLoader worker, a multiprocessing
  ``fork`` child) inherits this one's state, layer and step guard included, and checks in at the
  fork (its SCRIPT: ``fork of pid PARENT: SCRIPT``).
- **becomes the layer's worker** when its script, or the file its ``-m`` module resolves to (found
  without importing it), is a targeted upstream file (``$OTCA_PATCH_TARGETS``: a JSON list of
  "/"-separated paths inside the checkout, or absolute ``--otca_target`` paths). It re-executes the
  interpreter (same PID, environment and options) as ``-m otca_patch.launch.worker [--module NAME]
  FILE ARGS``, which checks the hook points and runs the rewritten file as ``__main__``. Once
  targeted, nothing fails open: if otca_patch cannot be imported or the worker cannot start, the
  process exits with status 2 and says why (an exception here would be printed as "Error in
  sitecustomize" and the script would then run unpatched).
- otherwise **stops early when its script is a copy** of a targeted trainer (``hooks/resemblance.py``,
  the rule doctor applies, loaded by path: ``$OTCA_PATCH_SHAPES`` names each spec's trainer file in
  this checkout), saying what doctor says of it (``hooks.coverage.classify``: not a GRPO trainer, a
  copy whose spec holds and its ``--otca_target``, or a trainer that needs a spec of its own);
- and **arms the step guard**: once ``torch.optim`` is imported, a global optimizer-step pre-hook
  makes the first optimizer step raise, naming the script and doctor's verdict on it. The
  worker disarms it once the layer is installed (``runner.py``), so only a process the layer did not
  patch is stopped, whatever its file is called.

The variables' names are ``otca_patch/env_names.py``'s, and the record's lines and this process's
identity (pid and start time) ``otca_patch/launch/record.py``'s, each loaded by its path. This folder
holds this file only, so nothing else becomes importable as a top-level module. Any other
sitecustomize on the path still runs.
"""
import os
import sys

WORKER_MODULE = "otca_patch.launch.worker"
HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = os.path.dirname(os.path.dirname(HERE))
RESEMBLANCE = os.path.join(PACKAGE, "hooks", "resemblance.py")
ENV_NAMES = os.path.join(PACKAGE, "env_names.py")
RECORD_PY = os.path.join(PACKAGE, "launch", "record.py")


def _load(name, path):
    """The module at ``path``, loaded by its path: this Python may not be able to import otca_patch,
    and importing the package here would import torch in every process."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _load_or_stop(name, path):
    try:
        return _load(name, path)
    except BaseException as exc:  # the launch put this hook here: never run a process unpatched unseen
        sys.stderr.write(f"otca-patch: error: the start-up hook cannot read {path} ({type(exc).__name__}: {exc})\n")
        sys.stderr.flush()
        os._exit(2)


NAMES = _load_or_stop("_otca_patch_env_names", ENV_NAMES)  # the variables the launch sets (env_names.py)
#: the launch record's lines and this process's identity (launch/record.py)
LAUNCH_RECORD = _load_or_stop("_otca_patch_launch_record", RECORD_PY)


def _fail(message):
    sys.stderr.write(f"{os.environ.get(NAMES.COMMAND) or 'otca-patch'}: error: {message}\n")
    sys.stderr.flush()
    _record_error(message)
    os._exit(2)


def _record_error(message):
    """The launch relays the first error (the same line as ``launch.record.record_error``)."""
    if os.environ.get(NAMES.RECORD):
        script = sys.argv[0] if sys.argv else ""
        _record([LAUNCH_RECORD.event_line(LAUNCH_RECORD.ERROR_EVENT, script, message=message)])


def _asks_for_layer(args, script):
    import shlex

    try:
        return bool({"--otca", "--otca_observe"} & set(shlex.split(args)))
    except ValueError as exc:
        _fail(f"${NAMES.ARGS} cannot be read ({exc}); refusing to run {script}")


def _program():
    """This program's check-in token, ``FD:NAME``: a memory file named uniquely, opened close-on-exec.
    A fork keeps it; an exec in place closes it, whatever the address layout, so the program that
    replaces this one lacks it until it checks in itself. ``""`` where memory files do not exist."""
    name = f"otca-checkin-{os.urandom(6).hex()}"
    try:
        return f"{os.memfd_create(name, os.MFD_CLOEXEC)}:{name}"
    except (AttributeError, OSError):
        return ""


def _check_in_forks(program, shown):
    """Each process forked from this one, by ``os.fork`` (multiprocessing, DataLoader workers), checks
    in as it starts: it runs this program with this process's state, so it is as safe as this one."""
    os.register_at_fork(
        after_in_child=lambda: _record([LAUNCH_RECORD.checkin_line(program, f"fork of pid {os.getppid()}: {shown}")]))


def _record(lines):
    LAUNCH_RECORD.append_to(os.environ.get(NAMES.RECORD), lines)  # a process that cannot check in is stopped


def _module_command():
    """``(options before -m, module name)`` of a ``python [OPTIONS] -m MODULE ARGS`` process.

    At this point ``sys.argv`` is ``["-m", ARGS...]`` and ``sys.orig_argv`` the whole command line."""
    orig = getattr(sys, "orig_argv", None) or []
    at = len(orig) - len(sys.argv)
    if at < 1 or at >= len(orig):
        return None
    token, before = orig[at], orig[at - 1] if at >= 2 else ""
    if token.startswith("-") and "m" in token[1:]:  # -mNAME, -umNAME
        flags, module = token[1:].split("m", 1)
        return orig[1:at] + ([f"-{flags}"] if flags else []), module
    if before.startswith("-") and not before.startswith("--") and before.endswith("m"):  # -m NAME, -um NAME
        return orig[1:at - 1] + ([before[:-1]] if before != "-m" else []), token
    return None


def _module_file(name):
    """The file ``python -m name`` would run, found without importing anything (``-m`` puts the working
    directory first on the path); None when it is not a source file."""
    from importlib.machinery import PathFinder

    path, spec, parts = [os.getcwd(), *filter(None, sys.path)], None, name.split(".")
    for depth in range(1, len(parts) + 1):
        spec = PathFinder.find_spec(".".join(parts[:depth]), path)
        if spec is None:
            return None
        path = spec.submodule_search_locations
        if depth < len(parts) and not path:
            return None
    if spec.submodule_search_locations:  # a package: -m runs its __main__
        spec = PathFinder.find_spec(name + ".__main__", spec.submodule_search_locations)
    origin = spec.origin if spec is not None and spec.has_location else None
    return origin if origin and origin.endswith(".py") else None


def _what_runs():
    """``(shown, file, module, options)``: how this process is named in messages, the Python file it
    runs (None for ``-c``, an interactive interpreter, a console script without ``.py``), its ``-m``
    module name and the interpreter options before ``-m``."""
    script = sys.argv[0] if sys.argv else ""
    if script.endswith(".py"):
        return script, os.path.abspath(script), None, None
    if script == "-m":
        command = _module_command()
        if command is not None:
            options, module = command
            return f"-m {module}", (_module_file(module) if module != WORKER_MODULE else None), module, options
    if script == "-c":
        orig = getattr(sys, "orig_argv", None) or ["python", "-c", ""]
        program = orig[-len(sys.argv)].strip()
        first = program.split("\n", 1)[0]
        return f"python -c '{first[:60]}{' …' if len(first) > 60 or first != program else ''}'", None, None, None
    return script or "python", None, None, None


def _installed(file):
    """Whether ``file`` belongs to the standard library or an installed package (torch, the launchers):
    never a trainer copy, never the code a message should name."""
    if f"{os.sep}site-packages{os.sep}" in file or f"{os.sep}dist-packages{os.sep}" in file:
        return True
    prefixes = {os.path.join(prefix, "lib") + os.sep for prefix in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    return file.startswith(tuple(prefixes))


def _targeted(file, targets, shown):
    """The entry of ``$OTCA_PATCH_TARGETS`` (``targets``, its JSON) that ``file`` is, as written or
    with its symlinks followed (a link to a trainer runs the trainer), or None."""
    found = _targeted_path(file, targets, shown)
    if found is None:
        real = os.path.realpath(file)
        found = _targeted_path(real, targets, shown) if real != file else None
    return found


def _targeted_path(file, targets, shown):
    base = os.path.basename(file)
    if base.isascii() and base.isprintable() and '"' not in base and "\\" not in base and f'/{base}"' not in targets \
            and f'"{base}"' not in targets:
        return None  # json.dumps writes such a name as it is: no entry ends with it (and json's import is skipped)
    import json

    try:
        targets = json.loads(targets)
        parts = file.split(os.sep)
    except ValueError as exc:
        _fail(f"${NAMES.TARGETS} is not the JSON list of paths `otca-patch launch` sets ({exc}); "
              f"refusing to run {shown}")
    for target in targets if isinstance(targets, list) else []:
        want = target.split("/") if isinstance(target, str) else [None]
        if parts[-len(want):] == want:
            return target
    return None


def _become_worker(target, shown, file, module, options):
    try:
        from otca_patch.launch.reexec import become_worker
    except BaseException as exc:
        _fail(f"{shown} is the upstream file {target} that --otca patches, but this Python "
              f"({sys.executable}) cannot import otca_patch ({type(exc).__name__}: {exc}). Install otca-patch into "
              f"the environment the launcher starts (pip install -e <otca-patch>), or launch without --otca.")
    try:
        become_worker(module=module, file=file, options=options)
    except BaseException as exc:
        _fail(f"cannot start the layer's worker for {shown} ({type(exc).__name__}: {exc})")


def _chain_next_sitecustomize():
    saved_path = list(sys.path)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != HERE]
    module = sys.modules.pop("sitecustomize", None)
    try:
        __import__("sitecustomize")  # not importlib: importing it here would cost every process ~10 ms
    except ImportError:
        pass
    finally:
        sys.path[:] = saved_path
        if module is not None:
            sys.modules["sitecustomize"] = module


# ---- what a process that is not targeted is told: the copy check and the step guard


def _resemblance():
    """``hooks/resemblance.py``, loaded by path (this Python may not be able to import otca_patch)."""
    return _load("_otca_patch_resemblance", RESEMBLANCE)


def _shapes():
    """``$OTCA_PATCH_SHAPES``: JSON ``[[NAME, FILE, TRAINER PATH HERE or ""], ...]``, one per spec."""
    import json

    try:
        shapes = json.loads(os.environ.get(NAMES.SHAPES) or "[]")
    except ValueError:
        return []
    return [tuple(shape) for shape in shapes if isinstance(shape, list) and len(shape) == 3]


def _nearest_spec(file, copies_only=False):
    """``(resemblance module, (spec name, upstream file, trainer path), share)`` of the trainer nearest
    to ``file``, or None (with ``copies_only``, also when ``file`` is no copy of it). The trainers' line keys come
    from ``$OTCA_PATCH_RECORD.lines`` (the wrapper's: one line per shape), else from the trainers;
    the shapes' JSON is read only once a trainer is near enough (json's import is most of the cost)."""
    try:
        resemblance = _resemblance()
    except (OSError, ImportError):
        return None
    text = resemblance.read_text(file)
    if text is None:
        return None
    keys = resemblance.read_text(f"{os.environ.get(NAMES.RECORD)}.lines") if os.environ.get(NAMES.RECORD) else None
    if keys is not None:
        trainers = [(index, set(line.split())) for index, line in enumerate(keys.split("\n"))]
    else:
        trainers = [(index, _trainer_keys(resemblance, shape[2])) for index, shape in enumerate(_shapes()) if shape[2]]
    found = resemblance.nearest(resemblance.line_keys(text), trainers)
    if found is None or (copies_only and not resemblance.is_copy(found)):
        return None
    shapes = _shapes()
    return (resemblance, shapes[found[0]], found[1]) if found[0] < len(shapes) else None


def _trainer_keys(resemblance, path):
    text = resemblance.read_text(path)
    return resemblance.line_keys(text) if text is not None else None


def _shown_path(path):
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative


def _checkout():
    """The folder the launch runs from: where ``$OTCA_PATCH_SHAPES`` found the trainers (else here)."""
    for _, upstream_file, here in _shapes():
        suffix = os.sep + upstream_file.replace("/", os.sep)
        if here and here.endswith(suffix):
            return here[:-len(suffix)] or os.sep
    return os.getcwd()


def _flag_path(file):
    """``file`` as ``--otca_target`` takes it in the launch: relative to its folder when inside it."""
    relative = os.path.relpath(file, _checkout())
    return file if relative.startswith("..") else relative


def _doctor_verdict(file):
    """doctor's verdict on ``file`` (``hooks.coverage.classify``), or None when it has nothing to say
    or this Python cannot import otca_patch (this process stops either way: the import is paid once)."""
    try:
        from pathlib import Path

        from otca_patch.hooks.coverage import UNRELATED, classify
        from otca_patch.hooks.spec import load_specs

        verdict = classify(Path(file), Path(_checkout()), load_specs())
    except Exception:
        return None
    return None if verdict.kind == UNRELATED else verdict


def _check_with_doctor(name, path):
    """The advice when doctor's verdict cannot be had here: ask doctor, which never contradicts itself."""
    return (f"`otca-patch doctor {_checkout()} --otca_target {name}={path}` says whether it is a GRPO trainer and "
            f"whether that spec holds on it; if it holds, run it patched with --otca_target {name}={path} among the "
            f"otca-patch flags")


def _stop_copy(shown, file, nearest):
    verdict = _doctor_verdict(file)
    if verdict is not None:
        _fail(verdict.stop_message(shown, _flag_path(file)))
    _, (name, upstream_file, _), share = nearest
    _fail(f"{shown} is not a file the layer targets but shares {share:.0%} of the lines of {upstream_file} (spec "
          f"{name}), so it would train unpatched; {_check_with_doctor(name, _flag_path(file))}, or launch without --otca")


def _stepping_code(frame):
    """``(file, function, line)`` of the innermost frame outside installed packages, the standard
    library and otca-patch: the code that asked for the optimizer step (through any wrapper)."""
    while frame is not None:
        file = frame.f_code.co_filename
        if os.path.isabs(file) and not _installed(file) and not file.startswith(PACKAGE + os.sep):
            return file, frame.f_code.co_name, frame.f_lineno
        frame = frame.f_back
    return None


def unpatched_step_message(shown, file, stepping=None):
    """Why this process may not take an optimizer step, and what to do. ``stepping``: ``(file,
    function, line)`` of the code that steps, when it is not the process's script."""
    where = f"{shown} (pid {os.getpid()})"
    if stepping is not None and stepping[0] != file:
        where += f", in {_shown_path(stepping[0])}:{stepping[2]} ({stepping[1]}),"
        file = stepping[0]  # the trainer code is what resembles a target
    elif stepping is not None:
        where += f", in {stepping[1]} (line {stepping[2]}),"
    verdict = _doctor_verdict(file) if file else None
    if verdict is not None:
        return (f"{where} is about to take an optimizer step without the layer: "
                f"{verdict.stop_message(_shown_path(file), _flag_path(file))}. Stopped here so it does not train vanilla.")
    nearest = _nearest_spec(file) if file else None
    path = _flag_path(file) if file else "PATH"
    if nearest is not None and nearest[2] >= 0.05:
        resemblance, (name, upstream_file, _), share = nearest
        what = ("a copy of" if resemblance.is_copy((name, share)) else "nearest to") + \
               f" {upstream_file} (spec {name}, {share:.0%} of its lines)"
        how = _check_with_doctor(name, path)
    else:
        what = "like none of the targeted trainers"
        how = f"if it is a GRPO trainer shaped like a target, give --otca_target NAME={path} (`otca-patch doctor .` lists them)"
    return (f"{where} is about to take an optimizer step without the layer: {_shown_path(file) if file else 'it'} is "
            f"not a file --otca patches, and is {what}. Stopped here so it does not train vanilla; {how}. A trainer "
            f"without group-relative advantages (DPO, SFT, NFT) runs without --otca.")


class UnpatchedTraining(RuntimeError):
    """An optimizer step in a process of an ``--otca`` launch that the layer did not patch."""


class _StepGuard:
    """A meta-path finder that lets the import of ``torch.optim.optimizer`` run and then registers a
    global optimizer-step pre-hook that raises: every ``torch.optim.Optimizer`` (also the ones
    DeepSpeed and accelerate wrap) calls it before it steps. Processes that never import torch pay
    one function call per import."""

    otca_patch_step_guard = True  # how ``runner.disarm_step_guard`` finds it
    MODULE = "torch.optim.optimizer"

    def __init__(self, shown, file):
        self.shown, self.file, self.handle, self.armed = shown, file, None, False

    def find_spec(self, name, path=None, target=None):
        if name != self.MODULE or self.armed:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            self.arm(module)

        spec.loader.exec_module = exec_module
        return spec

    def arm(self, module):
        self.armed = True
        register = getattr(module, "register_optimizer_step_pre_hook", None)
        if register is not None:
            self.handle = register(self.refuse)
            return
        original = module.Optimizer.__init__  # torch < 2.0 has no global step hooks: refuse to build one

        def refusing_init(optimizer, *args, **kwargs):
            self.refuse(optimizer, args, kwargs)
            original(optimizer, *args, **kwargs)

        module.Optimizer.__init__ = refusing_init
        self.handle = _Restore(module.Optimizer, original)

    def refuse(self, optimizer, args, kwargs):
        message = unpatched_step_message(self.shown, self.file, _stepping_code(sys._getframe(1)))
        _record_error(message)
        sys.stderr.write(f"{os.environ.get(NAMES.COMMAND) or 'otca-patch'}: error: {message}\n")
        sys.stderr.flush()
        raise UnpatchedTraining(message)

    def disarm(self):
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        if self.handle is not None:
            self.handle.remove()
            self.handle = None


class _Restore:
    def __init__(self, owner, init):
        self.owner, self.init = owner, init

    def remove(self):
        self.owner.__init__ = self.init


def _main():
    args = os.environ.get(NAMES.ARGS)
    if not args:
        return
    targets = os.environ.get(NAMES.TARGETS)
    if targets is None:  # not the wrapper's environment: fail closed only if the flags ask for the layer
        script = sys.argv[0] if sys.argv else ""
        if script.endswith(".py") and _asks_for_layer(args, script):
            _fail(f"${NAMES.ARGS} asks for the layer but ${NAMES.TARGETS} does not say which files it "
                  f"targets; start the launch through `otca-patch launch` (refusing to run {script} unpatched)")
        return
    program = _program()
    shown, file, module, options = _what_runs()
    lines = [LAUNCH_RECORD.checkin_line(program, shown)]
    _check_in_forks(program, shown)
    if file is not None:
        target = _targeted(file, targets, shown)
        if target is not None:
            _record(lines)
            _become_worker(target, shown, file, module, options)
        lines.append(LAUNCH_RECORD.ran_line(file if module is None else shown))
    elif module is not None and module != WORKER_MODULE:  # a module that is no source file here
        lines.append(LAUNCH_RECORD.ran_line(shown))
    _record(lines)
    if file is not None and not _installed(file):
        nearest = _nearest_spec(file, copies_only=True)
        if nearest is not None:
            _stop_copy(shown, file, nearest)
    sys.meta_path.insert(0, _StepGuard(shown, file))


_main()
_chain_next_sitecustomize()
