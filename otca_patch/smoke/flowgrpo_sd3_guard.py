"""Run FlowGRPO's real ``scripts/train_sd3_GRPO_Guard.py`` ``main()`` on the CPU with a tiny SD3,
with upstream's GRPO-Guard ratio on (``config.rationorm``, as its ``config/grpo_guard.py`` sets)
(the FlowGRPO smoke base, ``flowgrpo.py``, does the run)."""
from __future__ import annotations

from dataclasses import dataclass

from . import flowgrpo
from .flowgrpo_sd3 import SD3


@dataclass
class Sizes(flowgrpo.Sizes):
    rationorm: int = 1  # 0: the plain ratio (upstream's switch; an int, as the CLI's flags are typed)


def overrides(sizes: Sizes) -> dict:
    # config/grpo_guard.py's keys that config/base.py lacks
    return {"rationorm": bool(sizes.rationorm), "run_project": "otca-smoke"}


TRAINER = flowgrpo.FlowTrainer("scripts/train_sd3_GRPO_Guard.py", "train_sd3_guard", **SD3,
                               overrides=overrides, starts_wandb=False)
run = TRAINER.run
