#!/usr/bin/env python
"""``check_run_log_credit.py RUN_DIR [--processes N]``: does the ``--otca`` run log in RUN_DIR hold
the credit the spec gives? (``otca_patch.rehearsal.credit_check``: every logged step's advantages and
step weights of every process against the credit engine recomputed from the logged rewards, TCD
progress and group ids.) Used by check_upstream_env.sh in an upstream environment, where the package
is installed (run it from outside the repository), and by gpu_check.sh."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from otca_patch.rehearsal.credit_check import check


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--processes", type=int, default=1)
    args = parser.parse_args(argv)
    problems = check(args.run_dir, args.processes)
    for problem in problems:
        print(f"credit check: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
