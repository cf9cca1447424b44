"""Every Python process of an ``--otca`` launch is seen by the layer, or the launch stops.

The start-up hook appends ``checkin<TAB>PID<TAB>START TIME<TAB>PROGRAM<TAB>SCRIPT`` to the launch record
in every process it runs in (``startup/sitecustomize.py``). PROGRAM (``program``) is a digest of what the
kernel set up for the process's last exec: an exec in place keeps the pid and start time, so a
program that replaced a checked-in one is a new program, which must check in itself. A process
forked from a checked-in one (a DataLoader worker, a multiprocessing ``fork`` child) runs the same
program with its parent's state, layer and step guard included; it checks in at the fork
(SCRIPT ``fork of pid PARENT: ...``, from an ``os.register_at_fork`` hook).

The wrapper walks its process tree (``/proc``, standard library only) every ``POLL_S``; a Python
interpreter (``/proc/PID/exe`` named ``python*``) whose program has not checked in ``GRACE_S`` after
it was first seen, or once it has used ``CPU_GRACE_S`` of CPU time since (a Python reaches the hook
after some 0.02 s; importing torch takes seconds), never loaded the hook: ``python -I``, ``-E``,
``-S``, ``env -i ...``, a PYTHONPATH the script replaced. It would train without the layer, so the
launch stops: that process is killed at once, the rest of the tree terminated. A Python that exits
before its grace ends has not trained.

The wrapper makes itself a child subreaper, so a process whose parent exits stays in its tree, and
it watches the tree until its last process has ended, also after the launch's top process ended
(``TreeWatch.top_ended``). Each node's ``otca-patch launch`` watches the processes started on that
node; a process that a server outside the launch starts (a tmux server already running, a job
scheduler, sshd) is not in its tree. Without ``/proc`` (not Linux) there is nothing to watch.
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


#: ``program``'s digest: the start-up hook computes the same (``startup/sitecustomize.py``)
PROGRAM_MODULUS = (1 << 61) - 1


def _randomized() -> bool:
    try:
        with open("/proc/sys/kernel/randomize_va_space", "rb") as handle:
            return handle.read().strip() != b"0"
    except OSError:
        return True


#: address-space randomisation: with it, the auxiliary vector alone tells one exec from the next
RANDOMIZED = _randomized()


def program(pid: int) -> str:
    """The digest of ``pid``'s current program, as its start-up hook wrote it when it checked in:
    its auxiliary vector (new addresses on each exec), with the command line where randomisation is
    off; ``""`` when it cannot be read."""
    try:
        with open(f"/proc/{pid}/auxv", "rb") as handle:
            data = handle.read()
        if not RANDOMIZED:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                data += handle.read()
    except OSError:
        return ""
    return format(int.from_bytes(data, "little") % PROGRAM_MODULUS, "x")


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
    before = paths[:paths.index(str(startup_dir))]
    shadowing = next((p for p in before if os.path.isfile(os.path.join(p, "sitecustomize.py"))), None)
    if shadowing is not None:
        return (f"{os.path.join(shadowing, 'sitecustomize.py')}, earlier on its PYTHONPATH, is imported instead "
                f"of the start-up hook")
    return "the start-up hook did not run in it, or failed before it checked in"


def shown_command(pid: int, cmdline: list[str] | None = None) -> str:
    shown = shlex.join(command_line(pid) if cmdline is None else cmdline) or f"pid {pid}"
    return shown if len(shown) <= 300 else shown[:297] + "..."


class TreeWatch:
    """The check-ins of the launch record against the Python processes below this process."""

    def __init__(self, record: Path, startup_dir: Path, record_variable: str):
        self.record, self.startup_dir, self.record_variable = record, startup_dir, record_variable
        self.offset, self.stopped = 0, False
        self.root = os.getpid()
        #: ``(pid, start time) -> programs`` that checked in (a pid's programs: one per exec)
        self.checked: dict = {}
        #: ``(pid, start time, program) -> (when first seen, its CPU seconds then)``: its grace counts from there
        self.first_seen: dict = {}
        #: ``(pid, start time) -> (program, command line)`` last seen checked in, and the script its last
        #: check-in named: what an exec replaced
        self.seen_as: dict = {}
        self.checked_as: dict = {}
        #: once the top process ended: its status, and the processes still running then
        self.top_status: int | None = None
        self.outliving: dict = {}
        #: exit statuses of the processes this subreaper adopted and collected
        self.adopted_status: dict = {}

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
                pid, start, code, shown = (rest.split("\t") + ["", "", ""])[:4]
                self.checked.setdefault((pid, start), set()).add(code)
                self.checked_as[(pid, start)] = shown

    def checked_in(self, key: tuple, code: str) -> bool:
        """Whether the program ``code`` of process ``key`` checked in (``""``: a side that could not read it)."""
        codes = self.checked.get(key)
        return codes is not None and (code in codes or "" in codes or code == "")

    def late(self) -> list[int]:
        """Python processes past their grace that have not checked in."""
        now, suspects = time.monotonic(), []
        for pid in descendants(self.root):
            info = stat(pid)
            if info is None or info[0] == "Z" or not is_python(pid):
                continue
            key, code = (str(pid), info[2]), program(pid)
            if self.checked_in(key, code):
                if self.seen_as.get(key, ("",))[0] != code:
                    self.seen_as[key] = (code, command_line(pid))
                continue
            # an exec in place: the new program's grace counts from now, its CPU from what it has used
            first = self.first_seen.setdefault(key + (code,), (now, info[3] if key in self.checked else 0.0))
            if now - first[0] > GRACE_S or info[3] - first[1] > CPU_GRACE_S:
                suspects.append((pid, key, code))
        self.read_checkins()  # after the scan: a check-in written before it is in the record now
        return [pid for pid, key, code in suspects if not self.checked_in(key, code)]

    def cause(self, pid: int) -> str:
        """Why ``pid`` never checked in: an exec in place, a fork of a process that did not, or why the
        start-up hook did not run in it."""
        info = stat(pid)
        key = (str(pid), info[2]) if info is not None else None
        unseen = why_unseen(pid, self.startup_dir, self.record_variable)
        if key in self.checked:
            before = self.seen_as.get(key)
            was = (f" as `{shown_command(pid, before[1])}`" if before is not None
                   else f" as {self.checked_as[key]}" if self.checked_as.get(key) else "")
            return (f"it checked in{was}, then replaced its program in place (exec) with `{shown_command(pid)}`, "
                    f"which never checked in: {unseen}")
        parent = info[1] if info is not None else 0
        parent_info = stat(parent) if parent > 1 else None
        code = program(pid)
        if parent_info is not None and code and is_python(parent) and program(parent) == code:
            if self.checked_in((str(parent), parent_info[2]), code):
                return (f"it is a fork of pid {parent}, which checked in, made outside Python's os.fork (a C "
                        f"extension's fork()), so the layer's check-in at the fork did not run in it")
            return (f"it is a fork of pid {parent} (`{shown_command(parent)}`), which never checked in either: "
                    f"{why_unseen(parent, self.startup_dir, self.record_variable)}")
        return unseen

    def describe(self, pids: list[int]) -> str:
        pid = pids[0]
        more = f" (and {len(pids) - 1} more)" if len(pids) > 1 else ""
        after = (f" It was still running after the launch's top process had ended (status {self.top_status})."
                 if self.top_status is not None else "")
        return (f"a Python process of this launch never checked in with the layer: pid {pid}, `{shown_command(pid)}`"
                f"{more}; {self.cause(pid)}.{after} It would train without the layer, so the launch is stopped. Start "
                f"every Python process with the environment the launch sets (no -I, -E or -S, no `env -i`, "
                f"PYTHONPATH extended rather than replaced, no exec into such a Python), or launch without --otca")

    def running(self) -> list[int]:
        """The processes below this one that have not ended."""
        return [pid for pid in descendants(self.root) if (stat(pid) or ("Z",))[0] != "Z"]

    def top_ended(self, status: int) -> str:
        """The launch's top process ended with ``status``: what still runs below this process, named
        (the launch watches it until it ends), or ``""`` when nothing does."""
        self.top_status = status
        self.read_checkins()
        for pid in self.running():
            info = stat(pid)
            if info is None:
                continue
            seen = self.checked_in((str(pid), info[2]), program(pid))
            what = "checked in" if seen else "a Python that has not checked in yet" if is_python(pid) else "not Python now"
            self.outliving[pid] = f"pid {pid} `{shown_command(pid)}` ({what})"
        if not self.outliving:
            return ""
        count = len(self.outliving)
        return (f"the launch's top process ended (status {status}) while {count} process{'es' if count > 1 else ''} "
                f"it started still run{'s' if count == 1 else ''}: {'; '.join(self.outliving.values())}. The launch "
                f"watches them until the last one ends (a Python that never checks in is stopped; Ctrl-C stops all)")

    def outliving_end(self) -> tuple[str, int]:
        """Once the processes that outlived the top process have ended: a line saying so and the first
        failing status among those this subreaper collected (0 when none failed)."""
        failed = {pid: code for pid, code in self.adopted_status.items() if code != 0}
        status = next(iter(failed.values()), 0)
        shown = "; ".join(f"pid {pid} exited with status {code}" for pid, code in failed.items())
        return (f"the {len(self.outliving)} process{'es' if len(self.outliving) > 1 else ''} that outlived the "
                f"launch's top process ended{': ' + shown if shown else ''}"), status

    def reap_adopted(self, child: int) -> None:
        """Orphans re-parented to this subreaper: collect the ones that exited, and their statuses."""
        for pid in children(self.root):
            info = stat(pid)
            if pid != child and info is not None and info[0] == "Z":
                try:
                    _, status = os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    continue
                code = os.waitstatus_to_exitcode(status)
                self.adopted_status[pid] = 128 - code if code < 0 else code

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
            if not self.running():
                return
            time.sleep(POLL_S)
        for pid in descendants(self.root):
            _signal(pid, signal.SIGKILL)


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass
