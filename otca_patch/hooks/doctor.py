"""``otca-patch doctor UPSTREAM_DIR``: check every hook-point spec against an upstream checkout."""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from ..files import shown_path
from ..help_text import PlainHelpFormatter
from .checkout import check_upstream_dir
from .coverage import coverage_lines, uncovered_lines
from .explicit_targets import explicit_specs, not_overridden, resolve_in
from .rewrite import check
from .select import SpecChoiceError, choose_spec
from .source import file_sha256, read_source
from .spec import TargetSpec, default_patches_dir, load_specs


class NoTargetedFile(ValueError):
    """The folder doctor was given holds none of the files the specs target."""


def checkout_commit(directory: Path) -> str:
    """The checkout's HEAD commit, or "unknown" outside git."""
    try:
        return subprocess.run(["git", "-C", str(directory), "rev-parse", "HEAD"], capture_output=True,
                              text=True, check=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def identity_line(spec: TargetSpec, digest: str, holds: bool = True, tails: dict | None = None) -> str:
    """One line on the upstream file's identity: the verified file, or a changed one whose hook
    points, reads and pins were checked (what both ``doctor`` and a run print). ``tails``: per hook
    point or pin, the no-op tails (``advantages.clone()``) its anchor matched only past."""
    commit = spec.verified_commit[:12]
    if digest == spec.verified_sha256:
        line = f"{spec.file}: identical to the file the spec was verified on (upstream commit {commit})"
    else:
        verdict = ("its structure still matches: every hook point, name read and pin holds" if holds else
                   "and its structure no longer matches the spec")
        line = (f"{spec.file}: sha256 {digest[:16]} differs from the file the spec was verified on "
                f"({spec.verified_sha256[:16]}, upstream commit {commit}); {verdict}")
    tails = {name: found for name, found in (tails or {}).items() if found}
    if tails:
        line += (f"; {len(tails)} hold only past no-op .detach() / .clone() / .contiguous() calls upstream added: "
                 + ", ".join(f"{name} ({', '.join(found)})" for name, found in tails.items()))
    return line


def applicable(upstream_dir: Path, specs: list[TargetSpec]) -> tuple[list[tuple[TargetSpec, str]], bool]:
    """``[(spec, why)]`` to check in ``upstream_dir``: per file that exists, the spec its content picks
    (``select.choose_spec``: several upstreams can share a path), or, when none or several hold,
    every candidate with the error naming them; and whether every file picked one spec."""
    chosen, picked = [], True
    for file in dict.fromkeys(spec.file for spec in specs):
        path = upstream_dir / file
        if not path.is_file():
            continue
        mine = [spec for spec in specs if spec.file == file]
        try:
            choice = choose_spec(path, mine)
        except SpecChoiceError as exc:
            picked = False
            chosen += [(spec, f"ERROR: {exc}") for spec in mine]
            continue
        chosen.append((choice.spec, choice.reason if len(mine) > 1 else ""))
    return chosen, picked


def diagnose(upstream_dir: Path, specs: list[TargetSpec]) -> tuple[list[dict], bool]:
    """One row per hook of the spec picked for each targeted file in ``upstream_dir``; and whether all hold."""
    rows, seen = [], 0
    chosen, all_hold = applicable(upstream_dir, specs)
    for spec, why in chosen:
        path = upstream_dir / spec.file
        seen += 1
        digest = file_sha256(str(path))
        try:
            statuses = check(read_source(str(path)), spec, str(path))
        except SyntaxError as exc:
            rows.append({"target": spec.name, "file": spec.file, "hook": "-", "function": "-", "anchor": "-",
                         "spec": spec, "kind": "file", "chosen": why,
                         "status": f"FAIL: file does not parse ({exc.msg}, line {exc.lineno})",
                         "sha256": digest, "verified_sha256": spec.verified_sha256,
                         "verified_commit": spec.verified_commit})
            all_hold = False
            continue
        for status in statuses:
            all_hold &= status.ok
            rows.append({"target": spec.name, "file": spec.file, "hook": status.hook.name, "spec": spec, "chosen": why,
                         "kind": "pin" if status.hook.is_pin else "hook", "tails": status.tails,
                         "function": status.hook.function, "anchor": status.hook.anchor,
                         "status": "ok" if status.ok else f"FAIL: {status.problem}",
                         "sha256": digest, "verified_sha256": spec.verified_sha256,
                         "verified_commit": spec.verified_commit})
    if not seen:
        raise NoTargetedFile(f"{upstream_dir} holds none of the files the hook specs target "
                         f"({', '.join(sorted({s.file for s in specs}))}); is it an upstream checkout?")
    return rows, all_hold


def format_report(upstream_dir: Path, rows: list[dict]) -> str:
    commit = checkout_commit(upstream_dir)
    lines = [f"upstream checkout: {upstream_dir} (commit {commit})", ""]
    for target, file in dict.fromkeys((row["target"], row["file"]) for row in rows):  # a --otca_target copy apart
        mine = [r for r in rows if r["target"] == target and r["file"] == file]
        first = mine[0]
        lines.append(f"{first['target']}: {file}")
        lines.append(f"  spec {shown_path(first['spec'].path)} (upstream {first['spec'].upstream})"
                     + (f"; picked: {first['chosen']}" if first["chosen"] and not first["chosen"].startswith("ERROR")
                        else ""))
        lines.append("  " + identity_line(first["spec"], first["sha256"], all(r["status"] == "ok" for r in mine),
                                          {r["hook"]: r.get("tails", ()) for r in mine}))
        width = max(len(r["hook"]) for r in mine)
        for row in mine:
            anchor = row["anchor"] if len(row["anchor"]) <= 60 else row["anchor"][:57] + "..."
            lines.append(f"  {row['kind']:<4} {row['hook']:<{width}}  {row['status']:<5}  {row['function']}: {anchor}")
        lines.append("")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="otca-patch doctor", description=__doc__, formatter_class=PlainHelpFormatter)
    parser.add_argument("upstream_dir", type=Path, help="an upstream checkout (e.g. upstream/DanceGRPO)")
    parser.add_argument("--patches", type=Path, default=None, help="a folder of hook specs to check instead of the shipped ones ($OTCA_PATCHES_DIR when set)")
    parser.add_argument("--otca_target", metavar="NAME=PATH", action="append", default=[],
                        help="also check spec NAME applied to the file at PATH (a copy of a trainer), as a launch "
                             "given the same flag does; PATH from the current folder or the checkout (repeatable)")
    args = parser.parse_args(argv)
    from ..verl_omni import doctor as verl_omni_doctor  # VeRL-Omni has a plug-in, not hook specs

    if verl_omni_doctor.is_checkout(args.upstream_dir) and not args.otca_target:
        return verl_omni_doctor.main(args.upstream_dir)
    try:
        check_upstream_dir(args.upstream_dir)
        specs = load_specs(args.patches)
        explicit = targets_in_checkout(args.otca_target, specs, args.upstream_dir)
        rows, all_hold = diagnose(args.upstream_dir, not_overridden(specs, explicit, args.upstream_dir) + explicit)
    except ValueError as exc:
        print(f"otca-patch doctor: error: {exc}", file=sys.stderr)
        if isinstance(exc, NoTargetedFile):  # another project's checkout: still say what its trainers are
            for line in uncovered_lines(args.upstream_dir, specs, explicit):
                print(line)
        return 2
    # the details first, the verdicts last: the summary is the line a reader sees at the end
    print(format_report(args.upstream_dir, rows))
    for line in coverage_lines(args.upstream_dir, specs, explicit):
        print(line)
    for error in dict.fromkeys(r["chosen"] for r in rows if r["chosen"].startswith("ERROR")):
        print(f"otca-patch doctor: {error}")
    print("per target:")
    for line in verdicts(rows):
        print(line)
    print(summary_line(rows))
    return 0 if all_hold else 1


def summary_line(rows: list[dict]) -> str:
    """doctor's last line: how many hook points and targets hold, and whether --otca can run here."""
    failed = sum(not r["status"].startswith("ok") for r in rows)
    targets = dict.fromkeys((r["target"], r["file"]) for r in rows)
    broken = {(r["target"], r["file"]) for r in rows if not r["status"].startswith("ok")}
    counts = f"{len(rows) - failed} of {len(rows)} hook points hold, {len(targets) - len(broken)} of {len(targets)} targets"
    if not failed:
        return f"doctor: passed: {counts}; --otca can run every target here"
    return f"doctor: failed: {counts}; {failed} hook points need a new spec before --otca can run the targets above"


def targets_in_checkout(given: list[str], specs: list[TargetSpec], checkout: Path) -> list[TargetSpec]:
    """``--otca_target NAME=PATH`` values as specs whose ``file`` is PATH (relative to ``checkout``
    when it lies inside it, as the report names files)."""
    import os
    from dataclasses import replace

    from ..flags import spec_targets

    chosen = {}
    for text in given:
        try:
            chosen.update({str(resolve_in(path, checkout)): name for path, name in spec_targets(text).items()})
        except argparse.ArgumentTypeError as exc:
            raise ValueError(f"--otca_target: {exc}") from None
    root = Path(os.path.abspath(checkout))
    return [replace(spec, file=os.path.relpath(spec.file, root) if Path(spec.file).is_relative_to(root) else spec.file)
            for spec in explicit_specs(chosen, specs)]


def verdicts(rows: list[dict]) -> list[str]:
    """Per target: whether --otca can run it here, or exactly which hook points need a new spec."""
    lines = []
    for target, file in dict.fromkeys((r["target"], r["file"]) for r in rows):  # a --otca_target copy apart
        mine = [r for r in rows if r["target"] == target and r["file"] == file]
        broken = [f"{r['kind']} {r['hook']}" for r in mine if r["status"] != "ok"]
        lines.append(f"  {target} ({mine[0]['file']}): " + (f"holds ({len(mine)} hook points and pins)" if not broken
                     else f"needs a new spec for {len(broken)} of {len(mine)}: {', '.join(broken)}"))
    return lines
