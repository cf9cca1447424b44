"""``otca-patch launch UPSTREAM_LAUNCH.sh [--otca ...] [ARGS]``: run an upstream launch script
unchanged, with the layer installed in every Python process it starts.

``otca-patch launch [--otca ...] -- COMMAND [ARGS]``: the same for a launch command line, e.g.
FlowGRPO's ``accelerate launch --config_file ... scripts/train_sd3.py --config config/grpo.py:NAME``,
given unchanged after ``--``. (``scripts/otca_run.sh`` is this command for a checkout of otca-patch.)

The upstream shell scripts pass fixed arguments to torchrun / accelerate, so the ``--otca*`` flags
travel in ``$OTCA_PATCH_ARGS`` and the startup hook (``startup/sitecustomize.py``, put first on
``PYTHONPATH``) turns each targeted trainer process into the layer's worker. Without ``--otca`` or
``--otca_observe`` the script runs exactly as published: no variable is set, no hook is installed.

With the layer, before anything starts: the flags, the objectives' registry names and options, and
the hook points of every targeted file the launch names (and of every ``--otca_target`` file) are
checked. A process running a copy of a targeted trainer stops (``--otca_target NAME=PATH`` runs it
patched). When the launch ends without any process having run a targeted file, the launch fails
and names the Python scripts that did run.
"""
from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from ..config import ENV_ARGS, OtcaConfig, parse_otca_args
from ..hooks.errors import PatchError
from ..hooks.explicit_targets import explicit_specs, not_overridden
from ..hooks.rewrite import compile_target
from ..hooks.select import choose_spec
from ..hooks.source import read_source
from ..hooks.spec import TargetSpec, load_specs
from .worker import COMMAND_VARIABLE, RECORD_VARIABLE

PROG = "otca-patch launch"
STARTUP_DIR = Path(__file__).resolve().parent / "startup"
#: the targeted upstream files, for the startup hook's standard-library check (see startup/sitecustomize.py)
ENV_TARGETS = "OTCA_PATCH_TARGETS"
#: per spec, the functions it hooks and its trainer file here: how the startup hook recognises a copy
ENV_SHAPES = "OTCA_PATCH_SHAPES"


def preflight(launch_script: Path, workdir: Path, text: str | None, specs: list[TargetSpec]) -> list[str]:
    """Check the hook points of every targeted upstream file the launch script (or the command
    line ``text``) names, before any process starts (each worker checks again). Returns the files
    checked; raises ``PatchError``."""
    text = launch_script.read_text(errors="replace") if text is None else text
    checked = []
    for file in dict.fromkeys(spec.file for spec in specs):  # a path several upstreams share: its content picks
        path = workdir / file
        if not re.search(re.escape(file) + r"\b", text) or not path.is_file():
            continue
        choice = choose_spec(path, [spec for spec in specs if spec.file == file])
        compile_target(read_source(str(path)), choice.spec, str(path))
        checked.append(f"{file} [{choice.spec.name}]")
    return checked


def check_explicit(specs: list[TargetSpec]) -> list[str]:
    """Hook points of every ``--otca_target`` file (``specs``: their specs, ``file`` absolute)."""
    for spec in specs:
        compile_target(read_source(spec.file), spec, spec.file)
    return [f"{os.path.relpath(spec.file)} (as {spec.name})" for spec in specs]


def shapes(specs: list[TargetSpec], workdir: Path) -> str:
    """``$OTCA_PATCH_SHAPES``: ``NAME<TAB>FILE<TAB>HOOKED FUNCTIONS<TAB>TRAINER PATH`` per spec."""
    lines = []
    for spec in specs:
        hooked = sorted({hook.function for hook in spec.hooks + spec.pins} - {"<module>"})
        trainer = workdir / spec.file
        lines.append("\t".join([spec.name, spec.file, ",".join(hooked),
                                str(trainer.resolve()) if trainer.is_file() else ""]))
    return "\n".join(lines)


def layer_config(config: OtcaConfig, workdir: Path) -> OtcaConfig:
    """The config every process gets: ``--otca_target`` paths made absolute (a launcher may start
    its processes elsewhere)."""
    from ..hooks.explicit_targets import resolve

    return replace(config, otca_target={str(resolve(path, workdir)): name for path, name in config.otca_target.items()})


def check_objectives(config: OtcaConfig, launched: list[TargetSpec]) -> None:
    """The objectives' registry names, checkpoints and options, before any process starts."""
    from ..objective_set import check_objective_flags
    from ..targets.registry import runtime_class

    trainer_names = any(getattr(getattr(runtime_class(spec), "upstream_rewards", None), "bare_keys", False)
                        for spec in launched)
    check_objective_flags(config.otca_rewards, config.otca_reward_ckpt, config.otca_reward_opt,
                          trainer_names_rewards=trainer_names)


def read_record(path: Path) -> tuple[list[str], list[str]]:
    """(targeted scripts that started, other scripts that ran), each once, in order."""
    targeted, ran = {}, {}
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        lines = []
    for line in lines:
        kind, _, rest = line.partition("\t")
        script = rest.split("\t")[0]
        (targeted if kind == "targeted" else ran)[script] = None
    return list(targeted), [s for s in ran if s not in targeted]


def no_target_message(ran: list[str]) -> str:
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


def run_and_wait(command: list[str], env: dict) -> int:
    """Run the launch as a child and wait: SIGTERM / SIGHUP are passed on; Ctrl-C reaches the child
    through the terminal's process group, so the wrapper only keeps waiting."""
    child = subprocess.Popen(command, env=env)
    forward = lambda signum, _frame: child.send_signal(signum)
    previous = {signum: signal.signal(signum, forward) for signum in (signal.SIGTERM, signal.SIGHUP)}
    previous[signal.SIGINT] = signal.signal(signal.SIGINT, lambda *_: None)
    try:
        code = child.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return 128 - code if code < 0 else code


def error(message: str) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return 2


def usage() -> str:
    import argparse

    from ..config import build_parser

    parser = build_parser()
    parser.usage = argparse.SUPPRESS
    flags = parser.format_help().strip("\n").split("\n", 1)[1]  # without argparse's "options:" title
    return (f"usage: {PROG} UPSTREAM_LAUNCH.sh [--otca ...] [ARGS]\n       {PROG} [--otca ...] -- COMMAND [ARGS]\n\n"
            f"{__doc__.strip()}\n\nflags:\n{flags}")


def remote_launcher(text: str) -> str:
    """``pdsh`` / ``ssh`` when a launch script starts its commands on other hosts (MixGRPO's scripts
    use ``pdsh``), else ``""``: those processes do not inherit the layer's environment."""
    for line in text.splitlines():
        found = re.search(r"(?:^|[;&|(`]|\s)(pdsh|ssh)\s", line.split("#", 1)[0])
        if found:
            return found.group(1)
    return ""


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0 if argv else 2
    if "--" in argv:  # [--otca ...] -- COMMAND [ARGS]: the command line runs exactly as given
        split = argv.index("--")
        flags, command = argv[:split], argv[split + 1:]
        if not command:
            return error("nothing to run after --")
        launch_script, command_text = None, shlex.join(command)
    else:
        launch_script, flags, command_text = Path(argv[0]), argv[1:], None
        if not launch_script.is_file():
            return error(f"launch script {launch_script} does not exist")
    try:
        config, rest = parse_otca_args(flags)
    except ValueError as exc:
        return error(str(exc))
    if launch_script is None and rest:
        return error(f"before -- only otca-patch flags go, got {shlex.join(rest)}")
    if launch_script is not None:
        command = ["bash", str(launch_script), *rest]
        remote = remote_launcher(launch_script.read_text(errors="replace"))
        if config.active and remote:
            return error(f"{launch_script} starts its trainers through {remote}, which does not pass "
                         f"this environment to the processes it starts: they would train vanilla. Run each node's "
                         f"command as `{PROG} {shlex.join(config.to_argv())} -- torchrun ...`, or put "
                         f"`export {ENV_ARGS}={shlex.quote(shlex.join(config.to_argv()))} PYTHONPATH={STARTUP_DIR}:$PYTHONPATH` "
                         f"into its remote command")
    env = dict(os.environ)
    if not config.active:
        print(f"{PROG}: no --otca / --otca_observe: running the upstream script untouched", file=sys.stderr)
        for variable in (ENV_ARGS, ENV_TARGETS, ENV_SHAPES, RECORD_VARIABLE, COMMAND_VARIABLE):
            env.pop(variable, None)
        sys.stdout.flush()
        os.execvpe(command[0], command, env)
    workdir = Path.cwd()
    try:
        specs = load_specs()
        explicit = explicit_specs(config.otca_target, specs, workdir)
        checked = (preflight(launch_script, workdir, command_text, not_overridden(specs, explicit, workdir))
                   + check_explicit(explicit))
        # the trainers this launch runs: those it names, else this checkout's, else any
        named = [spec for spec in specs if spec.file in checked] + explicit
        present = [spec for spec in specs if (workdir / spec.file).is_file()]
        check_objectives(config, named or present or specs)
    except (PatchError, ValueError, SyntaxError) as exc:
        return error(str(exc))
    record = record_file(workdir)
    env.update({ENV_ARGS: shlex.join(layer_config(config, workdir).to_argv()),
                ENV_TARGETS: os.pathsep.join(sorted({spec.file for spec in specs}) + [spec.file for spec in explicit]),
                ENV_SHAPES: shapes(specs, workdir), RECORD_VARIABLE: str(record), COMMAND_VARIABLE: PROG,
                "PYTHONPATH": os.pathsep.join([str(STARTUP_DIR), *filter(None, [env.get("PYTHONPATH")])])})
    print(f"{PROG}: layer installed ({shlex.join(config.to_argv())}); hook points hold in: "
          f"{', '.join(checked) or 'no targeted file found under the current directory yet'}", file=sys.stderr)
    sys.stdout.flush()
    try:
        code = run_and_wait(command, env)
        targeted, ran = read_record(record)
    finally:
        record.unlink(missing_ok=True)
    if not targeted:
        error(no_target_message(ran))
        return code or 2
    return code


if __name__ == "__main__":
    sys.exit(main())
