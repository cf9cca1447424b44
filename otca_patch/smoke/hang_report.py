"""A smoke run that hangs says where, in minutes rather than after the process group's 30.

A tiny smoke run takes seconds to a few minutes, but a rank stuck outside a collective (a reward
thread, a lock) leaves the others in theirs until gloo's 30-minute timeout, and the launcher then
kills the silent rank without a word about where it was. So each smoke process prints every
thread's stack when the launcher stops it (SIGTERM, then the usual exit) and, once it has run
``OTCA_SMOKE_HANG_S`` seconds (default 900; 0: never), prints them and exits with status 1.
"""
from __future__ import annotations

import faulthandler
import os
import signal
import sys

HANG_ENV = "OTCA_SMOKE_HANG_S"
#: far above any smoke run on the CPU under CI's load (the slowest take a few minutes)
DEFAULT_HANG_S = 900.0


def hang_limit() -> float:
    """Seconds after which a smoke process reports its stacks and exits (0: never)."""
    text = os.environ.get(HANG_ENV, "").strip()
    if not text:
        return DEFAULT_HANG_S
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{HANG_ENV}={text!r} is not a number of seconds (0 turns the limit off)") from None
    if value < 0:
        raise ValueError(f"{HANG_ENV}={text!r}: give a number of seconds, 0 or more (0 turns the limit off)")
    return value


def arm() -> None:
    """Report this process's stacks on SIGTERM (then exit as SIGTERM does) and after ``hang_limit``."""
    faulthandler.register(signal.SIGTERM, file=sys.stderr, all_threads=True, chain=True)
    limit = hang_limit()
    if limit > 0:
        faulthandler.dump_traceback_later(limit, exit=True, file=sys.stderr)
