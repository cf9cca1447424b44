"""The launch record: one file (``$OTCA_PATCH_RECORD``) that every process of an ``--otca`` launch appends
to, and the wrapper reads. Standard library only.

Lines, each one short append (atomic with ``O_APPEND``):

- ``checkin<TAB>PID<TAB>START TIME<TAB>PROGRAM<TAB>SCRIPT``: the start-up hook, in every process
  (``startup/sitecustomize.py`` writes it itself: it loads nothing it does not need);
- ``ran<TAB>SCRIPT``: the start-up hook, for a script that is no target;
- ``targeted<TAB>SCRIPT<TAB>SPEC``: the worker, once a targeted process is patched;
- ``{"event": "error" | "finished", "pid", "host", "rank", "script", ...}``: how a process ended
  (``record_event``; the hook writes the same error line).
"""
from __future__ import annotations

import json
import os
import socket
from pathlib import Path

from .. import env_names

CHECKIN, RAN, TARGETED = "checkin", "ran", "targeted"
#: a process that stopped: the launch relays the first one that no restart undid
ERROR_EVENT = "error"
#: a targeted process whose script ran to its end (a restart that succeeded)
FINISHED_EVENT = "finished"


def append(line: str) -> None:
    """One line to this launch's record, if this process is in a launch."""
    record = os.environ.get(env_names.RECORD)
    if not record:
        return
    try:
        with open(record, "a") as handle:  # one write of one line: atomic with O_APPEND
            handle.write(line + "\n")
    except OSError:
        pass  # the record only serves the launch's summary; the error itself is printed


def record_event(event: str, script: str = "", **fields) -> None:
    """What this process (host, rank, pid) ended with."""
    append(json.dumps({"event": event, "pid": os.getpid(), "host": socket.gethostname(),
                       "rank": os.environ.get("RANK"), "script": script, **fields}))


def record_error(message: str, script: str = "", status: int | None = None) -> None:
    """Why this process stopped (the launch's end names the first such error)."""
    record_event(ERROR_EVENT, script, message=message, **({"status": status} if status is not None else {}))


def record_targeted(script: str, spec_name: str) -> None:
    """A targeted process started patched (the launch checks that one did)."""
    append(f"{TARGETED}\t{os.path.abspath(script)}\t{spec_name}")


def fields(line: str) -> tuple[str, list[str]]:
    """``(kind, fields)`` of a tab-separated line; ``("", [])`` for an event line."""
    if line.startswith("{"):
        return "", []
    kind, _, rest = line.partition("\t")
    return kind, rest.split("\t")


def read_lines(path: Path) -> list[str]:
    try:
        return path.read_text(errors="replace").splitlines()
    except OSError:
        return []


def read_scripts(path: Path) -> tuple[list[str], list[str]]:
    """(targeted scripts that started, other scripts that ran), each once, in order."""
    targeted, ran = {}, {}
    for line in read_lines(path):
        kind, parts = fields(line)
        if kind in (TARGETED, RAN):
            (targeted if kind == TARGETED else ran)[parts[0]] = None
    return list(targeted), [s for s in ran if s not in targeted]


def read_events(path: Path) -> list[dict]:
    """The events the launch's processes reported (errors, finished trainers), in order."""
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
