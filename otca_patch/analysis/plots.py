"""The comparison's PNG figures (matplotlib's Agg backend: no display needed). Each figure is
written to a temporary name and renamed, so an interrupted run never leaves half a PNG."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from ..files import atomic_path
from .logs import Run
from .metrics import RunScores, smooth


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def file_safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "run"


def _save(fig, path: Path) -> Path:
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
    _pyplot().close(fig)
    return path


def _curve(ax, steps, values, window, label, colour):
    mean, spread = smooth(values, window)
    ax.plot(steps, values, color=colour, alpha=0.3, linewidth=0.8)
    ax.plot(steps, mean, color=colour, linewidth=1.8, label=label)
    ax.fill_between(steps, mean - spread, mean + spread, color=colour, alpha=0.15, linewidth=0)


def reward_curves(runs: list[Run], objective: str, window: int, path: Path) -> Path:
    """Objective's mean reward per training step for every run: raw (faint), smoothed, band."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    for index, run in enumerate(runs):
        k = run.objectives.index(objective)
        _curve(ax, run.steps, run.reward_mean[:, k], window, run.label, f"C{index}")
    ax.set(xlabel="training step", ylabel=f"{objective} (mean over samples and ranks)",
           title=f"{objective}: smoothed over {window} step(s), band = +-1 std within the window")
    ax.legend(fontsize=8)
    return _save(fig, path)


def balanced_curves(scores: list[RunScores], window: int, path: Path) -> Path:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    for index, score in enumerate(scores):
        _curve(ax, score.steps, score.balanced, window, f"{score.label} (final {score.final:+.3f})", f"C{index}")
        ax.axhline(score.final, color=f"C{index}", linestyle=":", linewidth=0.8)
    ax.set(xlabel="training step", ylabel="balanced score (reference-std units)",
           title="balanced score: mean over objectives of the standardised reward")
    ax.legend(fontsize=8)
    return _save(fig, path)


def step_weight_heatmap(run: Run, path: Path) -> Path:
    """Left: sampling step (rows) x training step (columns), the mean step weight OTCA gave. Right:
    the profile over the sampling steps, one line per stretch of training (first, middle, last third),
    so which step gets what reads off directly."""
    plt = _pyplot()
    weights = np.asarray(run.step_weights).T  # [S, T]
    fig, (ax, profile) = plt.subplots(1, 2, figsize=(10.4, 3.6), gridspec_kw={"width_ratios": [1.6, 1]})
    image = ax.imshow(weights, aspect="auto", origin="lower", cmap="viridis", interpolation="nearest",
                      extent=(run.steps[0] - 0.5, run.steps[-1] + 0.5, 0.5, weights.shape[0] + 0.5))
    fig.colorbar(image, ax=ax, label="mean step weight")
    ax.set(xlabel="training step", ylabel="sampling step (1 = first denoising step, noise side)",
           title=f"{run.label}: step weights")
    for index, columns in enumerate(np.array_split(np.arange(weights.shape[1]), min(3, weights.shape[1]))):
        first, last = int(run.steps[columns[0]]), int(run.steps[columns[-1]])
        profile.plot(np.arange(weights.shape[0]), weights[:, columns].mean(axis=1), marker="o", markersize=3,
                     color=f"C{index}", label=f"training steps {first}-{last}" if last > first else f"training step {first}")
    profile.axhline(1.0, color="grey", linestyle=":", linewidth=0.8)
    profile.set(xlabel="sampling step", ylabel="mean step weight", title="profile per sampling step")
    profile.legend(fontsize=8)
    return _save(fig, path)


def mixture_over_training(run: Run, window: int, path: Path) -> Path:
    """Each objective's mean mixture weight per training step (stacked: they sum to 1 per sample)."""
    plt = _pyplot()
    mixture, _ = smooth(np.asarray(run.mixture), window)
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    ax.stackplot(run.steps, mixture.T, labels=run.objectives, alpha=0.8)
    ax.set_ylim(bottom=0)
    ax.set(xlabel="training step", ylabel="mean mixture weight",
           title=f"{run.label}: objective mixture (smoothed over {window} step(s))")
    ax.legend(fontsize=8, loc="upper right")
    return _save(fig, path)
