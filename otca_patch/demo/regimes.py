"""The demo's task regimes. Both use the same prompts, model, sampler and GRPO protocol, and both
have a known joint optimum: the prompt's clean render scores exactly 1 on every objective.

- ``conflicting`` (the default): objectives ``palette``, ``shape``, ``edges``; the base model is
  pre-trained on renders with colour jitter, blur and misplacement. ``edges`` rewards edge energy
  that matches the clean render's, so a blurred but well-placed shape keeps ``shape`` and loses
  ``edges``, an over-large sharp one the reverse: the objectives disagree on many samples.
- ``agreeing``: objectives ``palette``, ``shape``, ``fidelity`` (closeness of every pixel to the
  clean render); the base model is pre-trained on colour jitter and misplacement only (no blur).
  Every corruption lowers all three objectives together, so a sample that is better on one is
  mostly better on the others, as the paper's rewards (HPS, CLIP score, aesthetic) mostly agree.

Each regime's base model is cached under its own key (its corruptions are part of the key).
"""
from __future__ import annotations

from dataclasses import dataclass

from .data import CORRUPTIONS


@dataclass(frozen=True)
class Regime:
    name: str
    objectives: tuple  # names of pixel_rewards.OBJECTIVE_FUNCTIONS, in reward-column order
    corruptions: tuple  # the pre-training mixture's corruptions (a subset of data.CORRUPTIONS)


REGIMES = {
    "conflicting": Regime("conflicting", ("palette", "shape", "edges"), CORRUPTIONS),
    "agreeing": Regime("agreeing", ("palette", "shape", "fidelity"), ("colour_jitter", "misplacement")),
}
DEFAULT_REGIME = "conflicting"
#: ``--regime`` values: one regime, or ``both`` (``otca-patch ablate`` only).
REGIME_CHOICES = tuple(REGIMES) + ("both",)


def regime_names(choice: str) -> list[str]:
    """``"both"`` -> every regime; a regime's name -> that one."""
    if choice == "both":
        return list(REGIMES)
    if choice not in REGIMES:
        raise ValueError(f"--regime: unknown regime {choice!r} (valid: {', '.join(REGIME_CHOICES)})")
    return [choice]
