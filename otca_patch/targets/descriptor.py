"""``Target``: everything target-specific that generic code needs, in one place per target.

Each runtime module (the ``runtime`` of a spec's ``[target]`` table) defines ``TARGET = Target(...)``;
the spec holds the upstream file and its hook points, the descriptor the rest. Generic code reads
descriptors only (``targets.registry``): the launch builds the runtime, A/B working copies make the
outputs private, the smoke command finds the smoke module, target-only flags are checked.
"""
from __future__ import annotations

from dataclasses import dataclass, fields

from ..config import OtcaConfig


@dataclass(frozen=True)
class Target:
    """name: the spec's ``[target]`` name. runtime: the ``Runtime`` subclass its hook code calls.
    outputs: what upstream writes relative to its working directory (folders and files; an A/B run
    gives each side its own). flags: the target-only ``OtcaConfig`` flags this target takes.
    smoke: the module of its CPU smoke run (``""``: none). smoke_objectives: the objectives of a
    smoke run with ``--otca`` alone. smoke_variants: ``(name, module)`` pairs, further smoke runs of
    the same trainer on another model layout (Wan2.2's two experts on the Wan trainer)."""

    name: str
    runtime: type
    outputs: tuple = ()
    flags: tuple = ()
    smoke: str = ""
    smoke_objectives: tuple = ("upstream",)
    smoke_variants: tuple = ()

    def __post_init__(self) -> None:
        target_only = {f.name for f in fields(OtcaConfig) if f.metadata.get("target_only")}
        unknown = set(self.flags) - target_only
        if unknown:
            raise ValueError(f"target {self.name}: {', '.join(sorted(unknown))} are not target-only flags of "
                             f"OtcaConfig ({', '.join(sorted(target_only))})")
        if self.runtime.__dict__.get("target") not in (None, self):
            raise ValueError(f"target {self.name}: {self.runtime.__name__} already belongs to target "
                             f"{self.runtime.target.name}; give each target its own runtime class")
        self.runtime.target = self

    def install(self, config: OtcaConfig):
        """The runtime of one process, before the rewritten upstream module executes."""
        return self.runtime(config)
