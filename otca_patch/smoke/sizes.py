"""The sizes every smoke target shares, each a flag of ``otca-patch smoke``; without torch, so that
``otca-patch smoke --help`` lists them cheaply (a target's own sizes: ``--target NAME --help``)."""
from __future__ import annotations

from dataclasses import dataclass

from ..flags import flag


@dataclass
class SmokeSizes:
    """Every smoke run: training steps (or epochs), the learning rate, the seed of weights and noise."""

    steps: int = flag("training steps (epochs for DanceGRPO's SD trainer)", 2)
    learning_rate: float = flag("the optimizer's learning rate", 1e-4)
    seed: int = flag("seed of the tiny models' weights, the prompts and the noise", 0)


def size_help(name: str) -> str:
    """The help of a target's own size ``name`` (a field without one): most are upstream's settings."""
    return f"the tiny run's {name}, as upstream's setting of that name"
