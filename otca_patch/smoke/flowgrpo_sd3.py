"""Run FlowGRPO's real ``scripts/train_sd3.py`` ``main()`` on the CPU with a tiny SD3 it builds
(the family's smoke base, ``flowgrpo.py``, does the run)."""
from __future__ import annotations

from functools import partial
from pathlib import Path

from . import flowgrpo
from .flowgrpo import Sizes, TrainingProbe, UPSTREAM_EXTRA, write_config  # noqa: F401 (the SD3 smoke's names)
from .tiny_sd3 import build_tiny_sd3

UPSTREAM_FILE = "scripts/train_sd3.py"
TRAINER = flowgrpo.FlowTrainer(UPSTREAM_FILE, "flowgrpo_train_sd3", build_tiny_sd3)


def tiny_pipeline(folder: Path) -> Path:
    return flowgrpo.tiny_model(folder, build_tiny_sd3)


run = partial(flowgrpo.run, TRAINER)
