"""``python -m otca_patch.launch.worker [--module NAME] SCRIPT [ARGS]``: what every targeted process becomes when the
layer is active (the startup hook re-executes into it), and ``otca-patch run``. Flags come from
``$OTCA_PATCH_ARGS`` (set by ``otca-patch launch``) and from ARGS.

Without ``--otca`` / ``--otca_observe`` the script runs as ``python SCRIPT ARGS`` would run it. With
them, any failure before the script starts (flags, specs, hook points, the runtime) ends the process
with status 2 and a message naming what is wrong: it never runs the script unpatched.
"""
from __future__ import annotations

import os
import runpy
import sys

from .. import env_names
from ..help_text import plain_text
from .record import FINISHED_EVENT, record_error, record_event, record_targeted

USAGE = "usage: otca-patch run SCRIPT [ARGS ...] [--otca ...]"
def run_untouched(script: str, argv: list[str]) -> None:
    """As ``python SCRIPT ARGS``: the script's folder first on sys.path, no rewrite, no runtime."""
    sys.argv = [script, *argv]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    runpy.run_path(script, run_name="__main__")


def prepare_process(script: str, rest: list[str], module: str | None, command: str):
    """Everything before ``script`` runs: its arguments ``rest`` parsed once into the config (with
    ``$OTCA_PATCH_ARGS``), which then goes down; the reward packages checked, the spec and the rewritten
    code (one parse of the file), the runtime installed with the rank check armed, and a fresh
    ``__main__``. Returns (code, namespace), or None once the script has run untouched (no ``--otca``);
    raises before any upstream code runs."""
    from ..config import config_from_environment, environment_flags_note
    from ..hooks.prepare import prepare
    from ..hooks.spec import load_specs
    from ..rewards.packages import check_reward_packages
    from ..targets.registry import install_for_run
    from .runner import main_namespace, say_identity

    note = environment_flags_note(command)
    if note and os.environ.get("RANK", "0") == "0":
        print(note, file=sys.stderr, flush=True)
    if not os.path.isfile(script):
        raise ValueError(f"script {script} does not exist (working directory {os.getcwd()})")
    config, upstream_argv = config_from_environment(rest)
    if not config.active:
        run_untouched(script, upstream_argv)  # no --otca: the upstream file runs untouched
        return None
    check_reward_packages(config.otca_rewards, config.otca_reward_ckpt, config.otca_reward_opt)
    prepared = prepare(script, config.otca_target, load_specs())
    if prepared is None:
        raise ValueError(f"{script} is not an upstream file that otca-patch has hook points for "
                         f"(`otca-patch doctor` lists them; for a copy of one, add --otca_target NAME={script})")
    say_identity(prepared.identity)
    runtime = install_for_run(prepared.spec, config, os.path.abspath(script), prepared.reason)
    namespace = main_namespace(script, upstream_argv, prepared, runtime, module)
    record_targeted(script, prepared.spec.name)
    return prepared.code, namespace


def main(argv=None, command: str | None = None) -> int:
    """``command``: what messages start with (``otca-patch run``; in a launch's processes, the launch)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    command = command or os.environ.get(env_names.COMMAND) or "otca-patch"
    if argv and argv[0] in ("-h", "--help"):
        print(plain_text(f"{USAGE}\n\n{__doc__.split(chr(10) * 2, 1)[1]}\nThe --otca flags are those of `otca-patch launch --help`."))
        return 0
    module = None
    if argv[:1] == ["--module"] and len(argv) >= 3:  # the startup hook's form for `python -m MODULE ARGS`
        module, argv = argv[1], argv[2:]
    if not argv or argv[0].startswith("-"):
        print(USAGE, file=sys.stderr)
        return 2
    script, rest = argv[0], argv[1:]
    from ..hooks.errors import PatchError

    try:
        prepared = prepare_process(script, rest, module, command)
    except Exception as exc:  # before the script starts: every failure stops the process, clearly
        print(f"{command}: error: {exc}", file=sys.stderr)
        record_error(str(exc), script)
        return 2
    if prepared is None:
        return 0
    code, namespace = prepared
    try:
        exec(code, namespace)
    except PatchError as exc:  # a run-time invariant does not hold (before the first optimizer step)
        print(f"{command}: error: {exc}", file=sys.stderr)
        record_error(str(exc), script)
        return 2
    except SystemExit as exc:
        if exc.code not in (None, 0):
            record_error(f"exited with status {exc.code}", script, exc.code if isinstance(exc.code, int) else 1)
        else:
            record_event(FINISHED_EVENT, script)
        raise
    except Exception as exc:  # the trainer's own failure (or the credit's refusal): its traceback follows
        record_error(f"{type(exc).__name__}: {exc}", script)
        raise
    record_event(FINISHED_EVENT, script)
    return 0


if __name__ == "__main__":
    sys.exit(main())
