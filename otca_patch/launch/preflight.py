"""The launch's pre-flight: before any process starts, the launch is read, and what would not run
as asked is refused in one line.

Always: an argument that looks like an otca-patch flag but is not one, otca-patch flags without
``--otca``, a folder given as the script, a program not on the launch's ``PATH``. With ``--otca`` or
``--otca_observe`` also: a script that hands its trainers to ``pdsh`` / ``ssh`` or to a tmux / screen
server, the flags (the objectives' registry names and options, the weights against the launched
trainer's objectives, target-only flags, the log folder), and the hook points of every targeted file
the launch names (and of every ``--otca_target`` file); a launched script that is no target gets
doctor's verdict on it. Nothing of upstream's script has run when the launch refuses
(docs/launch-preflight.md).
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .. import env_names
from ..config import OtcaConfig, parse_otca_args
from ..files import shown_path
from ..hooks.copies import warn_unused_copies
from ..hooks.errors import PatchError
from ..hooks.explicit_targets import explicit_specs, not_overridden
from ..hooks.prepare import rewritten
from ..hooks.select import choose_spec
from ..hooks.spec import TargetSpec, load_specs
from . import reach

PROG = "otca-patch launch"
#: the start-up hook's folder: the launch puts it first on ``PYTHONPATH``; the advice for a remote
#: launcher names it
STARTUP_DIR = Path(__file__).resolve().parent / "startup"


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


def setup_note(text: str) -> str:
    """The pre-flight line's clause on set-up commands that the script runs before training."""
    commands = reach.setup_commands(text)
    if not commands:
        return ""
    shown = ", ".join(f"`{c if len(c) <= 60 else c[:57] + '...'}`" for c in commands[:5])
    more = f" and {len(commands) - 5} more" if len(commands) > 5 else ""
    return (f"; before training, the script runs set-up commands that change this machine or environment, "
            f"now: {shown}{more}")
