"""What ``doctor`` says besides the hook points: trainer files in the checkout that no spec covers, and
specs whose file the checkout lacks (a target ``--otca`` cannot run here)."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from . import resemblance
from .select import checkout_upstreams
from .spec import TargetSpec
from .trainer_kind import NOT_GRPO, trainer_kind

#: doctor's verdict on a trainer file that is not GRPO (``trainer_kind``'s rule)
NOT_GRPO_ADVICE = "not a GRPO trainer: launch it without --otca"

#: trainer scripts, looked for in the folders that hold a spec's file (fastvideo/, scripts/)
TRAINER_PATTERN = "train*.py"


def uncovered_trainers(checkout: Path, specs: Sequence[TargetSpec], explicit: Sequence[TargetSpec] = ()) -> list[str]:
    """``train*.py`` files, in the folders of this checkout's targeted files, that neither a spec nor
    ``--otca_target`` covers ("/"-separated, relative to ``checkout``)."""
    present = [spec for spec in specs if (checkout / spec.file).is_file()]
    covered = {(checkout / spec.file).resolve() for spec in present} | {(checkout / s.file).resolve() for s in explicit}
    folders = sorted({(checkout / spec.file).parent for spec in present})
    found = {path.resolve(): path for folder in folders for path in folder.glob(TRAINER_PATTERN) if path.is_file()}
    return sorted(found[p].relative_to(checkout).as_posix() for p in set(found) - covered)


def closest_spec(path: Path, checkout: Path, specs: Sequence[TargetSpec]) -> tuple[TargetSpec, float] | None:
    """The spec whose file (in ``checkout``) shares the largest part of its distinct lines with
    ``path``, and that part, when ``path`` is a copy of it (``resemblance``: the launch's start-up
    hook applies the same rule). Only specs of this checkout's own upstream(s) count: a shared path
    does not make a MixGRPO file a copy of DanceGRPO's."""
    here = checkout_upstreams(checkout, list(specs))
    present = [spec for spec in specs if spec.upstream in here and (checkout / spec.file).is_file()]
    found = resemblance.nearest(resemblance.line_keys(path.read_text(errors="replace")),
                                [(index, resemblance.line_keys((checkout / spec.file).read_text(errors="replace")))
                                 for index, spec in enumerate(present)])
    return (present[found[0]], found[1]) if resemblance.is_copy(found) else None


def missing_files(checkout: Path, specs: Sequence[TargetSpec]) -> tuple[list[TargetSpec], list[TargetSpec]]:
    """(specs of this checkout's upstream(s) whose file is not here, specs of other upstreams)."""
    here = checkout_upstreams(checkout, list(specs))  # a shared path alone does not make MixGRPO DanceGRPO
    absent = [spec for spec in specs if not (checkout / spec.file).is_file()]
    return [s for s in absent if s.upstream in here], [s for s in absent if s.upstream not in here]


def coverage_lines(checkout: Path, specs: Sequence[TargetSpec], explicit: Sequence[TargetSpec] = ()) -> list[str]:
    """doctor's lines on trainer files without a spec and specs without a file."""
    lines = []
    uncovered = uncovered_trainers(checkout, specs, explicit)
    if uncovered:
        lines.append(f"trainer files no spec covers ({len(uncovered)}; --otca does not patch them, and a launch "
                     f"that runs one of them under --otca stops if it is a copy of a covered trainer; to check and "
                     f"run a copy patched, give --otca_target NAME=PATH):")
        for file in uncovered:
            lines.append(f"  {file}{_advice(checkout, file, specs)}")
    missing, elsewhere = missing_files(checkout, specs)
    if missing:
        lines.append(f"specs whose file this checkout lacks ({len(missing)}; --otca cannot run these targets here):")
        lines += [f"  {spec.name}: {spec.file} (verified on {spec.upstream} commit {spec.verified_commit[:12]})"
                  for spec in missing]
    if elsewhere:
        lines.append("specs of other upstreams (their files are not in this checkout): "
                     + ", ".join(f"{spec.name} ({spec.upstream}: {spec.file})" for spec in elsewhere))
    return lines


def _advice(checkout: Path, file: str, specs: Sequence[TargetSpec]) -> str:
    """What doctor tells of one uncovered trainer, only advice that can work: not GRPO (launch it
    without --otca); a copy of a spec of its own upstream that holds on it (``--otca_target``); or
    the nearest such spec, which does not hold (it needs a spec of its own)."""
    from .select import failures

    if trainer_kind(checkout / file) == NOT_GRPO:
        return f" ({NOT_GRPO_ADVICE}; it trains no group advantage OTCA could replace)"
    copy = closest_spec(checkout / file, checkout, specs)
    if copy is None:
        return ""
    spec, share = copy
    failed = failures(str(checkout / file), spec)
    if not failed:
        return f" (a copy of {spec.file}, {share:.0%} of its lines, and {spec.name}'s spec holds on it: --otca_target {spec.name}={file})"
    return (f" (nearest spec: {spec.name}, {share:.0%} of {spec.file}'s lines, but {len(failed)} of its hook points "
            f"and pins do not hold here, first {failed[0].split(':')[0]}: it needs a spec of its own, not --otca_target)")


def uncovered_summary(checkout: Path, specs: Sequence[TargetSpec]) -> list[str]:
    """``rebase``'s short lines on the trainer files no spec covers: which are GRPO trainers that
    need a spec of their own, and which are not GRPO (``trainer_kind``)."""
    uncovered = uncovered_trainers(checkout, specs)
    if not uncovered:
        return []
    kinds = {file: trainer_kind(checkout / file) for file in uncovered}
    lines = [f"trainer files no spec covers ({len(uncovered)}):"]
    for file in uncovered:
        lines.append(f"  {file}: " + ("not a GRPO trainer: launch it without --otca" if kinds[file] == NOT_GRPO
                                      else "a GRPO trainer without a spec yet: it needs a spec of its own"))
    return lines
