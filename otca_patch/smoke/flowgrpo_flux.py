"""Run FlowGRPO's real ``scripts/train_flux.py`` ``main()`` (9745241) on the CPU with a tiny FLUX
(``tiny_flux``: diffusers' ``FluxPipeline`` layout, random weights) under ``accelerate launch``
(gloo). Upstream's FLUX loop reads ``transformer.module`` (DDP's wrapper), so it runs on two or
more processes, as upstream launches it. Shared mechanics: ``flowgrpo``."""
from __future__ import annotations

from dataclasses import dataclass

from .flowgrpo import ACCELERATE_DDP, FlowSizes, FlowTrainer
from .tiny_flux import build_tiny_flux


@dataclass
class Sizes(FlowSizes):
    """FLUX trains T = int(S * timestep_fraction) steps."""


TRAINER = FlowTrainer("scripts/train_flux.py", "train_flux", build_tiny_flux, "OTCA_TINY_FLUX_DIR", **ACCELERATE_DDP)
run = TRAINER.run
