"""``otca-patch launch UPSTREAM_LAUNCH.sh [--otca ...] [ARGS]``: run an upstream launch script
unchanged, with the layer installed in every Python process it starts.

``otca-patch launch [--otca ...] -- COMMAND [ARGS]``: the same for a launch command line, e.g.
FlowGRPO's ``accelerate launch --config_file ... scripts/train_sd3.py --config config/grpo.py:NAME``,
given unchanged after ``--``. (``scripts/otca_run.sh`` is this command for a checkout of otca-patch.)

The upstream shell scripts pass fixed arguments to torchrun / accelerate, so the ``--otca*`` flags
travel in ``$OTCA_PATCH_ARGS``, and a start-up hook the launch puts first on ``PYTHONPATH`` turns
each targeted trainer process into the layer's worker. Without ``--otca`` or
``--otca_observe`` the script runs exactly as published: no variable is set, no hook is installed.

With the layer, before anything starts: the flags (the objectives' registry names and options, the
weights against the launched trainer's objectives, target-only flags, the log folder), and the hook
points of every targeted file the launch names (and of every ``--otca_target`` file) are checked; a
launched script that is no target gets doctor's verdict on it. While it
runs, nothing trains without the layer (docs/launch-guard.md): a Python process that never checks
in with the launch (``python -I``, ``-E``, ``-S``, ``env -i``) stops the launch once it loads torch; in a
process the layer did not patch, the first optimizer step raises, with doctor's verdict on the code;
a copy of a targeted trainer stops at start, with the same verdict. Forks of a process that checked in
(DataLoader workers) are the launch's own; an exec in place must check in anew. The launch lasts until
the last process it started has ended: one still running when the script has ended is named, and
stopped if it loads torch without checking in; once the trainers have ended, what ran beside them (a
server left in the background) is named and stopped. A restart that succeeded ends 0 with a note; a
failure the script ignored ends with that process's status. ``-m`` launches are patched like path launches. When the launch ends without any
process having run a targeted file, the launch fails and names the Python scripts that did run.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

from .. import env_names
from ..config import OtcaConfig, parse_otca_args
from ..files import shown_path
from ..help_text import plain_text
from ..hooks.errors import PatchError
from ..hooks.copies import warn_unused_copies
from ..hooks.explicit_targets import explicit_specs, not_overridden
from ..hooks.prepare import rewritten
from ..hooks.select import choose_spec
from ..hooks.spec import TargetSpec, load_specs
from ..runlog import LOG_NAME
from . import reach, watch
from .wandb_note import panels_note
from .record import failures, read_events, read_scripts

PROG = "otca-patch launch"
STARTUP_DIR = Path(__file__).resolve().parent / "startup"


def preflight(launch_script: Path, workdir: Path, text: str | None, specs: list[TargetSpec]) -> dict[str, TargetSpec]:
    """Check the hook points of every targeted upstream file the launch script (or the command
    line ``text``) names, before any process starts (each worker checks again). Returns ``{file
    checked [spec name]: its spec}``; raises ``PatchError``."""
    text = command_text(launch_script, workdir, None) if text is None else text
    checked = {}
    for file in dict.fromkeys(spec.file for spec in specs):  # a path several upstreams share: its content picks
        path = next((p for p in reach.named_paths(file, text, workdir) if p.is_file()), None)
        if path is None:
            continue
        choice = choose_spec(path, [spec for spec in specs if spec.file == file])
        rewritten(path, choice.spec)  # the file's one parse serves the choice and the rewrite
        checked[f"{file} [{choice.spec.name}]"] = choice.spec
    return checked


def command_text(launch_script: Path | None, workdir: Path, text: str | None) -> str:
    """The launch's text: the command line, or the script with the shell scripts it runs."""
    text = launch_script.read_text(errors="replace") if text is None else text
    return reach.launch_text(text, workdir)


def unreachable(launch_script: Path | None, workdir: Path, text: str, specs: list[TargetSpec],
                config: OtcaConfig) -> str | None:
    """Why this ``--otca`` launch can reach no targeted trainer from ``workdir`` (called when the
    pre-flight checked none), or ``None`` when it cannot tell (a script path built at run time: each
    process is checked as it starts)."""
    literal, built = reach.python_entries(text)
    if built:
        return None
    what = str(launch_script) if launch_script is not None else f"`{text.strip()}`"
    named = [spec.file for spec in specs if reach.named_paths(spec.file, text, workdir)]
    named = list(dict.fromkeys(named))
    starts = [workdir] + ([launch_script.resolve().parent] if launch_script is not None else [])
    nearby = reach.nearby_checkouts(starts, specs)
    here = reach.present(workdir, specs)
    if named:  # it runs a targeted file, but not one under this directory: run from the checkout
        holding = {d: files for d, files in nearby.items() if set(named) & set(files)}
        problem = (f"{what} runs {reach.shown_files(named)}, which is not under the current directory {workdir}, "
                   f"so no process would train with the layer")
        return problem + "; " + _run_from_checkout(holding or nearby, launch_script, config)
    entries = reach.python_entry_list(text, workdir)
    verdict = _verdict_on(entries, workdir, specs)
    if verdict:  # a script doctor has a verdict on, in a checkout of an upstream or of another project
        return verdict
    missing = next((entry for entry in entries if entry.path is not None and entry.module is None
                    and "train" in entry.path.name and not entry.path.exists()), None)
    if missing is not None:  # a trainer file the script names is not there at all (a config file may be built)
        return (f"{what} runs {missing.token}, which does not exist ({shown_path(missing.path)} from {workdir}), so no "
                f"process would train with the layer; correct the path (`otca-patch doctor .` lists the trainer files "
                f"here)")
    if here:  # run from a checkout, but the script runs none of its targets
        runs = f"it runs {reach.shown_files(literal)}" if literal else "it names no Python script or module"
        return (f"{what} runs no trainer the layer targets ({runs}), so --otca would change nothing; targeted "
                f"trainers here: {reach.shown_files(here)}. Launch one of their scripts, run this one without "
                f"--otca, or, for a copy of a targeted trainer, add --otca_target NAME=PATH")
    runs = f"it runs {reach.shown_files(literal)}" if literal else "it names no Python script or module"
    return (f"{what} reaches no trainer the layer targets from the current directory {workdir} ({runs}); "
            + _run_from_checkout(nearby, launch_script, config))


def _run_from_checkout(checkouts: dict, launch_script: Path | None, config: OtcaConfig) -> str:
    if not checkouts:
        return ("run from the upstream checkout (no folder near here or near the script holds a targeted file; "
                "`otca-patch doctor CHECKOUT` lists them)")
    root, files = next(iter(checkouts.items()))
    flags = shlex.join(config.to_argv())
    if launch_script is not None:
        script = Path(os.path.relpath(launch_script.resolve(), root))
        how = f"`cd {shlex.quote(str(root))} && {PROG} {shlex.quote(str(script))} {flags}`"
    else:
        how = f"`cd {shlex.quote(str(root))} && {PROG} {flags} -- ...`"
    others = [str(d) for d in list(checkouts)[1:]]
    return (f"run from the upstream checkout: {how}. Targets found nearby: {root} ({reach.shown_files(files)})"
            + (f"; also {', '.join(others)}" if others else ""))


def _verdict_on(entries: list[reach.PythonEntry], workdir: Path, specs: list[TargetSpec]) -> str | None:
    """The message for the first launched script doctor has a verdict on (``coverage.classify``: not
    GRPO, a copy whose spec holds, or a trainer that needs a spec of its own), said before anything
    runs, as the start-up hook would say it."""
    from ..hooks.coverage import UNRELATED, classify

    for entry in entries:
        path = entry.path
        if entry.module is not None or path is None or not path.is_file():
            continue
        verdict = classify(path, workdir, specs)
        if verdict.kind != UNRELATED:
            return verdict.stop_message(entry.token, _as_flag_path(path, workdir))
    return None


def _as_flag_path(path: Path, workdir: Path) -> str:
    """``path`` as ``--otca_target`` takes it from ``workdir``: relative inside it, else absolute."""
    return os.path.relpath(path, workdir) if path.is_relative_to(workdir) else str(path)


def setup_note(text: str) -> str:
    """The pre-flight line's clause on set-up commands that the script runs before training."""
    commands = reach.setup_commands(text)
    if not commands:
        return ""
    shown = ", ".join(f"`{c if len(c) <= 60 else c[:57] + '...'}`" for c in commands[:5])
    more = f" and {len(commands) - 5} more" if len(commands) > 5 else ""
    return (f"; before training, the script runs set-up commands that change this machine or environment, "
            f"now: {shown}{more}")


def check_explicit(specs: list[TargetSpec]) -> list[str]:
    """Hook points of every ``--otca_target`` file (``specs``: their specs, ``file`` absolute); a file
    on which they do not hold and that is not a GRPO trainer (a DPO one) is said to be so."""
    from ..hooks.coverage import NOT_GRPO_ADVICE
    from ..hooks.trainer_kind import NOT_GRPO, trainer_kind

    for spec in specs:
        try:
            rewritten(spec.file, spec)
        except PatchError as exc:
            if trainer_kind(Path(spec.file)) != NOT_GRPO:
                raise
            shown = os.path.relpath(spec.file)
            raise Refused(f"--otca_target {spec.name}={shown}: {shown} is {NOT_GRPO_ADVICE} (no spec patches a trainer "
                          f"without group-relative advantages; {spec.name}'s spec does not hold on it: "
                          f"{str(exc).splitlines()[0]})") from None
    return [f"{os.path.relpath(spec.file)} (as {spec.name})" for spec in specs]


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
    """Bytecode for the start-up hook and the files it loads (the variables' names, the copy rule), so that each process of the launch
    (also under PYTHONDONTWRITEBYTECODE) does not compile them again."""
    import py_compile

    package = STARTUP_DIR.parent.parent
    for source in (STARTUP_DIR / "sitecustomize.py", package / "env_names.py", package / "hooks" / "resemblance.py"):
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


def check_objectives(config: OtcaConfig, launched: list[TargetSpec], named: list[TargetSpec]) -> None:
    """The objectives' registry names, checkpoints and options, before any process starts; and, for
    each trainer the launch names (``named``) whose rewards are known before it runs, the number of
    ``--otca_objective_weights``."""
    from ..objective_set import check_objective_flags, check_weight_count, expected_columns
    from ..targets.registry import runtime_class

    trainer_names = any(getattr(getattr(runtime_class(spec), "upstream_rewards", None), "bare_keys", False)
                        for spec in launched)
    check_objective_flags(config.otca_rewards, config.otca_reward_ckpt, config.otca_reward_opt,
                          trainer_names_rewards=trainer_names)
    if config.otca_objective_weights is None:
        return
    for spec in named:
        runtime = runtime_class(spec)
        upstream = getattr(runtime, "upstream_rewards", None)
        if upstream is None or not getattr(runtime, "rewards_known_at_install", True):
            continue  # the trainer's own flags choose its rewards (MixGRPO): its first step checks the count
        try:
            columns = expected_columns(config.otca_rewards, upstream)
        except ImportError:
            continue  # a registry adapter's library is missing here; each trainer process says so
        check_weight_count(config.otca_objective_weights, columns)


def check_target_flags(config: OtcaConfig, named: list[TargetSpec]) -> None:
    """A target-only flag (``--otca_video_frames``...) that a trainer the launch names does not take:
    refused now, as its process would refuse it."""
    from ..hooks.spec import probing_targets
    from ..target_options import refuse_foreign_flags

    for spec in named:
        refuse_foreign_flags(config, spec.name, spec.flags, probing_targets)


def check_log_dir(folder: str, workdir: Path) -> None:
    """``--otca_log_dir`` can be written (from ``workdir``): its missing folders are made, a probe file
    written and removed, and the folders made for it removed again. A one-line ``ValueError``."""
    path = Path(os.path.expanduser(folder))
    path = path if path.is_absolute() else workdir / path
    made = []
    try:
        for parent in [*reversed(path.parents), path]:
            if not parent.is_dir():
                parent.mkdir()
                made.append(parent)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".otca-probe-"):
            pass
    except OSError as exc:
        raise ValueError(f"--otca_log_dir {folder}: run_log.jsonl cannot be written there "
                         f"({exc.strerror or exc}{f': {exc.filename}' if exc.filename else ''}); give a folder "
                         f"this user can write") from None
    finally:
        for parent in reversed(made):
            try:
                parent.rmdir()
            except OSError:
                pass


def script_is_folder(folder: Path) -> str:
    """What to say when the launch script given is a folder: the launch scripts in it, or the form
    for a Python trainer."""
    from itertools import islice

    scripts = sorted(str(p) for p in islice(folder.rglob("*.sh"), 100))[:3]  # scripts/finetune/*.sh
    trainers = sorted(str(p) for p in folder.glob("train*.py"))[:1]
    if scripts:
        give = f"give one of its launch scripts ({', '.join(scripts)}{', ...' if len(scripts) == 3 else ''})"
    elif trainers:
        give = f"for a Python trainer in it give the command after --: `{PROG} --otca -- python {trainers[0]} ...`"
    else:
        give = f"give the launch script (.sh) that starts training, or the command after --: `{PROG} --otca -- COMMAND`"
    return f"{folder} is a folder, not a launch script; {give}"


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


def record_file(workdir: Path) -> Path:
    """Where the launch's processes say what they ran: in the launch's folder, which processes that a
    launcher starts on other machines usually share, else in the temporary folder."""
    try:
        handle, path = tempfile.mkstemp(prefix=".otca-launch-", suffix=".record", dir=workdir)
    except OSError:
        handle, path = tempfile.mkstemp(prefix="otca-launch-", suffix=".record")
    os.close(handle)
    return Path(path)


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
                      f"{__doc__.strip()}\n\nflags:\n{flags}")


#: a dash the user meant as the two of ``--otca`` (``-otca``, a typographic dash pasted from a page)
_DASHES = "-\u2010\u2011\u2012\u2013\u2014\u2015\u2212"


def misspelled_flag(tokens: list[str]) -> str | None:
    """The message for an argument that looks like an otca-patch flag but is not one (``-otca``,
    ``—otca_mode``, ``--OTCA``): upstream's script would get it and the layer would stay off."""
    from ..flags import flag_names
    from ..suggest import did_you_mean

    known = sorted(flag_names(OtcaConfig))
    for token in tokens:
        name = token.split("=", 1)[0]
        if re.match(f"[{_DASHES}]+otca", name, re.IGNORECASE) and name not in known:
            meant = "--" + name.lstrip(_DASHES).lower()
            hint = f"; did you mean {meant}?" if meant in known else did_you_mean(name, known)
            return f"{name} is not an otca-patch flag (they start with two ASCII dashes){hint}"
    return None


def cannot_start(program: str, env: dict) -> str | None:
    """Why the launch's program cannot be started (not found on the launch's PATH, or not executable),
    said before anything runs rather than as a traceback; None when it can."""
    if shutil.which(program, path=env.get("PATH", os.defpath)):
        return None
    if os.sep in program:
        return f"{program}: {'not executable' if os.path.exists(program) else 'no such file'}"
    return (f"{program}: command not found on PATH; activate the training environment that provides it "
            f"(or give its full path)")


@dataclass
class Launch:
    """What the user asked for: the launch script (or ``None`` for a command after ``--``), the command
    that runs, its text as given, and the layer's flags."""

    script: Path | None
    command: list[str]
    command_line: str | None
    config: OtcaConfig


@dataclass
class Checked:
    """What the pre-flight found: the specs, the ``--otca_target`` specs, the files whose hook points
    hold (``file [spec]``), and the launch's text (the script with the shell scripts it runs)."""

    specs: list[TargetSpec]
    explicit: list[TargetSpec]
    held: list[str]
    text: str


class Refused(ValueError):
    """The launch cannot start: one line, said before anything runs."""


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


def read_launch(argv: list[str]) -> Launch:
    """The launch script or the command after ``--``, and the layer's flags; ``Refused`` on what
    cannot run at all (with or without the layer)."""
    if "--" in argv:  # [--otca ...] -- COMMAND [ARGS]: the command line runs exactly as given
        split = argv.index("--")
        flags, command = argv[:split], argv[split + 1:]
        if not command:
            raise Refused("nothing to run after --")
        script, command_line = None, shlex.join(command)
    else:
        script, flags, command_line = Path(argv[0]), argv[1:], None
        if script.is_dir():
            raise Refused(script_is_folder(script))
        if not script.is_file():
            raise Refused(f"launch script {script} does not exist")
    config, rest = parse_otca_args(flags)
    refuse_flags(config, flags, rest, script)
    if script is not None:
        command = ["bash", str(script), *rest]
        remote, server = reach.outside_launchers(script.read_text(errors="replace"))
        if config.active and remote:
            raise Refused(f"{script} starts its trainers through {remote}, which does not pass "
                          f"this environment to the processes it starts: they would train vanilla. Run each node's "
                          f"command as `{PROG} {shlex.join(config.to_argv())} -- torchrun ...`, or put "
                          f"`export {env_names.ARGS}={shlex.quote(shlex.join(config.to_argv()))} PYTHONPATH={STARTUP_DIR}:$PYTHONPATH` "
                          f"into its remote command")
        if config.active and server:
            raise Refused(f"{script} hands work to a {server[0]} server (`{server[1]}`), which runs it outside this "
                          f"launch with the server's own environment (a server already running is not the launch's): "
                          f"it would train vanilla, unseen. Run `{PROG} {shlex.join(config.to_argv())} ...` as the "
                          f"command the {server[0]} window runs, or start the {server[0]} session first and the launch in it")
    unstartable = cannot_start(command[0], dict(os.environ))
    if unstartable:
        raise Refused(unstartable)
    return Launch(script, command, command_line, config)


def refuse_flags(config: OtcaConfig, flags: list[str], rest: list[str], script: Path | None) -> None:
    """Arguments that would leave the layer off without saying so: upstream arguments before ``--``,
    a misspelled otca-patch flag, otca-patch flags without ``--otca``."""
    if script is None and rest:
        raise Refused(f"before -- only otca-patch flags go, got {shlex.join(rest)}")
    misspelled = misspelled_flag(rest)
    if misspelled:
        raise Refused(misspelled)
    given = [token for token in flags if token.split("=", 1)[0].startswith("--otca")]
    if given and not config.active:
        raise Refused(f"{shlex.join(config.to_argv()) or ' '.join(given)}: otca-patch flags without --otca or "
                      f"--otca_observe would run the upstream script untouched; add --otca (or --otca_observe), "
                      f"or drop them")


def run_untouched(command: list[str]) -> None:
    """Without the layer: upstream's command in this process, with none of the layer's variables."""
    print(f"{PROG}: no --otca / --otca_observe: running the upstream script untouched", file=sys.stderr)
    env = dict(os.environ)
    for variable in env_names.LAYER:
        env.pop(variable, None)
    sys.stdout.flush()
    os.execvpe(command[0], command, env)


def preflight_launch(launch: Launch, workdir: Path) -> Checked:
    """Every check before anything runs: the hook points of the files the launch names (or doctor's
    verdict on what it runs instead), the objectives, target-only flags and the log folder."""
    config = launch.config
    specs = load_specs()
    explicit = explicit_specs(config.otca_target, specs, workdir)
    text = command_text(launch.script, workdir, launch.command_line)
    launched = preflight(launch.script, workdir, text, not_overridden(specs, explicit, workdir))
    warn_unused_copies(PROG, workdir, list(launched.values()), specs, config.otca_target)
    held = list(launched) + check_explicit(explicit)
    problem = None if held else unreachable(launch.script, workdir, text, specs, config)
    if problem:
        raise Refused(problem)
    # the trainers this launch runs: those it names, else this checkout's, else any
    named = list(launched.values()) + explicit
    present = [spec for spec in specs if (workdir / spec.file).is_file()]
    check_objectives(config, named or present or specs, named)
    check_target_flags(config, named)
    check_log_dir(config.otca_log_dir, workdir)
    return Checked(specs, explicit, held, text)


def start(launch: Launch, checked: Checked, workdir: Path) -> tuple[Path, Path, dict]:
    """The launch record, the trainers' line keys and the environment every process inherits; says
    what the layer does in one line (and once, when wandb's panels will not appear)."""
    config = launch.config
    record = record_file(workdir)
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
