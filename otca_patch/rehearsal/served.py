"""What a set-up command of upstream's launch script does on a rehearsal machine (no network, no root):
``python -m otca_patch.rehearsal.served NAME ARGS...``, started by the shim named NAME that
``verbatim.write_shims`` puts first on the script's PATH.

- ``sudo ...``, ``apt-get ...``, ``apt ...``: recorded, nothing run.
- ``git clone URL [DIR]``: a clone of the local repository served for URL (``$OTCA_REHEARSAL_SERVED``,
  a JSON object URL -> folder); any other git command is git's own.
- ``pip install ...`` / ``pip3 install ...``: this interpreter's pip (the run's environment) with
  ``--no-index --find-links $OTCA_REHEARSAL_WHEELHOUSE``, build isolation kept. A named requirement
  this environment satisfies is installed as asked; one it holds at another version is asked
  unpinned (this environment's version); one it lacks is left out (nothing serves it).

Each command appends ``STATUS<TAB>COMMAND<TAB>NOTE<TAB>SECONDS`` (its wall time) to
``$OTCA_REHEARSAL_SETUP_RECORD``."""
from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

RECORD_VARIABLE = "OTCA_REHEARSAL_SETUP_RECORD"
SERVED_VARIABLE = "OTCA_REHEARSAL_SERVED"
WHEELHOUSE_VARIABLE = "OTCA_REHEARSAL_WHEELHOUSE"
SHIMS_VARIABLE = "OTCA_REHEARSAL_SHIMS"
#: the file that marks a run's own environment (``verbatim.run_environment``): pip installs nowhere else
RUN_ENVIRONMENT_MARK = "otca-rehearsal-run-environment"
RECORDED_ONLY = ("sudo", "apt-get", "apt")
#: pip install options followed by a value (a path, a URL, a name) that is no requirement
PIP_VALUE_OPTIONS = {"-r", "--requirement", "-c", "--constraint", "-e", "--editable", "-t", "--target", "--prefix",
                     "--root", "-i", "--index-url", "--extra-index-url", "-f", "--find-links", "--src",
                     "--config-settings", "-C", "--python-version", "--platform", "--implementation", "--abi",
                     "--upgrade-strategy", "--progress-bar", "--log", "--cache-dir"}


STARTED = time.monotonic()


def record(status: int, command: list[str], note: str = "") -> int:
    path = os.environ.get(RECORD_VARIABLE)
    if path:
        with open(path, "a") as out:
            out.write(f"{status}\t{shlex.join(command)}\t{note}\t{time.monotonic() - STARTED:.1f}\n")
    return status


def real_program(name: str) -> str | None:
    """``name`` on PATH past the shims' folder."""
    shims = os.path.abspath(os.environ.get(SHIMS_VARIABLE, ""))
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if os.path.abspath(p) != shims)
    return shutil.which(name, path=path)


def served_url(url: str) -> str | None:
    served = json.loads(os.environ.get(SERVED_VARIABLE) or "{}")
    key = url.rstrip("/").removesuffix(".git")
    return next((folder for given, folder in served.items() if given.rstrip("/").removesuffix(".git") == key), None)


def git(args: list[str]) -> int:
    if args[:1] != ["clone"]:
        program = real_program("git")
        if program is None:
            return record(127, ["git", *args], "git is not installed")
        return subprocess.run([program, *args]).returncode
    positional = [a for a in args[1:] if not a.startswith("-")]
    if not positional:
        return record(129, ["git", *args], "no repository named")
    url = positional[0]
    folder = served_url(url)
    if folder is None:
        return record(128, ["git", *args], f"{url} is not served here (no network)")
    target = positional[1] if len(positional) > 1 else url.rstrip("/").rsplit("/", 1)[-1].removesuffix(".git")
    program = real_program("git")
    if program is not None:
        status = subprocess.run([program, "clone", "-q", folder, target]).returncode
    else:  # a machine without git: the served folder copied, as a clone's files
        shutil.copytree(folder, target, symlinks=True)
        status = 0
    return record(status, ["git", *args], f"cloned from {folder}")


def installed_version(name: str) -> str | None:
    import importlib.metadata

    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def served_requirement(word: str) -> tuple[str | None, str]:
    """(what pip is asked instead of the requirement ``word``, or None to leave it out; a note)."""
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        requirement = Requirement(word)
    except InvalidRequirement:
        return word, ""
    version = installed_version(requirement.name)
    if version is None:
        return None, f"{word}: not installed here and not served (no network): left out"
    if requirement.specifier.contains(version, prereleases=True):
        return word, ""
    extras = f"[{','.join(sorted(requirement.extras))}]" if requirement.extras else ""
    return requirement.name + extras, f"{word} -> this environment's {requirement.name} {version}"


def is_path(word: str) -> bool:
    return word in (".", "..") or os.sep in word or os.path.exists(word) or word.endswith((".whl", ".tar.gz", ".zip"))


def pip(name: str, args: list[str]) -> int:
    command = [name, *args]
    if not (Path(sys.prefix) / RUN_ENVIRONMENT_MARK).is_file():
        return record(1, command, f"refused: {sys.prefix} is no rehearsal run's own environment (pip would change it)")
    if args[:1] != ["install"]:
        return record(pip_run(args), command)
    kept, notes, asked, i = ["install"], [], 0, 1
    while i < len(args):
        word = args[i]
        if word in PIP_VALUE_OPTIONS and i + 1 < len(args):
            kept += [word, args[i + 1]]
            asked += word in ("-e", "--editable", "-r", "--requirement")
            i += 2
            continue
        i += 1
        if word.startswith("-") or is_path(word):
            kept.append(word)
            asked += not word.startswith("-")
            continue
        served, note = served_requirement(word)
        notes += [note] if note else []
        if served is not None:
            kept.append(served)
            asked += 1
    if not asked:
        return record(0, command, "; ".join(notes) + "; pip not run: nothing left to install")
    return record(pip_run(kept), command, "; ".join(notes))


def pip_run(args: list[str]) -> int:
    """This interpreter's pip, from the local wheelhouse only (its isolated builds too)."""
    env = {**os.environ, "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}
    if os.environ.get(WHEELHOUSE_VARIABLE):
        env["PIP_FIND_LINKS"] = os.environ[WHEELHOUSE_VARIABLE]
    return subprocess.run([sys.executable, "-m", "pip", *args], env=env).returncode


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m otca_patch.rehearsal.served NAME [ARGS...]", file=sys.stderr)
        return 2
    name, args = argv[0], argv[1:]
    if name in RECORDED_ONLY:
        return record(0, [name, *args], "recorded, not run (no root, no network)")
    if name == "git":
        return git(args)
    if name in ("pip", "pip3"):
        return pip(name, args)
    print(f"otca_patch.rehearsal.served: {name} is not a served set-up command", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
