"""``report.md`` of a comparison: what was compared, the numbers, the figures, and how each number
is defined (so a reader never has to open the code to know what "balanced score" means)."""
from __future__ import annotations

import numpy as np

from .logs import Run
from .metrics import RunScores, Standardiser


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


def build_report(runs: list[Run], scores: list[RunScores], reach: dict, standardiser: Standardiser,
                 window: int, figures: dict[str, list[str]], warnings: list[str]) -> str:
    objectives = runs[0].objectives
    lines = ["# Run comparison", ""]
    lines += _table(["run", "kind", "log", "steps", "samples / step"],
                    [[r.label, _kind(r), f"`{r.path}`", f"{r.steps[0]}-{r.steps[-1]} ({len(r.steps)})",
                      str(int(r.samples[0])) if r.samples[0] else "mean only"] for r in runs])
    lines += ["", f"Objectives: {', '.join(objectives)}. Smoothing window: {_steps(window)}.", ""]

    lines += ["## Final scores", "",
              f"Mean over each run's last {_steps(window)} of the per-step mean reward (higher is better), "
              "and of the balanced score.", ""]
    rows = []
    for run, score in zip(runs, scores):
        rows.append([run.label, *[f"{v:.4f}" for v in final_means(run, window)], f"{score.final:+.3f}"])
    lines += _table(["run", *objectives, "balanced"], rows)

    lines += ["", "## Steps to reach the other run's final balanced score", "",
              "Row run's first training step whose smoothed balanced score is at least the column run's "
              "final score; \"never\" = not within the row run's steps.", ""]
    labels = [s.label for s in scores]
    lines += _table(["run \\ target", *[f"{b} ({s.final:+.3f})" for b, s in zip(labels, scores)]],
                    [[a, *["-" if a == b else (str(reach[a, b]) if reach[a, b] is not None else "never")
                           for b in labels]] for a in labels])

    lines += ["", "## Balanced score", "",
              "balanced(t) = mean over objectives k of (m[t,k] - mu_k) / sigma_k, where m[t,k] is objective k's "
              "mean reward at step t (over samples and ranks) and mu_k, sigma_k are the mean and standard "
              f"deviation over the samples of the reference run **{runs[0].label}** at its first logged step "
              f"(step {runs[0].steps[0]}). All runs share mu and sigma: 0 is the reference's starting point, "
              "1 is one starting-sample std of each objective on average.", ""]
    lines += _table(["objective", "mu", "sigma"],
                    [[name, f"{m:.4f}", f"{s:.4f}" + (" (no spread: 1)" if name in standardiser.unit_std else "")]
                     for name, m, s in zip(objectives, standardiser.mean, standardiser.std)])

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
