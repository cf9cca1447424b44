"""Run FlowGRPO's real ``scripts/train_sd3.py`` ``main()`` on the CPU with a tiny SD3 it builds
(the FlowGRPO smoke base, ``flowgrpo.py``, does the run)."""
from __future__ import annotations

from pathlib import Path

from . import flowgrpo
# the SD3 smoke's names, as other modules import them from here
from .flowgrpo import PROMPTS, UPSTREAM_EXTRA, Sizes, TrainingProbe, config_overrides, write_config  # noqa: F401
from ..files import atomic_write_text as _write_once  # noqa: F401
from .tiny_sd3 import build_tiny_sd3

UPSTREAM_FILE = "scripts/train_sd3.py"
#: what the SD3 trainers' smokes share: the tiny SD3 (one folder for all three) and SD3's config keys
SD3 = {"build_model": build_tiny_sd3, "model_env": "OTCA_TINY_SD3_DIR", "model_folder": "sd3",
       "base_overrides": config_overrides}
TRAINER = flowgrpo.FlowTrainer(UPSTREAM_FILE, "train_sd3", **SD3)


def tiny_pipeline(folder: Path) -> Path:
    return flowgrpo.tiny_model(folder, build_tiny_sd3)


run = TRAINER.run
