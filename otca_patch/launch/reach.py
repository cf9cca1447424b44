"""What a launch's command can reach, read from its text before anything runs: the targeted files it
names (as paths or ``-m`` modules) and where they are from the working directory, the other Python
entries it names, the set-up commands it runs first, and the upstream checkouts near the working
directory or the script. ``preflight.py`` refuses an ``--otca`` launch that can reach no targeted
trainer, naming what it found instead.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ..hooks.spec import TargetSpec

#: how deep shell scripts that a launch script runs are followed (``bash scripts/inner.sh``)
NESTED_DEPTH = 3
#: how far ``nearby_checkouts`` walks up from the working directory and the script, and down from the former
LEVELS_UP, LEVELS_DOWN = 6, 2
#: commands that change the machine or the environment before training starts (a program by its name or full path)
SETUP = re.compile(r"(?:^|[;&|(]\s*|\s)((?:sudo\s+)?(?:(?:[^\s;&|()'\"]*/)?(?:pip3?|uv\s+pip|python[\d.]*\s+-m\s+pip|conda|mamba)\s+"
                   r"install|git\s+clone|(?:apt-get|apt|yum|dnf)\s+(?:install|update|upgrade))\b[^;&|\n]*)")
#: a Python script a command line names (``fastvideo/train.py``, ``"$DIR/train.py"``)
PY_TOKEN = re.compile(r"""(?:^|(?<=[\s'"=(]))([^\s'"=();|&<>]*\.py)(?=$|[\s'";|&)<>:])""")
MODULE_TOKEN = re.compile(r"""(?:^|\s)-m\s+['"]?([^\s'";|&)]+)""")
SHELL_TOKEN = re.compile(r"""(?:^|(?<=[\s'"]))([^\s'"();|&<>$`]*\.sh)(?=$|[\s'";|&)<>])""")


def code_lines(text: str) -> list[str]:
    """The lines of a shell text without comments, continuation lines joined."""
    joined = re.sub(r"\\\n", " ", text)
    return [line for line in (raw.split("#", 1)[0].rstrip() for raw in joined.splitlines()) if line.strip()]


def launch_text(text: str, base: Path, depth: int = NESTED_DEPTH) -> str:
    """``text`` followed by the text of each shell script it runs that exists (relative to ``base``
    or absolute), recursively: what the launch will execute, as far as it can be read now."""
    seen, parts, queue = set(), [text], [(text, depth)]
    while queue:
        current, left = queue.pop()
        if left <= 0:
            continue
        for line in code_lines(current):
            for token in SHELL_TOKEN.findall(line):
                path = (base / os.path.expanduser(token)).resolve()
                if path in seen or not path.is_file():
                    continue
                seen.add(path)
                nested = path.read_text(errors="replace")
                parts.append(nested)
                queue.append((nested, left - 1))
    return "\n".join(parts)


def module_of(file: str) -> str:
    """``fastvideo/train_grpo_flux.py`` -> ``fastvideo.train_grpo_flux`` (how ``-m`` names it)."""
    return file[:-3].replace("/", ".") if file.endswith(".py") else file


#: ``cd DIR`` followed by ``&&`` or ``;`` (or ending its line): where the commands after it run
CD_TOKEN = re.compile(r"""(?:^|(?<=[\s;&|('"]))cd\s+(['"]?)([^\s'";&|()<>]+)\1(?=\s*(?:&&|;|$|['"]))""")


@dataclass(frozen=True)
class PythonEntry:
    """A Python script or ``-m`` module a launch's text names: ``token`` as written (``-m NAME`` for
    a module), ``folder`` the working directory the shell would run it in (None: built at run time,
    by a ``$VAR`` in the token or in a ``cd`` before it)."""

    token: str
    folder: Path | None

    @property
    def module(self) -> str | None:
        return self.token[3:] if self.token.startswith("-m ") else None

    @property
    def built(self) -> bool:
        return self.folder is None or "$" in self.token or "`" in self.token

    @property
    def path(self) -> Path | None:
        """The script's path, normalised (``./``, ``//``, ``..`` resolved lexically; symlinks kept)."""
        if self.built:
            return None
        if self.module is not None:  # -m puts the folder it runs in first on the path
            return self.folder / (self.module.replace(".", "/") + ".py")
        return Path(os.path.normpath(self.folder / os.path.expanduser(self.token)))

    def runs(self, file: str) -> bool:
        """Whether this entry runs the targeted ``file`` ("/"-separated, inside a checkout): a path
        ending in it (normalised, or with its symlinks followed), or ``-m`` of its module."""
        if self.built:
            return False
        if self.module is not None:
            return self.module == module_of(file)
        path, want = self.path, tuple(file.split("/"))
        if path.parts[-len(want):] == want:
            return True
        real = Path(os.path.realpath(path))  # as the start-up hook and the worker read it
        return real.parts[-len(want):] == want


def python_entry_list(text: str, workdir: Path) -> list[PythonEntry]:
    """Every Python script and ``-m`` module ``text`` names, in order, each with the folder it would
    run in: ``workdir``, changed by a ``cd DIR`` before it on its line (``cd sub && python x.py``,
    ``bash -c 'cd sub; python x.py'``) or by a line that is ``cd DIR`` alone."""
    found, folder = [], workdir
    for line in code_lines(text):
        here = folder
        events = sorted([(m.start(), "cd", m.group(2)) for m in CD_TOKEN.finditer(line)]
                        + [(m.start(1), "py", m.group(1)) for m in PY_TOKEN.finditer(line)]
                        + [(m.start(1), "m", m.group(1)) for m in MODULE_TOKEN.finditer(line)])
        for _, kind, value in events:
            if kind == "cd":
                here = _changed(here, value)
            else:
                found.append(PythonEntry(value if kind == "py" else f"-m {value}", here))
        if CD_TOKEN.match(line.strip()) and not re.search(r"&&|;|\|\|", line):
            folder = here  # a line that only changes the directory: the lines after it run there
    return list(dict.fromkeys(found))


def _changed(folder: Path | None, target: str) -> Path | None:
    """``cd target`` from ``folder`` (None: not known before the launch runs)."""
    if folder is None or "$" in target or "`" in target or target == "-":
        return None
    return Path(os.path.normpath(folder / os.path.expanduser(target)))


def named_paths(file: str, text: str, workdir: Path) -> list[Path]:
    """Where ``text`` runs the targeted ``file`` ("/"-separated, inside a checkout), read as the
    command would from ``workdir`` (``PythonEntry.runs``), each normalised."""
    paths = [entry.path for entry in python_entry_list(text, workdir) if entry.runs(file)]
    return list(dict.fromkeys(paths))


def python_entries(text: str) -> tuple[list[str], list[str]]:
    """(Python scripts and ``-m`` modules the text names literally, those it builds at run time)."""
    literal, built = [], []
    for entry in python_entry_list(text, Path(".")):
        (built if entry.built else literal).append(entry.token)
    return list(dict.fromkeys(literal)), list(dict.fromkeys(built))


#: a command handed to a server outside the launch's process tree: a terminal multiplexer's
TERMINAL_SERVER = re.compile(r"(?:^|[;&|(`]|\s)((tmux|screen)\s[^;&|\n]*)")
REMOTE = re.compile(r"(?:^|[;&|(`]|\s)(pdsh|ssh)\s")


def outside_launchers(text: str) -> tuple[str, tuple[str, str] | None]:
    """``pdsh`` / ``ssh`` when a launch script starts its commands on other hosts (MixGRPO's scripts
    use ``pdsh``), else ``""``; and ``(tmux or screen, the command)`` when it hands a command to a
    terminal multiplexer's server, else None. Neither passes the launch's environment on."""
    remote, server = "", None
    for line in code_lines(text):
        found = REMOTE.search(line)
        remote = remote or (found.group(1) if found else "")
        found = TERMINAL_SERVER.search(line)
        if found and server is None:
            command = " ".join(found.group(1).split())
            server = (found.group(2), command if len(command) <= 80 else command[:80] + "…")
    return remote, server


#: the launchers that start the trainers (``python -m torch.distributed.run`` runs in Python: it checks in)
LAUNCHER = re.compile(r"(?:^|[;&|(`]|\s)(?:[^\s;&|()'\"]*/)?(torchrun|accelerate|deepspeed)(?=\s|$)")


def launchers(text: str) -> list[str]:
    """The launchers ``text`` runs, in order, each once."""
    return list(dict.fromkeys(found.group(1) for line in code_lines(text) for found in LAUNCHER.finditer(line)))


def setup_commands(text: str) -> list[str]:
    """The set-up commands (``pip install``, ``git clone``, ``apt-get``...) the text runs, in order."""
    found = []
    for line in code_lines(text):
        found += [" ".join(command.split()) for command in SETUP.findall(line)]
    return list(dict.fromkeys(found))


def present(directory: Path, specs: Sequence[TargetSpec]) -> list[str]:
    """The targeted files (spec paths) that ``directory`` holds, each once."""
    return list(dict.fromkeys(spec.file for spec in specs if (directory / spec.file).is_file()))


def nearby_checkouts(starts: Sequence[Path], specs: Sequence[TargetSpec]) -> dict[Path, list[str]]:
    """``{checkout: targeted files it holds}`` for the folders near ``starts`` (the working directory
    first, then the launch script's folder) that hold a targeted file: each start and the folders
    above it (up to a git root or ``LEVELS_UP``), and the folders below the first start (``LEVELS_DOWN``)."""
    found: dict[Path, list[str]] = {}

    def visit(directory: Path) -> None:
        if directory not in found:
            files = present(directory, specs)
            if files:
                found[directory] = files

    for start in starts:
        directory = start.resolve()
        for _ in range(LEVELS_UP + 1):
            visit(directory)
            if (directory / ".git").exists() or directory.parent == directory:
                break
            directory = directory.parent
    if starts:
        level = [starts[0].resolve()]
        for _ in range(LEVELS_DOWN):
            level = [child for folder in level for child in _subfolders(folder)]
            for folder in level:
                visit(folder)
    return found


def _subfolders(folder: Path, limit: int = 200) -> list[Path]:
    try:
        children = sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
    except OSError:
        return []
    return children[:limit]


def shown_files(files: Sequence[str], limit: int = 4) -> str:
    more = len(files) - limit
    return ", ".join(files[:limit]) + (f" and {more} more" if more > 0 else "")
