"""What each registry reward needs installed, checked before a run starts, without importing it.

A trainer's own environment may lack a reward's library (DanceGRPO's has no open_clip, FlowGRPO's
neither open_clip nor hpsv2). A run asking for such a reward stops before the trainer starts with
one line naming the package and what installs it, instead of a traceback mid-rollout. Each reward
says what it needs (its class's ``missing_packages``), from the paths its checkpoint slots name.
"""
from __future__ import annotations

import os
from typing import Mapping, Optional, Sequence

from .clip_libs import MissingPackage
from .registry import available, named_paths, reward_class


def missing_package(name: str, checkpoint: Optional[str] = None, options: Optional[Mapping] = None,
                    env: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """One line saying what reward ``name`` lacks in this environment, or None (also for a name that
    is not a registry reward, such as upstream's own)."""
    if name not in available():
        return None
    check = getattr(reward_class(name), "missing_packages", None)
    if check is None:  # a factory registered at run time says nothing
        return None
    return check(named_paths(name, checkpoint, options, os.environ if env is None else env))


def check_reward_packages(names: Sequence[str], checkpoints: Mapping[str, str],
                          options: Mapping[str, Mapping]) -> None:
    """``MissingPackage`` (one line per reward) when a registry reward in ``names`` cannot load here."""
    problems = [missing_package(name, checkpoints.get(name), options.get(name)) for name in names]
    problems = [line for line in problems if line]
    if problems:
        raise MissingPackage("\n".join(problems))
