"""What each registry reward needs installed, checked before a run starts, without importing it.

A trainer's own environment may lack a reward's library (DanceGRPO's has no open_clip, FlowGRPO's
neither open_clip nor hpsv2). A run asking for such a reward stops before the trainer starts with
one line naming the package and what installs it, instead of a traceback mid-rollout.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping, Optional, Sequence

from .clip_libs import REWARDS_EXTRA, MissingPackage, bpe_vocab_file, installed, open_clip_name


def _open_clip_file(model: str, path: Optional[str]) -> Optional[str]:
    """An open_clip checkpoint file needs open_clip or hpsv2's copy; a transformers folder does not."""
    if path is None or Path(path).expanduser().is_dir() or open_clip_name() is not None:
        return None
    return (f"reward model {model!r}: {path} is an open_clip checkpoint file, which needs open_clip (package "
            f"open_clip_torch) or hpsv2, and neither is installed: {REWARDS_EXTRA} "
            f"(or give a transformers CLIP folder, which loads through transformers)")


def missing_package(name: str, checkpoint: Optional[str] = None, options: Optional[Mapping] = None,
                    env: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """One line saying what reward ``name`` lacks in this environment, or None."""
    env = os.environ if env is None else env
    options = options or {}
    if name == "clip_t":
        return _open_clip_file(name, checkpoint or env.get("OTCA_CKPT_CLIP_T"))
    if name == "aesthetic":
        return _open_clip_file(name, options.get("clip_checkpoint") or env.get("OTCA_CKPT_AESTHETIC_CLIP"))
    if name == "hpsv2":
        if not installed("hpsv2"):
            return f"reward model 'hpsv2' needs the hpsv2 package, which is not installed: {REWARDS_EXTRA}"
        if bpe_vocab_file() is None:
            return (f"reward model 'hpsv2': hpsv2's tokenizer vocabulary is missing (its wheel omits it) and no "
                    f"open_clip_torch ships a copy: {REWARDS_EXTRA}")
    if name == "imagereward" and not (installed("ImageReward") and installed("fairscale")):
        from .imagereward import INSTALL_HINT

        return f"reward model 'imagereward' needs the ImageReward package: {INSTALL_HINT}"
    if name == "videoalign":
        lacking = [module for module in ("trl", "datasets") if not installed(module)]
        if lacking:
            return (f"reward model 'videoalign' needs {' and '.join(lacking)}, which DanceGRPO's vendored "
                    f"VideoAlign imports: pip install 'otca-patch[videoalign]'")
    return None


def check_reward_packages(names: Sequence[str], checkpoints: Mapping[str, str],
                          options: Mapping[str, Mapping]) -> None:
    """``MissingPackage`` (one line per reward) when a registry reward in ``names`` cannot load here."""
    problems = [missing_package(name, checkpoints.get(name), options.get(name)) for name in names]
    problems = [line for line in problems if line]
    if problems:
        raise MissingPackage("\n".join(problems))
