"""``otca-patch ablate``: every credit mode over several GRPO seeds on the demo task, as a table of
mean +- std per objective and for the balanced score in the layout of the paper's Table 4 (rows:
methods with their TCD / MOCA switches; columns: metrics)."""
from __future__ import annotations

import argparse
import math
import shlex
import sys
import time
from pathlib import Path

import numpy as np

from otca_patch.credit import MODES, STEP_WEIGHTED_MODES

from .cli import fail
from .config import DemoConfig, add_dataclass_flags, dataclass_from_args

#: Table rows, in the paper's order: baselines first, then the two components and their union.
ABLATION_ORDER = ("sum", "multi_grpo", "gdpo", "tcd", "moca", "otca")
METHOD_NAMES = {
    "sum": "Vanilla DanceGRPO (summed reward)",
    "multi_grpo": "Multi-GRPO (per-reward normalisation)",
    "gdpo": "GDPO (batch-normalised sum)",
    "tcd": "+ TCD only",
    "moca": "+ MOCA only",
    "otca": "OTCA (TCD + MOCA)",
}
assert set(ABLATION_ORDER) == set(MODES)
DEFAULTS = {"out": "runs/ablate", "base_cache": "runs/demo", "modes": ",".join(ABLATION_ORDER)}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="otca-patch ablate", description=__doc__.split("\n\n")[0],
        epilog="Writes ablation.md and ablation.json into --out. The base model is shared by every run and "
               "cached in --base-cache (default: the demo's folder, so a previous demo run is reused).",
    )
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated GRPO seeds (default: 0,1,2)")
    add_dataclass_flags(parser, DemoConfig, skip=("seed",), defaults=DEFAULTS)
    return parser


def parse_seeds(text: str) -> list[int]:
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise ValueError(f"--seeds: expected comma-separated integers, got {text!r}") from None
    if not seeds:
        raise ValueError("--seeds: name at least one seed")
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"--seeds: a seed is named twice in {text!r}")
    return seeds


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    try:
        seeds = parse_seeds(args.seeds)
        config = dataclass_from_args(DemoConfig, args, seed=seeds[0])
    except ValueError as exc:
        return fail(parser.prog, str(exc))
    from .files import atomic_write_json, atomic_write_text

    started = time.perf_counter()
    try:
        result = run_ablation(config, seeds)
    except (ValueError, OSError) as exc:
        return fail(parser.prog, str(exc), code=1)
    result["seconds"] = time.perf_counter() - started
    command = " ".join(["otca-patch ablate"] + [shlex.quote(a) for a in argv])
    out = Path(config.out)
    atomic_write_json(out / "ablation.json", result)
    atomic_write_text(out / "ablation.md", render_markdown(result, command))
    print(render_table(result))
    print(f"\nwrote {out / 'ablation.md'} and {out / 'ablation.json'} in {result['seconds']:.0f} s")
    return 0


def run_ablation(config: DemoConfig, seeds: list[int], log=None) -> dict:
    """Every mode of ``config.modes`` for every seed; returns per-run finals and the aggregated table."""
    from .experiment import ensure_base_model, summarise
    from .jobs import Job, run_jobs

    log = log or (lambda msg: print(msg, file=sys.stderr))
    modes = config.mode_list()
    info = ensure_base_model(config, log=log)
    jobs = [Job(config={**config.to_dict(), "seed": seed}, mode=mode, base_path=info["path"])
            for seed in seeds for mode in modes]
    outputs = run_jobs(jobs, config.workers, config, desc="ablate")
    per_seed, base = {}, None
    for index, seed in enumerate(seeds):
        chunk = outputs[index * len(modes):(index + 1) * len(modes)]
        summary = summarise(config, modes, chunk, info)
        base = summary["base"]  # the same for every seed: one base model, one evaluation set
        per_seed[seed] = {m: {"final_rewards": summary["modes"][m]["final_rewards"],
                              "final_balanced": summary["modes"][m]["final_balanced"],
                              "balanced": summary["modes"][m]["balanced"],
                              "eval_iterations": summary["modes"][m]["history"]["eval_iterations"]}
                          for m in modes}
    objectives = list(base["rewards"])
    table = {}
    for mode in modes:
        columns = {k: [per_seed[s][mode]["final_rewards"][k] for s in seeds] for k in objectives}
        columns["balanced"] = [per_seed[s][mode]["final_balanced"] for s in seeds]
        table[mode] = {name: _mean_std(values) for name, values in columns.items()}
    return {"config": config.to_dict(), "seeds": seeds, "modes": modes, "objectives": objectives,
            "base": base, "per_seed": {str(s): v for s, v in per_seed.items()}, "table": table}


def _mean_std(values: list) -> dict:
    array = np.asarray(values, dtype=float)
    std = float(array.std(ddof=1)) if len(array) > 1 else math.nan
    return {"mean": float(array.mean()), "std": std, "values": array.tolist()}


def _cell(stat: dict, digits: int = 4) -> str:
    if math.isnan(stat["std"]):
        return f"{stat['mean']:.{digits}f}"
    return f"{stat['mean']:.{digits}f} ± {stat['std']:.{digits}f}"


def render_table(result: dict) -> str:
    """The Table-4 layout: method, TCD, MOCA, one column per objective, balanced score."""
    objectives = result["objectives"]
    header = "| Method | mode | TCD | MOCA | " + " | ".join(objectives) + " | balanced |"
    lines = [header, "|---|---|:-:|:-:|" + "---:|" * (len(objectives) + 1)]
    base = result["base"]["rewards"]
    lines.append("| Base model (before GRPO) | – | – | – | " + " | ".join(f"{base[k]:.4f}" for k in objectives) + " | 0.000 |")
    for mode in sorted(result["modes"], key=ABLATION_ORDER.index):
        row = result["table"][mode]
        tcd = "✓" if mode in STEP_WEIGHTED_MODES else "✗"
        moca = "✓" if mode in ("moca", "otca") else "✗"
        cells = [_cell(row[k]) for k in objectives] + [_cell(row["balanced"], 3)]
        lines.append(f"| {METHOD_NAMES[mode]} | `{mode}` | {tcd} | {moca} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _reading(result: dict, ranking: list) -> str:
    """Plain statements the table supports: which modes end below the base, and whether the top two separate."""
    table = result["table"]
    below = [m for m in ranking if table[m]["balanced"]["mean"] < 0]
    notes = []
    if below:
        notes.append(f"{len(below)} of {len(ranking)} modes end below the base model's balanced score (0): "
                     + ", ".join(f"`{m}`" for m in below) + ".")
    if len(ranking) > 1:
        first, second = (table[m]["balanced"] for m in ranking[:2])
        gap, noise = first["mean"] - second["mean"], max(first["std"], second["std"])
        separable = not math.isnan(noise) and gap > noise
        notes.append(f"`{ranking[0]}` leads `{ranking[1]}` by {gap:.3f}, "
                     + ("more than" if separable else "not more than")
                     + (f" the larger of their seed stds ({noise:.3f})" if not math.isnan(noise) else " (one seed: no std)")
                     + ("." if separable else ": not separated by these seeds."))
    return " ".join(notes)


def render_markdown(result: dict, command: str) -> str:
    cfg, seeds = result["config"], result["seeds"]
    ranking = sorted(result["modes"], key=lambda m: -result["table"][m]["balanced"]["mean"])
    return "\n".join([
        "# Ablation on the demo task (the paper's Table 4 layout)",
        "",
        f"Command: `{command}`; seeds {', '.join(map(str, seeds))}; {cfg['grpo_steps']} GRPO iterations x "
        f"{cfg['prompts_per_step']} prompts x {cfg['group_size']} samples per run, {cfg['sampling_steps']} sampling steps. "
        "Every run starts from the same cached base model; within a seed every mode draws the same prompts and noise.",
        "",
        "Final evaluation reward per objective and balanced score (mean z-score against the base model, see "
        "`otca_patch/demo/evaluation.py`), mean ± sample std over seeds. Higher is better everywhere.",
        "",
        render_table(result),
        "",
        "Ranking by mean balanced score: " + " > ".join(f"`{m}` ({result['table'][m]['balanced']['mean']:+.3f})" for m in ranking) + ".",
        "",
        _reading(result, ranking),
        "",
        f"Wall time: {result.get('seconds', 0):.0f} s.",
        "",
    ])
