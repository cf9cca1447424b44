"""The targets the layer knows: one per hook-point spec in ``patches/`` (the spec is the one place a
target is registered: its ``[target]`` table names the runtime class, outputs, flags and smoke)."""
from __future__ import annotations

import importlib
from pathlib import Path
from typing import Optional

from ..config import OtcaConfig
from ..target_options import refuse_foreign_flags
from ..hooks.spec import TargetSpec, load_specs, probing_targets


def runtime_class(spec: TargetSpec) -> type:
    """The class ``spec``'s ``runtime = "module:Class"`` names; an error names the spec when it is missing."""
    module_name, _, class_name = spec.runtime.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise ValueError(f"hook spec {spec.path}: runtime module {module_name} cannot be imported ({exc})") from None
    runtime = getattr(module, class_name, None)
    if not isinstance(runtime, type):
        raise ValueError(f"hook spec {spec.path}: runtime {spec.runtime}: {module_name} defines no class {class_name}")
    return runtime


def install(spec: TargetSpec, config: OtcaConfig):
    """The runtime of one process for target ``spec``, before the rewritten upstream module executes.
    A target-only flag the spec does not list is refused here (the one place it is checked)."""
    refuse_foreign_flags(config, spec.name, spec.flags, probing_targets)
    return runtime_class(spec)(config, spec)


def install_for_run(spec: TargetSpec, config: OtcaConfig, path: str, chosen: str = ""):
    """``install`` for the process that runs the upstream file at ``path``: the runtime keeps why its
    spec was chosen (``chosen``, for the run log), and every rank or none is checked once the
    trainer's process group exists, before any rollout (``rank_check``)."""
    from . import rank_check  # torch.distributed: only in the process that trains

    runtime = install(spec, config)
    runtime.spec_chosen = chosen  # several upstreams share a path: the run log says which and why
    rank_check.arm(rank_check.entry(config, spec, path), config.otca_rank_check_timeout, spec.file)
    return runtime


def runtime_for(name: str, config: OtcaConfig, patches_dir: Optional[Path] = None):
    """The runtime of target ``name`` (tests, benches and tools; a launch installs its spec's)."""
    return install(spec_named(name, patches_dir), config)


def spec_named(name: str, patches_dir: Optional[Path] = None) -> TargetSpec:
    """The spec of target ``name``."""
    specs = load_specs(patches_dir)
    for spec in specs:
        if spec.name == name:
            return spec
    raise ValueError(f"no target named {name!r} (targets: {', '.join(s.name for s in specs)})")


def targets_in(checkout: Path, patches_dir: Optional[Path] = None) -> list[TargetSpec]:
    """The specs whose upstream file exists in ``checkout``. Where several specs share a path, the
    one the file's content picks (``hooks.select``); when it picks none, every candidate (their
    outputs are all made private, say)."""
    from ..hooks.select import SpecChoiceError, choose_spec

    present = [spec for spec in load_specs(patches_dir) if (Path(checkout) / spec.file).is_file()]
    kept = []
    for spec in present:
        sharing = [other for other in present if other.file == spec.file]
        try:
            if len(sharing) > 1 and choose_spec(Path(checkout) / spec.file, sharing).spec is not spec:
                continue
        except SpecChoiceError:
            pass
        kept.append(spec)
    return kept
