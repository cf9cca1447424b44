#!/usr/bin/env python
"""Run the real upstream trainer step on the CPU with tiny models, with or without the layer.

    scripts/smoke_upstream.py UPSTREAM_DIR OUT_DIR [--target NAME] [--steps N] [--seed S] [--otca --otca_* ...]

UPSTREAM_DIR is a DanceGRPO or FlowGRPO checkout (e.g. upstream/DanceGRPO); --target picks
dancegrpo-flux (the default for DanceGRPO), dancegrpo-flux-lora, dancegrpo-sd, dancegrpo-qwenimage,
dancegrpo-qwenimage-edit, dancegrpo-hunyuan, dancegrpo-wan or flowgrpo-sd3.
Without --otca the upstream file runs unpatched; with --otca alone the objectives are upstream's
reward and a tiny CLIP-T from the reward registry. Upstream's own outputs (images/, reward.txt), the run log and smoke.json
({"otca": bool, "steps": [{"loss": x, "grad_norm": y}, ...]}) land in OUT_DIR. Works under
`torchrun --nproc_per_node 2` too (a gloo world on the CPU).
"""
import sys

from otca_patch.smoke.cli import main

if __name__ == "__main__":
    sys.exit(main())
