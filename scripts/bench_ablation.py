#!/usr/bin/env python
"""Script form of ``otca-patch ablate``: every credit mode over several seeds on the demo task, in the
layout of the paper's Table 4. Same flags (``--help``); e.g. a quick look:

    .venv/bin/python scripts/bench_ablation.py --seeds 0,1 --modes multi_grpo,tcd,tcd_batch --grpo_steps 30
"""
import sys

from otca_patch.demo.ablate import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
