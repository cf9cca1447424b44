"""The demo's report folder: ``report.md``, ``metrics.json`` and the three plots, written atomically
(a failed run leaves the previous report whole)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .evaluation import __doc__ as BALANCED_DOC
from .files import atomic_write_json, atomic_write_text
from .objectives import __doc__ as OBJECTIVES_DOC
from .plots import plot_mixture, plot_reward_curves, plot_step_weights

REPORT_FILES = ("report.md", "metrics.json", "reward_curves.png", "step_weights.png", "mixture.png")


def write_report(result: dict, out_dir, command: str = "otca-patch demo") -> list[Path]:
    """Write every report file into ``out_dir``; returns their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    plot_reward_curves(result, out / "reward_curves.png")
    plot_step_weights(result, out / "step_weights.png")
    plot_mixture(result, out / "mixture.png")
    atomic_write_json(out / "metrics.json", result)
    atomic_write_text(out / "report.md", render_markdown(result, command))
    return [out / name for name in REPORT_FILES]


def _z_scores(result: dict, rewards: dict) -> dict:
    base, spread = result["base"]["rewards"], result["base"]["reward_std"]
    return {k: (rewards[k] - base[k]) / max(spread[k], 1e-8) for k in result["objectives"]}


def render_markdown(result: dict, command: str) -> str:
    cfg, objectives, modes = result["config"], result["objectives"], result["modes"]
    reference = result["reference_mode"]
    names = list(modes)
    lines = [
        "# OTCA demo: vanilla DanceGRPO credit against OTCA on a tiny FLUX model",
        "",
        f"Command: `{command}`. Everything below was measured by this run; nothing is copied from the paper.",
        "",
        "## Setup",
        "",
        f"- Base model: diffusers `FluxTransformer2DModel` ({cfg['layers']} joint + {cfg['single_layers']} single "
        f"blocks, {cfg['heads']} heads x {cfg['head_dim']}), {cfg['image_size']}x{cfg['image_size']} RGB as 2x2-packed "
        f"tokens, pre-trained by flow matching for {cfg['pretrain_steps']} steps on synthetic \"a <colour> <shape> on "
        f"<colour>\" images (final loss {_num(result['base']['model'].get('final_loss'))}; "
        f"{'loaded from the cache' if result['base']['model'].get('cached') else 'trained by this run'}: "
        f"`{result['base']['model']['path']}`).",
        f"- GRPO: {cfg['grpo_steps']} iterations x {cfg['prompts_per_step']} prompts x {cfg['group_size']} samples, "
        f"SDE sampling with {cfg['sampling_steps']} steps, eta {cfg['eta']}, shift {cfg['shift']}; "
        f"{int((cfg['sampling_steps'] - 1) * cfg['timestep_fraction'])} shuffled steps trained per sample "
        f"(timestep_fraction {cfg['timestep_fraction']}, last step never trained), PPO clip {cfg['clip_range']}, "
        f"advantage clip {cfg['adv_clip_max']}, AdamW lr {cfg['learning_rate']}, micro-batch {cfg['micro_batch']} x "
        f"{cfg['grad_accum']} accumulation, seed {cfg['seed']}.",
        f"- Every mode starts from the same base weights and draws the same prompts, initial noise (shared within a "
        f"group: {cfg['init_same_noise']}) and SDE noise; advantages come from `otca_patch.credit.compute_credit` "
        f"with `CreditConfig(mode=...)` for every mode (`sum` = vanilla DanceGRPO: one summed reward, "
        f"group-normalised, the same advantage at every step).",
        f"- Evaluation: {result['base']['eval_samples']} samples ({cfg['eval_prompts']} fixed prompts x "
        f"{cfg['eval_samples_per_prompt']}) with fixed noise, every {cfg['eval_every']} iterations.",
        "",
        "### Objectives",
        "",
        _indent_doc(OBJECTIVES_DOC),
        "",
        "### Balanced score",
        "",
        _indent_doc(BALANCED_DOC),
        "",
        "## Results",
        "",
        "Mean evaluation reward per objective (higher is better), before (base model) and after GRPO:",
        "",
        "| objective | base | " + " | ".join(f"{m} (after)" for m in names) + " |",
        "|---|---:|" + "---:|" * len(names),
    ]
    base = result["base"]["rewards"]
    for k in objectives:
        cells = [f"{modes[m]['final_rewards'][k]:.4f} ({modes[m]['final_rewards'][k] - base[k]:+.4f})" for m in names]
        lines.append(f"| {k} | {base[k]:.4f} | " + " | ".join(cells) + " |")
    z = {m: _z_scores(result, modes[m]["final_rewards"]) for m in names}
    lines.append("| **balanced score** | 0.000 | " + " | ".join(f"**{modes[m]['final_balanced']:+.3f}**" for m in names) + " |")
    lines.append("| worst objective (z) | 0.000 | " + " | ".join(f"{min(z[m].values()):+.3f}" for m in names) + " |")
    lines += ["", "Per-objective z-scores after GRPO (change in units of the base model's across-sample std):", "",
              "| objective | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    for k in objectives:
        lines.append(f"| {k} | " + " | ".join(f"{z[m][k]:+.2f}" for m in names) + " |")
    target = modes[reference]["final_balanced"]
    lines += ["", f"Iterations each mode needs to reach the {reference} (vanilla) final balanced score "
                  f"{target:+.3f} (checked every {cfg['eval_every']} iterations):", ""]
    for m in names:
        lines.append(f"- `{m}`: {_reached(modes[m]['steps_to_reference_final'], cfg['grpo_steps'])}")
    if target <= 0:
        lines.append(f"- Note: the {reference} final balanced score is not above the base model's (0), so iteration 0 "
                     "already reaches it; the per-objective counts below say more.")
    lines += ["", f"Iterations each mode needs to reach the {reference} final value of each objective:", "",
              "| objective | " + f"{reference} final | " + " | ".join(names) + " |", "|---|---:|" + "---:|" * len(names)]
    for k in objectives:
        cells = [_reached(modes[m]["steps_to_reference_final_per_objective"][k], cfg["grpo_steps"]) for m in names]
        lines.append(f"| {k} | {modes[reference]['final_rewards'][k]:.4f} | " + " | ".join(cells) + " |")
    conflict = {m: float(np.mean(modes[m]["history"]["conflict_share"])) for m in names}
    lines += ["", "Share of training samples whose per-objective group advantages disagree in sign (how often the "
                  "objectives conflict): " + ", ".join(f"`{m}` {conflict[m]:.2f}" for m in names) + ".",
              "", "## Verdict", "", _verdict(result), "",
              "## Figures", "",
              "- `reward_curves.png`: evaluation reward per objective and balanced score over training.",
              "![reward curves](reward_curves.png)", "",
              "- `step_weights.png`: TCD's mean weight per sampling step over training.",
              "![step weights](step_weights.png)", "",
              "- `mixture.png`: MOCA's mean mixture per objective over training.",
              "![mixture](mixture.png)", "",
              "## Caveats", "",
              "One seed, one small task: differences of a few hundredths in the balanced score are within seed noise "
              "(`otca-patch ablate` repeats every mode over several seeds). The objectives are hand-written pixel "
              "statistics, not learned reward models.",
              "", f"Wall time: {result['seconds']['total']:.0f} s in all "
                  f"(base model {result['seconds']['base_model']:.0f} s; "
              + ", ".join(f"{m} {modes[m]['seconds']:.0f} s" for m in names) + ").", ""]
    return "\n".join(lines)


def _verdict(result: dict) -> str:
    modes, reference = result["modes"], result["reference_mode"]
    ref_score = modes[reference]["final_balanced"]
    sentences = []
    for mode, data in modes.items():
        if mode == reference:
            continue
        score = data["final_balanced"]
        better = [k for k in result["objectives"] if data["final_rewards"][k] > modes[reference]["final_rewards"][k]]
        relation = "beats" if score > ref_score else "does not beat"
        sentences.append(
            f"On this run `{mode}` {relation} `{reference}` on the balanced score ({score:+.3f} against {ref_score:+.3f}); "
            f"it ends higher on {', '.join(better) if better else 'no objective'} and lower or equal on "
            f"{', '.join(k for k in result['objectives'] if k not in better) or 'no objective'}."
        )
    below = [m for m, data in modes.items() if data["final_balanced"] < 0]
    if below:
        sentences.append(
            f"{_join(below)} {'ends' if len(below) == 1 else 'end'} below the base model's balanced score (0): on this "
            "task GRPO trades some objectives for others rather than improving all of them; the per-objective rows "
            "above show what each mode gave up and gained.")
    spread = result["base"]["reward_std"]
    smallest = min(spread, key=spread.get)
    sentences.append(
        f"The balanced score divides each change by the base model's spread of that objective; `{smallest}` has the "
        f"smallest spread ({spread[smallest]:.4f}), so a change in it weighs most.")
    return " ".join(sentences) if len(modes) > 1 else "Only one mode was run. " + " ".join(sentences)


def _join(names: list) -> str:
    quoted = [f"`{n}`" for n in names]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " and " + quoted[-1]


def _reached(iteration, total: int) -> str:
    return f"{iteration} of {total}" if iteration is not None else f"not reached in {total}"


def _indent_doc(doc: str) -> str:
    return "\n".join(line.strip() and line or "" for line in (doc or "").strip().splitlines())


def _num(value) -> str:
    return "n/a" if value is None else f"{value:.4f}"
