"""``otca-patch compare RUN [RUN ...]``: report.md and PNG plots from two or more run folders (one run
alone: its pictures, as wandb would show them, from its run log).

Each RUN is a folder holding the layer's run_log.jsonl (or, for a run without the layer,
upstream's reward.txt), or one of those files, or a folder of such folders (several seeds of one
side, as `otca-patch ab --seeds` writes). The first RUN is the reference: every other one is
compared with it, per objective and on the balanced score, as a difference with a 95% interval and
a verdict (better / worse / no detectable difference / negligible / not decided; see the report for
the method).
When the runs kept samples (the layer keeps rank 0's first and latest step's), the report opens with
samples.png: one row per run, its samples at the first and the last step.
All runs must log the same objectives; --objectives compares a common subset instead. A run still
in progress can be compared: its partial last line and a step not every rank has logged yet are
left out, with a warning.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..help_text import PlainDescriptionFormatter
from .verdict import DEFAULT_THRESHOLD


def whole_steps(text: str) -> int:
    """argparse type of --window / --cycle: a whole number of steps >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number of steps >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of steps >= 1, got {text!r}")
    return value


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="otca-patch compare", description=__doc__,
                                     formatter_class=PlainDescriptionFormatter)
    parser.add_argument("runs", nargs="+", type=Path, help="run folders (or run_log.jsonl / reward.txt files)")
    parser.add_argument("--out", type=Path, default=Path("compare"), help="report folder (default ./compare)")
    parser.add_argument("--labels", help="comma-separated names, one per run (default: folder names)")
    parser.add_argument("--objectives", help="comma-separated objectives to compare (default: all; runs must agree)")
    parser.add_argument("--window", type=whole_steps, help="steps of the final score and steps-to-reach, and the curves' "
                        "smoothing (default: whole prompt cycles, about the cube root of the run's length)")
    parser.add_argument("--cycle", type=whole_steps, help="the prompt cycle in steps (default: detected from the "
                        "reference's curve)")
    parser.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD,
                        help="practical threshold of a difference, in units of each objective's sigma (the balanced "
                             f"score's unit): a difference whose 95%% interval lies within it is negligible "
                             f"(default {DEFAULT_THRESHOLD})")
    args = parser.parse_args(argv)
    from .compare import compare, headlines  # here: numpy, scipy and the plots, which --help does not need
    from .logs import LogError

    try:
        report = compare(args.runs, args.out, labels=args.labels.split(",") if args.labels else None,
                         objectives=tuple(args.objectives.split(",")) if args.objectives else None, window=args.window,
                         cycle=args.cycle, threshold=args.threshold)
    except LogError as exc:
        print(f"otca-patch compare: error: {exc}", file=sys.stderr)
        return 2
    for line in headlines(report):
        print(line)
    print(f"otca-patch compare: wrote {report} and its figures in {report.parent}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
