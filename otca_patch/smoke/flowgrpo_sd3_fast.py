"""Run FlowGRPO's real ``scripts/train_sd3_fast.py`` ``main()`` on the CPU with a tiny SD3: an SDE
window of ``sde_window_size`` steps at a random start in ``[0, sde_window_end)`` of ``num_steps``
(the FlowGRPO smoke base, ``flowgrpo.py``, does the run)."""
from __future__ import annotations

from dataclasses import dataclass

from . import flowgrpo
from .flowgrpo_sd3 import SD3


@dataclass
class Sizes(flowgrpo.Sizes):
    num_steps: int = 6
    sde_window_size: int = 2  # trains T = sde_window_size columns (0: num_steps - 1, no window)
    sde_window_end: int = 4  # the window starts in 0 .. sde_window_end - sde_window_size
    sde_type: str = "cps"  # upstream's Fast configs' step rule


def overrides(sizes: Sizes) -> dict:
    return {"sample.sde_window_size": sizes.sde_window_size, "sample.sde_window_range": [0, sizes.sde_window_end],
            "sample.sde_type": sizes.sde_type}


TRAINER = flowgrpo.FlowTrainer("scripts/train_sd3_fast.py", "train_sd3_fast", **SD3,
                               overrides=overrides)
run = TRAINER.run
