"""``scripts/otca_run.sh UPSTREAM_LAUNCH.sh [--otca ...] [ARGS]``: run an upstream launch script
unchanged, with the layer installed in every Python process it starts.

``scripts/otca_run.sh [--otca ...] -- COMMAND [ARGS]``: the same for a launch command line, e.g.
FlowGRPO's ``accelerate launch --config_file ... scripts/train_sd3.py --config config/grpo.py:NAME``,
given unchanged after ``--``.

The upstream shell scripts pass fixed arguments to torchrun / accelerate, so the ``--otca*`` flags
travel in ``$OTCA_PATCH_ARGS`` and the startup hook (``startup/sitecustomize.py``, put first on
``PYTHONPATH``) turns each targeted trainer process into the layer's worker. Without ``--otca`` or
``--otca_observe`` the script runs exactly as published: no variable is set, no hook is installed.
"""
from __future__ import annotations

import os
import re
import shlex
import sys
from pathlib import Path

from ..config import ENV_ARGS, parse_otca_args
from ..hooks.errors import PatchError
from ..hooks.rewrite import compile_target
from ..hooks.select import choose_spec
from ..hooks.source import read_source
from ..hooks.spec import TargetSpec, load_specs

STARTUP_DIR = Path(__file__).resolve().parent / "startup"
#: the targeted upstream files, for the startup hook's standard-library check (see startup/sitecustomize.py)
ENV_TARGETS = "OTCA_PATCH_TARGETS"


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
        print(__doc__)
        return 0 if argv else 2
    if "--" in argv:  # [--otca ...] -- COMMAND [ARGS]: the command line runs exactly as given
        split = argv.index("--")
        flags, command = argv[:split], argv[split + 1:]
        if not command:
            print("otca_run.sh: error: nothing to run after --", file=sys.stderr)
            return 2
        launch_script, command_text = None, shlex.join(command)
    else:
        launch_script, flags, command_text = Path(argv[0]), argv[1:], None
        if not launch_script.is_file():
            print(f"otca_run.sh: error: launch script {launch_script} does not exist", file=sys.stderr)
            return 2
    try:
        config, rest = parse_otca_args(flags)
    except ValueError as exc:
        print(f"otca_run.sh: error: {exc}", file=sys.stderr)
        return 2
    if launch_script is None and rest:
        print(f"otca_run.sh: error: before -- only otca-patch flags go, got {shlex.join(rest)}", file=sys.stderr)
        return 2
    if launch_script is not None:
        command = ["bash", str(launch_script), *rest]
        remote = remote_launcher(launch_script.read_text(errors="replace"))
        if config.active and remote:
            print(f"otca_run.sh: error: {launch_script} starts its trainers through {remote}, which does not pass "
                  f"this environment to the processes it starts: they would train vanilla. Run each node's "
                  f"command as `otca-patch launch {shlex.join(config.to_argv())} -- torchrun ...`, or put "
                  f"`export {ENV_ARGS}={shlex.quote(shlex.join(config.to_argv()))} PYTHONPATH={STARTUP_DIR}:$PYTHONPATH` "
                  f"into its remote command", file=sys.stderr)
            return 2
    env = dict(os.environ)
    if not config.active:
        print("otca_run.sh: no --otca / --otca_observe: running the upstream script untouched", file=sys.stderr)
        env.pop(ENV_ARGS, None)
        env.pop(ENV_TARGETS, None)
    else:
        try:
            specs = load_specs()
            checked = preflight(launch_script, Path.cwd(), command_text, specs)
        except (PatchError, ValueError, SyntaxError) as exc:
            print(f"otca_run.sh: error: {exc}", file=sys.stderr)
            return 2
        env[ENV_ARGS] = shlex.join(config.to_argv())
        env[ENV_TARGETS] = os.pathsep.join(sorted({spec.file for spec in specs}))
        env["PYTHONPATH"] = os.pathsep.join([str(STARTUP_DIR), *filter(None, [env.get("PYTHONPATH")])])
        print(f"otca_run.sh: layer installed ({env[ENV_ARGS]}); hook points hold in: "
              f"{', '.join(checked) or 'no targeted file found under the current directory yet'}", file=sys.stderr)
    sys.stdout.flush()
    os.execvpe(command[0], command, env)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
