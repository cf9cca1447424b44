"""Per target, at one upstream checkout: is its file there, do its hook points hold, and does its
smoke run pass (only where the file differs from the one the layer was verified on, and the hooks
hold). What ``otca-patch rebase`` reports, one line per target, with long lists wrapped."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..hooks.doctor import diagnose
from ..hooks.select import checkout_upstreams
from ..hooks.source import file_sha256

WIDTH = 100


@dataclass
class TargetCheck:
    name: str
    file: str
    present: bool
    verified: bool = False  # the file is byte-identical to the spec's verified one
    held: tuple = ()  # the hook points that hold
    broken: tuple = ()  # "hook (problem)" of each hook point that fails
    smoke: str = "-"  # passed / FAILED ... / not needed / no smoke run / skipped

    @property
    def hold(self) -> int:
        return len(self.held)


def upstream_specs(checkout: Path, specs: list) -> list:
    """The specs of the upstream(s) this checkout is a clone of: every spec whose ``upstream`` has a
    file in the checkout now (so a target whose file a commit lacks is still listed)."""
    present = checkout_upstreams(checkout, specs)
    return [spec for spec in specs if spec.upstream in present]


def check_targets(checkout: Path, specs: list) -> list[TargetCheck]:
    """Hook points per target (``doctor.diagnose``) of ``specs`` at ``checkout``."""
    checks = []
    present = [spec for spec in specs if (checkout / spec.file).is_file()]
    rows, _ = diagnose(checkout, present) if present else ([], True)
    for spec in specs:
        if spec not in present:
            checks.append(TargetCheck(spec.name, spec.file, present=False))
            continue
        mine = [r for r in rows if r["target"] == spec.name]
        broken = tuple(f"{r['hook']} ({r['status'][len('FAIL: '):]})" for r in mine if r["status"] != "ok")
        checks.append(TargetCheck(spec.name, spec.file, present=True,
                                  verified=file_sha256(str(checkout / spec.file)) == spec.verified_sha256,
                                  held=tuple(r["hook"] for r in mine if r["status"] == "ok"), broken=broken))
    return checks


def smoke_of(name: str) -> bool:
    """Whether target ``name`` has a smoke run (its spec names a smoke module or its family's harness)."""
    from ..hooks.spec import load_specs

    try:
        return any(spec.name == name and spec.smoke.runs for spec in load_specs())
    except ValueError:  # a spec folder that does not load here: no built-in smoke
        return False


def run_smoke(command: str | None, checkout: Path, target: str) -> tuple[bool | None, str]:
    """(passed, what ran) of ``target``'s smoke at ``checkout``; passed is None when skipped.
    ``command``: a bash command run with $UPSTREAM_DIR, $SMOKE_OUT and $OTCA_TARGET set, or "skip";
    None runs ``python -m otca_patch.smoke UPSTREAM OUT --target NAME --steps 1 --otca``."""
    if command == "skip":
        return None, "skipped (--smoke skip)"
    if command is None and not smoke_of(target):
        return None, "no smoke run for this target"
    with tempfile.TemporaryDirectory(prefix="otca-rebase-smoke-") as out:
        if command is None:
            argv = [sys.executable, "-m", "otca_patch.smoke", str(checkout), out, "--target", target,
                    "--steps", "1", "--otca"]
        else:
            argv = ["bash", "-c", command]
        env = dict(os.environ, UPSTREAM_DIR=str(checkout), SMOKE_OUT=out, OTCA_TARGET=target)
        done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=3600)
    shown = command or " ".join(argv[1:])
    if done.returncode != 0:
        tail = (done.stdout + done.stderr).rstrip().splitlines()[-12:]  # the error, not the whole log
        return False, f"{shown}: exit {done.returncode}; its output ends:\n" + "\n".join("    " + line for line in tail)
    return True, shown


def smoke_changed(checks: list[TargetCheck], checkout: Path, command: str | None) -> list[str]:
    """Runs the smoke of every present target whose hooks hold and whose file is not the verified
    one; fills ``check.smoke``; returns the failures' outputs."""
    failures = []
    for check in checks:
        if not check.present:
            continue
        if check.broken:
            check.smoke = "not run (its hook points fail)"
            continue
        if check.verified:
            check.smoke = "not needed (unchanged)"
            continue
        passed, shown = run_smoke(command, checkout, check.name)
        check.smoke = "passed" if passed else ("FAILED" if passed is False else shown)
        if passed is False:
            failures.append(f"{check.name}: {shown}")
    return failures


def wrapped(label: str, items: list[str]) -> str:
    """``label (N): a, b, ...`` wrapped to ``WIDTH`` columns between items (an item is never split),
    continuation lines indented."""
    lines, line = [], f"{label} ({len(items)}):"
    for index, item in enumerate(items or ["none"]):
        piece = f" {item}" + ("," if index < len(items) - 1 else "")
        if len(line) + len(piece) > WIDTH and line.strip():
            lines.append(line)
            line = "   "
        line += piece
    return "\n".join(lines + [line])


def format_checks(checks: list[TargetCheck], ref: str) -> str:
    """One line per target, then the targets without a file at ``ref`` and every broken hook point."""
    width = max(len(c.name) for c in checks)
    lines = [f"per target at {ref}:"]
    for check in checks:
        if not check.present:
            lines.append(f"  {check.name:<{width}}  no file at {ref} ({check.file})")
            continue
        hooks = f"{check.hold} hook points hold" if not check.broken else \
            f"{len(check.broken)} of {check.hold + len(check.broken)} hook points need a new spec"
        file_state = "verified file" if check.verified else "file changed since the verified commit"
        lines.append(f"  {check.name:<{width}}  {file_state}; {hooks}; smoke: {check.smoke}")
    absent = [c.name for c in checks if not c.present]
    if absent:
        lines.append(wrapped(f"no file at {ref}", absent))
    broken = [f"{c.name}:{b}" for c in checks for b in c.broken]
    lines.append(wrapped("need a new spec", broken))
    return "\n".join(lines)
