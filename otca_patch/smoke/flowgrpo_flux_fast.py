"""Run FlowGRPO's real ``scripts/train_flux_fast.py`` ``main()`` (9745241) on the CPU with the tiny
FLUX of ``flowgrpo_flux``, under ``accelerate launch`` on two processes (gloo). The window: 2 SDE
steps of 4, drawn in steps 0 .. 3, with upstream's own ``sde`` step."""
from __future__ import annotations

from dataclasses import dataclass

from .flowgrpo import ACCELERATE_DDP, FlowSizes, FlowTrainer
from .tiny_flux import build_tiny_flux


@dataclass
class Sizes(FlowSizes):
    """The SDE window: ``sde_window_size`` steps starting in ``0 .. sde_window_end - size``."""

    sde_window_size: int = 2
    sde_window_end: int = 4


def overrides(sizes: Sizes) -> dict:
    return {"sample.sde_window_size": sizes.sde_window_size, "sample.sde_window_range": (0, sizes.sde_window_end),
            "sample.sde_type": "sde"}


TRAINER = FlowTrainer("scripts/train_flux_fast.py", "train_flux_fast", build_tiny_flux, "OTCA_TINY_FLUX_DIR",
                      overrides=overrides, **ACCELERATE_DDP)
run = TRAINER.run
