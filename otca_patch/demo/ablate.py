"""``otca-patch ablate``: every credit mode and the controls of ``variants`` over several GRPO seeds on
the demo task, as a table in the layout of the paper's Table 4 (rows: methods with their TCD / MOCA
switches; columns: each objective's fraction of the base-to-oracle gap closed, their mean, and the
drift from the base), mean [95% t-interval] over seeds, and each row minus Multi-GRPO paired by seed."""
from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

from .cli import fail, parse
from otca_patch.flags import add_flags, from_namespace

from .config import DemoConfig
from .report import interval
from .variants import ABLATION_ORDER, VARIANTS

#: The reference of the paired differences: the fair vanilla (per-reward normalisation).
REFERENCE = "multi_grpo"
DEFAULTS = {"out": "runs/ablate", "base_cache": "runs/demo", "resume": True,
            "modes": ",".join([REFERENCE] + [m for m in ABLATION_ORDER if m != REFERENCE])}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="otca-patch ablate", description=__doc__.split("\n\n")[0],
        epilog="Writes ablation.md and ablation.json into --out. The base model is shared by every run and "
               "cached in --base_cache (default: the demo's folder, so a previous demo run is reused). The first "
               "of --modes is the reference of the paired differences.",
    )
    add_flags(parser, DemoConfig, defaults=DEFAULTS)
    parser.add_argument("--no_resume", dest="resume", action="store_false", help="turn --resume off (on by default here)")
    return parser


def main(argv=None) -> int:
    parser, argv, args, code = parse(build_parser, argv)
    if args is None:
        return code
    try:
        config = from_namespace(DemoConfig, args)
        from .variants import check_available

        check_available(config.mode_list())
    except ValueError as exc:
        return fail(parser.prog, str(exc))
    from .experiment import run_experiment
    from .files import atomic_write_json, atomic_write_text

    started = time.perf_counter()
    try:
        result = run_experiment(config, log=lambda msg: print(msg, file=sys.stderr))
    except (ValueError, OSError) as exc:
        return fail(parser.prog, str(exc), code=1)
    result["seconds"]["total"] = time.perf_counter() - started
    command = " ".join(["otca-patch ablate"] + [shlex.quote(a) for a in argv])
    out = Path(config.out)
    atomic_write_json(out / "ablation.json", result)
    atomic_write_text(out / "ablation.md", render_markdown(result, command))
    print(render_table(result))
    print(f"\nwrote {out / 'ablation.md'} and {out / 'ablation.json'} in {result['seconds']['total']:.0f} s")
    return 0


def _order(modes: list) -> list:
    return sorted(modes, key=ABLATION_ORDER.index)


def render_table(result: dict) -> str:
    """The Table-4 layout: method, TCD, MOCA, one column per objective's gap closed, mean, drift."""
    objectives = result["objectives"]
    lines = ["| Method | variant | TCD | MOCA | " + " | ".join(objectives) + " | mean gap closed | drift |",
             "|---|---|:-:|:-:|" + "---:|" * (len(objectives) + 2)]
    for mode in _order(result["modes"]):
        variant, row = VARIANTS[mode], result["table"][mode]
        tcd = ("✓ (batch)" if variant.options.get("weight_scope") == "batch" else "✓") if variant.step_weighted else "✗"
        moca = "✓" if variant.fuses else "✗"
        cells = [interval(row[c]) for c in objectives + ["mean_gap_closed"]] + [interval(row["drift"], 4)]
        lines.append(f"| {variant.description} | `{mode}` | {tcd} | {moca} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def render_differences(result: dict) -> str:
    objectives, reference = result["objectives"], result["reference_mode"]
    lines = [f"| variant - `{reference}` | " + " | ".join(objectives) + " | mean gap closed | drift | verdict |",
             "|---|" + "---:|" * (len(objectives) + 2) + "---|"]
    for mode in _order(list(result["comparisons"])):
        diff = result["comparisons"][mode]
        cells = [interval(diff[c]) for c in objectives + ["mean_gap_closed"]] + [interval(diff["drift"], 4)]
        lines.append(f"| `{mode}` | " + " | ".join(cells) + f" | {result['verdicts'][mode]} |")
    return "\n".join(lines)


def render_markdown(result: dict, command: str) -> str:
    cfg, seeds = result["config"], result["seeds"]
    return "\n".join([
        "# Ablation on the demo task (the paper's Table 4 layout, with controls)",
        "",
        f"Command: `{command}`; seeds {', '.join(map(str, seeds))}; {cfg['grpo_steps']} GRPO iterations x "
        f"{cfg['prompts_per_step']} prompts x {cfg['group_size']} samples per run, {cfg['sampling_steps']} sampling steps, "
        f"lr {cfg['learning_rate']}, clip {cfg['clip_range']}. Every run starts from the same cached base model; within a "
        "seed every variant draws the same prompts and noise.",
        "",
        "Base model " + ", ".join(f"{k} {v:.4f}" for k, v in result["base"].items()) + "; oracle (clean renders) "
        + ", ".join(f"{k} {v:.4f}" for k, v in result["oracle"].items()) + ".",
        "",
        "Fraction of the base-to-oracle gap closed per objective (0 = base, 1 = oracle), their mean, and the drift (mean "
        "per-step Gaussian KL to the base model on the evaluation set); mean [95% t-interval] over seeds:",
        "",
        render_table(result),
        "",
        f"Paired by seed, each variant minus `{result['reference_mode']}`:",
        "",
        render_differences(result),
        "",
        "Controls: `tcd_batch` keeps only TCD's batch-mean step schedule (if it matches `tcd`, TCD's per-trajectory "
        "credit adds nothing here); `multi_grpo_moca_rms` is Multi-GRPO shrunk to MOCA's advantage RMS (if it matches "
        "`moca`, MOCA acts as a smaller step); `moca_beta0`, `moca_centred`, `moca_group` change MOCA's bias and fusion.",
        "",
        f"Wall time: {result['seconds']['total']:.0f} s.",
        "",
    ])
