"""The demo report's description of the task it ran, in plain words for its reader: the task, the
regime's objectives and corruptions, and what each column of the results measures. Only what the run
used is described (its regime, its objectives, the raw scales when a variant summed raw rewards)."""
from __future__ import annotations

CORRUPTION_WORDS = {
    "colour_jitter": "colours shifted away from the named ones",
    "blur": "blur",
    "misplacement": "the shape at the wrong size or place",
    "fading": "washed-out colours",
}

OBJECTIVE_WORDS = {
    "palette": "how close every pixel is to one of the two colours the prompt names",
    "shape": "how well the image matches the prompt's shape, centred and at the size the prompt names",
    "edges": "how close the image's sharpness (the colour change between neighbouring pixels) is to the clean "
             "render's: blur lowers it, and so do grain and noise",
    "fidelity": "how close every pixel is to the clean render's",
    "vividness": "how saturated the colours are against the clean render's: pushing colours towards pure hues "
                 "raises it",
}

REGIME_WORDS = {
    "conflicting": "The objectives disagree on many samples: a blurred but well-placed shape scores well on shape "
                   "and badly on edges, an over-large sharp one the other way round.",
    "agreeing": "The objectives move together: every corruption lowers all three, so a sample that is better on "
                "one is mostly better on the others.",
    "hacking": "One objective can be raised at the others' cost: pushing colours towards pure hues raises vividness "
               "while it leaves the prompt's colours (palette) and blurs the shape the shape objective reads.",
}


def task_lines(regime: str, objectives: list, corruptions: tuple, raw_scales: tuple | None) -> list:
    """The task, the objectives and what makes this regime what it is."""
    damage = ", ".join(CORRUPTION_WORDS.get(c, c.replace("_", " ")) for c in corruptions)
    lines = [
        "### Task", "",
        "Prompts of the form \"a <size> <colour> <shape> on <colour>\". Each prompt has one *clean render*: the "
        "shape centred, at the size the prompt names, in exactly the two named colours. The base model learnt "
        f"from renders that were often damaged ({damage}), so its samples mix clean and damaged images and "
        "training has room to improve them.", "",
        "### Objectives", "",
        "Each objective lies between 0 and 1, is computed from the pixels and the prompt (no learnt model), and "
        "the clean render scores exactly 1 on all of them: the best joint result is known.", "",
        *[f"- **{name}**: {OBJECTIVE_WORDS.get(name, 'see its definition')}." for name in objectives], "",
        REGIME_WORDS.get(regime, ""), "",
    ]
    if raw_scales is not None:
        dominant = [name for name, scale in zip(objectives, raw_scales) if scale != min(raw_scales)]
        lines += [f"The `sum_raw` variant adds the raw rewards into one score before normalising it, as DanceGRPO "
                  f"does; there {', '.join(dominant)} counts {max(raw_scales) / min(raw_scales):g} times as much as "
                  "the others, as an aesthetic score outweighs a CLIP score in the paper's setting. Every other "
                  "variant normalises each objective on its own, so the scales do not matter to it.", ""]
    return lines


def measure_lines() -> list:
    """What the results table's columns mean."""
    return [
        "### Measures", "",
        "Every variant and seed is evaluated on the same fixed prompts with the same fixed noise.", "",
        "- **Gap closed** (per objective): (run - base model) / (clean render - base model): 0 is the base "
        "model, 1 the clean renders, below 0 worse than the base model.",
        "- **Drift**: how far the trained model moved from the base model (the mean KL divergence between their "
        "denoising steps on the evaluation samples), whatever the direction. A run that closed less of the gap and "
        "also moved less has not balanced the objectives better; it has trained less.",
        "- **Gradient conflict**: at every update, each objective's own gradient is compared with the update the "
        "variant actually applied. The column is the share of updates in which at least one objective's gradient "
        "pointed against the applied update (a negative cosine): an update that, taken alone, made that "
        "objective worse. 0 means no update worked against any objective.",
        "- **Worst cosine**: the mean over updates of the lowest cosine between an objective's gradient and the "
        "applied update: near 1, every objective is served; below 0, some objective is pushed back.", "",
    ]
