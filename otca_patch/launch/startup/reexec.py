"""Turn a process that is about to run a targeted upstream script into the layer's worker."""
from __future__ import annotations

import os
import subprocess
import sys


def reexec_if_targeted(script: str) -> None:
    """``execv`` into ``python -m otca_patch.launch.worker`` when ``script`` has a hook-point spec.

    The PID, environment, stdio and interpreter flags stay, so torchrun / accelerate keep
    supervising the same process. A process running any other script is left alone.
    """
    from otca_patch.config import config_from_environment
    from otca_patch.hooks.spec import spec_for_script

    if spec_for_script(script) is None:
        return
    config, _ = config_from_environment(sys.argv[1:])
    if not config.active:
        return  # flags without --otca / --otca_observe: upstream runs as published
    flags = subprocess._args_from_interpreter_flags()
    if getattr(sys.stdout, "write_through", False) and "-u" not in flags:
        flags.append("-u")  # launchers start workers unbuffered; keep it so logs interleave as before
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, *flags, "-m", "otca_patch.launch.worker", *sys.argv])
