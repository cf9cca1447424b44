"""``otca-patch demo``: OTCA against Multi-GRPO (per-reward normalisation, the fair vanilla) on a tiny
FLUX-architecture model over paired seeds, on the CPU, in minutes; writes a report folder
(``runs/demo/`` by default)."""
from __future__ import annotations

import argparse
import shlex
import sys
import time

from otca_patch.flags import add_flags, from_namespace
from otca_patch.help_text import PlainHelpFormatter

from .config import DemoConfig


def build_parser(prog: str = "otca-patch demo") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog, description=__doc__.split("\n\n")[0], formatter_class=PlainHelpFormatter,
        epilog="Writes report.md, metrics.json, samples.png, reward_curves.png, step_weights.png and mixture.png "
               "into --out, and caches the base model there (reused by the next run with the same base-model flags). "
               "Runs are paired by seed; every objective is reported as the fraction of the base-to-oracle gap closed.",
    )
    add_flags(parser, DemoConfig)
    return parser


def fail(prog: str, message: str, code: int = 2) -> int:
    """One clear line on stderr (no usage dump) and the exit code."""
    print(f"{prog}: error: {message}\n(see {prog} --help)" if code == 2 else f"{prog}: error: {message}", file=sys.stderr)
    return code


def parse(build, argv):
    """``(parser, argv, args, None)``, or ``args = None`` and argparse's own exit code (help, or a value
    of the wrong type); ``argv = None`` reads ``sys.argv``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build()
    try:
        return parser, argv, parser.parse_args(argv), None
    except SystemExit as exc:
        return parser, argv, None, int(exc.code or 0)


def main(argv=None) -> int:
    parser, argv, args, code = parse(build_parser, argv)
    if args is None:
        return code
    try:
        config = from_namespace(DemoConfig, args)
        if config.regime == "both":
            raise ValueError("--regime: both is for otca-patch ablate; the demo runs one regime "
                             "(conflicting or agreeing)")
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
    print(_summary(result))
    print(f"wrote {', '.join(str(p) for p in paths)} in {time.perf_counter() - started:.0f} s "
          f"(CPU: base model {result['seconds']['base_model_cpu']:.0f} s, GRPO {result['seconds']['grpo_cpu']:.0f} s)")
    return 0


def _summary(result: dict) -> str:
    from .report import comparison_table, results_table

    lines = ["base   " + ", ".join(f"{k} {v:.4f}" for k, v in result["base"].items()),
             "oracle " + ", ".join(f"{k} {v:.4f}" for k, v in result["oracle"].items()), "",
             "gap closed, mean [95% interval] over seeds " + ", ".join(map(str, result["seeds"])) + ":",
             results_table(result)]
    if result["comparisons"]:
        lines += ["", comparison_table(result), ""] + list(result["verdicts"].values())
    return "\n".join(lines)
