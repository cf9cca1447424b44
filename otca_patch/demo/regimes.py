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
  image's chroma, max - min channel, against the clean render's); the base model is pre-trained on
  colour jitter, misplacement and fading (washed-out colours). ``vividness`` rewards colours pushed
  towards pure hues, as HPS and Aesthetic favour over-saturated images: its gradient at any colour
  raises the largest channel and lowers the smallest, which turns the hue (a white or black into a
  colour) and so leaves the prompt's palette and blurs the object/background distinction ``shape``
  reads, from the first step. A shortcut that raises one reward at the others' cost.

  *Why chroma*. The regime counts only if ``sum_raw`` or
  ``multi_grpo`` pushes an objective below the base model with its interval below 0.
  (1) Vividness as the mean distance from mid-grey failed that: at 40 iterations ``sum_raw`` closed
  palette's gap by -0.039 [-0.175, +0.098] and shape's by -0.018 [-0.105, +0.069] (seeds 0, 1, 2, 4).
  Its gradient is radial from grey, the exact reverse of fading, so the policy first *un-fades*
  (palette and shape rise with it) and only past the clean render over-saturates; within 40
  iterations that late cost was not separated from 0. (2) Adding colour contrast (colour spread
  over the image, which also rewards an object resized towards half the image) made it later still:
  ``sum_raw`` seed 0 closed palette's gap by +0.085 at 40 iterations and -0.049 at 60, because
  contrast rises with un-fading too. Chroma's gradient is not radial, so its cost to palette and
  shape does not wait for the clean render (gradient ascent on each reward alone from the base
  mixture's images: palette and shape rise under (1) and (2), fall under chroma).

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
