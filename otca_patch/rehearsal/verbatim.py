"""Upstream's launch script run as a user runs it (``bash SCRIPT``, ``otca-patch launch SCRIPT``), set-up
lines included, on a CPU machine without network:

- the script is upstream's, byte for byte, except its launch command (sizes, processes, a loopback
  rendezvous) and the exports the caller names (``adapted_script``);
- its set-up commands meet shims first on PATH (``write_shims``; what each does: ``served``): ``sudo``
  and ``apt-get`` are recorded, ``git clone`` clones a local repository served for the URL, ``pip``
  installs from a local wheelhouse of the build tools (``wheelhouse``), build isolation kept;
- pip installs into a run environment of its own (``run_environment``): a venv layered over this
  environment, which stays unchanged.

Every set-up command a run's script ran is a line of ``RUN/setup_commands.txt`` (``setup_record``)."""
from __future__ import annotations

import re
import shlex
import shutil
import site
import subprocess
import sys
import sysconfig
import venv
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, NamedTuple

from . import served
from .launch_script import command_span
from .wheelhouse import wheelhouse

RECORD_NAME = "setup_commands.txt"
SHIM_NAMES = ("sudo", "apt-get", "apt", "git", "pip", "pip3")
#: the console scripts of this environment a launch script runs, remade in the run environment
LAUNCHERS = ("torchrun", "accelerate")
HPSV2_URL = "https://github.com/tgxs002/HPSv2.git"
#: what running upstream's script here replaces, for a target's replacement lines
SCRIPT_AS_IS = ("upstream's launch script run as it is (bash SCRIPT; otca-patch launch SCRIPT), only its launch "
                "command and the exports named below changed")
SET_UP_SERVED = [
    "sudo / apt-get -> shims first on PATH that record the command and run nothing (no root, no network)",
    f"git clone {HPSV2_URL} -> a clone of a local repository shaped like HPSv2's (setup.py at its root and the "
    "installed hpsv2 package, its tests left out; this environment's hpsv2, the same files, stays first on the path)",
    "pip / pip3 -> this environment's pip with --no-index and a local wheelhouse of the build tools (setuptools, "
    "and wheel where installed, built from their installation here), build isolation kept; a pinned requirement "
    "installed here at another version -> this environment's version; one not installed -> left out",
]
RUN_ENVIRONMENT = ("the script runs in a venv of its own layered over this environment (pip installs there; this "
                   "environment stays unchanged): its torchrun / accelerate are that venv's")
SERVED_REPLACEMENTS = [SCRIPT_AS_IS, *SET_UP_SERVED, RUN_ENVIRONMENT]


def adapted_script(text: str, launcher: str, words: list[str], exports: dict[str, str] | None = None) -> str:
    """``text`` with its first ``launcher`` command (and its continuation lines) replaced by ``words``
    on one line, and each ``export NAME=...`` of ``exports`` given its value; nothing else changes."""
    lines = text.splitlines(keepends=True)
    start, end = command_span(lines, launcher)
    lines[start:end] = [shlex.join(words) + "\n"]
    adapted = "".join(lines)
    for name, value in (exports or {}).items():
        adapted, count = re.subn(rf"(?m)^(\s*export\s+{re.escape(name)}=)\S*", lambda m: m.group(1) + value, adapted)
        if not count:
            raise ValueError(f"the launch script sets no `export {name}=`")
    return adapted


def script_command(source: Path, script: str, launcher: str, words: Callable[[Path], list[str]],
                   where: Callable[[Path], Path], exports: dict[str, str] | None = None) -> Callable[[Path], list[str]]:
    """run -> ``["bash", script]``, having written the run's copy of upstream's ``source`` at ``script``
    in ``where(run)``, its ``launcher`` command replaced by ``words(run)`` (``adapted_script``)."""
    def command(run: Path) -> list[str]:
        path = where(run) / script
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(adapted_script(source.read_text(), launcher, words(run), exports))
        return ["bash", script]

    return command


def write_shims(folder: Path) -> Path:
    """``folder`` holding one shim per set-up command name: each runs ``otca_patch.rehearsal.served``
    with the run environment's interpreter (``$OTCA_REHEARSAL_PYTHON``)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in SHIM_NAMES:
        shim = folder / name
        shim.write_text(f'#!/usr/bin/env bash\n# the rehearsal\'s {name}: otca_patch/rehearsal/served.py\n'
                        f'exec "${{OTCA_REHEARSAL_PYTHON:-{sys.executable}}}" -m otca_patch.rehearsal.served '
                        f'{name} "$@"\n')
        shim.chmod(0o755)
    return folder


def base_site_dirs() -> list[str]:
    """The site-packages folders this interpreter imports from."""
    dirs = [*site.getsitepackages(), sysconfig.get_paths()["purelib"]]
    dirs += [p for p in sys.path if p.rstrip("/").endswith(("site-packages", "dist-packages"))]
    return [d for d in dict.fromkeys(dirs) if Path(d).is_dir()]


def run_environment(folder: Path) -> Path:
    """A venv at ``folder`` over this environment: its own site-packages first (where the script's pip
    installs), then this environment's (a ``.pth`` adds them, their own ``.pth`` files processed);
    ``LAUNCHERS`` remade to run its interpreter."""
    venv.EnvBuilder(symlinks=True, with_pip=False, clear=True).create(folder)
    (folder / served.RUN_ENVIRONMENT_MARK).write_text("a rehearsal run's own environment: pip may install here\n")
    python = folder / "bin" / "python"
    # the venv's own scheme (3.11 on): a distribution's default scheme may differ (Debian's posix_local)
    scheme = "venv" if "venv" in sysconfig.get_scheme_names() else "posix_prefix"
    purelib = Path(sysconfig.get_paths(scheme, vars={"base": str(folder), "platbase": str(folder)})["purelib"])
    purelib.mkdir(parents=True, exist_ok=True)
    # after the run's own .pth files (an editable install's) in name order: 'o' sorts after '_'
    (purelib / "otca_rehearsal_base_environment.pth").write_text(
        "import site; " + "; ".join(f"site.addsitedir({d!r})" for d in base_site_dirs()) + "\n")
    programs = Path(sys.executable).parent
    for name in LAUNCHERS:
        source = programs / name
        if source.is_file():
            body = source.read_text().split("\n", 1)[1]
            (folder / "bin" / name).write_text(f"#!{python}\n{body}")
            (folder / "bin" / name).chmod(0o755)
    return folder


def served_hpsv2(folder: Path) -> Path:
    """A local repository shaped like HPSv2's checkout (``setup.py`` at its root, the ``hpsv2`` package
    beside it), built from the installed hpsv2 package (its vocabulary restored, its tests left out),
    committed with git where git is installed. Its setup.py names no requirements: this environment
    has them, and pip's check of each costs seconds a run."""
    import importlib.metadata

    from ..rewards.clip_libs import import_hpsv2_open_clip

    if (folder / "setup.py").is_file():
        return folder
    import_hpsv2_open_clip("the rehearsal's HPSv2 repository")  # restores the vocabulary its wheel omits
    source = Path(sys.modules["hpsv2"].__file__).parent
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copytree(source, folder / "hpsv2", ignore=shutil.ignore_patterns("__pycache__", "tests"))
    (folder / "setup.py").write_text(
        "from setuptools import find_packages, setup\n\n"
        f"setup(name='hpsv2', version={importlib.metadata.version('hpsv2')!r}, packages=find_packages(),\n"
        "      include_package_data=True, package_data={'': ['*.json', '*.gz', '*.txt']})\n")
    git = shutil.which("git")
    if git:
        identity = ["-c", "user.name=otca-rehearsal", "-c", "user.email=rehearsal@localhost"]
        for args in (["init", "-q"], ["add", "-A"], [*identity, "commit", "-q", "-m", "HPSv2 as installed"]):
            subprocess.run([git, *args], cwd=folder, check=True, capture_output=True)
    return folder


@dataclass(frozen=True)
class Served:
    """What one target's runs share: the shims, the wheelhouse and the served repositories."""

    shims: Path
    wheels: Path | None  # None: no build tool is installed here, and a pip build fails as without network
    repositories: dict[str, str]  # URL -> local folder

    @classmethod
    def build(cls, work: Path, repositories: dict[str, Path] | None = None) -> "Served":
        try:
            wheels = wheelhouse()
        except FileNotFoundError:
            wheels = None
        return cls(shims=write_shims(work / "shims"), wheels=wheels,
                   repositories={url: str(path) for url, path in (repositories or {}).items()})

    def run_env(self, run: Path) -> dict[str, str]:
        """The variables of a run: its own environment (``run_environment``, at ``RUN/env``) for its
        script's pip and launcher, the shims first on PATH."""
        return self.environment(run, run_environment(run / "env") / "bin" / "python")

    def environment(self, run: Path, python: Path) -> dict[str, str]:
        """The variables of a run whose script runs ``python`` (a run environment's) for pip, with the
        shims, then ``python``'s folder, then this interpreter's first on PATH."""
        import json
        import os

        (run / RECORD_NAME).touch()
        path = [str(self.shims), str(python.parent), str(Path(sys.executable).parent),
                *os.environ.get("PATH", "").split(os.pathsep)]
        return {"PATH": os.pathsep.join(dict.fromkeys(filter(None, path))),
                "OTCA_REHEARSAL_PYTHON": str(python), served.SHIMS_VARIABLE: str(self.shims),
                served.RECORD_VARIABLE: str(run / RECORD_NAME), served.WHEELHOUSE_VARIABLE: str(self.wheels or ""),
                served.SERVED_VARIABLE: json.dumps(self.repositories)}


class SetupCommand(NamedTuple):
    status: int  # its exit status
    command: str
    note: str  # what was done for it here
    seconds: float  # its wall time (from the served program's start)


def setup_record(run: Path) -> list[SetupCommand]:
    """Each set-up command the run's script ran, in order."""
    path = run / RECORD_NAME
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text().splitlines():
        status, command, note, seconds = (line.split("\t") + ["", "", ""])[:4]
        rows.append(SetupCommand(int(status), command, note, float(seconds or 0)))
    return rows
