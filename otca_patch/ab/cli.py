"""``otca-patch ab [--out DIR] [--private PATH] UPSTREAM_LAUNCH.sh [--otca flags]``
``otca-patch ab [--out DIR] --smoke UPSTREAM_DIR [--steps N] [--seed S] [--otca flags]``
(``scripts/ab_compare.sh`` is an alias)

Runs one launch twice, one side after the other, then ``otca-patch compare``:

  DIR/vanilla  the launch with --otca_observe: trains exactly as vanilla, logs every objective
  DIR/otca     the launch with --otca and your flags
  DIR/compare  report.md and the plots

Both sides run the same launch script, so the same seeds (the script's --seed) and the same
initial noise; the OTCA flags other than --otca (objectives, checkpoints, mode) apply to both, so
both sides log the same objectives. Run it from the upstream checkout, as `otca-patch launch`.
Each side runs in DIR/<side>, a working copy of the checkout (symlinks) in which what the trainer
writes into its working directory (./images, ./reward.txt, ./videos, ...: the target's descriptor
lists it) and the launch script's relative --output_dir (checkpoints) are private, so the sides
never overwrite each other and the checkout is left as it was. --private PATH adds another path a
trainer writes. --smoke runs `otca-patch smoke` (CPU, tiny models) instead of a launch.
"""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from ..analysis.compare import compare
from ..analysis.logs import LogError
from ..config import parse_otca_args
from .workdir import cwd_outputs, make_working_copy, output_dirs_of

PROG = "otca-patch ab"
SIDE_FLAGS = ("--otca", "--otca_observe")
SIDES = (("vanilla", "--otca_observe"), ("otca", "--otca"))


def side_argv(flags: list[str], side_flag: str) -> list[str]:
    """The shared flags with this side's switch: --otca_observe (vanilla) or --otca."""
    return [token for token in flags if token not in SIDE_FLAGS] + [side_flag]


def parse(argv: list[str]) -> dict:
    options = {"out": None, "smoke": False, "private": []}
    position = 0
    while position < len(argv) and argv[position] in ("--out", "--smoke", "--private"):
        flag = argv[position]
        if flag == "--smoke":
            options["smoke"] = True
        else:
            if position + 1 >= len(argv):
                raise ValueError(f"{flag} needs a value")
            value = argv[position + 1]
            options["private"].append(value) if flag == "--private" else options.update(out=value)
            position += 1
        position += 1
    if position >= len(argv):
        raise ValueError("give the upstream launch script (or, with --smoke, the upstream checkout)")
    options["target"] = Path(argv[position])
    options["flags"] = argv[position + 1:]
    config, _ = parse_otca_args(options["flags"])  # unknown --otca_* flags stop here, before any run
    if config.otca_log_dir != type(config)().otca_log_dir:
        raise ValueError("--otca_log_dir: each side logs into its own run folder; leave it out")
    return options


def run_side(command: list[str], cwd: Path, log: Path) -> int:
    """One side, its output teed to ``log`` (kept even when the side fails)."""
    print(f"{PROG}: {' '.join(command)}  (in {cwd})", flush=True)
    with open(log, "w") as handle:
        process = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for line in process.stdout:
            sys.stdout.write(line)
            handle.write(line)
        return process.wait()


def smoke_command(upstream: Path, run_dir: Path, flags: list[str]) -> list[str]:
    return [sys.executable, "-m", "otca_patch.smoke", str(upstream.resolve()), str(run_dir), *flags]


def launch_command(launch: Path, run_dir: Path, flags: list[str]) -> list[str]:
    return [sys.executable, "-m", "otca_patch.launch.wrapper", str(launch), *flags, "--otca_log_dir", str(run_dir)]


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    try:
        options = parse(argv)
    except ValueError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    out = Path(options["out"] or f"ab_runs/{time.strftime('%Y%m%d-%H%M%S')}").resolve()
    target = options["target"]
    checkout = Path.cwd()
    if options["smoke"]:
        if not target.is_dir():
            print(f"{PROG}: error: --smoke needs an upstream checkout folder, got {target}", file=sys.stderr)
            return 2
    else:
        if not target.is_file():
            print(f"{PROG}: error: launch script {target} does not exist (run from the upstream checkout)",
                  file=sys.stderr)
            return 2
        if target.is_absolute():
            target = target.relative_to(checkout) if target.is_relative_to(checkout) else target
        try:
            private = [*cwd_outputs(checkout, options["target"]), *output_dirs_of(options["target"]),
                       *options["private"]]
        except ValueError as exc:
            print(f"{PROG}: error: {exc}", file=sys.stderr)
            return 2
        if "--seed" not in options["target"].read_text(errors="replace"):
            print(f"{PROG}: warning: the launch script sets no --seed; the sides will not share their noise",
                  file=sys.stderr)
    for name, _ in SIDES:
        if (out / name / "run_log.jsonl").exists():
            print(f"{PROG}: error: {out / name} already holds a run; pass another --out", file=sys.stderr)
            return 2
    out.mkdir(parents=True, exist_ok=True)
    for name, side_flag in SIDES:
        run_dir = out / name
        flags = side_argv(options["flags"], side_flag)
        if options["smoke"]:
            command, cwd = smoke_command(target, run_dir, flags), out
        else:
            try:
                make_working_copy(checkout, run_dir, private)
            except ValueError as exc:
                print(f"{PROG}: error: {exc}", file=sys.stderr)
                return 2
            command, cwd = launch_command(target, run_dir, flags), run_dir
        code = run_side(command, cwd, out / f"{name}.out")
        if code != 0:
            print(f"{PROG}: error: the {name} side failed (exit {code}); its output is in {out / f'{name}.out'}",
                  file=sys.stderr)
            return code
    try:
        report = compare([out / name for name, _ in SIDES], out / "compare", labels=[name for name, _ in SIDES])
    except LogError as exc:
        print(f"{PROG}: error: comparing the two sides: {exc}", file=sys.stderr)
        return 2
    print(f"{PROG}: report: {report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
