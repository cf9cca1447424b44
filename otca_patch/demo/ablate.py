"""``otca-patch ablate``: every credit mode, the controls and the peers of ``variants`` over several GRPO
seeds on the demo task, as a table in the layout of the paper's Table 4 (rows: methods with their TCD /
MOCA switches; columns: each objective's fraction of the base-to-oracle gap closed, their mean, the
drift from the base and the gradient-conflict diagnostic), mean [95% t-interval] over seeds, each row
minus Multi-GRPO paired by seed, and OTCA minus each peer; per task regime (``--regime``)."""
from __future__ import annotations

import argparse
import dataclasses
import shlex
import sys
import time
from pathlib import Path

from .cli import fail, parse
from otca_patch.flags import add_flags, from_namespace

from .config import DemoConfig
from .regimes import regime_names
from .report import interval
from ..analysis.intervals import mean_interval, pareto_verdict
from .variants import ABLATION_ORDER, PEERS, VARIANTS

#: The reference of the paired differences: the fair vanilla (per-reward normalisation).
REFERENCE = "multi_grpo"
DEFAULTS = {"out": "runs/ablate", "base_cache": "runs/demo", "resume": True,
            "modes": ",".join([REFERENCE] + [m for m in ABLATION_ORDER if m != REFERENCE])}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="otca-patch ablate", description=__doc__.split("\n\n")[0],
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
        add_peer_comparisons(result)
        folder = Path(regime_config.out)
        atomic_write_json(folder / "ablation.json", result)
        atomic_write_text(folder / "ablation.md", render_markdown(result, command))
        plot_gradient_conflict(result, folder / "gradient_conflict.png")
        results[name] = result
        print(f"\n## regime {name}\n\n" + render_table(result))
    if len(regimes) > 1:
        total = time.perf_counter() - started
        atomic_write_json(out / "ablation.json", {"regimes": results, "command": command, "seconds": {"total": total}})
        atomic_write_text(out / "ablation.md", "\n".join(render_markdown(results[n], command) for n in regimes)
                          + f"\nWall time, both regimes: {total:.0f} s.\n")
    print(f"\nwrote {out / 'ablation.md'} and {out / 'ablation.json'} in {time.perf_counter() - started:.0f} s")
    return 0


def add_peer_comparisons(result: dict, candidate: str = "otca") -> None:
    """``result["peer_comparisons"]``: ``candidate`` minus each peer that ran, paired by seed (every
    column, mean [95% t-interval], with the practical threshold of ``result["thresholds"]``), and
    ``result["peer_verdicts"]`` from ``stats.pareto_verdict`` (the rule ``compare`` uses)."""
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
        moca = "✓" if variant.mode in ("moca", "otca") else "✗"
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


def render_markdown(result: dict, command: str) -> str:
    cfg, seeds = result["config"], result["seeds"]
    regime = result.get("regime", "conflicting")
    peers = ["", "OTCA minus each peer, paired by seed (what the intervals say about where OTCA stands):", "",
             render_differences(result, "peer_comparisons", "peer_verdicts", "`otca` - peer")] \
        if result.get("peer_comparisons") else []
    return "\n".join([
        f"# Ablation on the demo task, regime `{regime}` (the paper's Table 4 layout, with controls and peers)",
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
        f"Paired by seed, each variant minus `{result['reference_mode']}`:",
        "",
        render_differences(result),
        *peers,
        "",
        "Controls: `tcd_batch` keeps only TCD's batch-mean step schedule (if it matches `tcd`, TCD's per-trajectory "
        "credit adds nothing here); `multi_grpo_moca_rms` is Multi-GRPO shrunk to MOCA's advantage RMS (if it matches "
        "`moca`, MOCA acts as a smaller step); `moca_beta0`, `moca_centred`, `moca_group` change MOCA's bias and fusion. "
        "Peers (comparison methods, docs/credit.md section 8): `coca`, `tempflow`, `marble`.",
        "",
        f"Wall time: {result['seconds']['total']:.0f} s.",
        "",
    ])
