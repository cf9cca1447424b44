"""A private working copy of an upstream checkout for one side of an A/B run.

Upstream's trainers write into the current directory (DanceGRPO's FLUX trainer ``./images`` and
``./reward.txt``, its video trainers ``./videos`` and their reward logs: each target's spec
lists them in ``[target] outputs``) and into the ``--output_dir`` fixed in their launch scripts, so two runs from one checkout overwrite each other.
A working copy is a folder of symlinks to the checkout's entries, except for the paths that runs
write: those (and the folders above them) are real and start empty, so each side's outputs stay in
its own folder and nothing in the checkout changes. Anything a trainer writes elsewhere through a
symlinked folder (a cache, wandb's files) still lands in the shared checkout.
"""
from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

from ..targets.registry import targets_in


def cwd_outputs(checkout: Path, launch_script: Path) -> list[str]:
    """What the launched trainer writes relative to the checkout: the specs' ``outputs`` of the
    targets whose upstream file the launch script names (or, when it names none, of every target
    in the checkout)."""
    known = targets_in(checkout)
    if not known:
        raise ValueError(f"{checkout} holds none of the targets' upstream files; run from an upstream checkout")
    text = launch_script.read_text(errors="replace")
    named = [spec for spec in known if spec.file in text] or known
    return list(dict.fromkeys(path for spec in named for path in spec.outputs))


def output_dirs_of(launch_script: Path) -> list[str]:
    """Relative ``--output_dir`` values in a launch script (absolute ones cannot be redirected)."""
    text = launch_script.read_text(errors="replace").replace("\\\n", " ")
    found = []
    for line in text.splitlines():
        try:
            tokens = shlex.split(line, comments=True)
        except ValueError:
            continue
        for index, token in enumerate(tokens):
            value = None
            if token == "--output_dir" and index + 1 < len(tokens):
                value = tokens[index + 1]
            elif token.startswith("--output_dir="):
                value = token.split("=", 1)[1]
            if value is not None and value not in found:
                found.append(value)
    return found


def check_private(path: str) -> tuple[str, ...]:
    """A private path's parts; it must be relative, inside the checkout, without variables."""
    if os.path.isabs(path) or re.search(r"[$`]", path):
        raise ValueError(f"output path {path!r} is absolute or built at run time; both A/B sides would write "
                         f"to it. Make it relative to the checkout (or run the sides by hand)")
    parts = Path(os.path.normpath(path)).parts
    if not parts or parts[0] in ("..", "."):
        raise ValueError(f"output path {path!r} is outside the checkout")
    return parts


def make_working_copy(checkout: Path, work: Path, private: list[str]) -> None:
    """Symlink ``checkout``'s entries into ``work``, except ``private`` paths (relative to the
    checkout): their parent folders become real folders of symlinks, and they themselves are absent."""
    checkout = checkout.resolve()
    tree: dict = {}
    for path in private:
        node = tree
        for part in check_private(path):
            node = node.setdefault(part, {})
    work.mkdir(parents=True, exist_ok=True)
    _populate(checkout, work, tree)


def _populate(source: Path, target: Path, private: dict) -> None:
    for entry in sorted(os.listdir(source)):
        if entry in private:
            continue
        link = target / entry
        if not link.exists() and not link.is_symlink():
            link.symlink_to(source / entry)
    for name, below in private.items():
        if not below:  # the private path itself: left for the trainer to create
            continue
        folder = target / name
        if folder.is_symlink():
            raise ValueError(f"{folder} is a symlink; cannot make a private copy below it")
        folder.mkdir(exist_ok=True)
        if (source / name).is_dir():
            _populate(source / name, folder, below)
