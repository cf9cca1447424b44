"""Every Python process of an ``--otca`` launch is seen by the layer, or the launch stops.

The start-up hook appends ``checkin<TAB>PID<TAB>START TIME`` to the launch record in every process it
runs in (``startup/sitecustomize.py``). The wrapper walks its process tree (``/proc``, standard
library only) every ``POLL_S``; a Python interpreter (``/proc/PID/exe`` named ``python*``) that has
not checked in ``GRACE_S`` after it was first seen, or once it has used ``CPU_GRACE_S`` of CPU time (a
Python reaches the hook after some 0.02 s; importing torch takes seconds), never loaded the hook:
``python -I``, ``-E``, ``-S``, ``env -i ...``, a PYTHONPATH the script replaced. It would train
without the layer, so the launch stops: that process is killed at once, the rest of the tree
terminated. A Python that exits before its grace ends has not trained.

The wrapper makes itself a child subreaper, so a process whose parent exits stays in its tree. Each
node's ``otca-patch launch`` watches the processes started on that node. Without ``/proc`` (not
Linux) there is nothing to watch.
"""
from __future__ import annotations

import os
import shlex
import signal
import time
from pathlib import Path

#: seconds after a Python process was first seen by which it has checked in
GRACE_S = 10.0
#: CPU seconds a Python process may use before it has checked in
CPU_GRACE_S = 0.5
#: seconds between two looks at the process tree
POLL_S = 0.2
#: seconds the rest of a stopped launch has to exit after SIGTERM, before SIGKILL
TERM_WAIT_S = 10.0
TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
PR_SET_CHILD_SUBREAPER = 36


def available() -> bool:
    return os.path.isdir("/proc/self/task")


def become_subreaper() -> None:
    """Orphans of the launch are re-parented to this process, not to init: they stay in the tree."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def stat(pid: int) -> tuple[str, int, str, float] | None:
    """``(state, parent pid, start time, CPU seconds)`` of ``pid``, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[0].decode(), int(fields[1]), fields[19].decode(), (int(fields[11]) + int(fields[12])) / TICKS


def children(pid: int) -> list[int]:
    found = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as handle:
                found += [int(child) for child in handle.read().split()]
        except (OSError, ValueError):
            pass
    return found


def descendants(root: int) -> list[int]:
    """Every process below ``root``, parents before children."""
    found, queue = [], [root]
    while queue:
        for child in children(queue.pop()):
            if child not in found:
                found.append(child)
                queue.append(child)
    return found


def is_python(pid: int) -> bool:
    try:
        return os.path.basename(os.readlink(f"/proc/{pid}/exe")).startswith("python")
    except OSError:
        return False


def command_line(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return [part.decode(errors="replace") for part in handle.read().split(b"\0") if part]
    except OSError:
        return []


def environment(pid: int) -> dict | None:
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            entries = handle.read().split(b"\0")
    except OSError:
        return None
    return dict(entry.decode(errors="replace").partition("=")[::2] for entry in entries if b"=" in entry)


def interpreter_flags(argv: list[str]) -> set[str]:
    """The one-letter options of ``python [OPTIONS] ...`` before its script, ``-c`` or ``-m``."""
    flags, skip = set(), False
    for arg in argv[1:]:
        if skip:
            skip = False
            continue
        if not arg.startswith("-") or arg == "-" or arg.startswith("--"):
            break
        for at, letter in enumerate(arg[1:]):
            if letter in "cm":
                return flags
            if letter in "WX":  # takes a value: the rest of this argument or the next one
                skip = at == len(arg) - 2
                break
            flags.add(letter)
    return flags


def why_unseen(pid: int, startup_dir: Path, record_variable: str) -> str:
    """Why the start-up hook did not run in ``pid``, as far as its command line and environment tell."""
    named = [f"-{letter}" for letter in "IES" if letter in interpreter_flags(command_line(pid))]
    if named:
        return f"it was started with {' '.join(named)}, which keeps Python from running the start-up hook"
    env = environment(pid)
    if env is None:
        return "the start-up hook did not run in it"
    paths = [os.path.abspath(p) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if str(startup_dir) not in paths:
        held = f"PYTHONPATH={env['PYTHONPATH']}" if env.get("PYTHONPATH") else "no PYTHONPATH"
        return (f"its environment does not carry the start-up hook ({held}): a cleared environment such as "
                f"`env -i`, or a PYTHONPATH the launch script sets instead of extending it")
    if record_variable not in env:
        return f"its environment lacks ${record_variable}, which the launch sets"
    return "the start-up hook did not run in it (another sitecustomize earlier on its path, or a failure before it)"


class TreeWatch:
    """The check-ins of the launch record against the Python processes below this process."""

    def __init__(self, record: Path, startup_dir: Path, record_variable: str):
        self.record, self.startup_dir, self.record_variable = record, startup_dir, record_variable
        self.offset, self.checked, self.first_seen = 0, set(), {}
        self.root, self.stopped = os.getpid(), False

    def read_checkins(self) -> None:
        try:
            with open(self.record, "rb") as handle:
                handle.seek(self.offset)
                chunk = handle.read()
        except OSError:
            return
        complete = chunk[:chunk.rfind(b"\n") + 1]  # a line still being written is read next time
        self.offset += len(complete)
        for line in complete.decode(errors="replace").splitlines():
            kind, _, rest = line.partition("\t")
            if kind == "checkin":
                pid, _, start = rest.partition("\t")
                self.checked.add((pid, start))

    def late(self) -> list[int]:
        """Python processes past their grace that have not checked in."""
        now, suspects = time.monotonic(), []
        for pid in descendants(self.root):
            info = stat(pid)
            if info is None or info[0] == "Z":
                continue
            key = (str(pid), info[2])
            if key in self.checked or not is_python(pid):
                continue
            first = self.first_seen.setdefault(key, now)
            if now - first > GRACE_S or info[3] > CPU_GRACE_S:
                suspects.append((pid, key))
        self.read_checkins()  # after the scan: a check-in written before it is in the record now
        return [pid for pid, key in suspects if key not in self.checked]

    def describe(self, pids: list[int]) -> str:
        pid = pids[0]
        shown = shlex.join(command_line(pid)) or f"pid {pid}"
        shown = shown if len(shown) <= 300 else shown[:297] + "..."
        more = f" (and {len(pids) - 1} more)" if len(pids) > 1 else ""
        return (f"a Python process of this launch never checked in with the layer: pid {pid}, `{shown}`{more}; "
                f"{why_unseen(pid, self.startup_dir, self.record_variable)}. It would train without the layer, so "
                f"the launch is stopped. Start every Python process with the environment the launch sets "
                f"(no -I, -E or -S, no `env -i`, PYTHONPATH extended rather than replaced), or launch without --otca")

    def reap_adopted(self, child: int) -> None:
        """Orphans re-parented to this subreaper: collect the ones that exited."""
        for pid in children(self.root):
            info = stat(pid)
            if pid != child and info is not None and info[0] == "Z":
                try:
                    os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    pass

    def stop(self, late: list[int], child: int) -> None:
        """Kill the processes that would train without the layer, terminate the rest of the tree."""
        self.stopped = True
        for pid in late:
            _signal(pid, signal.SIGKILL)
        for pid in descendants(self.root):
            _signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + TERM_WAIT_S
        while time.monotonic() < deadline:
            self.reap_adopted(child)
            alive = [pid for pid in descendants(self.root) if (stat(pid) or ("Z",))[0] != "Z"]
            if not alive:
                return
            time.sleep(POLL_S)
        for pid in descendants(self.root):
            _signal(pid, signal.SIGKILL)


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass
