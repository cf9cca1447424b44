"""``otca-patch doctor UPSTREAM_DIR``: check every hook-point spec against an upstream checkout."""
from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
from pathlib import Path

from ..launch.runner import read_source
from .checkout import check_upstream_dir
from .rewrite import check
from .spec import TargetSpec, default_patches_dir, load_specs


def checkout_commit(directory: Path) -> str:
    """The checkout's HEAD commit, or "unknown" outside git."""
    try:
        return subprocess.run(["git", "-C", str(directory), "rev-parse", "HEAD"], capture_output=True,
                              text=True, check=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def diagnose(upstream_dir: Path, specs: list[TargetSpec]) -> tuple[list[dict], bool]:
    """One row per hook of every spec whose file exists in ``upstream_dir``; and whether all hold."""
    rows, all_hold, seen = [], True, 0
    for spec in specs:
        path = upstream_dir / spec.file
        if not path.is_file():
            continue
        seen += 1
        digest = file_sha256(path)
        try:
            statuses = check(read_source(str(path)), spec, str(path))
        except SyntaxError as exc:
            rows.append({"target": spec.name, "file": spec.file, "hook": "-", "function": "-", "anchor": "-",
                         "status": f"FAIL: file does not parse ({exc.msg}, line {exc.lineno})",
                         "sha256": digest, "verified_sha256": spec.verified_sha256,
                         "verified_commit": spec.verified_commit})
            all_hold = False
            continue
        for status in statuses:
            all_hold &= status.ok
            rows.append({"target": spec.name, "file": spec.file, "hook": status.hook.name,
                         "function": status.hook.function, "anchor": status.hook.anchor,
                         "status": "ok" if status.ok else f"FAIL: {status.problem}",
                         "sha256": digest, "verified_sha256": spec.verified_sha256,
                         "verified_commit": spec.verified_commit})
    if not seen:
        raise ValueError(f"{upstream_dir} holds none of the files the hook specs target "
                         f"({', '.join(sorted({s.file for s in specs}))}); is it an upstream checkout?")
    return rows, all_hold


def format_report(upstream_dir: Path, rows: list[dict]) -> str:
    commit = checkout_commit(upstream_dir)
    lines = [f"upstream checkout: {upstream_dir} (commit {commit})", ""]
    for file in dict.fromkeys(row["file"] for row in rows):
        first = next(r for r in rows if r["file"] == file)
        same = first["sha256"] == first["verified_sha256"]
        lines.append(f"{first['target']}: {file}")
        lines.append(f"  sha256 {first['sha256'][:16]}  "
                     + ("identical to the file the spec was verified on" if same else
                        f"differs from the verified file ({first['verified_sha256'][:16]})")
                     + f"; spec verified on upstream commit {first['verified_commit'][:12]}")
        width = max(len(r["hook"]) for r in rows if r["file"] == file)
        for row in (r for r in rows if r["file"] == file):
            anchor = row["anchor"] if len(row["anchor"]) <= 60 else row["anchor"][:57] + "..."
            lines.append(f"  {row['hook']:<{width}}  {row['status']:<5}  {row['function']}: {anchor}")
        lines.append("")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="otca-patch doctor", description=__doc__)
    parser.add_argument("upstream_dir", type=Path, help="an upstream checkout (e.g. upstream/DanceGRPO)")
    parser.add_argument("--patches", type=Path, default=None, help=f"spec folder (default {default_patches_dir()})")
    args = parser.parse_args(argv)
    try:
        check_upstream_dir(args.upstream_dir)
        rows, all_hold = diagnose(args.upstream_dir, load_specs(args.patches))
    except ValueError as exc:
        print(f"otca-patch doctor: error: {exc}", file=sys.stderr)
        return 2
    print(format_report(args.upstream_dir, rows))
    failed = sum(not r["status"].startswith("ok") for r in rows)
    print(f"{len(rows) - failed} of {len(rows)} hook points hold" + ("" if all_hold else
          f"; {failed} need a new spec before --otca can run on this checkout"))
    return 0 if all_hold else 1
