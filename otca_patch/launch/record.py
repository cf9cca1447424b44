"""The launch record: one file (``$OTCA_PATCH_RECORD``) that every process of an ``--otca`` launch appends
to, and the wrapper reads; and a process's identity, by which the record's check-ins and the watch
know it. Its writers, its reader and the ``/proc`` parsing are written here once.

Standard library only, and importing only ``os`` as it loads: the start-up hook
(``startup/sitecustomize.py``) loads this file by its path in every Python process of a launch, as it
loads ``env_names.py``, before otca_patch may be imported (importing the package there would import
torch). The hook uses the functions that take the record's path (``append_to``, the ``*_line``
builders, ``start_time``); the package's modules use ``append`` and ``record_*``, which find the
record through ``$OTCA_PATCH_RECORD``.

Lines, each one short append (atomic with ``O_APPEND``):

- ``checkin<TAB>PID<TAB>START TIME<TAB>PROGRAM<TAB>SCRIPT``: the start-up hook, in every process
  (``checkin_line``);
- ``ran<TAB>SCRIPT``: the start-up hook, for a script that is no target;
- ``targeted<TAB>SCRIPT<TAB>SPEC``: the worker, once a targeted process is patched;
- ``{"event": "error" | "finished", "pid", "host", "rank", "script", ...}``: how a process ended
  (``event_line``: the worker's ``record_event`` and the hook's error line).

A process is known by its pid and its start time (clock ticks since boot, ``/proc/PID/stat``): a pid
the kernel hands out again later has another start time.
"""
from __future__ import annotations

import os

CHECKIN, RAN, TARGETED = "checkin", "ran", "targeted"
#: a process that stopped: the launch relays the first one that no restart undid
ERROR_EVENT = "error"
#: a targeted process whose script ran to its end (a restart that succeeded)
FINISHED_EVENT = "finished"
#: clock ticks per second: the unit of ``/proc/PID/stat``'s times
TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


# ---- process identity

def stat(pid: int | str = "self") -> tuple[str, int, str, float] | None:
    """``(state, parent pid, start time, CPU seconds)`` of ``pid``, or None once it is gone (or
    without ``/proc``). The start time is the kernel's text, in ``TICKS`` since boot."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()  # after the command name, which may hold ") "
        return fields[0].decode(), int(fields[1]), fields[19].decode(), (int(fields[11]) + int(fields[12])) / TICKS
    except (OSError, IndexError, ValueError):
        return None


def start_time(pid: int | str = "self") -> str:
    """``pid``'s start time as its check-in writes it (``"?"`` where it cannot be read)."""
    info = stat(pid)
    return info[2] if info is not None else "?"


# ---- writing

def create_record(workdir: str | os.PathLike):
    """A new, empty record file (a ``Path``): in the launch's folder, which processes that a launcher
    starts on other machines usually share, else in the temporary folder."""
    import tempfile
    from pathlib import Path

    try:
        handle, path = tempfile.mkstemp(prefix=".otca-launch-", suffix=".record", dir=workdir)
    except OSError:
        handle, path = tempfile.mkstemp(prefix="otca-launch-", suffix=".record")
    os.close(handle)
    return Path(path)


def checkin_line(program: str, shown: str) -> str:
    """This process's check-in: its pid, start time, check-in token (``FD:NAME``) and script."""
    return f"{CHECKIN}\t{os.getpid()}\t{start_time()}\t{program}\t{' '.join(shown.split())}"


def ran_line(script: str) -> str:
    return f"{RAN}\t{script}"


def event_line(event: str, script: str = "", **fields) -> str:
    """What this process (host, rank, pid) ended with, as one JSON line."""
    import json
    import socket

    return json.dumps({"event": event, "pid": os.getpid(), "host": socket.gethostname(),
                       "rank": os.environ.get("RANK"), "script": script, **fields})


def append_to(record: str | None, lines: list[str]) -> None:
    """``lines`` to the record file ``record`` (nothing when it is None or empty: not in a launch)."""
    if not record:
        return
    try:
        with open(record, "a") as handle:  # one short write: atomic with O_APPEND
            handle.write("".join(line + "\n" for line in lines))
    except OSError:
        pass  # the record serves the launch's summary and watch; a process that cannot check in is stopped


def this_record() -> str | None:
    """The record of the launch this process is in (``$OTCA_PATCH_RECORD``), for the package's modules."""
    from ..env_names import RECORD

    return os.environ.get(RECORD)


def append(line: str) -> None:
    """One line to this launch's record, if this process is in a launch."""
    append_to(this_record(), [line])


def record_event(event: str, script: str = "", **fields) -> None:
    """What this process (host, rank, pid) ended with."""
    append(event_line(event, script, **fields))


def record_error(message: str, script: str = "", status: int | None = None) -> None:
    """Why this process stopped (the launch's end names the first such error)."""
    record_event(ERROR_EVENT, script, message=message, **({"status": status} if status is not None else {}))


def record_targeted(script: str, spec_name: str) -> None:
    """A targeted process started patched (the launch checks that one did)."""
    append(f"{TARGETED}\t{os.path.abspath(script)}\t{spec_name}")


# ---- reading

def fields(line: str) -> tuple[str, list[str]]:
    """``(kind, fields)`` of a tab-separated line; ``("", [])`` for an event line."""
    if line.startswith("{"):
        return "", []
    kind, _, rest = line.partition("\t")
    return kind, rest.split("\t")


def read_lines(path: str | os.PathLike) -> list[str]:
    try:
        with open(path, errors="replace") as handle:
            return handle.read().splitlines()
    except OSError:
        return []


def read_scripts(path: str | os.PathLike) -> tuple[list[str], list[str]]:
    """(targeted scripts that started, other scripts that ran), each once, in order."""
    targeted, ran = {}, {}
    for line in read_lines(path):
        kind, parts = fields(line)
        if kind in (TARGETED, RAN):
            (targeted if kind == TARGETED else ran)[parts[0]] = None
    return list(targeted), [s for s in ran if s not in targeted]


def read_events(path: str | os.PathLike) -> list[dict]:
    """The events the launch's processes reported (errors, finished trainers), in order."""
    import json

    events = []
    for line in read_lines(path):
        if line.startswith("{"):
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict) and event.get("event") in (ERROR_EVENT, FINISHED_EVENT):
                events.append(event)
    return events


def failures(events: list[dict]) -> tuple[list[dict], list[dict]]:
    """``(errors that stand, errors a restart undid)``: an error is undone when the same script on the
    same host and rank later ran to its end (torchrun's ``--max_restarts``)."""
    def slot(event: dict) -> tuple:
        return event.get("host"), event.get("rank"), event.get("script")

    finished_after = {slot(event): at for at, event in enumerate(events) if event.get("event") == FINISHED_EVENT}
    standing, undone = [], []
    for at, event in enumerate(events):
        if event.get("event") == ERROR_EVENT:
            (undone if finished_after.get(slot(event), -1) > at else standing).append(event)
    return standing, undone
