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
- ``hacking``: objectives ``palette``, ``shape``, ``vividness`` (``pixel_rewards.vividness``: the
  mean of the image's colour strength and colour contrast, each relative to the clean render's);
  the base model is pre-trained on colour jitter, misplacement and fading (washed-out colours). Up
  to the clean render the three rise together; past it ``vividness`` keeps rising along two
  shortcuts that raise one reward at the others' cost, as HPS and Aesthetic favour over-saturated,
  high-contrast images: colours pushed towards the corners of the RGB cube (off the prompt's
  palette, and blurring the object/background distinction ``shape`` reads), and an object grown or
  shrunk towards half the image (off the size the prompt names, which ``shape`` reads directly).

  *Why contrast was added* (second version of the regime, 2026-12-01 23:35 UTC): with colour
  strength alone, the regime failed its own condition. At 40 iterations ``sum_raw`` closed palette's
  gap by -0.039 [-0.175, +0.098] and shape's by -0.018 [-0.105, +0.069] (seeds 0, 1, 2, 4): the first
  part of the shortcut (un-fading) raises palette and shape with vividness, so only the later,
  over-saturating part costs them, and within 40 iterations that cost was not separated from 0.
  The contrast term opens a second shortcut that costs ``shape`` from the start (a small object's
  contrast grows as it grows, whatever the colours), so the fight no longer waits for saturation.

**Raw scales** (``Regime.raw_scales``, used only by the ``sum_raw`` arm, DanceGRPO's one summed
scalar of *raw* rewards): the pixel objectives all lie near [0, 1], while the paper's reward models do
not (Aesthetic scores of about 5-6 against CLIP-T about 0.3: about 20x). Each regime gives one
objective, the one that plays the Aesthetic/HPS part, a raw scale 20x the others': ``edges`` in
``conflicting`` (sharpness), ``fidelity`` in ``agreeing`` (a whole-image quality score), ``vividness``
in ``hacking`` (the saturation-loving one). ``sum_raw`` sums ``raw_scales[k] * r[:, k]`` and
normalises that one scalar per group; every per-objective arm (``multi_grpo``, MOCA, OTCA, ...)
normalises each objective by its own group std, so it is unaffected by these scales and is fed the
unit-scale rewards as before.

Each regime's base model is cached under its own key (its corruptions are part of the key).
"""
from __future__ import annotations

from dataclasses import dataclass

from .data import CORRUPTIONS


@dataclass(frozen=True)
class Regime:
    name: str
    objectives: tuple  # names of pixel_rewards.OBJECTIVE_FUNCTIONS, in reward-column order
    corruptions: tuple  # the pre-training mixture's corruptions (of data.CORRUPTIONS + data.EXTRA_CORRUPTIONS)
    raw_scales: tuple  # per objective: the raw reward scale the sum_raw arm sums with (one 20x the others)


#: The raw scale of the objective that plays the Aesthetic part, against 1 for the others (the paper's ~20x).
DOMINANT_RAW_SCALE = 20.0
REGIMES = {
    "conflicting": Regime("conflicting", ("palette", "shape", "edges"), CORRUPTIONS, (1.0, 1.0, DOMINANT_RAW_SCALE)),
    "agreeing": Regime("agreeing", ("palette", "shape", "fidelity"), ("colour_jitter", "misplacement"),
                       (1.0, 1.0, DOMINANT_RAW_SCALE)),
    "hacking": Regime("hacking", ("palette", "shape", "vividness"), ("colour_jitter", "misplacement", "fading"),
                      (1.0, 1.0, DOMINANT_RAW_SCALE)),
}
DEFAULT_REGIME = "conflicting"
#: ``--regime`` values: one regime, ``both`` (conflicting and agreeing, as before the hacking regime) or
#: ``all`` (every regime); the last two for ``otca-patch ablate`` only.
REGIME_GROUPS = {"both": ["conflicting", "agreeing"], "all": list(REGIMES)}
REGIME_CHOICES = tuple(REGIMES) + tuple(REGIME_GROUPS)


def regime_names(choice: str) -> list[str]:
    """``"both"`` -> conflicting and agreeing; ``"all"`` -> every regime; a regime's name -> that one."""
    if choice in REGIME_GROUPS:
        return list(REGIME_GROUPS[choice])
    if choice not in REGIMES:
        raise ValueError(f"--regime: unknown regime {choice!r} (valid: {', '.join(REGIME_CHOICES)})")
    return [choice]
