"""The comparison's PNG figures (matplotlib's Agg backend: no display needed). Each figure is
written to a temporary name and renamed, so an interrupted run never leaves half a PNG."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from .figure_style import note_coinciding, pyplot, run_look, save, step_ticks, tint
from .logs import Run
from .metrics import RunScores, smooth


def file_safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "run"


def _curve(ax, steps, values, window, label, index):
    """One run: its per-step values (a light line with hollow markers), their moving mean (bold) and the
    band of +-1 std (filled faintly, edged with light lines), all in the run's colour and line style,
    opaque, so a run drawn over another leaves the other's colour visible between its dashes."""
    look = run_look(index)
    light = tint(look["color"])
    mean, spread = smooth(values, window)
    ax.fill_between(steps, mean - spread, mean + spread, color=look["color"], alpha=0.07, linewidth=0)
    for edge in (mean - spread, mean + spread):
        ax.plot(steps, edge, color=light, linestyle=look["linestyle"], linewidth=0.7)
    ax.plot(steps, values, color=light, linestyle=look["linestyle"], marker=look["marker"], markersize=5,
            markerfacecolor="none", linewidth=1.1)
    ax.plot(steps, mean, color=look["color"], linestyle=look["linestyle"], linewidth=1.8, label=label)


def _step_axis(ax, steps_of: list) -> None:
    step_ticks(ax.xaxis, min(int(s[0]) for s in steps_of), max(int(s[-1]) for s in steps_of))


def reward_curves(runs: list[Run], objective: str, window: int, path: Path) -> Path:
    """Objective's mean reward per training step for every run: per step (faint), smoothed, band; runs
    that coincide are named in the title."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    curves = []
    for index, run in enumerate(runs):
        values = run.reward_mean[:, run.objectives.index(objective)]
        _curve(ax, run.steps, values, window, run.label, index)
        curves.append((run.steps, values))
    ax.set(xlabel="training step", ylabel=f"{objective} (mean over samples and ranks)",
           title=f"{objective}: smoothed over {_steps(window)}, band = +-1 std within the window")
    note_coinciding(ax, [run.label for run in runs], curves)
    _step_axis(ax, [run.steps for run in runs])
    ax.legend(fontsize=8)
    return save(fig, path)


def _steps(count: int) -> str:
    return f"{count} step" + ("" if count == 1 else "s")


def balanced_curves(scores: list[RunScores], window: int, path: Path) -> Path:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    for index, score in enumerate(scores):
        _curve(ax, score.steps, score.balanced, window, f"{score.label} (final {score.final:+.3f})", index)
        look = run_look(index)
        ax.axhline(score.final, color=look["color"], linestyle=look["linestyle"], linewidth=0.9)
    ax.set(xlabel="training step", ylabel="balanced score (reference-std units)",
           title="balanced score: mean over objectives of the standardised reward")
    note_coinciding(ax, [score.label for score in scores], [(score.steps, score.balanced) for score in scores])
    _step_axis(ax, [score.steps for score in scores])
    ax.legend(fontsize=8)
    return save(fig, path)


def step_weight_heatmap(run: Run, path: Path) -> Path:
    """Left: sampling step (rows) x training step (columns), the mean step weight OTCA gave. Right:
    the profile over the sampling steps, one line per stretch of training (first, middle, last third),
    so which step gets what reads off directly. Both number the sampling steps 1..S (1 = noise side)."""
    plt = pyplot()
    weights = np.asarray(run.step_weights).T  # [S, T]
    sampling = np.arange(1, weights.shape[0] + 1)
    fig, (ax, profile) = plt.subplots(1, 2, figsize=(10.4, 3.6), gridspec_kw={"width_ratios": [1.6, 1]},
                                      layout="constrained")
    image = ax.imshow(weights, aspect="auto", origin="lower", cmap="viridis", interpolation="nearest",
                      extent=(run.steps[0] - 0.5, run.steps[-1] + 0.5, 0.5, weights.shape[0] + 0.5))
    fig.colorbar(image, ax=ax)  # unlabelled: the title names the colour, beside the profile's own axis label
    ax.set(xlabel="training step", ylabel="sampling step (1 = first, noise side)",
           title=f"{run.label}: mean step weight (colour)")
    step_ticks(ax.xaxis, run.steps[0], run.steps[-1])
    step_ticks(ax.yaxis, 1, weights.shape[0])
    for index, columns in enumerate(np.array_split(np.arange(weights.shape[1]), min(3, weights.shape[1]))):
        first, last = int(run.steps[columns[0]]), int(run.steps[columns[-1]])
        look = run_look(index)
        profile.plot(sampling, weights[:, columns].mean(axis=1), markersize=4, **look,
                     label=f"training steps {first}-{last}" if last > first else f"training step {first}")
    profile.axhline(1.0, color="grey", linestyle=":", linewidth=0.8)
    profile.set(xlabel="sampling step (1 = first, noise side)", ylabel="mean step weight",
                title="profile per sampling step")
    step_ticks(profile.xaxis, 1, weights.shape[0])
    profile.legend(fontsize=8)
    return save(fig, path)


def mixture_over_training(run: Run, window: int, path: Path) -> Path:
    """Each objective's mean mixture weight per training step (stacked: they sum to 1 per sample)."""
    plt = pyplot()
    mixture, _ = smooth(np.asarray(run.mixture), window)
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    ax.stackplot(run.steps, mixture.T, labels=run.objectives, alpha=0.8)
    ax.set_ylim(bottom=0)
    ax.set(xlabel="training step", ylabel="mean mixture weight",
           title=f"{run.label}: objective mixture (smoothed over {_steps(window)})")
    _step_axis(ax, [run.steps])
    ax.legend(fontsize=8, loc="upper right")
    return save(fig, path)
