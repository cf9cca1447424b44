"""A copy of a targeted trainer left beside the original while the original is what runs: a
researcher who edited ``train_grpo_flux_mine.py`` and forgot ``--otca_target`` would otherwise train
the published file without a word. ``ab``, ``smoke`` and ``launch`` each print ``unused_copies_note``
(``warn_unused_copies``).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, Sequence

from .. import env_names
from . import resemblance
from .explicit_targets import FLAG
from .spec import TargetSpec


def unused_copies(checkout: Path, running: Sequence[TargetSpec], specs: Sequence[TargetSpec],
                  chosen: Iterable[str | Path] = ()) -> list[tuple[str, TargetSpec, float]]:
    """``(copy, spec, share)`` for each Python file beside a running trainer (``running``: specs whose
    ``file`` in ``checkout`` runs) that is a copy of it (``resemblance``'s rule) and runs neither by
    its own spec (``specs``' files) nor by ``--otca_target`` (``chosen``: the files it names). ``copy``
    is "/"-separated, relative to ``checkout``."""
    checkout = Path(checkout)
    taken = {(checkout / spec.file).resolve() for spec in specs}
    taken |= {(checkout / path).resolve() for path in chosen}  # absolute paths stay as they are
    found = []
    for spec in running:
        original = checkout / spec.file
        if not original.is_file():
            continue
        theirs = resemblance.line_keys(original.read_text(errors="replace"))
        for path in sorted(original.parent.glob("*.py")):
            if path.resolve() in taken or not path.is_file():
                continue
            match = resemblance.nearest(resemblance.line_keys(path.read_text(errors="replace")), [(0, theirs)])
            if resemblance.is_copy(match):
                found.append((path.relative_to(checkout).as_posix(), spec, match[1]))
    return found


def unused_copies_note(checkout: Path, running: Sequence[TargetSpec], specs: Sequence[TargetSpec],
                       chosen: Iterable[str | Path] = ()) -> str | None:
    """One line naming each unused copy (``unused_copies``), the file that runs instead and the flag
    that would run the copy; None when there is none, or when ``otca-patch ab`` said it already."""
    if os.environ.get(env_names.COPY_NOTE_SAID):
        return None
    found = unused_copies(checkout, running, specs, chosen)
    if not found:
        return None
    said = "; ".join(f"{copy} is a copy of {spec.file} ({share:.0%} of its lines), but {spec.file} is what runs: "
                     f"to run the copy add {FLAG} {spec.name}={copy}" for copy, spec, share in found)
    return f"warning: {said}"


def warn_unused_copies(prog: str, checkout: Path, running: Sequence[TargetSpec], specs: Sequence[TargetSpec],
                       chosen: Iterable[str | Path] = ()) -> None:
    """``unused_copies_note``, printed on stderr after ``prog``'s name."""
    import sys

    note = unused_copies_note(checkout, running, specs, chosen)
    if note:
        print(f"{prog}: {note}", file=sys.stderr, flush=True)
