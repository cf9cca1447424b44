"""``otca-patch compare RUN [RUN ...]``: report.md and PNG plots from two or more run folders.

Each RUN is a folder holding the layer's run_log.jsonl (or, for a run without the layer,
upstream's reward.txt), or one of those files. The first run is the reference of the balanced
score. All runs must log the same objectives; --objectives compares a common subset instead.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..files import atomic_write_text
from .logs import LogError, Run, load_run
from .metrics import default_window, reach_table, score_runs, standardiser_from
from .plots import balanced_curves, file_safe, mixture_over_training, reward_curves, step_weight_heatmap
from .report import build_report


def unique_labels(paths: list[Path]) -> list[str]:
    """Folder names; where two runs share a name, the parent folder is prefixed."""
    names = [p.name if p.is_dir() else p.parent.name for p in paths]
    return [f"{p.resolve().parent.name if p.is_dir() else p.resolve().parent.parent.name}/{n}"
            if names.count(n) > 1 else n for p, n in zip(paths, names)]


def align_objectives(runs: list[Run], wanted: tuple[str, ...] | None) -> list[Run]:
    """Every run restricted to ``wanted``; without it, all runs must log the same objectives."""
    if wanted:
        return [run.select(wanted) for run in runs]
    first = runs[0]
    for run in runs[1:]:
        if run.objectives != first.objectives:
            raise LogError(f"objectives differ: {first.label} ({first.path}) logged {list(first.objectives)}, "
                           f"{run.label} ({run.path}) logged {list(run.objectives)}; compare a common subset "
                           f"with --objectives {','.join(o for o in first.objectives if o in run.objectives) or 'NAME'}")
    return runs


def compare(paths: list[Path], out: Path, labels: list[str] | None = None, objectives: tuple[str, ...] | None = None,
            window: int | None = None) -> Path:
    """Writes ``out/report.md`` and its figures; returns the report's path. Raises ``LogError``."""
    if len(paths) < 2:
        raise LogError("compare needs at least two runs")
    if labels is not None and len(labels) != len(paths):
        raise LogError(f"--labels gives {len(labels)} labels for {len(paths)} runs")
    labels = labels or unique_labels(paths)
    if len(set(labels)) != len(labels):
        raise LogError(f"labels repeat: {labels}; pass --labels")
    runs = align_objectives([load_run(p, label) for p, label in zip(paths, labels)], objectives)
    window = window or default_window(min(len(r.steps) for r in runs))
    if window < 1:
        raise LogError(f"--window must be at least 1, got {window}")
    warnings = [w for run in runs for w in run.warnings]
    lengths = {run.label: int(run.steps[-1]) for run in runs}
    if len(set(lengths.values())) > 1:
        warnings.append(f"runs end at different steps ({lengths}): final scores cover different training lengths")

    standardiser = standardiser_from(runs[0])
    scores = score_runs(runs, window, standardiser)
    out.mkdir(parents=True, exist_ok=True)
    figures: dict[str, list[str]] = {"per-objective reward": [], "balanced score": [],
                                     "step weights": [], "objective mixture": []}
    for objective in runs[0].objectives:
        name = f"reward_{file_safe(objective)}.png"
        reward_curves(runs, objective, window, out / name)
        figures["per-objective reward"].append(name)
    balanced_curves(scores, window, out / "balanced_score.png")
    figures["balanced score"].append("balanced_score.png")
    for run in runs:
        if not run.trains_with_credit:
            continue
        if run.step_weights is not None:
            name = f"step_weights_{file_safe(run.label)}.png"
            step_weight_heatmap(run, out / name)
            figures["step weights"].append(name)
        if run.mixture is not None and len(run.objectives) > 1:
            name = f"mixture_{file_safe(run.label)}.png"
            mixture_over_training(run, window, out / name)
            figures["objective mixture"].append(name)
    text = build_report(runs, scores, reach_table(scores), standardiser, window, figures, warnings)
    report = out / "report.md"
    atomic_write_text(report, text)
    for warning in warnings:
        print(f"otca-patch compare: warning: {warning}", file=sys.stderr)
    return report


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="otca-patch compare", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path, help="run folders (or run_log.jsonl / reward.txt files)")
    parser.add_argument("--out", type=Path, default=Path("compare"), help="report folder (default ./compare)")
    parser.add_argument("--labels", help="comma-separated names, one per run (default: folder names)")
    parser.add_argument("--objectives", help="comma-separated objectives to compare (default: all; runs must agree)")
    parser.add_argument("--window", type=int, help="smoothing window in steps (default: a tenth of the shortest run, odd)")
    args = parser.parse_args(argv)
    try:
        report = compare(args.runs, args.out, labels=args.labels.split(",") if args.labels else None,
                         objectives=tuple(args.objectives.split(",")) if args.objectives else None, window=args.window)
    except LogError as exc:
        print(f"otca-patch compare: error: {exc}", file=sys.stderr)
        return 2
    print(f"otca-patch compare: wrote {report} and its figures in {report.parent}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
