"""Run FlowGRPO's real ``scripts/train_sd3.py`` ``main()`` on the CPU with a tiny SD3 it builds
(the family's smoke base, ``flowgrpo.py``, does the run)."""
from __future__ import annotations

from functools import partial
from pathlib import Path

from . import flowgrpo
# the SD3 smoke's names, as other modules import them from here
from .flowgrpo import PROMPTS, UPSTREAM_EXTRA, Sizes, TrainingProbe, config_overrides, write_config  # noqa: F401
from ..files import atomic_write_text as _write_once  # noqa: F401
from .tiny_sd3 import build_tiny_sd3

UPSTREAM_FILE = "scripts/train_sd3.py"
TRAINER = flowgrpo.FlowTrainer(UPSTREAM_FILE, "flowgrpo_train_sd3", build_tiny_sd3)


def tiny_pipeline(folder: Path) -> Path:
    return flowgrpo.tiny_model(folder, build_tiny_sd3)


run = partial(flowgrpo.run, TRAINER)
