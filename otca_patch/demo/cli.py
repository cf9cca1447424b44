"""``otca-patch demo``: vanilla DanceGRPO credit (``sum``) against OTCA on a tiny FLUX-architecture
model, on the CPU, in minutes; writes a report folder (``runs/demo/`` by default)."""
from __future__ import annotations

import argparse
import shlex
import sys
import time

from .config import DemoConfig, add_dataclass_flags, dataclass_from_args


def build_parser(prog: str = "otca-patch demo") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog, description=__doc__.split("\n\n")[0],
        epilog="Writes report.md, metrics.json, reward_curves.png, step_weights.png and mixture.png into --out, "
               "and caches the base model there (reused by the next run with the same base-model flags).",
    )
    add_dataclass_flags(parser, DemoConfig)
    return parser


def fail(prog: str, message: str, code: int = 2) -> int:
    """One clear line on stderr (no usage dump) and the exit code."""
    print(f"{prog}: error: {message}\n(see {prog} --help)" if code == 2 else f"{prog}: error: {message}", file=sys.stderr)
    return code


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse's exit (help, or a value of the wrong type), as a return code
        return int(exc.code or 0)
    try:
        config = dataclass_from_args(DemoConfig, args)
    except ValueError as exc:
        return fail(parser.prog, str(exc))
    started = time.perf_counter()
    from .experiment import run_experiment  # the heavy imports (diffusers) only once the flags are good
    from .report import write_report

    try:
        result = run_experiment(config, log=lambda msg: print(msg, file=sys.stderr))
        paths = write_report(result, config.out, command=" ".join(["otca-patch demo"] + [shlex.quote(a) for a in argv]))
    except (ValueError, OSError) as exc:
        return fail(parser.prog, str(exc), code=1)
    print(f"wrote {', '.join(str(p) for p in paths)} in {time.perf_counter() - started:.0f} s")
    print(_summary(result))
    return 0


def _summary(result: dict) -> str:
    lines = []
    for mode, data in result["modes"].items():
        rewards = ", ".join(f"{k} {v:.3f}" for k, v in data["final_rewards"].items())
        lines.append(f"  {mode:<10} balanced {data['final_balanced']:+.3f}  ({rewards})")
    base = ", ".join(f"{k} {v:.3f}" for k, v in result["base"]["rewards"].items())
    return "\n".join([f"  {'base':<10} balanced +0.000  ({base})"] + lines)
