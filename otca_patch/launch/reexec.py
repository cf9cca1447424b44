"""Turn a process that is about to run a targeted upstream script into the layer's worker.

Imported by the startup hook only once it has decided (with the standard library) that this process
is targeted; it imports nothing heavy, since the process is replaced right away.
"""
from __future__ import annotations

import os
import sys

WORKER_MODULE = "otca_patch.launch.worker"


def worker_argv(module: str | None = None, file: str | None = None, options: list[str] | None = None) -> list[str]:
    """``python [the same interpreter options] -m otca_patch.launch.worker SCRIPT ARGS``, or for
    ``python [OPTIONS] -m MODULE ARGS`` (``module``, its ``file``, the ``options`` before ``-m``)
    ``... -m otca_patch.launch.worker --module MODULE FILE ARGS``.

    ``sys.orig_argv`` is the interpreter's own command line (``python -u -X dev script.py a b``)
    and ``sys.argv`` its script part (``script.py a b``): what lies between are the options."""
    if module is not None:
        return [sys.executable, *(options or []), "-m", WORKER_MODULE, "--module", module, file, *sys.argv[1:]]
    options = sys.orig_argv[1:len(sys.orig_argv) - len(sys.argv)]
    return [sys.executable, *options, "-m", WORKER_MODULE, *sys.argv]


def become_worker(module: str | None = None, file: str | None = None, options: list[str] | None = None) -> None:
    """``execv`` into the worker: same PID, environment, stdio and interpreter options, so torchrun /
    accelerate keep supervising the same process. Does not return."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, worker_argv(module, file, options))
