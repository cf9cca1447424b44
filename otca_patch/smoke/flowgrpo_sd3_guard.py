"""Run FlowGRPO's real ``scripts/train_sd3_GRPO_Guard.py`` ``main()`` on the CPU with a tiny SD3,
with upstream's GRPO-Guard ratio on (``config.rationorm``, as its ``config/grpo_guard.py`` sets)
(the family's smoke base, ``flowgrpo.py``, does the run)."""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from . import flowgrpo
from .tiny_sd3 import build_tiny_sd3


@dataclass
class Sizes(flowgrpo.Sizes):
    rationorm: int = 1  # 0: the plain ratio (upstream's switch; an int, as the CLI's flags are typed)


def overrides(sizes: Sizes) -> dict:
    # config/grpo_guard.py's keys that config/base.py lacks
    return {"rationorm": bool(sizes.rationorm), "run_project": "otca-smoke"}


TRAINER = flowgrpo.FlowTrainer("scripts/train_sd3_GRPO_Guard.py", "flowgrpo_train_sd3_guard", build_tiny_sd3,
                               overrides=overrides, starts_wandb=False)
run = partial(flowgrpo.run, TRAINER)
