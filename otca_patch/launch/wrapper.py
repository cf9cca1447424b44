"""``otca-patch launch UPSTREAM_LAUNCH.sh [--otca ...] [ARGS]``: run an upstream launch script
unchanged, with the layer installed in every Python process it starts.

``otca-patch launch [--otca ...] -- COMMAND [ARGS]``: the same for a launch command line, e.g.
FlowGRPO's ``accelerate launch --config_file ... scripts/train_sd3.py --config config/grpo.py:NAME``,
given unchanged after ``--``. (``scripts/otca_run.sh`` is this command for a checkout of otca-patch.)

The upstream shell scripts pass fixed arguments to torchrun / accelerate, so the ``--otca*`` flags
travel in ``$OTCA_PATCH_ARGS``, and a start-up hook the launch puts first on ``PYTHONPATH`` turns
each targeted trainer process into the layer's worker. Without ``--otca`` or
``--otca_observe`` the script runs exactly as published: no variable is set, no hook is installed.

The launch is first checked (the pre-flight, below). While a launch with the layer runs, nothing
trains without it (docs/launch-guard.md): a Python process that never checks in with the launch
(``python -I``, ``-E``, ``-S``, ``env -i``) stops the launch once it loads torch; in a process the
layer did not patch, the first optimizer step raises, with doctor's verdict on the code; a copy of a
targeted trainer stops at start, with the same verdict. Forks of a process that checked in
(DataLoader workers) are the launch's own; an exec in place must check in anew. The launch lasts
until the last process it started has ended: one still running when the script has ended is named,
and stopped if it loads torch without checking in; once the trainers have ended, what ran beside
them (a server left in the background) is named and stopped. A restart that succeeded ends 0 with a
note; a failure the script ignored ends with that process's status. ``-m`` launches are patched like
path launches. When the launch ends without any process having run a targeted file, the launch fails
and names the Python scripts that did run.
"""
from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from .. import env_names
from ..config import OtcaConfig
from ..files import shown_path
from ..help_text import plain_text
from ..hooks.errors import PatchError
from ..hooks.spec import TargetSpec
from ..runlog import LOG_NAME
from . import preflight, reach, watch
from .preflight import (PROG, STARTUP_DIR, Checked, Launch, Refused, preflight_launch, read_launch,
                        setup_note)
from .wandb_note import panels_note
from .record import create_record, failures, read_events, read_scripts


def shapes(specs: list[TargetSpec], workdir: Path) -> str:
    """``$OTCA_PATCH_SHAPES``: JSON ``[[NAME, FILE, TRAINER PATH HERE or ""], ...]``, one per spec."""
    return json.dumps([[spec.name, spec.file, str((workdir / spec.file).resolve()) if (workdir / spec.file).is_file() else ""]
                       for spec in specs])


def write_trainer_keys(specs: list[TargetSpec], workdir: Path, record: Path) -> Path:
    """``RECORD.lines``: per spec (``shapes``' order), its trainer's line keys here, space-separated
    (empty when absent), so a process that is not a target reads this one file for the copy check."""
    from ..hooks import resemblance

    lines = [" ".join(sorted(resemblance.line_keys((workdir / spec.file).read_text(errors="replace"))))
             if (workdir / spec.file).is_file() else "" for spec in specs]
    path = Path(f"{record}.lines")
    path.write_text("\n".join(lines))
    return path


def compile_startup_hook() -> None:
    """Bytecode for the start-up hook and the files it loads (the variables' names, the launch record, the
    copy rule), so that each process of the launch (also under PYTHONDONTWRITEBYTECODE) does not compile
    them again."""
    import py_compile

    package = STARTUP_DIR.parent.parent
    for source in (STARTUP_DIR / "sitecustomize.py", package / "env_names.py", package / "launch" / "record.py",
                   package / "hooks" / "resemblance.py"):
        try:
            py_compile.compile(str(source), doraise=True)
        except (OSError, py_compile.PyCompileError):
            pass  # a read-only installation: pip compiled them, or each process compiles them


def targets(specs: list[TargetSpec], explicit: list[TargetSpec]) -> str:
    """``$OTCA_PATCH_TARGETS``: JSON list of the targeted files ("/"-separated, relative to the checkout;
    ``--otca_target`` files absolute)."""
    return json.dumps(sorted({spec.file for spec in specs}) + [spec.file for spec in explicit])


def layer_config(config: OtcaConfig, workdir: Path) -> OtcaConfig:
    """The config every process gets: ``--otca_target`` paths made absolute (a launcher may start
    its processes elsewhere)."""
    from ..hooks.explicit_targets import resolve

    return replace(config, otca_target={str(resolve(path, workdir)): name for path, name in config.otca_target.items()})


def failure_message(event: dict) -> str:
    """The end of a failed launch: which process stopped first, and why."""
    return f"the launch failed; the first error a process reported {reported(event)}"


def reported(event: dict) -> str:
    """``(SCRIPT, rank R, host H, pid P): MESSAGE`` of an error a process reported."""
    who = ", ".join(filter(None, [f"rank {event['rank']}" if event.get("rank") is not None else "",
                                  f"host {event.get('host')}", f"pid {event.get('pid')}"]))
    script = event.get("script") or "a process"
    shown = os.path.relpath(script) if os.path.isabs(script) else script
    return f"({shown}, {who}): {event.get('message')}"


def no_target_message(ran: list[str], code: int = 0, text: str = "", path: str | None = None) -> str:
    """Why the launch ended with nothing trained under the layer: a launcher that is missing or failed
    (named, when the launch's text runs one), a top process that failed first, or scripts that ran but
    are no targets."""
    if code != 0:
        ended = f"the launch's top process ended with status {code} before any process ran a file the layer targets"
        for launcher in reach.launchers(text):
            if shutil.which(launcher, path=path if path is not None else os.environ.get("PATH", os.defpath)) is None:
                return (f"{ended}: {launcher} is not on the launch's PATH; activate the training environment that "
                        f"provides it (or give its full path)")
            return f"{ended}: {launcher} failed before it started a trainer (its error is above)"
        return f"{ended} (its error is above)"
    shown = [os.path.relpath(s) if os.path.isabs(s) else s for s in ran]
    return (f"the launch ended and no process ran a file the layer targets, so nothing trained with the layer; "
            f"Python scripts that ran: {', '.join(shown) or 'none'} (`otca-patch doctor .` lists the targeted "
            f"files; for a copy of one add --otca_target NAME=PATH)")


def run_and_wait(command: list[str], env: dict, tree: watch.TreeWatch | None = None) -> int:
    """Run the launch as a child and wait: SIGTERM / SIGHUP are passed on; Ctrl-C reaches the child
    through the terminal's process group, so the wrapper only keeps waiting. With ``tree``, a Python
    process of the launch that never checks in with the layer stops the launch (status 2), and the
    launch lasts until the last process of its tree has ended, also one that outlived the child: a
    signal then stops what still runs."""
    if tree is not None:
        watch.become_subreaper()
    child = subprocess.Popen(command, env=env)
    caught = []  # signals that came once the child had ended: they stop what outlived it

    def on_signal(signum, _frame):
        if child.returncode is None:
            if signum != signal.SIGINT:
                child.send_signal(signum)
        else:
            caught.append(signum)

    previous = {signum: signal.signal(signum, on_signal) for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)}
    try:
        code = child.wait() if tree is None else watch_tree(child, tree, caught)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return 128 - code if code < 0 else code


def watch_tree(child: subprocess.Popen, tree: watch.TreeWatch, caught: list) -> int:
    """Wait for ``child`` and every process below this one (``run_and_wait``); the exit status."""
    code = None
    while True:
        if code is None:
            try:
                code = child.wait(timeout=watch.POLL_S)
            except subprocess.TimeoutExpired:
                pass
            else:
                code = 128 - code if code < 0 else code
                outliving = tree.top_ended(code)
                if not outliving:
                    return code
                print(f"{PROG}: {outliving}", file=sys.stderr, flush=True)
        else:
            time.sleep(watch.POLL_S)
        tree.reap_adopted(child.pid)
        late = tree.late()
        if late:
            error(tree.describe(late))
            tree.stop(late, child.pid)  # sets tree.stopped
            child.wait()
            return 2
        if code is None:
            continue
        if caught:
            name = signal.Signals(caught[0]).name
            error(f"stopped by {name} while processes that outlived the launch's top process still ran")
            tree.stop([], child.pid)
            return 128 + caught[0]
        if tree.training_over():  # what ran beside the trainers does not hold the launch: a server left running
            stopped = tree.stop_leftovers(child.pid)
            if stopped:
                print(f"{PROG}: {stopped}", file=sys.stderr, flush=True)
        if not tree.running():
            tree.reap_adopted(child.pid)
            line, failed = tree.outliving_end()
            print(f"{PROG}: {line}", file=sys.stderr, flush=True)
            return code or failed


def error(message: str) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return 2


def usage() -> str:
    import argparse

    from ..config import build_parser

    parser = build_parser()
    parser.usage = argparse.SUPPRESS
    flags = parser.format_help().strip("\n").split("\n", 1)[1]  # without argparse's "options:" title
    return plain_text(f"usage: {PROG} UPSTREAM_LAUNCH.sh [--otca ...] [ARGS]\n       {PROG} [--otca ...] -- COMMAND [ARGS]\n\n"
                      f"{__doc__.strip()}\n\n{preflight.__doc__.strip()}\n\nflags:\n{flags}")


def main(argv=None) -> int:
    """Pre-flight, start, watch, end: each phase one function below."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0 if argv else 2
    try:
        launch = read_launch(argv)
        if not launch.config.active:
            run_untouched(launch.command)  # execs: never returns
        workdir = Path.cwd()
        checked = preflight_launch(launch, workdir)
    except (Refused, PatchError, ValueError, SyntaxError) as exc:
        return error(str(exc))
    record, keys, env = start(launch, checked, workdir)
    tree = watch.TreeWatch(record, STARTUP_DIR, env_names.RECORD) if watch.available() else None
    try:
        code = run_and_wait(launch.command, env, tree)
        targeted, ran = read_scripts(record)
        events = read_events(record)
    finally:
        record.unlink(missing_ok=True)
        keys.unlink(missing_ok=True)
    status = launch_status(code, tree, events, targeted, ran, checked.text)
    print(closing_line(status, launch.config, workdir), file=sys.stderr)
    return status


def run_untouched(command: list[str]) -> None:
    """Without the layer: upstream's command in this process, with none of the layer's variables."""
    print(f"{PROG}: no --otca / --otca_observe: running the upstream script untouched", file=sys.stderr)
    env = dict(os.environ)
    for variable in env_names.LAYER:
        env.pop(variable, None)
    sys.stdout.flush()
    os.execvpe(command[0], command, env)


def start(launch: Launch, checked: Checked, workdir: Path) -> tuple[Path, Path, dict]:
    """The launch record, the trainers' line keys and the environment every process inherits; says
    what the layer does in one line (and once, when wandb's panels will not appear)."""
    config = launch.config
    record = create_record(workdir)
    keys = write_trainer_keys(checked.specs, workdir, record)
    compile_startup_hook()
    env = dict(os.environ)
    env.update({env_names.ARGS: shlex.join(layer_config(config, workdir).to_argv()),
                env_names.TARGETS: targets(checked.specs, checked.explicit),
                env_names.SHAPES: shapes(checked.specs, workdir), env_names.RECORD: str(record), env_names.COMMAND: PROG,
                "PYTHONPATH": os.pathsep.join([str(STARTUP_DIR), *filter(None, [env.get("PYTHONPATH")])])})
    print(f"{PROG}: layer installed ({shlex.join(config.to_argv())}); hook points hold in: "
          f"{', '.join(checked.held) or 'no file yet: the script builds its trainer path at run time, so each process is checked as it starts'}"
          f"{setup_note(checked.text)}", file=sys.stderr)
    note = panels_note(PROG, checked.text, env, shown_path(launch.script) if launch.script else "the command",
                       shown_path(workdir / config.otca_log_dir))
    if note:
        print(note, file=sys.stderr)
    sys.stdout.flush()
    return record, keys, env


def launch_status(code: int, tree, events: list[dict], targeted: list[str], ran: list[str], text: str = "") -> int:
    """The launch's exit status, saying why when the layer failed it, when the script ignored a
    process's failure (the process's status, else 2), or when a restart undid one (a note)."""
    if tree is not None and tree.stopped:  # said why already
        return code
    standing, undone = failures(events)
    if standing:  # also with status 0: a failure the script ignored (`|| true`), a process it never waited for
        if code != 0:
            error(failure_message(standing[0]))
            return code
        status = standing[0].get("status")
        status = status if isinstance(status, int) and 0 < status < 256 else 2
        error(f"{failure_message(standing[0])}; the launch's top process ended with status 0, ignoring that "
              f"failure, so the launch ends with status {status}")
        return status
    if undone:
        count = len(undone)
        print(f"{PROG}: note: {count} process{'es' if count > 1 else ''} failed and {'were' if count > 1 else 'was'} "
              f"started again, and the next attempt ran to its end; the first failed attempt {reported(undone[0])}", file=sys.stderr)
    if not targeted:
        error(no_target_message(ran, code, text))
        return code or 2
    return code


def closing_line(status: int, config: OtcaConfig, workdir: Path) -> str:
    """The launch's last line: finished or failed, and where the run log is."""
    log = Path(config.otca_log_dir)
    log = (log if log.is_absolute() else workdir / log) / LOG_NAME
    where = f"run log {shown_path(log)}" if log.is_file() else f"no run log at {shown_path(log)}"
    verdict = "finished" if status == 0 else f"failed (exit status {status}, the error above)"
    return f"{PROG}: {verdict}; {where}"


if __name__ == "__main__":
    sys.exit(main())
