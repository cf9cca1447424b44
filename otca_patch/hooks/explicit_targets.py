"""``--otca_target NAME=PATH``: spec NAME applied to the file at PATH (a copy or variant of an upstream
trainer, or a file two specs share). An explicit choice wins over the spec matched by path."""
from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Mapping, Sequence

from ..suggest import did_you_mean
from .select import SpecChoice, spec_choice_for_script
from .spec import TargetSpec

FLAG = "--otca_target"


def spec_named(name: str, specs: Sequence[TargetSpec]) -> TargetSpec:
    """The spec called ``name``; a ``ValueError`` with the near miss and the names there are."""
    for spec in specs:
        if spec.name == name:
            return spec
    names = [spec.name for spec in specs]
    raise ValueError(f"{FLAG}: no spec is named {name!r}{did_you_mean(name, names)} (specs: {', '.join(names)})")


def resolve(path: str, base: Path | None = None) -> Path:
    """``path`` as an absolute path, relative ones taken from ``base`` (default: the working directory)."""
    return Path(os.path.abspath(Path(base or os.getcwd()) / os.path.expanduser(path)))


def resolve_in(path: str, checkout: Path) -> Path:
    """``path`` for a command given an upstream checkout: from the working directory when it is there,
    else inside ``checkout``."""
    here = resolve(path)
    return here if here.exists() or os.path.isabs(path) else resolve(path, checkout)


def explicit_specs(chosen: Mapping[str, str], specs: Sequence[TargetSpec], base: Path | None = None) -> list[TargetSpec]:
    """One spec per ``{PATH: NAME}`` entry, its ``file`` the absolute PATH; ``ValueError`` naming an
    unknown spec or a missing file."""
    applied = []
    for path, name in chosen.items():
        spec = spec_named(name, specs)
        file = resolve(path, base)
        if not file.is_file():
            raise ValueError(f"{FLAG} {name}={path}: {file} is not a file")
        applied.append(replace(spec, file=str(file)))
    return applied


def spec_choice_for(script: str | os.PathLike, chosen: Mapping[str, str],
                    specs: Sequence[TargetSpec]) -> SpecChoice | None:
    """The spec a process running ``script`` applies, and why: the one ``--otca_target`` names for this
    file, else the spec its upstream path and content pick (``select``), else ``None``."""
    script = resolve(str(script))
    for path, name in chosen.items():
        if resolve(path) == script:
            return SpecChoice(replace(spec_named(name, specs), file=str(script)), f"named by {FLAG}")
    return spec_choice_for_script(script, list(specs))


def not_overridden(specs: Sequence[TargetSpec], explicit: Sequence[TargetSpec], checkout: Path) -> list[TargetSpec]:
    """``specs`` less those whose file in ``checkout`` ``--otca_target`` gives to a spec by name (a
    path two specs share: only the named one applies there)."""
    chosen = {(checkout / spec.file).resolve() for spec in explicit}  # relative: inside the checkout
    return [spec for spec in specs if (checkout / spec.file).resolve() not in chosen]
