"""Command line of ``scripts/smoke_upstream.py``: one CPU smoke run of an upstream target."""
from __future__ import annotations

import argparse
import importlib
import sys
from dataclasses import fields, replace
from pathlib import Path

from ..config import parse_otca_args
from ..hooks.errors import PatchError

#: smoke target -> module with UPSTREAM_FILE, Sizes (dataclass of size flags), DEFAULT_REWARDS and
#: run(upstream_dir, out_dir, config, sizes, reward_root, record_terms) -> dict
TARGETS = {
    "dancegrpo-flux": "otca_patch.smoke.dancegrpo_flux",
    "dancegrpo-flux-lora": "otca_patch.smoke.dancegrpo_flux_lora",
    "dancegrpo-hunyuan": "otca_patch.smoke.dancegrpo_hunyuan",
    "dancegrpo-qwenimage": "otca_patch.smoke.dancegrpo_qwenimage",
    "dancegrpo-qwenimage-edit": "otca_patch.smoke.dancegrpo_qwenimage_edit",
    "dancegrpo-sd": "otca_patch.smoke.dancegrpo_sd",
    "dancegrpo-wan": "otca_patch.smoke.dancegrpo_wan",
    "flowgrpo-sd3": "otca_patch.smoke.flowgrpo_sd3",
}


def _module(name: str):
    return importlib.import_module(TARGETS[name])


def detect_target(upstream_dir: Path) -> str:
    """The first registered target whose upstream file exists in ``upstream_dir``."""
    for name in TARGETS:
        if (upstream_dir / _module(name).UPSTREAM_FILE).is_file():
            return name
    raise ValueError(f"{upstream_dir} holds none of the smoke targets' files "
                     f"({', '.join(_module(n).UPSTREAM_FILE for n in TARGETS)}); pass an upstream checkout")


def build_parser(sizes_type) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="smoke_upstream.py", description=sys.modules["__main__"].__doc__)
    parser.add_argument("upstream_dir", type=Path, help="upstream checkout, e.g. upstream/DanceGRPO")
    parser.add_argument("out_dir", type=Path, help="where upstream's outputs, the run log and smoke.json go")
    parser.add_argument("--target", choices=sorted(TARGETS), help="default: detected from the checkout")
    parser.add_argument("--record_terms", action="store_true", help="also save per-term log-probs (tests)")
    for f in fields(sizes_type):
        parser.add_argument(f"--{f.name}", type=type(f.default), default=f.default)
    return parser


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        config, rest = parse_otca_args(argv)
        peek = argparse.ArgumentParser(add_help=False)
        peek.add_argument("upstream_dir", type=Path, nargs="?")
        peek.add_argument("--target", choices=sorted(TARGETS))
        known, _ = peek.parse_known_args(rest)
        if known.upstream_dir is None:
            build_parser(_module("dancegrpo-flux").Sizes).parse_args(rest)  # prints usage
        target = known.target or detect_target(known.upstream_dir)
    except ValueError as exc:
        print(f"smoke: error: {exc}", file=sys.stderr)
        return 2
    module = _module(target)
    args = build_parser(module.Sizes).parse_args(rest)
    out_dir = args.out_dir.resolve()
    reward_root = out_dir / "tiny_rewards"
    try:
        if config.active:
            config = with_smoke_defaults(config, argv, reward_root, module.DEFAULT_REWARDS, module.__name__)
        sizes = module.Sizes(**{f.name: getattr(args, f.name) for f in fields(module.Sizes)})
        module.run(args.upstream_dir.resolve(), out_dir, config, sizes, reward_root, record_terms=args.record_terms)
    except (PatchError, ValueError) as exc:
        print(f"smoke: error: {exc}", file=sys.stderr)
        return 2
    return 0


def with_smoke_defaults(config, argv, reward_root: Path, default_rewards: tuple, default_rewards_module: str = ""):
    """--otca alone: the target's default objectives (upstream's reward plus a tiny registry
    CLIP-T); the run log beside the outputs; tiny checkpoints for registry rewards."""
    from ..rewards import tiny

    changes = {}
    if not any(a.split("=")[0] == "--otca_rewards" for a in argv):
        changes["otca_rewards"] = default_rewards
    if not any(a.split("=")[0] == "--otca_log_dir" for a in argv):
        changes["otca_log_dir"] = str(reward_root.parent)
    config = replace(config, **changes)
    # a module's is_upstream_objective names the rewards its upstream trainer computes itself
    is_upstream = getattr(sys.modules.get(default_rewards_module or ""), "is_upstream_objective",
                          lambda name: name == "upstream")
    registry = {name.split(".")[0] for name in config.otca_rewards if not is_upstream(name)} - set(config.otca_reward_ckpt)
    if registry - {"clip_t"}:
        raise ValueError(f"the smoke run builds a tiny checkpoint for clip_t only; give "
                         f"{', '.join(sorted(registry - {'clip_t'}))} with --otca_reward_ckpt / --otca_reward_opt")
    if "clip_t" in registry:
        config = replace(config, otca_reward_ckpt={"clip_t": str(tiny.build_clip(reward_root)), **config.otca_reward_ckpt},
                         otca_reward_opt={"clip_t": {"model_name": tiny.TINY_CLIP_ARCH}, **config.otca_reward_opt})
    return config
