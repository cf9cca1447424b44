"""Reward models: the objectives OTCA balances, loaded from local checkpoints.

``available()`` lists the names, ``load(name, checkpoint=PATH, device="cpu")`` builds one,
``RewardSet([...]).score(images, prompts)`` gives ``[B, K]`` plus the column names.
"""
from .base import RewardModel
from .checkpoints import CheckpointError
from .registry import available, load, register
from .reward_set import RewardScores, RewardSet

__all__ = ["CheckpointError", "RewardModel", "RewardScores", "RewardSet", "available", "load", "register"]
