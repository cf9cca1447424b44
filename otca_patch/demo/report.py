"""The demo's report folder: ``report.md``, ``metrics.json`` and the three plots, written atomically
(a failed run leaves the previous report whole)."""
from __future__ import annotations

import math
from pathlib import Path

from .files import atomic_write_json, atomic_write_text
from .plots import plot_gradient_conflict, plot_mixture, plot_reward_curves, plot_step_weights
from .regimes import DEFAULT_REGIME, REGIMES
from .report_words import measure_lines, task_lines
from ..analysis.intervals import plain_line
from .variants import short_name

REPORT_FILES = ("report.md", "metrics.json", "reward_curves.png", "step_weights.png", "mixture.png",
                "gradient_conflict.png", "timing.png")
SAMPLES_FILE = "samples.png"


def write_report(result: dict, out_dir, command: str = "otca-patch demo") -> list[Path]:
    """Write every report file into ``out_dir``; returns their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    # first: the numbers survive a failing figure (the samples' pixels are in samples.png only)
    atomic_write_json(out / "metrics.json", {k: v for k, v in result.items() if k != "samples"})
    plot_reward_curves(result, out / "reward_curves.png")
    plot_step_weights(result, out / "step_weights.png")
    plot_mixture(result, out / "mixture.png")
    plot_gradient_conflict(result, out / "gradient_conflict.png")
    plot_result_timing(result, out / "timing.png")
    grid = samples_grid(result)
    if grid is not None:
        grid.save(out / SAMPLES_FILE)
    atomic_write_text(out / "report.md", render_markdown(result, command))
    return [out / name for name in REPORT_FILES + ((SAMPLES_FILE,) if grid is not None else ())]


def samples_grid(result: dict):
    """``samples.png``: one row per variant, its images of the shown prompts at iteration 0 (the base
    model: the same in every row) and after the last iteration; None without samples."""
    import numpy as np
    from PIL import Image

    from ..sample_grid import sample_grid

    samples = result.get("samples")
    if not samples:
        return None
    prompts, iterations = samples["prompts"], samples["iterations"]
    picture = lambda pixels: Image.fromarray(np.asarray(pixels, dtype=np.uint8))  # noqa: E731
    rows = [(short_name(mode).strip("`"), [picture(p) for p in samples["first"][mode] + samples["last"][mode]])
            for mode in result["modes"] if mode in samples["first"]]
    return sample_grid(rows, prompts + prompts, groups=[(f"iteration {iterations[0]}", len(prompts)),
                                                        (f"iteration {iterations[1]}", len(prompts))],
                       cell=96, title=f"seed {samples['seed']}: the same prompts and noise in every row")


def plot_result_timing(result: dict, path) -> None:
    """``timing.png``: the regime's map (the base model's) and each variant's after training."""
    from ..analysis.timing import plot_timing, result_maps

    if _has_timing(result):
        plot_timing(result_maps(result), path, TIMING_SHARE)


#: "mostly decided" in the reports' timing lines
TIMING_SHARE = 0.8


def timing_lines(result: dict) -> list:
    """The map's figure and, per objective, the step by which the base model has it mostly decided."""
    from ..analysis.timing import decided_by, result_maps

    if not _has_timing(result):
        return []
    _, base, names, _ = result_maps(result)[0]
    steps = base.shape[1]
    decided = {k: decided_by(base[i], TIMING_SHARE) for i, k in enumerate(names)}
    by = ", ".join(f"{k} by step {step}" for k, step in decided.items() if step)
    unmeasured = [k for k, step in decided.items() if not step]
    reading = (f"On the base model, {round(100 * TIMING_SHARE)}% decided: {by} (of {steps} steps)." if by else "")
    if unmeasured:
        reading += (f" Not measured for {', '.join(unmeasured)}: the samples of one prompt did not differ (the map "
                    "needs several samples per evaluation prompt).")
    return [f"When each objective is decided: for each denoising step t (step 1 = the noise side), the share of the "
            "objective's final differences between samples of one prompt that step t's prediction of the clean "
            f"image already fixes. {reading.strip()}", "", "![when each objective is decided](timing.png)", ""]


def _has_timing(result: dict) -> bool:
    return any(run.get("history", {}).get("objective_timing") for run in result.get("runs", []))


def interval(stat: dict, digits: int = 3) -> str:
    """``mean [low, high]`` (or the mean alone for one seed)."""
    if math.isnan(stat["mean"]):
        return "n/a"
    if math.isnan(stat["low"]):
        return f"{stat['mean']:+.{digits}f}"
    return f"{stat['mean']:+.{digits}f} [{stat['low']:+.{digits}f}, {stat['high']:+.{digits}f}]"


def results_table(result: dict) -> str:
    """Per variant: each objective's gap closed, their mean, the drift (mean [95% interval] over seeds)."""
    objectives = result["objectives"]
    lines = ["| variant | " + " | ".join(objectives) + " | mean gap closed | drift (KL to base) | grad. conflict | worst cosine |",
             "|---|" + "---:|" * (len(objectives) + 4)]
    for mode in result["modes"]:
        row = result["table"][mode]
        cells = ([interval(row[c]) for c in objectives + ["mean_gap_closed"]] + [interval(row["drift"], 4)]
                 + [interval(row[c]) if c in row else "n/a" for c in ("gradient_conflict", "worst_cosine")])
        lines.append(f"| `{mode}` | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def comparison_table(result: dict) -> str:
    """Each variant minus the reference, paired by seed."""
    objectives, reference = result["objectives"], result["reference_mode"]
    lines = ["| difference | " + " | ".join(objectives) + " | mean gap closed | drift | grad. conflict | worst cosine |",
             "|---|" + "---:|" * (len(objectives) + 4)]
    for mode, diff in result["comparisons"].items():
        cells = ([interval(diff[c]) for c in objectives + ["mean_gap_closed"]] + [interval(diff["drift"], 4)]
                 + [interval(diff[c]) if c in diff else "n/a" for c in ("gradient_conflict", "worst_cosine")])
        lines.append(f"| `{mode}` - `{reference}` | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def render_markdown(result: dict, command: str) -> str:
    """The report as Markdown: title, verdict, samples and command; then setup, results, figures and caveats."""
    lines = [
        f"# OTCA demo: credit variants on a task with a known joint optimum (regime `{result.get('regime', 'conflicting')}`)",
        "",
        *verdict_lines(result),
        *samples_lines(result),
        f"Command: `{command}`. Everything below was measured by this run; nothing is copied from the paper.",
        "",
        *_setup_lines(result),
        *_results_lines(result),
        *_figures_and_caveats_lines(result),
    ]
    return "\n".join(lines)


def _setup_lines(result: dict) -> list:
    """The model, GRPO, seeds and evaluation of the run, then its task, objectives and measures."""
    cfg, seeds, model = result["config"], result["seeds"], result["base_model"]
    regime = REGIMES[result.get("regime", DEFAULT_REGIME)]
    return [
        "## Setup",
        "",
        f"- Base model: diffusers `FluxTransformer2DModel` ({cfg['layers']} joint + {cfg['single_layers']} single "
        f"blocks, {cfg['heads']} heads x {cfg['head_dim']}), {cfg['image_size']}x{cfg['image_size']} RGB as 2x2-packed "
        f"tokens, flow matching for {cfg['pretrain_steps']} steps on the corrupted mixture (each corruption with "
        f"probability {cfg['corrupt_prob']}; final loss {_num(model.get('final_loss'))}; "
        f"{'loaded from the cache' if model.get('cached') else 'trained by this run'}).",
        f"- GRPO: {cfg['grpo_steps']} iterations x {cfg['prompts_per_step']} prompts x {cfg['group_size']} samples, "
        f"{cfg['sampling_steps']} SDE steps (eta {cfg['eta']}, shift {cfg['shift']}), timestep_fraction "
        f"{cfg['timestep_fraction']} (every trainable step), PPO clip {cfg['clip_range']}, advantage clip "
        f"{cfg['adv_clip_max']}, AdamW lr {cfg['learning_rate']}, one optimizer step per "
        f"{cfg['micro_batch'] * cfg['grad_accum']} samples.",
        f"- Seeds {', '.join(map(str, seeds))}: within a seed every variant starts from the same weights and draws the "
        "same prompts, initial noise and SDE noise, so runs are paired by seed. Every variant computes its "
        "advantages with the credit code the layer runs in real trainers.",
        f"- Evaluation: {result['eval_samples']} samples ({cfg['eval_prompts']} fixed prompts x "
        f"{cfg['eval_samples_per_prompt']}) with fixed noise, every {cfg['eval_every']} iterations.",
        "",
        *task_lines(regime.name, list(result["objectives"]), regime.corruptions,
                    regime.raw_scales if "sum_raw" in result["modes"] else None),
        *measure_lines(),
    ]


def _results_lines(result: dict) -> list:
    """The rewards table and the gap closed per variant; the paired comparisons and the verdict when variants
    were compared; the runs that improve every objective."""
    objectives, n = result["objectives"], len(result["seeds"])
    lines = [
        "## Results", "",
        "| | " + " | ".join(objectives) + " |", "|---|" + "---:|" * len(objectives),
        "| base model | " + " | ".join(f"{result['base'][k]:.4f}" for k in objectives) + " |",
        "| oracle (clean renders) | " + " | ".join(f"{result['oracle'][k]:.4f}" for k in objectives) + " |",
        "",
        f"Fraction of the base-to-oracle gap closed after GRPO, mean [95% t-interval] over {n} seeds:",
        "",
        results_table(result),
        "",
    ]
    if result["comparisons"]:
        lines += [f"Paired differences (same seed), mean [95% t-interval] over {n} seeds:", "", comparison_table(result),
                  "", "## Verdict", ""]
        lines += [f"- {text}" for text in result["verdicts"].values()]
        lines += ["- " + _drift_reading(result)]
    improving = result["seeds_improving_every_objective"]
    lines += ["- Runs that improve every objective over the base: " + ", ".join(
        f"`{m}` {len(s)} of {n} seeds" for m, s in improving.items()) + ".", ""]
    return lines


def _figures_and_caveats_lines(result: dict) -> list:
    """The figures (the timing map's when measured), the caveats and the time the run took."""
    n = len(result["seeds"])
    return [
        "## Figures", "",
        "![gap closed and drift](reward_curves.png)", "", "![step weights](step_weights.png)", "",
        "![mixture](mixture.png)", "",
        "Gradient conflict over training (at every update, each objective's own gradient against the update "
        "applied; see Measures):", "", "![gradient conflict](gradient_conflict.png)", "",
        *timing_lines(result),
        "## Caveats", "",
        f"{n} seeds of one small synthetic task with hand-written pixel objectives: an interval that contains 0 means "
        "these seeds cannot tell the variants apart, not that they are equal. The ablation (`otca-patch ablate`) adds "
        "the other modes and the controls.", "",
        f"Time: {result['seconds']['total']:.0f} s wall (base model {result['seconds']['base_model']:.0f} s wall, "
        f"{result['seconds']['base_model_cpu']:.0f} s CPU; GRPO runs {result['seconds']['grpo_cpu']:.0f} s CPU in all).",
        "",
    ]


def samples_lines(result: dict) -> list:
    """The samples figure and what it shows (nothing when the runs kept no samples)."""
    samples = result.get("samples")
    if not samples:
        return []
    return [f"![samples]({SAMPLES_FILE})", "",
            f"Each variant's samples of {len(samples['prompts'])} evaluation prompts (seed {samples['seed']}) before "
            f"GRPO (iteration {samples['iterations'][0]}: the base model, alike in every row) and after its last "
            f"iteration ({samples['iterations'][1]}), from the same fixed noise.", ""]


def verdict_lines(result: dict) -> list:
    """The report's opening: one plain line per comparison with the reference (``stats.plain_line``),
    then the seeds they rest on; empty for a single variant."""
    reference, objectives = result["reference_mode"], result["objectives"]
    lines = [f"**{plain_line(diff, objectives, short_name(mode), short_name(reference))}**"
             for mode, diff in result["comparisons"].items()]
    if not lines:
        return []
    return [line + "  " for line in lines] + [
        "", f"(Paired by seed over {len(result['seeds'])} seeds; an objective is named with its mean difference only "
        "when its 95% interval excludes 0 and reaches beyond its practical threshold; details below.)", ""]


_DRIFT_READINGS = {  # (closed more of the gap, moved more) -> what it means
    (False, False): "it closed less of the gap and moved less: that is training less, not balancing better",
    (False, True): "it closed less of the gap although it moved more: its steps were spent less usefully",
    (True, False): "it closed more of the gap while moving less: more gain per unit of movement",
    (True, True): "it closed more of the gap and moved more: part of the gain may be a larger step",
}


def _drift_reading(result: dict) -> str:
    reference = result["reference_mode"]
    parts = []
    for mode, diff in result["comparisons"].items():
        closed, drift = diff["mean_gap_closed"], diff["drift"]
        reading = _DRIFT_READINGS[closed["mean"] > 0, drift["mean"] > 0]
        parts.append(f"`{mode}` - `{reference}`: mean gap closed {interval(closed)}, drift {interval(drift, 4)}; {reading}")
    return "Drift: " + "; ".join(parts) + "."


def _num(value) -> str:
    return "n/a" if value is None else f"{value:.4f}"
