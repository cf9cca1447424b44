"""``otca-patch ab [--out DIR] [--private PATH] UPSTREAM_LAUNCH.sh [--otca flags]``
``otca-patch ab [--out DIR] --smoke UPSTREAM_DIR [--steps N] [--seed S] [--otca flags]``
``otca-patch ab [--out DIR] --seeds 1,2,3 ...``: each side once per seed
(``scripts/ab_compare.sh`` is an alias)

Runs one launch twice, one side after the other, then ``otca-patch compare``:

  DIR/vanilla  the launch with --otca_observe: trains exactly as vanilla, logs every objective
  DIR/otca     the launch with --otca and your flags
  DIR/compare  report.md (opening with samples.png: both sides' samples at the first and the last
               step, same prompts and noise) and the plots

Both sides run the same launch script, so the same seeds (the script's --seed) and the same
initial noise; the OTCA flags other than --otca (objectives, checkpoints, mode) apply to both, so
both sides log the same objectives. Run it from the upstream checkout, as `otca-patch launch`.
Each side runs in DIR/<side>, a working copy of the checkout (symlinks) in which what the trainer
writes into its working directory (./images, ./reward.txt, ./videos, ...: the target's spec
lists it) and the launch script's relative --output_dir (checkpoints) are private, so the sides
never overwrite each other and the checkout is left as it was. --private PATH adds another path a
trainer writes. --smoke runs `otca-patch smoke` (CPU, tiny models) instead of a launch.

--seeds S1,S2,...: both sides once per seed, in DIR/<side>/seed<S> (vanilla and otca of one seed
share it); the report compares the sides over the seeds and says how many runs stand behind each
number. With --smoke the seed is the smoke's --seed; a launch script must read it from
$OTCA_AB_SEED (e.g. ``--seed ${OTCA_AB_SEED:-42}``), which each run of a side gets.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from .. import env_names
from ..config import parse_otca_args
from ..help_text import plain_text
from ..hooks.errors import PatchError
from .workdir import cwd_outputs, make_working_copy, output_dirs_of

PROG = "otca-patch ab"
SIDE_FLAGS = ("--otca", "--otca_observe")
SIDES = (("vanilla", "--otca_observe"), ("otca", "--otca"))
SEED_VARIABLE = "OTCA_AB_SEED"


def side_argv(flags: list[str], side_flag: str) -> list[str]:
    """The shared flags with this side's switch: --otca_observe (vanilla) or --otca."""
    return [token for token in flags if token not in SIDE_FLAGS] + [side_flag]


def parse(argv: list[str]) -> dict:
    options = {"out": None, "smoke": False, "private": [], "seeds": None}
    position = 0
    while position < len(argv) and argv[position] in ("--out", "--smoke", "--private", "--seeds"):
        flag = argv[position]
        if flag == "--smoke":
            options["smoke"] = True
        else:
            if position + 1 >= len(argv):
                raise ValueError(f"{flag} needs a value")
            value = argv[position + 1]
            if flag == "--private":
                options["private"].append(value)
            elif flag == "--seeds":
                options["seeds"] = parse_seeds(value)
            else:
                options["out"] = value
            position += 1
        position += 1
    if position >= len(argv):
        raise ValueError("give the upstream launch script (or, with --smoke, the upstream checkout)")
    options["target"] = Path(argv[position])
    options["flags"] = argv[position + 1:]
    if options["seeds"] and options["smoke"] and "--seed" in options["flags"]:
        raise ValueError("--seeds sets each run's --seed; leave --seed out")
    config, _ = parse_otca_args(options["flags"])  # unknown --otca_* flags stop here, before any run
    if config.otca_log_dir != type(config)().otca_log_dir:
        raise ValueError("--otca_log_dir: each side logs into its own run folder; leave it out")
    return options


def parse_seeds(text: str) -> list[int]:
    """``--seeds 1,2,3``: distinct integers, at least two (one seed is the plain A/B)."""
    try:
        seeds = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ValueError(f"--seeds takes comma-separated integers, e.g. 1,2,3; got {text!r}") from None
    if len(seeds) < 2 or len(set(seeds)) != len(seeds):
        raise ValueError(f"--seeds needs at least two distinct seeds (an interval over seeds needs two), got {text!r}")
    return seeds


def run_side(command: list[str], cwd: Path, log: Path, env: dict | None = None) -> int:
    """One side, its output teed to ``log`` (kept even when the side fails)."""
    print(f"{PROG}: {' '.join(command)}  (in {cwd})", flush=True)
    with open(log, "w") as handle:
        process = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                   env=env)
        for line in process.stdout:
            sys.stdout.write(line)
            handle.write(line)
        return process.wait()


def smoke_command(upstream: Path, run_dir: Path, flags: list[str]) -> list[str]:
    return [sys.executable, "-m", "otca_patch.smoke", str(upstream.resolve()), str(run_dir), *flags]


def launch_command(launch: Path, run_dir: Path, flags: list[str]) -> list[str]:
    return [sys.executable, "-m", "otca_patch.launch.wrapper", str(launch), *flags, "--otca_log_dir", str(run_dir)]


def side_runs(out: Path, seeds: list[int] | None) -> list[tuple[str, str, Path, int | None]]:
    """(side, side flag, run folder, seed) of every run, seed by seed (both sides of a seed together)."""
    if not seeds:
        return [(name, flag, out / name, None) for name, flag in SIDES]
    return [(name, flag, out / name / f"seed{seed}", seed) for seed in seeds for name, flag in SIDES]


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(plain_text(__doc__))
        return 0 if argv else 2
    checkout = Path.cwd()
    try:
        options = parse(argv)
        out = Path(options["out"] or f"ab_runs/{time.strftime('%Y%m%d-%H%M%S')}").resolve()
        target, private = checked_target(options, checkout)
        runs = new_side_runs(out, options["seeds"])
    except ValueError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    warn_of_copies(options, target, checkout)
    out.mkdir(parents=True, exist_ok=True)
    code = run_sides(runs, options, target, private, checkout, out)
    return code if code != 0 else write_comparison(out)


def checked_target(options: dict, checkout: Path) -> tuple[Path, list]:
    """The launch script as each side runs it (relative to ``checkout`` when inside it), or with
    --smoke the upstream checkout; and the paths each side's working copy keeps private (none with
    --smoke). Raises ValueError saying what is wrong with the target; warns when the launch script
    sets no seed."""
    target = options["target"]
    if options["smoke"]:
        if not target.is_dir():
            raise ValueError(f"--smoke needs an upstream checkout folder, got {target}")
        return target, []
    if not target.is_file():
        raise ValueError(f"launch script {target} does not exist (run from the upstream checkout)")
    if target.is_absolute():
        target = target.relative_to(checkout) if target.is_relative_to(checkout) else target
    private = [*cwd_outputs(checkout, options["target"]), *output_dirs_of(options["target"]), *options["private"]]
    script = options["target"].read_text(errors="replace")
    if options["seeds"] and SEED_VARIABLE not in script:
        raise ValueError(f"--seeds: the launch script {target} does not read ${SEED_VARIABLE}; give its "
                         f"trainer --seed ${{{SEED_VARIABLE}:-42}} so each run gets its seed")
    if "--seed" not in script:
        print(f"{PROG}: warning: the launch script sets no --seed; the sides will not share their noise",
              file=sys.stderr)
    return target, private


def warn_of_copies(options: dict, target: Path, checkout: Path) -> None:
    """Once, before the sides run: a copy of the trainer that runs, left unused beside it
    (``hooks.copies``); the sides then do not say it again."""
    from ..hooks.copies import warn_unused_copies
    from ..hooks.explicit_targets import not_overridden
    from ..hooks.spec import load_specs

    config, rest = parse_otca_args(options["flags"])
    specs = load_specs()
    try:
        if options["smoke"]:
            from ..smoke.cli import detect_target, smoke_targets

            smokes = smoke_targets()
            named = next((rest[i + 1] for i, token in enumerate(rest[:-1]) if token == "--target"), None)
            running, where = [smokes[named or detect_target(target, smokes)][0]], target
        else:
            from ..launch.preflight import preflight

            running = list(preflight(target, checkout, None, not_overridden(specs, [], checkout)).values())
            where = checkout
    except (KeyError, ValueError, PatchError, SyntaxError):
        return  # the side that runs says what is wrong
    warn_unused_copies(PROG, where, running, specs, [str(Path(where) / path) for path in config.otca_target])
    os.environ[env_names.COPY_NOTE_SAID] = "1"


def new_side_runs(out: Path, seeds: list[int] | None) -> list[tuple[str, str, Path, int | None]]:
    """``side_runs``, refused (ValueError) when a run folder already holds a run."""
    runs = side_runs(out, seeds)
    for _, _, run_dir, _ in runs:
        if (run_dir / "run_log.jsonl").exists():
            raise ValueError(f"{run_dir} already holds a run; pass another --out")
    return runs


def run_sides(runs: list, options: dict, target: Path, private: list, checkout: Path, out: Path) -> int:
    """Every run of ``runs`` in turn, each in its run folder (a working copy of ``checkout`` for a
    launch), its output in ``out``/<side>[-seed<S>].out. Returns 0, or the exit status of the first
    run that fails (2 when its working copy cannot be made)."""
    for name, side_flag, run_dir, seed in runs:
        flags = side_argv(options["flags"], side_flag)
        env = None
        if options["smoke"]:
            command, cwd = smoke_command(target, run_dir, flags + ([] if seed is None else ["--seed", str(seed)])), out
        else:
            try:
                make_working_copy(checkout, run_dir, private)
            except ValueError as exc:
                print(f"{PROG}: error: {exc}", file=sys.stderr)
                return 2
            command, cwd = launch_command(target, run_dir, flags), run_dir
            env = None if seed is None else {**os.environ, SEED_VARIABLE: str(seed)}
        output = out / (f"{name}.out" if seed is None else f"{name}-seed{seed}.out")
        code = run_side(command, cwd, output, env)
        if code != 0:
            print(f"{PROG}: error: the {name} side{'' if seed is None else f' (seed {seed})'} failed "
                  f"(exit {code}); its output is in {output}", file=sys.stderr)
            return code
    return 0


def write_comparison(out: Path) -> int:
    """``otca-patch compare`` of the two sides into ``out``/compare; prints its headlines and the report's path."""
    from ..analysis.compare import compare, headlines  # here: numpy and the plots, which --help does not need
    from ..analysis.logs import LogError

    try:
        report = compare([out / name for name, _ in SIDES], out / "compare", labels=[name for name, _ in SIDES])
    except LogError as exc:
        print(f"{PROG}: error: comparing the two sides: {exc}", file=sys.stderr)
        return 2
    for line in headlines(report):
        print(line)
    print(f"{PROG}: report: {report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
