"""What every smoke run's sizes share, and the prompt lists they draw from (one place for both)."""
from __future__ import annotations

from dataclasses import dataclass

#: captions of the image smoke runs (the tiny text encoders map each to fixed random embeddings)
IMAGE_PROMPTS = ("a red circle on a white background", "a blue square in the snow", "a green triangle at night",
                 "a yellow star over the sea")
#: captions of the video smoke runs
VIDEO_PROMPTS = ("a red ball rolling on grass", "a blue car driving in the snow", "a green kite in the wind",
                 "a yellow boat on the sea")


@dataclass
class SmokeSizes:
    """Every smoke run: training steps (or epochs), the learning rate, the seed of weights and noise.
    Each field is a flag of ``otca-patch smoke`` (``flags.add_flags``)."""

    steps: int = 2
    learning_rate: float = 1e-4
    seed: int = 0


@dataclass
class RolloutSizes(SmokeSizes):
    """DanceGRPO-family samplers (DanceGRPO's trainers, MixGRPO): small enough for seconds per step on 2
    CPU cores."""

    sampling_steps: int = 6
    num_generations: int = 4
    image_size: int = 32  # pixels; latents are image_size / 8
    timestep_fraction: float = 0.6
    eta: float = 0.3
    shift: float = 3.0
