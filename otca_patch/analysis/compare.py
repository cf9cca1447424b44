"""The work of ``otca-patch compare`` (``compare_command``: its flags and messages): report.md and
PNG plots from run folders."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from ..files import atomic_write_text
from .cycle import cycle_window, detect_cycle
from .difference import compare_sides
from .logs import LogError, Run
from .metrics import reach_table, score_runs, standardiser_from
from .plots import balanced_curves, file_safe, mixture_over_training, reward_curves, step_weight_heatmap
from .report import build_report
from .sample_panels import samples_figure
from .sides import Side, load_side
from .verdict import DEFAULT_THRESHOLD


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


def positive_int(name: str, value) -> int | None:
    """``value`` as an integer >= 1 (None stays None); else ``LogError`` naming the flag."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise LogError(f"--{name} must be a whole number of steps >= 1, got {value!r}")
    return value


def compare(paths: list[Path], out: Path, labels: list[str] | None = None, objectives: tuple[str, ...] | None = None,
            window: int | None = None, cycle: int | None = None, threshold: float = DEFAULT_THRESHOLD) -> Path:
    """Writes ``out/report.md`` and its figures; returns the report's path. Raises ``LogError``.

    ``window``: steps of the final score and steps-to-reach (default: whole prompt cycles);
    ``cycle``: the prompt cycle in steps (default: detected); ``threshold``: the practical
    threshold in units of each objective's sigma (the balanced score's unit)."""
    window, cycle = positive_int("window", window), positive_int("cycle", cycle)
    if not (isinstance(threshold, (int, float)) and threshold >= 0):
        raise LogError(f"--threshold must be a number >= 0 (in objective sigmas), got {threshold!r}")
    labels = checked_labels(paths, labels)
    sides = load_aligned_sides(paths, labels, objectives)
    runs = [side.merged for side in sides]
    length = min(len(r.steps) for r in runs)
    every_run = [r for side in sides for r in side.runs]  # sigma from the runs themselves, not the seed means
    standardiser = standardiser_from(every_run, 1, reference=runs[0])
    if cycle is None:
        cycle, cycle_how = detect_cycle(standardiser.balanced(runs[0].reward_mean))
    else:
        cycle_how = f"whole repeats of the {cycle}-step prompt order given with --cycle"
    if window is not None and window > length:
        raise LogError(f"--window {window} is longer than the shortest run ({length} steps)")
    block = cycle_window(cycle, length)  # the differences' blocks: always whole prompt cycles
    window = window or block
    standardiser = standardiser_from(every_run, window, reference=runs[0])
    warnings = [w for run in runs for w in run.warnings]
    trainers = {run.label: run.spec["file"] for run in runs if run.spec.get("file")}
    if len(set(trainers.values())) > 1:
        warnings.append(f"the runs rewrote different trainer files ({trainers}): the comparison mixes trainers")
    lengths = {run.label: int(run.steps[-1]) for run in runs}
    if len(set(lengths.values())) > 1:
        warnings.append(f"runs end at different steps ({lengths}): final scores cover different training lengths; "
                        "the differences use the steps both sides logged")

    scores = score_runs(runs, window, standardiser)
    differences = {side.label: side_differences(sides[0], side, standardiser, block, threshold)
                   for side in sides[1:]}
    out.mkdir(parents=True, exist_ok=True)
    figures = draw_figures(runs, scores, window, out)
    text = build_report(sides, scores, reach_table(scores), standardiser, window, figures, warnings,
                        differences=differences, cycle=(cycle, cycle_how, block), threshold=threshold,
                        samples=samples_figure(sides, out))
    report = out / "report.md"
    atomic_write_text(report, text)
    for warning in warnings:
        print(f"otca-patch compare: warning: {warning}", file=sys.stderr)
    return report


def checked_labels(paths: list[Path], labels: list[str] | None) -> list[str]:
    """The runs' labels (``labels``, or names from the runs' paths); raises ``LogError`` when there is no
    run, a run's path does not exist, or the labels do not name every run once."""
    if not paths:
        raise LogError("compare needs a run (one draws its pictures; two or more are compared)")
    missing = [str(path) for path in paths if not path.exists()]
    if missing:
        raise LogError(f"no such run folder or log file: {', '.join(missing)}")
    if labels is not None and len(labels) != len(paths):
        raise LogError(f"--labels gives {len(labels)} labels for {len(paths)} runs")
    labels = labels or unique_labels(paths)
    if len(set(labels)) != len(labels):
        raise LogError(f"labels repeat: {labels}; pass --labels")
    return labels


def load_aligned_sides(paths: list[Path], labels: list[str], objectives: tuple[str, ...] | None) -> list[Side]:
    """Each run's side, its merged run and every seed's run restricted to ``objectives`` (without them, every
    run must log the same objectives: ``LogError`` otherwise)."""
    sides = [load_side(p, label) for p, label in zip(paths, labels)]
    merged = align_objectives([side.merged for side in sides], objectives)
    for side, run in zip(sides, merged):
        side.merged = run
        side.runs = align_objectives(side.runs, run.objectives) if len(side.runs) > 1 else [run]
    return sides


def draw_figures(runs: list[Run], scores, window: int, out: Path) -> dict[str, list[str]]:
    """Draws the figures into ``out``: each objective's reward, the balanced score, and per run that trains with
    credit its step weights and objective mixture. Returns the file names by figure kind."""
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
    return figures


def side_differences(reference: Side, candidate: Side, standardiser, block: int, threshold: float) -> list:
    """Per objective (in its own units) and for the balanced score (in sigmas): candidate - reference."""
    names = list(reference.merged.objectives) + ["balanced"]
    limits = [threshold * s for s in standardiser.std] + [threshold]

    def series(run: Run):
        return np.column_stack([run.reward_mean, standardiser.balanced(run.reward_mean)])

    return compare_sides(reference.runs, candidate.runs, series, names, limits, block)


def headlines(report: Path) -> list[str]:
    """The verdict on the balanced score of each compared pair, as the report states it."""
    lines, pair = [], None
    for line in report.read_text().splitlines():
        if line.startswith("### "):
            pair = line[4:]
        elif line.startswith("Balanced score:") and pair:
            lines.append(f"{pair}: {line.replace('**', '')}")
    return lines
