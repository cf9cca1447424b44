"""``report.md`` of a comparison: what was compared, the numbers, the figures, and how each number
is defined (so a reader never has to open the code to know what "balanced score" means)."""
from __future__ import annotations

import numpy as np

from .difference import Difference
from .logs import Run
from .metrics import RunScores, Standardiser
from .sides import Side
from .verdict import BETTER, NEGLIGIBLE, NONE, UNDECIDED, WORSE


def final_means(run: Run, window: int) -> np.ndarray:
    """Each objective's mean reward over the run's last ``window`` steps."""
    return run.reward_mean[-window:].mean(axis=0)


def _steps(count: int) -> str:
    return f"{count} step" + ("" if count == 1 else "s")


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def _kind(run: Run) -> str:
    if run.source == "reward.txt":
        return "vanilla (upstream reward.txt only)"
    if run.observe:
        return "vanilla, observed (credit logged, not trained)"
    return f"OTCA, mode {run.mode}"


def _number(value: float) -> str:
    return f"{value:+.4g}" if np.isfinite(value) else "n/a"


def _verdict_words(diff: Difference, candidate: str, reference: str) -> str:
    if diff.verdict == BETTER:
        return f"**{candidate} better**"
    if diff.verdict == WORSE:
        return f"**{candidate} worse**"
    if diff.verdict == NEGLIGIBLE:
        return "negligible (real, within the threshold)"
    if diff.verdict == UNDECIDED:
        return f"{UNDECIDED} (the 95% interval reaches across the practical threshold: more seeds decide it)"
    return NONE


def verdict_section(sides: list[Side], differences: dict, cycle: tuple, window: int, threshold: float) -> list[str]:
    """The answer first: each side against the reference, per objective and balanced, with intervals."""
    reference = sides[0]
    lines = ["## Verdict", ""]
    _, how, block = cycle
    for side in sides[1:]:
        diffs: list[Difference] = differences[side.label]
        balanced = diffs[-1]
        lines += [f"### {side.label} - {reference.label}", "",
                  f"Balanced score: {_number(balanced.mean)} [{_number(balanced.low)}, {_number(balanced.high)}] "
                  f"(95% interval, in sigmas): {_verdict_words(balanced, side.label, reference.label)}.", ""]
        rows = []
        for diff in diffs:
            rows.append([diff.name, f"{diff.reference:.4g}", f"{diff.candidate:.4g}",
                         f"{_number(diff.mean)} [{_number(diff.low)}, {_number(diff.high)}]",
                         f"+-{diff.threshold:.3g}", _verdict_words(diff, side.label, reference.label)])
        lines += _table(["objective", f"{reference.label} ({_runs(reference)})", f"{side.label} ({_runs(side)})",
                         f"{side.label} - {reference.label} [95% interval]", "practical threshold", "verdict"], rows)
        lines += ["", f"How the interval was formed: {balanced.method}."]
        notes = [f"{d.name}: {note}" for d in diffs for note in d.notes]
        lines += [f"- {note}" for note in notes]
        lines.append("")
    several = any(s.count > 1 for s in sides)
    lines += [f"Columns 2-3: each side's mean over the steps both sides logged{' (and over its runs)' if several else ''}. "
              f"A difference is **better** or **worse** when its 95% interval lies wholly beyond the practical "
              f"threshold (+-{threshold:g} sigma of the objective; the balanced score's unit is one sigma; "
              "`--threshold` changes it), **no detectable difference** when it contains 0 and lies wholly within, "
              "**negligible** when it lies wholly within and excludes 0, else **not decided** (it reaches across "
              "the threshold: more seeds decide it)."]
    if not several:
        lines.append(f"Stretches of {_steps(block)}: {how}.")
    lines += [f"Final scores and steps to reach use the last {_steps(window)}.", ""]
    return lines


def trainer_file(run: Run) -> str:
    """The trainer file the layer rewrote for ``run`` (the run log's ``spec``), and its target."""
    if run.source != "run_log":
        return "not logged (upstream's reward.txt)"
    if not run.spec.get("file"):
        return "not logged (a run log from before the layer recorded it)"
    return f"`{run.spec['file']}` ({run.spec.get('target', 'target not logged')})"


def reach_section(scores: list[RunScores], reach: dict, window: int) -> list[str]:
    lines = ["", "## Steps to reach the other run's final balanced score", "",
             f"Row run's first training step whose trailing mean balanced score over {_steps(window)} (whole prompt "
             "cycles) is at least the column run's final score; \"never\" = not within the row run's steps.", ""]
    labels = [s.label for s in scores]
    return lines + _table(["run \\ target", *[f"{b} ({s.final:+.3f})" for b, s in zip(labels, scores)]],
                          [[a, *["-" if a == b else (str(reach[a, b]) if reach[a, b] is not None else "never")
                                 for b in labels]] for a in labels])


def _runs(side: Side) -> str:
    return f"{side.count} run" + ("" if side.count == 1 else "s")


def build_report(sides: list[Side], scores: list[RunScores], reach: dict, standardiser: Standardiser,
                 window: int, figures: dict[str, list[str]], warnings: list[str], differences: dict,
                 cycle: tuple, threshold: float, samples: str | None = None) -> str:
    """``samples``: the lines that show the runs' samples (``sample_panels``), first in the report."""
    runs = [side.merged for side in sides]
    objectives = runs[0].objectives
    compared = len(sides) > 1  # one run alone: its pictures and scores, nothing that needs a second run
    lines = ["# Run comparison" if compared else f"# Run {runs[0].label}", ""] + ([samples, ""] if samples else [])
    lines += _table(["run", "kind", "trainer file", "log", "runs (seeds)", "steps", "samples / step"],
                    [[r.label, _kind(r), trainer_file(r), f"`{r.path}`", str(side.count),
                      f"{r.steps[0]}-{r.steps[-1]} ({len(r.steps)})",
                      str(int(r.samples[0])) if r.samples[0] else "mean only"] for side, r in zip(sides, runs)])
    lines += ["", f"Objectives: {', '.join(objectives)}. Window: {_steps(window)}.", ""]
    if compared:
        lines += verdict_section(sides, differences, cycle, window, threshold)
    lines += ["## Final scores", "",
              f"Mean over each run's last {_steps(window)} of the per-step mean reward (higher is better), "
              "and of the balanced score.", ""]
    rows = []
    for run, score in zip(runs, scores):
        rows.append([run.label, *[f"{v:.4f}" for v in final_means(run, window)], f"{score.final:+.3f}"])
    lines += _table(["run", *objectives, "balanced"], rows)

    if compared:
        lines += reach_section(scores, reach, window)

    reference = f"the reference run **{runs[0].label}**" if compared else "the run"
    lines += ["", "## Balanced score", "",
              "balanced(t) = mean over objectives k of (m[t,k] - mu_k) / sigma_k, where m[t,k] is objective k's "
              f"mean reward at step t (over samples and ranks), mu_k its mean over the first {_steps(window)} of "
              f"{reference}, and sigma_k a robust spread of the objective (below). "
              + ("All runs share mu and sigma: 0 is the reference's start" if compared else "0 is the run's start")
              + ", 1 is one sample std of each objective on average.", ""]
    lines += _table(["objective", "mu", "sigma", "sigma from"],
                    [[name, f"{m:.4f}", f"{s:.4f}" if np.isfinite(s) else "-", how]
                     for name, m, s, how in zip(objectives, standardiser.mean, standardiser.std, standardiser.how)])
    lines += ["", "## Figures", "",
              f"Curves: faint = per-step mean, bold = centred moving mean over {_steps(window)}, "
              "band = +-1 standard deviation of the per-step means inside that window.", ""]
    for title, paths in figures.items():
        for path in paths:
            lines.append(f"![{title}]({path})")
        lines.append("")
    credit_runs = [r for r in runs if r.trains_with_credit]
    if not credit_runs:
        lines += ["No run trained with OTCA's credit, so there is no step-weight heatmap or mixture plot "
                  "(observed runs log the credit they would have given in their run_log.jsonl).", ""]

    if warnings:
        lines += ["## Warnings", "", *[f"- {w}" for w in warnings], ""]
    return "\n".join(lines).rstrip() + "\n"
