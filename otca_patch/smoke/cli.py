"""Command line of ``scripts/smoke_upstream.py``."""
from __future__ import annotations

import argparse
import os
import sys
from dataclasses import fields
from pathlib import Path

from ..config import parse_otca_args
from ..hooks.errors import PatchError
from . import dancegrpo_flux


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="smoke_upstream.py", description=__doc__)
    parser.add_argument("upstream_dir", type=Path, help="DanceGRPO checkout")
    parser.add_argument("out_dir", type=Path, help="where upstream's outputs, the run log and smoke.json go")
    parser.add_argument("--record_terms", action="store_true", help="also save per-term log-probs (tests)")
    for f in fields(dancegrpo_flux.SmokeSizes):
        parser.add_argument(f"--{f.name}", type=type(f.default), default=f.default)
    return parser


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        config, rest = parse_otca_args(argv)
    except ValueError as exc:
        print(f"smoke: error: {exc}", file=sys.stderr)
        return 2
    args = build_parser().parse_args(rest)
    out_dir = args.out_dir.resolve()
    reward_root = out_dir / "tiny_rewards"
    if config.active:
        config = _with_smoke_defaults(config, argv, reward_root)
    sizes = dancegrpo_flux.SmokeSizes(**{f.name: getattr(args, f.name) for f in fields(dancegrpo_flux.SmokeSizes)})
    try:
        dancegrpo_flux.run(args.upstream_dir, out_dir, config, sizes, reward_root, record_terms=args.record_terms)
    except (PatchError, ValueError) as exc:
        print(f"smoke: error: {exc}", file=sys.stderr)
        return 2
    return 0


def _with_smoke_defaults(config, argv, reward_root: Path):
    """--otca alone: upstream's reward plus a tiny registry CLIP-T; log beside the outputs."""
    from dataclasses import replace

    from ..rewards import tiny

    changes = {}
    if not any(a.split("=")[0] == "--otca_rewards" for a in argv):
        changes["otca_rewards"] = ("upstream", "clip_t")
    if not any(a.split("=")[0] == "--otca_log_dir" for a in argv):
        changes["otca_log_dir"] = str(reward_root.parent)
    config = replace(config, **changes)
    registry = [name for name in config.otca_rewards if name != "upstream"]
    if registry:
        if registry != ["clip_t"]:
            raise ValueError("the smoke run builds a tiny checkpoint for clip_t only; give other rewards "
                             "with --otca_reward_ckpt / --otca_reward_opt")
        config = replace(config, otca_reward_ckpt={"clip_t": str(tiny.build_clip(reward_root)), **config.otca_reward_ckpt},
                         otca_reward_opt={"clip_t": {"model_name": tiny.TINY_CLIP_ARCH}, **config.otca_reward_opt})
    return config
