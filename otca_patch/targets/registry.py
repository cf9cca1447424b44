"""The targets the layer knows: one per hook-point spec in ``patches/``, its descriptor found
through the spec's ``runtime`` module (which defines ``TARGET``)."""
from __future__ import annotations

import importlib
from pathlib import Path
from typing import Optional

from ..hooks.spec import TargetSpec, load_specs
from .descriptor import Target


def target_of(spec: TargetSpec) -> Target:
    """The descriptor of ``spec``'s target; an error names the spec when its module has none."""
    module = importlib.import_module(spec.runtime)
    target = getattr(module, "TARGET", None)
    if not isinstance(target, Target):
        raise ValueError(f"hook spec {spec.path}: runtime module {spec.runtime} defines no TARGET = Target(...)")
    if target.name != spec.name:
        raise ValueError(f"hook spec {spec.path}: [target] name {spec.name!r} but {spec.runtime}.TARGET is "
                         f"named {target.name!r}")
    return target


def all_targets(patches_dir: Optional[Path] = None) -> list:
    """``[(spec, Target)]`` for every spec, in the specs' order."""
    return [(spec, target_of(spec)) for spec in load_specs(patches_dir)]


def targets_in(checkout: Path, patches_dir: Optional[Path] = None) -> list:
    """``[(spec, Target)]`` of the targets whose upstream file exists in ``checkout``. Where several
    specs share a path, the one the file's content picks (``hooks.select``); when it picks none,
    every candidate (their outputs are all made private, say)."""
    from ..hooks.select import SpecChoiceError, choose_spec

    present = [(spec, target) for spec, target in all_targets(patches_dir) if (Path(checkout) / spec.file).is_file()]
    kept = []
    for spec, target in present:
        sharing = [other for other, _ in present if other.file == spec.file]
        try:
            if len(sharing) > 1 and choose_spec(Path(checkout) / spec.file, sharing).spec is not spec:
                continue
        except SpecChoiceError:
            pass
        kept.append((spec, target))
    return kept
