"""``otca-patch ablate``: every credit mode, the controls and the peers of ``variants`` over several GRPO
seeds on the demo task, as a table in the layout of the paper's Table 4 (rows: methods with their TCD /
MOCA switches; columns: each objective's fraction of the base-to-oracle gap closed, their mean, the
drift from the base and the gradient-conflict diagnostic), mean [95% t-interval] over seeds, each row
minus Multi-GRPO paired by seed, and OTCA minus each peer; per task regime (``--regime``)."""
from __future__ import annotations

import argparse
import dataclasses
import math
import shlex
import sys
import time
from pathlib import Path

from .cli import fail, parse
from otca_patch.flags import add_flags, from_namespace
from otca_patch.help_text import PlainHelpFormatter

from .config import DemoConfig
from .variants import ABLATION_ORDER, PEERS, VARIANTS, short_name

# the regimes, the report and the intervals import torch and scipy: each function below imports what it
# uses, so that `otca-patch ablate --help` does not pay for them

#: The reference of the paired differences: the fair vanilla (per-reward normalisation).
REFERENCE = "multi_grpo"
DEFAULTS = {"out": "runs/ablate", "base_cache": "runs/demo", "resume": True,
            "modes": ",".join([REFERENCE] + [m for m in ABLATION_ORDER if m != REFERENCE])}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="otca-patch ablate", description=__doc__.split("\n\n")[0], formatter_class=PlainHelpFormatter,
        epilog="Writes ablation.md and ablation.json into --out (with --regime both: one folder per regime under "
               "--out, each with its own ablation.md and ablation.json, and both in --out/ablation.json and "
               "--out/ablation.md). The base model of each regime is shared by every run of that regime and "
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
    from .regimes import regime_names
    from .report import plot_result_timing

    try:
        config = from_namespace(DemoConfig, args)
        from .variants import check_available

        check_available(config.mode_list())
    except ValueError as exc:
        return fail(parser.prog, str(exc))
    from .experiment import run_experiment
    from .files import atomic_write_json, atomic_write_text
    from .plots import plot_gradient_conflict

    command = " ".join(["otca-patch ablate"] + [shlex.quote(a) for a in argv])
    out, regimes = Path(config.out), regime_names(config.regime)
    started = time.perf_counter()
    results = {}
    for name in regimes:
        regime_config = dataclasses.replace(config, regime=name, out=str(out / name) if len(regimes) > 1 else config.out)
        regime_started = time.perf_counter()
        try:
            result = run_experiment(regime_config, log=lambda msg: print(msg, file=sys.stderr))
        except (ValueError, OSError) as exc:
            return fail(parser.prog, str(exc), code=1)
        result["seconds"]["total"] = time.perf_counter() - regime_started
        result.pop("samples", None)  # pixels for the demo's samples.png; the ablation's files are numbers
        add_peer_comparisons(result)
        add_decomposition(result)
        folder = Path(regime_config.out)
        atomic_write_json(folder / "ablation.json", result)
        atomic_write_text(folder / "ablation.md", render_markdown(result, command))
        plot_gradient_conflict(result, folder / "gradient_conflict.png")
        plot_result_timing(result, folder / "timing.png")
        results[name] = result
        print(f"\n## regime {name}\n\n" + render_table(result))
    if len(regimes) > 1:
        total = time.perf_counter() - started
        atomic_write_json(out / "ablation.json", {"regimes": results, "command": command, "seconds": {"total": total}})
        atomic_write_text(out / "ablation.md", render_headline(results) + "\n\n"
                          + "\n".join(render_markdown(results[n], command) for n in regimes)
                          + f"\nWall time, {len(regimes)} regimes: {total:.0f} s.\n")
    print(f"\nwrote {out / 'ablation.md'} and {out / 'ablation.json'} in {time.perf_counter() - started:.0f} s")
    return 0


#: Where OTCA's difference to the paper's baseline comes from: (from, to, what the step adds), each
#: ``to - from`` paired by seed. The first three chain sum_raw -> multi_grpo -> moca -> otca; then the
#: totals, the controls, and the gap-fill options (rows appear where both ran).
DECOMPOSITION = (
    ("sum_raw", "multi_grpo", "normalisation: each reward by its own group std instead of one raw sum"),
    ("multi_grpo", "moca", "MOCA: min-norm fusion and exploration bias instead of the sum of advantages"),
    ("moca", "otca", "TCD: the step weights on MOCA's advantage"),
    ("sum_raw", "otca", "all of OTCA against the paper's baseline"),
    ("multi_grpo", "otca", "all of OTCA against per-reward normalisation"),
    ("multi_grpo_moca_rms", "moca", "control: MOCA against Multi-GRPO shrunk to MOCA's RMS (more than a smaller step?)"),
    ("multi_grpo", "tcd_batch", "control: a fixed step schedule alone (TCD's batch-mean weights)"),
    ("tcd_batch", "tcd", "control: TCD's per-trajectory credit beyond its schedule"),
    ("otca", "otca_maxadv", "option: exploration bias scaled by the largest objective advantage"),
    ("otca", "otca_window", "option: rewards to unit std over a running window (App. A.5)"),
    ("sum_raw", "sum_window", "option: the raw sum with each reward rescaled over a running window (App. A.5)"),
    ("multi_grpo", "multi_grpo_timed", "option: each objective spread over the steps that decide it (on Multi-GRPO)"),
    ("otca", "otca_timed", "option: each objective spread over the steps that decide it (on OTCA)"),
)
def _paired(result: dict, candidate: str, reference: str) -> dict:
    """``candidate - reference`` per seed for every table column, mean [95% t-interval] with the thresholds."""
    from ..analysis.intervals import mean_interval

    objectives = result["objectives"]
    by = {(r["mode"], r["seed"]): r for r in result["runs"]}
    value = lambda run, c: run["gap_closed"][c] if c in objectives else run[c]  # noqa: E731
    return {c: mean_interval([value(by[candidate, s], c) - value(by[reference, s], c) for s in result["seeds"]],
                             threshold=result.get("thresholds", {}).get(c)) for c in result["table"][candidate]}


def add_decomposition(result: dict) -> None:
    """``result["decomposition"]``: the rows of ``DECOMPOSITION`` whose two modes ran (``from``, ``to``,
    ``step``, ``differences`` per column, ``verdict``, ``plain``); ``result["below_base"]``: per mode, the
    objectives whose gap closed has its 95% interval below 0 (pushed below the base model)."""
    from ..analysis.intervals import pareto_verdict, plain_line

    modes, objectives = result["modes"], result["objectives"]
    rows = []
    for reference, candidate, step in DECOMPOSITION:
        if reference in modes and candidate in modes:
            diff = _paired(result, candidate, reference)
            rows.append({"from": reference, "to": candidate, "step": step, "differences": diff,
                         "verdict": pareto_verdict({k: diff[k] for k in objectives}, candidate, reference),
                         "plain": plain_line(diff, objectives, short_name(candidate),
                                             short_name(reference))})
    result["decomposition"] = rows
    result["below_base"] = {m: {k: result["table"][m][k] for k in _below_base(result, m)} for m in modes}
    result["regime_condition"] = regime_condition(result)


def _below_base(result: dict, mode: str) -> list:
    """The objectives whose gap closed under ``mode`` has its 95% interval below 0 (below the base model)."""
    return [k for k in result["objectives"] if result["table"][mode][k]["high"] < 0]


#: The baselines whose failure makes a regime one where objectives really fight.
FIGHT_BASELINES = ("sum_raw", "multi_grpo")


def regime_condition(result: dict) -> dict:
    """The hacking regime's own condition, stated for every regime: under ``sum_raw`` or ``multi_grpo``
    some objective's gap closed has its 95% interval below 0. ``{"met": bool|None, "hurt": {mode:
    [objectives]}}``; ``met`` is None when neither baseline ran."""
    ran = [m for m in FIGHT_BASELINES if m in result["modes"]]
    hurt = {m: _below_base(result, m) for m in ran}
    return {"met": any(hurt.values()) if ran else None, "hurt": hurt}


def regime_condition_line(result: dict) -> str:
    condition = result.get("regime_condition") or regime_condition(result)
    if condition["met"] is None:
        return "- Objectives fight: not tested (neither `sum_raw` nor `multi_grpo` ran)."
    hurt = "; ".join(f"`{m}` lowers {', '.join(ks)}" for m, ks in condition["hurt"].items() if ks)
    return ("- Objectives fight: **yes**, a baseline pushes an objective below the base model (" + hurt + ")."
            if condition["met"] else
            "- Objectives fight: **no**, neither `sum_raw` nor `multi_grpo` pushes any objective below the base model "
            "with its interval below 0 (the hacking regime's condition is not met).")


def add_peer_comparisons(result: dict, candidate: str = "otca") -> None:
    """``result["peer_comparisons"]``: ``candidate`` minus each peer that ran, paired by seed (every
    column, mean [95% t-interval], with the practical threshold of ``result["thresholds"]``), and
    ``result["peer_verdicts"]`` from ``stats.pareto_verdict`` (the rule ``compare`` uses)."""
    from ..analysis.intervals import mean_interval, pareto_verdict

    modes, seeds, objectives = result["modes"], result["seeds"], result["objectives"]
    result["peer_comparisons"], result["peer_verdicts"] = {}, {}
    if candidate not in modes:
        return
    by = {(r["mode"], r["seed"]): r for r in result["runs"]}
    columns = list(result["table"][candidate])

    def value(run, column):
        return run["gap_closed"][column] if column in objectives else run[column]

    for peer in (v.name for v in PEERS if v.name in modes):
        diff = {c: mean_interval([value(by[candidate, s], c) - value(by[peer, s], c) for s in seeds],
                                 threshold=result.get("thresholds", {}).get(c)) for c in columns}
        result["peer_comparisons"][peer] = diff
        result["peer_verdicts"][peer] = pareto_verdict({k: diff[k] for k in objectives}, candidate, peer)


def _order(modes: list) -> list:
    return sorted(modes, key=ABLATION_ORDER.index)


#: The diagnostic's columns as the tables head them.
_DIAGNOSTIC_HEADS = ("grad. conflict (share of updates)", "worst cosine")


def _cells(row: dict, objectives: list) -> list:
    from .report import interval

    return ([interval(row[c]) for c in objectives + ["mean_gap_closed"]] + [interval(row["drift"], 4)]
            + [interval(row[c]) if c in row else "n/a" for c in ("gradient_conflict", "worst_cosine")])


def _heads(objectives: list) -> tuple[str, str]:
    names = objectives + ["mean gap closed", "drift", *_DIAGNOSTIC_HEADS]
    return " | ".join(names), "---:|" * len(names)


def render_table(result: dict) -> str:
    """The Table-4 layout: method, TCD, MOCA, one column per objective's gap closed, mean, drift, and
    the gradient-conflict diagnostic."""
    objectives = result["objectives"]
    heads, rule = _heads(objectives)
    lines = [f"| Method | variant | TCD | MOCA | {heads} |", f"|---|---|:-:|:-:|{rule}"]
    for mode in _order(result["modes"]):
        variant, row = VARIANTS[mode], result["table"][mode]
        tcd = ("✓ (batch)" if variant.options.get("weight_scope") == "batch" else "✓") if variant.step_weighted else "✗"
        moca = "✓" if variant.mode_fuses else "✗"
        lines.append(f"| {variant.description} | `{mode}` | {tcd} | {moca} | " + " | ".join(_cells(row, objectives)) + " |")
    return "\n".join(lines)


def render_differences(result: dict, key: str = "comparisons", verdicts: str = "verdicts", label: str = "") -> str:
    """Paired differences with their verdicts: each variant minus the reference (default), or, with
    ``key="peer_comparisons"``, OTCA minus each peer."""
    objectives = result["objectives"]
    heads, rule = _heads(objectives)
    label = label or f"variant - `{result['reference_mode']}`"
    lines = [f"| {label} | {heads} | verdict |", f"|---|{rule}---|"]
    for mode in _order(list(result[key])):
        lines.append(f"| `{mode}` | " + " | ".join(_cells(result[key][mode], objectives)) + f" | {result[verdicts][mode]} |")
    return "\n".join(lines)


def render_decomposition(result: dict) -> str:
    """The decomposition rows: ``to - from``, paired by seed, every column, with the verdict."""
    objectives = result["objectives"]
    heads, rule = _heads(objectives)
    lines = [f"| step | difference | {heads} | verdict |", f"|---|---|{rule}---|"]
    for row in result.get("decomposition", []):
        lines.append(f"| {row['step']} | `{row['to']}` - `{row['from']}` | "
                     + " | ".join(_cells(row["differences"], objectives)) + f" | {row['verdict']} |")
    return "\n".join(lines)


def render_headline(results: dict) -> str:
    """The decomposition of every regime in one table (``{regime: result}``): per step and regime, each
    objective's paired difference, the mean gap closed, the drift and the plain verdict."""
    from .report import interval

    lines = ["| regime | step | difference | objectives (paired difference of gap closed) | mean gap closed | drift | "
             "reading |", "|---|---|---|---|---:|---:|---|"]
    for name, result in results.items():
        for row in result.get("decomposition", []):
            diff = row["differences"]
            objectives = "; ".join(f"{k} {interval(diff[k])}" for k in result["objectives"])
            reading = row["plain"].split(": ", 1)[1].rsplit(" \u2192 ", 1)[1]
            lines.append(f"| {name} | {row['step']} | `{row['to']}` - `{row['from']}` | {objectives} | "
                         f"{interval(diff['mean_gap_closed'])} | {interval(diff['drift'], 4)} | {reading} |")
    seeds = sorted({len(r["seeds"]) for r in results.values()})
    return (f"Decomposition, paired by seed ({'/'.join(map(str, seeds))} seeds), mean [95% t-interval]; reading: "
            "the verdict rule of `otca_patch/analysis/verdict.py` over the objectives.\n\n" + "\n".join(lines))


def below_base_lines(result: dict) -> list:
    """One line per mode that pushed an objective below the base model (interval below 0)."""
    from .report import interval

    return [f"- `{mode}` lowers " + ", ".join(f"{k} to {interval(v)}" for k, v in hurt.items())
            + " (gap closed, 95% interval below 0: below the base model)"
            for mode, hurt in result.get("below_base", {}).items() if hurt]


def render_markdown(result: dict, command: str) -> str:
    from .report import interval, timing_lines

    cfg, seeds = result["config"], result["seeds"]
    regime = result.get("regime", "conflicting")
    peers = ["", "OTCA minus each peer, paired by seed (what the intervals say about where OTCA stands):", "",
             render_differences(result, "peer_comparisons", "peer_verdicts", "`otca` - peer")] \
        if result.get("peer_comparisons") else []
    plain = [f"- {row['plain']}" for row in result.get("decomposition", [])]
    hurt = below_base_lines(result) or ["- No variant pushed any objective below the base model (no interval below 0)."]
    conflict = [f"`{m}` {interval(result['table'][m]['gradient_conflict'])}" for m in _order(result["modes"])
                if not math.isnan(result["table"][m].get("gradient_conflict", {"mean": math.nan})["mean"])]
    return "\n".join([
        f"# Ablation on the demo task, regime `{regime}` (the paper's Table 4 layout, with controls and peers)",
        "",
        *plain,
        *hurt,
        regime_condition_line(result),
        *([f"- Gradient-conflict share (updates where some objective's own gradient opposes the applied update): "
           + ", ".join(conflict) + "."] if conflict else []),
        "",
        f"Command: `{command}`; regime `{regime}` (objectives {', '.join(result['objectives'])}); seeds "
        f"{', '.join(map(str, seeds))}; {cfg['grpo_steps']} GRPO iterations x "
        f"{cfg['prompts_per_step']} prompts x {cfg['group_size']} samples per run, {cfg['sampling_steps']} sampling steps, "
        f"lr {cfg['learning_rate']}, clip {cfg['clip_range']}. Every run starts from the same cached base model; within a "
        "seed every variant draws the same prompts and noise.",
        "",
        "Base model " + ", ".join(f"{k} {v:.4f}" for k, v in result["base"].items()) + "; oracle (clean renders) "
        + ", ".join(f"{k} {v:.4f}" for k, v in result["oracle"].items()) + ".",
        "",
        "Fraction of the base-to-oracle gap closed per objective (0 = base, 1 = oracle), their mean, the drift (mean "
        "per-step Gaussian KL to the base model on the evaluation set), and the gradient-conflict diagnostic (share of "
        "updates in which some objective's own gradient has a negative cosine with the applied update; mean over "
        "updates of the worst objective's cosine); mean [95% t-interval] over seeds:",
        "",
        render_table(result),
        "",
        "Where the difference comes from (the decomposition: each step `to` - `from`, paired by seed, mean [95% "
        "t-interval]; rows appear where both modes ran):",
        "",
        render_decomposition(result),
        "",
        f"Paired by seed, each variant minus `{result['reference_mode']}`:",
        "",
        render_differences(result),
        *peers,
        "",
        "Controls: `tcd_batch` keeps only TCD's batch-mean step schedule (if it matches `tcd`, TCD's per-trajectory "
        "credit adds nothing here); `multi_grpo_moca_rms` is Multi-GRPO shrunk to MOCA's advantage RMS (if it matches "
        "`moca`, MOCA acts as a smaller step); `moca_beta0`, `moca_centred`, `moca_group` change MOCA's bias and fusion. "
        "Peers (other papers' step credit, run here for comparison; they are not OTCA): `coca` (CoCA), `tempflow` "
        "(TempFlow-GRPO), `marble` (MARBLE).",
        "",
        *timing_lines(result),
        f"Wall time: {result['seconds']['total']:.0f} s.",
        "",
    ])
