"""Which spec applies to an upstream file, told from the file itself.

Several upstreams can share a path: DanceGRPO and MixGRPO both train FLUX from
``fastvideo/train_grpo_flux.py``. The path names the candidates (the specs whose ``file`` it ends
with); the file's content picks one of them:

1. its sha256 is the file a candidate was verified on (a content fingerprint), else
2. the one candidate whose pins and hook points all hold on it.

Two candidates that both hold, or none, is a ``SpecChoiceError`` naming each of them (and, for
each, the first hook point that does not hold). A path with a single candidate is that spec: when it
does not hold, applying it raises the precise ``PatchError``, as before.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..files import shown_path
from .errors import PatchError
from .rewrite import check_tree, rewrite_tree
from .source import UpstreamFile, upstream_file
from .spec import TargetSpec, load_specs


class SpecChoiceError(ValueError):
    """No spec, or more than one, holds for an upstream file that several specs target."""


@dataclass(frozen=True)
class SpecChoice:
    """The spec picked for a file and why (printed by doctor, the pre-flight line and the run)."""

    spec: TargetSpec
    reason: str

    def describe(self) -> str:
        return f"{self.spec.upstream} (target {self.spec.name}, {shown_path(self.spec.path)}): {self.reason}"


def candidates(path: str | os.PathLike, specs: list[TargetSpec] | None = None) -> list[TargetSpec]:
    """The specs whose upstream file ``path`` is (by its trailing path), in the specs' order."""
    return [spec for spec in (specs if specs is not None else load_specs()) if spec.matches_script(path)]


def failures(path: str | UpstreamFile, spec: TargetSpec) -> list[str]:
    """What of ``spec`` does not hold on the file at ``path`` (or on that read of it) ([] when everything holds)."""
    file = path if isinstance(path, UpstreamFile) else upstream_file(path)
    try:
        statuses = check_tree(file.tree(), spec)
    except SyntaxError as exc:
        return [f"the file does not parse ({exc.msg}, line {exc.lineno})"]
    return [f"{'pin' if s.hook.is_pin else 'hook'} {s.hook.name}: {s.problem}" for s in statuses if not s.ok]


def choose_spec(path: str | os.PathLike, specs: list[TargetSpec]) -> SpecChoice:
    """The one spec of ``specs`` (the candidates for ``path``) that applies to the file's content."""
    path = os.path.abspath(path)
    if not specs:
        raise SpecChoiceError(f"{path}: no hook-point spec targets this file")
    if len(specs) == 1:
        return SpecChoice(specs[0], "the only spec for this path")
    file = upstream_file(path)  # one read and one parse for every candidate
    digest = file.sha256
    for spec in specs:
        if digest == spec.verified_sha256:
            return SpecChoice(spec, f"the file is the one the spec was verified on (sha256 {digest[:16]})")
    problems = {spec.name: failures(file, spec) for spec in specs}
    holding = [spec for spec in specs if not problems[spec.name]]
    others = ", ".join(s.name for s in specs if s not in holding)
    if len(holding) == 1:
        return SpecChoice(holding[0], f"its pins and hook points all hold on this file; they do not for {others}")
    if holding:
        raise SpecChoiceError(f"{path}: the pins and hook points of several specs all hold on this file: "
                              f"{', '.join(f'{s.name} ({s.path})' for s in holding)}; the layer cannot tell "
                              f"which upstream it belongs to. Name the spec explicitly.")
    nearest = sorted(specs, key=lambda s: len(problems[s.name]))
    lines = [f"{path}: none of the {len(specs)} specs for this path holds on this file "
             f"({', '.join(s.name for s in specs)}); nearest first:"]
    for spec in nearest:
        lines.append(f"  {spec.name} ({spec.upstream}, {spec.path}; {len(problems[spec.name])} do not hold): "
                     + "; ".join(problems[spec.name][:3]))
        if spec is nearest[0]:
            lines.append("  " + str(_first_error(file, spec)).replace("\n", "\n  "))
    raise SpecChoiceError("\n".join(lines))


def _first_error(file: UpstreamFile, spec: TargetSpec) -> PatchError | SyntaxError:
    """The ``PatchError`` applying ``spec`` raises (file, function, anchor, verified commit)."""
    try:
        rewrite_tree(file.tree(), spec)
    except (PatchError, SyntaxError) as exc:
        return exc
    return PatchError(file=spec.file, function="-", anchor="-", problem="unexpectedly holds",
                      verified_commit=spec.verified_commit, spec=spec.path)


def spec_choice_for_script(script: str | os.PathLike, specs: list[TargetSpec] | None = None) -> SpecChoice | None:
    """The spec for a launched script, chosen by its path and content; ``None`` when no spec targets it."""
    found = candidates(script, specs)
    return choose_spec(script, found) if found else None


def checkout_upstreams(checkout: Path, specs: list[TargetSpec]) -> set[str]:
    """The upstream(s) ``checkout`` is a clone of: those with a file at a path no other upstream
    shares; where only shared paths exist (MixGRPO's FLUX trainer is at DanceGRPO's path), the one
    the file's content picks (every candidate when none or several hold)."""
    files = {file: [spec for spec in specs if spec.file == file] for file in dict.fromkeys(s.file for s in specs)}
    files = {file: mine for file, mine in files.items() if (checkout / file).is_file()}
    present = {mine[0].upstream for mine in files.values() if len({s.upstream for s in mine}) == 1}
    for file, mine in files.items():
        if len({s.upstream for s in mine}) > 1 and not present & {spec.upstream for spec in mine}:
            try:
                present.add(choose_spec(checkout / file, mine).spec.upstream)
            except SpecChoiceError:
                present.update(spec.upstream for spec in mine)
    return present
