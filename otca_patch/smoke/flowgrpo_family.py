"""The former base of the newer trainers' smokes, now ``flowgrpo.py`` (one base for every FlowGRPO
trainer): its names stay importable from here."""
from .flowgrpo import (ACCELERATE_DDP, PROMPTS, UPSTREAM_EXTRA, FlowSizes, FlowTrainer, FsdpProbe,  # noqa: F401
                       TrainingProbe, common_overrides, tiny_model, write_prompt_lists)
