"""No Python process of an ``--otca`` launch loads torch unseen by the layer, or the launch stops.

The start-up hook appends ``checkin<TAB>PID<TAB>START TIME<TAB>PROGRAM<TAB>SCRIPT`` to the launch record
in every process it runs in (``startup/sitecustomize.py``). PROGRAM, ``FD:NAME``, names a memory file
the process holds open close-on-exec: a fork keeps it, an exec in place closes it (whatever the
address layout), so a program that replaced a checked-in one must check in itself. A process forked
from a checked-in one (a DataLoader worker, a multiprocessing ``fork`` child, a C extension's
``fork()``) runs the same program with its parent's state, layer and step guard included; it holds
the same memory file (and, through ``os.register_at_fork``, checks in as ``fork of pid PARENT: ...``).

The wrapper walks its process tree (``/proc``, standard library only) every ``POLL_S``. A process that
holds no checked-in program and has loaded torch (``/proc/PID/maps`` shows torch's libraries: only
a Python that imports torch maps them) could train without the layer: the hook never ran in it
(``python -I``, ``-E``, ``-S``, ``env -i ...``, a PYTHONPATH the script replaced, an exec into such a
Python). The launch stops: that process is killed at once, the rest of the tree terminated. A Python
that never loads torch cannot take a ``torch.optim`` step, so pip's isolated builds, ``python -m venv``
and other helpers that replace PYTHONPATH run, however long they take.

The wrapper makes itself a child subreaper, so a process whose parent exits stays in its tree, and
it watches the tree until its last process has ended, also after the launch's top process ended
(``TreeWatch.top_ended``); once the trainers have ended, what still runs is stopped
(``TreeWatch.leftovers``). Each node's ``otca-patch launch`` watches the processes started on that
node; a process that a server outside the launch starts (a tmux server already running, a job
scheduler, sshd) is not in its tree. Without ``/proc`` (not Linux) there is nothing to watch.
"""
from __future__ import annotations

import os
import shlex
import signal
import time
from pathlib import Path

from . import record
from .record import TICKS, stat  # a process's identity: the one reader of /proc/PID/stat

#: seconds between two looks at the process tree
POLL_S = 0.2
#: seconds the rest of a stopped launch has to exit after SIGTERM, before SIGKILL
TERM_WAIT_S = 10.0
#: the program or ``-m`` module of a trainer or its launcher: while one runs, the training goes on
TRAINING = {"otca_patch.launch.worker", "torchrun", "torch.distributed.run", "torch.distributed.launch", "accelerate",
            "deepspeed"}
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


def holds(pid: int, program: str) -> bool:
    """Whether ``pid`` still holds the check-in token ``program`` (``FD:NAME``, the start-up hook's)."""
    fd, _, name = program.partition(":")
    try:
        return os.readlink(f"/proc/{pid}/fd/{fd}").startswith(f"/memfd:{name} ")
    except OSError:
        return False


def held_tokens(pid: int) -> set[str]:
    """The check-in tokens' names among ``pid``'s open files (a fork made outside Python's os.fork)."""
    names = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return names
    for fd in fds:
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("/memfd:otca-checkin-"):
            names.add(link[len("/memfd:"):].split(" ", 1)[0])
    return names


def fingerprint(pid: int) -> tuple:
    """What ``pid`` runs as the kernel set it up at its last exec: program file, command line, environment."""
    try:
        parts = [os.readlink(f"/proc/{pid}/exe").encode()]
        for name in ("cmdline", "environ"):
            with open(f"/proc/{pid}/{name}", "rb") as handle:
                parts.append(handle.read())
    except OSError:
        return ()
    return tuple(parts)


#: what only a Python that imports torch maps (``_load_global_deps`` runs early in torch's import)
TORCH_LIBRARIES = (b"libtorch_global_deps", b"libtorch_python", b"/torch/_C.")


def loads_torch(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/maps", "rb") as handle:
            maps = handle.read()
    except OSError:
        return False
    return any(library in maps for library in TORCH_LIBRARIES)


def started(pid: int) -> float:
    """When ``pid`` started, in seconds since boot (infinity once it is gone)."""
    info = stat(pid)
    return int(info[2]) / TICKS if info is not None else float("inf")


def uptime() -> float:
    """Seconds since boot: the clock of a process's start time (``stat``, in ``TICKS``)."""
    try:
        with open("/proc/uptime", "rb") as handle:
            return float(handle.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0


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


#: ``(device, inode, mtime) -> whether that program file is a Python interpreter``
_INTERPRETERS: dict = {}


def is_python(pid: int) -> bool:
    """Whether ``pid`` runs a Python interpreter, whatever its file is called (a venv made with
    ``--copies`` and its ``python`` copied to ``trainer``): its name, libpython in its maps, or the
    interpreter's entry point in its program file."""
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
        if os.path.basename(exe).startswith("python"):
            return True
        info = os.stat(f"/proc/{pid}/exe")
    except OSError:
        return False
    key = (info.st_dev, info.st_ino, info.st_mtime_ns)
    if key not in _INTERPRETERS:
        _INTERPRETERS[key] = _interpreter_file(f"/proc/{pid}/exe")
    if _INTERPRETERS[key]:
        return True
    try:
        with open(f"/proc/{pid}/maps", "rb") as handle:
            return b"/libpython" in handle.read()
    except OSError:
        return False


#: the entry point every CPython executable calls or holds (3.8 and later; ``Py_Main`` before)
_ENTRY_POINTS = (b"Py_BytesMain", b"Py_Main\0")


def _interpreter_file(path: str) -> bool:
    tail = b""
    try:
        with open(path, "rb") as handle:
            while True:
                chunk = handle.read(1 << 20)
                if not chunk:
                    return False
                window = tail + chunk
                if any(entry in window for entry in _ENTRY_POINTS):
                    return True
                tail = window[-16:]
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
    """``pid``'s command line on one line: an argument of several lines (a ``-c`` program) by its
    first line and "…", the whole cut at 300 characters; ``pid N`` once it cannot be read."""
    argv = command_line(pid) if cmdline is None else cmdline
    shown = shlex.join(arg if "\n" not in arg.strip() else arg.strip().split("\n", 1)[0] + " …" for arg in argv)
    shown = shown or f"pid {pid}"
    return shown if len(shown) <= 300 else shown[:297] + "..."


def trains(argv: list[str]) -> bool:
    """Whether ``argv`` runs a trainer or its launcher (``python -m otca_patch.launch.worker``, ``torchrun``,
    ``python .../bin/accelerate launch``...), read from its program and first words."""
    return any(os.path.basename(word) in TRAINING for word in argv[:6])


def named(pid: int, cmdline: list[str] | None = None) -> str:
    """``pid N `COMMAND``` (``pid N`` alone once its command line cannot be read)."""
    argv = command_line(pid) if cmdline is None else cmdline
    return f"pid {pid} `{shown_command(pid, argv)}`" if argv else f"pid {pid}"


class TreeWatch:
    """The check-ins of the launch record against the processes below this process."""

    def __init__(self, record: Path, startup_dir: Path, record_variable: str):
        self.record, self.startup_dir, self.record_variable = record, startup_dir, record_variable
        self.offset, self.stopped = 0, False
        self.root = os.getpid()
        #: ``(pid, start time) -> programs`` that checked in (a pid's programs: one per exec)
        self.checked: dict = {}
        #: every checked-in program's memory-file name: a process holding one is a fork of a checked-in program
        self.token_names: set = set()
        #: ``(pid, start time) -> fingerprint`` while it held its checked-in program: a process that closed
        #: its token (closing every descriptor) but runs what it ran then has not exec'd
        self.fingerprints: dict = {}
        #: ``(pid, start time) -> command line`` last seen checked in, and the script its last check-in
        #: named: what an exec replaced
        self.seen_as: dict = {}
        self.checked_as: dict = {}
        #: once the top process ended: its status, and the processes still running then
        self.top_status: int | None = None
        self.outliving: dict = {}
        #: exit statuses of the processes this subreaper adopted and collected
        self.adopted_status: dict = {}
        #: whether a targeted trainer has started (its worker wrote ``targeted``), when (seconds since boot)
        #: a trainer or launcher was last seen running, and the processes stopped for outliving the training
        self.trained, self.training_seen, self.left_over = False, 0.0, set()

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
            kind, parts = record.fields(line)
            if kind == record.CHECKIN:
                pid, start, program, shown = (parts + ["", "", ""])[:4]
                self.checked.setdefault((pid, start), set()).add(program)
                self.token_names.add(program.partition(":")[2])
                self.checked_as[(pid, start)] = shown
            elif kind == record.TARGETED:
                self.trained = True

    def covered(self, pid: int, key: tuple) -> bool:
        """Whether ``pid`` (``key``: its pid and start time) runs a program that checked in: it holds
        the token its check-in named, or runs what it ran when it held it; or, with no check-in of its
        own, holds a checked-in program's token (a fork)."""
        programs = self.checked.get(key)
        if programs is None:
            return bool(self.token_names & held_tokens(pid)) or self.forked_from_covered(pid)
        if "" in programs:  # a side without memory files: the pid and start time are all there is
            return True
        if any(holds(pid, program) for program in programs):
            if key not in self.fingerprints:
                self.fingerprints[key] = fingerprint(pid)
                self.seen_as[key] = command_line(pid)
            return True
        return self.fingerprints.get(key, ()) == fingerprint(pid) != () or self.forked_from_covered(pid)

    def forked_from_covered(self, pid: int) -> bool:
        """Whether ``pid`` runs what its covered parent runs, exactly as the kernel set both up (program
        file, command line, environment): a fork found without the inherited check-in (its descriptor
        closed in it or in the trainer before the fork, as a DataLoader worker of the rehearsed FLUX
        trainer was seen). An exec in place shows a new fingerprint, and a Python started with its parent's
        exact command line and environment runs the start-up hook itself."""
        info = stat(pid)
        parent = info[1] if info is not None else 0
        parent_info = stat(parent) if parent > 1 and parent != self.root else None
        if parent_info is None:
            return False
        mine = fingerprint(pid)
        # up the tree, one parent at a time, only while each runs exactly what its child runs
        return mine != () and mine == fingerprint(parent) and self.covered(parent, (str(parent), parent_info[2]))

    def late(self) -> list[int]:
        """Processes that have loaded torch without running a checked-in program."""
        suspects, training = [], False
        for pid in descendants(self.root):
            info = stat(pid)
            if info is None or info[0] == "Z":
                continue
            training = training or trains(command_line(pid))
            key = (str(pid), info[2])
            if key in self.checked and self.covered(pid, key):
                continue  # the common case, one readlink: the maps of a torch process are long
            # covered first, then torch: an exec between the two reads (a fork of a checked-in trainer
            # becoming `/sbin/ldconfig -p`, as ctypes' find_library starts it) drops the inherited check-in
            # and torch's maps together, so this order never sees torch without a check-in that was there
            if not self.covered(pid, key) and loads_torch(pid):
                suspects.append((pid, key))
        if training:
            self.training_seen = uptime()
        if not suspects:
            return []
        self.read_checkins()  # a check-in written before the scan is in the record now
        return [pid for pid, key in suspects if not self.covered(pid, key) and loads_torch(pid)]

    def cause(self, pid: int) -> str:
        """Why ``pid`` never checked in: an exec in place, a fork of a process that did not, or why the
        start-up hook did not run in it."""
        info = stat(pid)
        key = (str(pid), info[2]) if info is not None else None
        unseen = why_unseen(pid, self.startup_dir, self.record_variable)
        if key in self.checked:
            before = self.seen_as.get(key)
            was = (f" as `{shown_command(pid, before)}`" if before
                   else f" as {self.checked_as[key]}" if self.checked_as.get(key) else "")
            return (f"it checked in{was}, then replaced its program in place (exec) with `{shown_command(pid)}`, "
                    f"which never checked in: {unseen}")
        parent = info[1] if info is not None else 0
        if parent > 1 and parent != self.root and command_line(parent) == command_line(pid) and is_python(parent):
            parent_info = stat(parent)
            if parent_info is not None and self.covered(parent, (str(parent), parent_info[2])):
                return (f"its parent pid {parent}, with the same command line, checked in, but this process holds "
                        f"neither that check-in nor the parent's program file and environment (it changed them)")
            return (f"it is a fork of pid {parent}, which never checked in either: "
                    f"{why_unseen(parent, self.startup_dir, self.record_variable)}")
        return unseen

    def describe(self, pids: list[int]) -> str:
        pid = pids[0]
        more = f" (and {len(pids) - 1} more)" if len(pids) > 1 else ""
        after = (f" It was still running after the launch's top process had ended (status {self.top_status})."
                 if self.top_status is not None else "")
        return (f"a Python process of this launch never checked in with the layer and has loaded torch: "
                f"{named(pid)}{more}; {self.cause(pid)}.{after} It would train without the layer, so the launch is "
                f"stopped. Start every Python process with the environment the launch sets (no -I, -E or -S, no "
                f"`env -i`, PYTHONPATH extended rather than replaced, no exec into such a Python), or launch "
                f"without --otca")

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
            seen = self.covered(pid, (str(pid), info[2]))
            what = "checked in" if seen else "a Python that has not checked in yet" if is_python(pid) else "not Python now"
            self.outliving[pid] = f"{named(pid)} ({what})"
        if not self.outliving:
            return ""
        count = len(self.outliving)
        return (f"the launch's top process ended (status {status}) while {count} process{'es' if count > 1 else ''} "
                f"it started still run{'s' if count == 1 else ''}: {'; '.join(self.outliving.values())}. The launch "
                f"watches them until the last one ends (a Python that never checks in is stopped; Ctrl-C stops all)")

    def outliving_end(self) -> tuple[str, int]:
        """Once the processes that outlived the top process have ended: a line saying so and the first
        failing status among those this subreaper collected (0 when none failed)."""
        failed = {pid: code for pid, code in self.adopted_status.items() if code != 0 and pid not in self.left_over}
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

    def training_over(self) -> bool:
        """Whether the launch's training has ended: a targeted trainer has run, and no trainer or
        launcher (torchrun, accelerate, deepspeed: one may be between two attempts) still runs."""
        self.read_checkins()
        return self.trained and not any(trains(command_line(pid)) for pid in self.running())

    def stop_leftovers(self, child: int) -> str:
        """Once the training has ended, stop the processes that ran beside it (started before a trainer
        was last seen running: a server the script started in the background), and what they started;
        a process started after the training is watched as before. The line naming each once, or ``""``."""
        left = [pid for pid in self.running() if pid not in self.left_over and started(pid) <= self.training_seen]
        if not left:
            return ""
        shown = [named(pid) for pid in left]
        for pid in left:
            self.left_over.update([pid, *descendants(pid)])
        self.terminate(child, sorted(self.left_over))
        count = len(left)
        return (f"the trainers have ended; stopped {count} process{'es' if count > 1 else ''} that ran beside them "
                f"and still ran: {'; '.join(shown)} (the launch does not wait for a process that outlives its training; "
                f"its exit status is the training's)")

    def stop(self, late: list[int], child: int) -> None:
        """Kill the processes that would train without the layer, terminate the rest of the tree."""
        self.stopped = True
        for pid in late:
            _signal(pid, signal.SIGKILL)
        self.terminate(child)

    def terminate(self, child: int, pids: list[int] | None = None) -> None:
        """SIGTERM to ``pids`` (every process below this one), SIGKILL to those left after ``TERM_WAIT_S``."""
        for pid in descendants(self.root) if pids is None else pids:
            _signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + TERM_WAIT_S
        while time.monotonic() < deadline:
            self.reap_adopted(child)
            if not set(self.running()) & set(descendants(self.root) if pids is None else pids):
                return
            time.sleep(POLL_S)
        for pid in descendants(self.root) if pids is None else pids:
            _signal(pid, signal.SIGKILL)


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass
