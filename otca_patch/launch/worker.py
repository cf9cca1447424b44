"""``python -m otca_patch.launch.worker SCRIPT [ARGS]``: what every targeted process becomes when the
layer is active (the startup hook re-executes into it), and ``otca-patch run``. Flags come from
``$OTCA_PATCH_ARGS`` (set by scripts/otca_run.sh) and from ARGS.

Without ``--otca`` / ``--otca_observe`` the script runs as ``python SCRIPT ARGS`` would run it. With
them, any failure before the script starts (flags, specs, hook points, the runtime) ends the process
with status 2 and a message naming what is wrong: it never runs the script unpatched.
"""
from __future__ import annotations

import os
import runpy
import sys

USAGE = "usage: otca-patch run SCRIPT [ARGS ...] [--otca ...]"


def run_untouched(script: str, argv: list[str]) -> None:
    """As ``python SCRIPT ARGS``: the script's folder first on sys.path, no rewrite, no runtime."""
    sys.argv = [script, *argv]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    runpy.run_path(script, run_name="__main__")


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0].startswith("-"):
        print(USAGE, file=sys.stderr)
        return 2
    script, rest = argv[0], argv[1:]
    try:
        from ..config import config_from_environment
        from ..hooks.errors import PatchError

        if not os.path.isfile(script):
            raise ValueError(f"script {script} does not exist (working directory {os.getcwd()})")
        config, upstream_argv = config_from_environment(rest)
        if not config.active:
            run_untouched(script, upstream_argv)  # no --otca: the upstream file runs untouched
            return 0
        from ..hooks.spec import spec_for_script
        from ..rewards.packages import check_reward_packages
        from .runner import prepare_main

        check_reward_packages(config.otca_rewards, config.otca_reward_ckpt, config.otca_reward_opt)

        spec = spec_for_script(script)
        if spec is None:
            raise ValueError(f"{script} is not an upstream file that otca-patch has hook points for "
                             f"(see patches/ and `otca-patch doctor`)")
        code, namespace = prepare_main(script, upstream_argv, spec, config)
    except Exception as exc:  # before the script starts: every failure stops the process, clearly
        print(f"otca-patch: error: {exc}", file=sys.stderr)
        return 2
    try:
        exec(code, namespace)
    except PatchError as exc:  # a run-time invariant does not hold (before the first optimizer step)
        print(f"otca-patch: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
