"""What ``doctor`` says besides the hook points: trainer files in the checkout that no spec covers, and
specs whose file the checkout lacks (a target ``--otca`` cannot run here)."""
from __future__ import annotations

import os
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path
from typing import Sequence

from . import resemblance
from .select import checkout_upstreams
from .spec import TargetSpec
from .trainer_kind import GRPO, NOT_GRPO, trainer_kind

#: doctor's verdict on a trainer file that is not GRPO (``trainer_kind``'s rule)
NOT_GRPO_ADVICE = "not a GRPO trainer: launch it without --otca"

#: the verdicts on a Python file that no spec targets by its path (``classify``)
COPY, OWN_SPEC, NOT_GRPO_FILE, UNRELATED = "copy", "own_spec", "not_grpo", "unrelated"

#: ``rebase``'s words for ``classify``'s verdicts (a copy's names its spec)
SHORT_VERDICTS = {NOT_GRPO_FILE: NOT_GRPO_ADVICE,
                  OWN_SPEC: "a GRPO trainer without a spec yet: it needs a spec of its own",
                  UNRELATED: "no GRPO loss in it and no copy of a trainer: nothing for --otca to patch"}

#: trainer scripts, looked for in the folders that hold a spec's file (fastvideo/, scripts/)
TRAINER_PATTERN = "train*.py"


def uncovered_trainers(checkout: Path, specs: Sequence[TargetSpec], explicit: Sequence[TargetSpec] = ()) -> list[str]:
    """``train*.py`` files, in the folders of this checkout's targeted files, that neither a spec nor
    ``--otca_target`` covers ("/"-separated, relative to ``checkout``). A checkout that holds no
    targeted file (another project's, e.g. a derivative's): those of its top folder and of the
    folders where the specs' files lie (``fastvideo/``, ``scripts/``)."""
    present = [spec for spec in specs if (checkout / spec.file).is_file()]
    covered = {(checkout / spec.file).resolve() for spec in present} | {(checkout / s.file).resolve() for s in explicit}
    folders = sorted({(checkout / spec.file).parent for spec in present}
                     or {checkout, *((checkout / spec.file).parent for spec in specs)})
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


@dataclass(frozen=True)
class Verdict:
    """What ``classify`` says of a file no spec targets by its path. ``kind``: ``COPY`` (``spec``
    holds on it: ``--otca_target`` runs it patched), ``OWN_SPEC`` (a GRPO trainer, or a copy of
    one, on which no spec holds: ``spec`` the nearest, ``failed`` what of it does not hold),
    ``NOT_GRPO_FILE`` (``trainer_kind``: launch it without --otca) or ``UNRELATED`` (nothing to
    say). ``share``: the part of ``spec``'s trainer lines the file holds (None: not compared)."""

    kind: str
    spec: TargetSpec | None = None
    share: float | None = None
    failed: tuple[str, ...] = ()

    def clause(self, file: str) -> str:
        """The verdict in words, ``file`` as ``--otca_target`` would name it: what doctor prints
        beside an uncovered trainer and what the launch, its start-up hook and its step guard say."""
        spec = self.spec
        lines = f"{self.share:.0%} of {spec.file}'s lines" if spec is not None and self.share is not None else ""
        if self.kind == NOT_GRPO_FILE:
            return f"{NOT_GRPO_ADVICE}; it trains no group advantage OTCA could replace"
        if self.kind == COPY:
            shape = (f"a copy of {spec.file}, {self.share:.0%} of its lines, and " if self.share is not None
                     else "")
            return f"{shape}{spec.name}'s spec holds on it: --otca_target {spec.name}={file}"
        if self.kind == OWN_SPEC and spec is not None:
            return (f"nearest spec: {spec.name}, {lines}, but {len(self.failed)} of its hook points and pins do not "
                    f"hold here, first {self.failed[0].split(':')[0]}: it needs a spec of its own, not --otca_target")
        if self.kind == OWN_SPEC:
            return "a GRPO trainer that no spec covers: it needs a spec of its own, not --otca_target"
        return ""

    def stop_message(self, shown: str, file: str) -> str:
        """Why a launch under --otca does not run ``shown`` (``file``: its path for ``--otca_target``),
        and what to do: the launch's pre-flight, its start-up hook and its step guard all say this."""
        said = f"{shown} is not a file the layer targets: {self.clause(file)}"
        if self.kind == COPY:
            return (f"{said} among the otca-patch flags runs it patched (without that flag it would train "
                    f"unpatched), or launch without --otca")
        if self.kind == OWN_SPEC:
            return f"{said}; until it has one, launch it without --otca"
        return said


def classify(path: Path, checkout: Path, specs: Sequence[TargetSpec]) -> Verdict:
    """The one verdict on the Python file at ``path`` (not a targeted file itself) that doctor and the
    launch give. In order: not a GRPO trainer (``trainer_kind``); a copy (``closest_spec``) of a
    trainer of ``checkout``'s upstream, whose spec holds on it or not; else, for a GRPO trainer, any
    spec that holds on it, else it needs a spec of its own; else nothing to say."""
    from .rewrite import holds
    from .select import failures
    from .source import read_source

    kind = trainer_kind(path)
    if kind == NOT_GRPO:
        return Verdict(NOT_GRPO_FILE)
    copy = closest_spec(path, checkout, specs)
    if copy is not None:
        spec, share = copy
        failed = tuple(failures(str(path), spec))
        return Verdict(OWN_SPEC if failed else COPY, spec, share, failed)
    if kind != GRPO:
        return Verdict(UNRELATED)
    source = read_source(str(path))
    holding = next((spec for spec in specs if holds(source, spec, str(path))), None)
    return Verdict(COPY, holding) if holding is not None else Verdict(OWN_SPEC)


#: how deep ``judged_elsewhere`` looks below the checkout, and the folders it skips (environments, caches)
ELSEWHERE_DEPTH = 4
SKIPPED_FOLDERS = {"site-packages", "dist-packages", "node_modules", "__pycache__", "build", "dist"}


def judged_elsewhere(checkout: Path, specs: Sequence[TargetSpec], known: Sequence[str]) -> list[str]:
    """Trainer files (``*train*.py``) anywhere in the checkout, outside ``known`` (``uncovered_trainers``)
    and the targeted files, on which ``classify`` has a verdict: ``my_train_x.py`` at the top,
    ``qwen_reward/train.py``, ``fastvideo_edited/train_grpo_flux.py``. A launch under --otca that runs
    one judges it so; doctor lists them all."""
    targeted = {(checkout / spec.file).resolve() for spec in specs}
    skip = set(known)
    found = []
    for folder, subfolders, files in os.walk(checkout):
        depth = len(Path(folder).relative_to(checkout).parts)
        subfolders[:] = sorted(d for d in subfolders if not d.startswith(".") and d not in SKIPPED_FOLDERS
                               and depth < ELSEWHERE_DEPTH and not (Path(folder) / d / "pyvenv.cfg").exists())
        for name in sorted(files):
            path = Path(folder) / name
            file = path.relative_to(checkout).as_posix()
            if fnmatch(name, "*train*.py") and file not in skip and path.resolve() not in targeted \
                    and classify(path, checkout, specs).kind != UNRELATED:
                found.append(file)
    return found


def uncovered_lines(checkout: Path, specs: Sequence[TargetSpec], explicit: Sequence[TargetSpec] = ()) -> list[str]:
    """doctor's lines on the trainer files no spec covers, each with ``classify``'s verdict: those
    beside the targeted files, and any other trainer file a launch would judge."""
    uncovered = uncovered_trainers(checkout, specs, explicit)
    explicit_files = [os.path.relpath(spec.file, checkout) for spec in explicit]
    uncovered += judged_elsewhere(checkout, specs, uncovered + explicit_files)
    if not uncovered:
        return []
    return [f"trainer files no spec covers ({len(uncovered)}; --otca does not patch them, and a launch that runs one "
            f"of them under --otca stops before it trains, saying what is said here):",
            *(f"  {file}{_advice(checkout, file, specs)}" for file in uncovered)]


def missing_files(checkout: Path, specs: Sequence[TargetSpec]) -> tuple[list[TargetSpec], list[TargetSpec]]:
    """(specs of this checkout's upstream(s) whose file is not here, specs of other upstreams)."""
    here = checkout_upstreams(checkout, list(specs))  # a shared path alone does not make MixGRPO DanceGRPO
    absent = [spec for spec in specs if not (checkout / spec.file).is_file()]
    return [s for s in absent if s.upstream in here], [s for s in absent if s.upstream not in here]


def coverage_lines(checkout: Path, specs: Sequence[TargetSpec], explicit: Sequence[TargetSpec] = ()) -> list[str]:
    """doctor's lines on trainer files without a spec and specs without a file."""
    lines = uncovered_lines(checkout, specs, explicit)
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
    """What doctor tells of one uncovered trainer (``classify``'s verdict), in parentheses."""
    clause = classify(checkout / file, checkout, specs).clause(file)
    return f" ({clause})" if clause else ""


def uncovered_summary(checkout: Path, specs: Sequence[TargetSpec]) -> list[str]:
    """``rebase``'s short lines on the trainer files no spec covers: ``classify``'s verdict on each,
    in fewer words."""
    uncovered = uncovered_trainers(checkout, specs)
    if not uncovered:
        return []
    lines = [f"trainer files no spec covers ({len(uncovered)}):"]
    for file in uncovered:
        verdict = classify(checkout / file, checkout, specs)
        said = (f"{verdict.spec.name}'s spec holds on it: --otca_target {verdict.spec.name}={file}"
                if verdict.kind == COPY else SHORT_VERDICTS[verdict.kind])
        lines.append(f"  {file}: {said}")
    return lines
