"""The demo's figures, each written atomically (matplotlib's Agg backend, no display): iterations on
whole-number ticks, each variant in its own colour, line style and marker, and a line in a panel's
title wherever variants coincide there."""
from __future__ import annotations

import numpy as np

from ..analysis.figure_style import note_coinciding, pyplot, run_look, save, step_ticks, tint
from .variants import VARIANTS


def _seed_mean(result: dict, mode: str, key: str) -> np.ndarray:
    """The mean over seeds of one history list of ``mode``."""
    return np.mean([np.asarray(r["history"][key], dtype=float) for r in result["runs"] if r["mode"] == mode], axis=0)


def plot_reward_curves(result: dict, path) -> None:
    """One panel per objective: the evaluation's fraction of the base-to-oracle gap closed over training
    (mean over seeds, each seed light), and one for the drift from the base model."""
    plt = pyplot()
    objectives, modes = result["objectives"], result["modes"]
    base, oracle = (np.array([result[key][k] for k in objectives]) for key in ("base", "oracle"))
    fig, axes = plt.subplots(1, len(objectives) + 1, figsize=(4.2 * (len(objectives) + 1), 3.9),
                             layout="constrained")
    curves = [[] for _ in axes]
    for index, mode in enumerate(modes):
        look = run_look(index)
        for run in (r for r in result["runs"] if r["mode"] == mode):
            iterations = np.asarray(run["history"]["eval_iterations"])
            closed = (np.asarray(run["history"]["eval_rewards"]) - base) / np.maximum(oracle - base, 1e-8)
            for k in range(len(objectives)):
                axes[k].plot(iterations, closed[:, k], color=tint(look["color"]), linestyle=look["linestyle"], lw=0.9)
            axes[-1].plot(iterations, run["history"]["drift"], color=tint(look["color"]), linestyle=look["linestyle"],
                          lw=0.9)
        iterations = np.asarray(next(r for r in result["runs"] if r["mode"] == mode)["history"]["eval_iterations"])
        closed = (_seed_mean(result, mode, "eval_rewards") - base) / np.maximum(oracle - base, 1e-8)
        series = [closed[:, k] for k in range(len(objectives))] + [_seed_mean(result, mode, "drift")]
        for ax, values, drawn in zip(axes, series, curves):
            ax.plot(iterations, values, ms=4, markerfacecolor="none", label=mode, **look)
            drawn.append((iterations, values))
    for k, name in enumerate(objectives):
        axes[k].axhline(0.0, color="black", lw=0.5)
        axes[k].set_title(f"{name}: gap to oracle closed")
    axes[-1].set_title("drift: mean per-step KL to the base")
    for ax, drawn in zip(axes, curves):
        ax.set_xlabel("GRPO iteration (0 = the base model)")
        step_ticks(ax.xaxis, min(int(x[0]) for x, _ in drawn), max(int(x[-1]) for x, _ in drawn))
        note_coinciding(ax, list(modes), drawn, width=48)
    axes[0].legend(fontsize=7)
    fig.suptitle("Evaluation (fixed prompts and noise); bold: mean over seeds, light: each seed")
    save(fig, path)


def _pick(modes: list, wanted) -> tuple[list, bool]:
    """Variants whose credit uses the quantity; else the first, flagged as 'computed, not applied'."""
    chosen = [m for m in modes if wanted(VARIANTS[m])]
    return (chosen, True) if chosen else (modes[:1], False)


def plot_step_weights(result: dict, path) -> None:
    """TCD's mean step weight per sampling step over training (mean over seeds): a heatmap per variant."""
    plt = pyplot()
    modes, applied = _pick(result["modes"], lambda v: v.step_weighted)
    fig, axes = plt.subplots(1, len(modes), figsize=(5.0 * len(modes), 3.8), squeeze=False, layout="constrained")
    for ax, mode in zip(axes[0], modes):
        weights = _seed_mean(result, mode, "step_weights")  # [iters, T]
        image = ax.imshow(weights.T, aspect="auto", origin="lower", cmap="viridis",
                          extent=(0.5, len(weights) + 0.5, 0.5, weights.shape[1] + 0.5))
        fig.colorbar(image, ax=ax, label="mean step weight")
        ax.set_title(f"{mode}: TCD step weights" + ("" if applied else " (computed, not applied)"))
        ax.set_xlabel("GRPO iteration")
        ax.set_ylabel("sampling step (1 = first, noise side)")
        step_ticks(ax.xaxis, 1, len(weights))
        step_ticks(ax.yaxis, 1, weights.shape[1])
    save(fig, path)


def plot_mixture(result: dict, path) -> None:
    """MOCA's mean objective mixture over training (mean over seeds, stacked)."""
    plt = pyplot()
    modes, applied = _pick(result["modes"], lambda v: v.fuses)
    objectives = result["objectives"]
    fig, axes = plt.subplots(1, len(modes), figsize=(5.2 * len(modes), 3.6), squeeze=False, layout="constrained")
    for ax, mode in zip(axes[0], modes):
        mixture = _seed_mean(result, mode, "mixture")  # [iters, K]
        ax.stackplot(np.arange(1, len(mixture) + 1), mixture.T, labels=objectives, alpha=0.85)
        ax.set_title(f"{mode}: MOCA mixture per objective" + ("" if applied else " (computed, not applied)"))
        ax.set_xlabel("GRPO iteration")
        ax.set_ylabel("mean mixture weight")
        ax.set_ylim(0, 1)
        step_ticks(ax.xaxis, 1, len(mixture))
        ax.legend(fontsize=7, loc="upper right")
    save(fig, path)


def plot_gradient_conflict(result: dict, path, window: int = 5) -> None:
    """The gradient-conflict diagnostic over training, one line per variant (mean over seeds, then a
    moving average over ``window`` iterations): the share of updates in which some objective's gradient
    has a negative cosine with the applied update, and the worst objective's cosine."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10.5, 3.9), layout="constrained")
    drawn, labels, looks = [[], []], [], []
    for index, mode in enumerate(result["modes"]):
        runs = [r for r in result["runs"] if r["mode"] == mode and r["history"].get("worst_cosine")]
        if not runs:
            continue
        labels.append(mode)
        looks.append(index)
        for ax, key, curves in zip(axes, ("gradient_conflict", "worst_cosine"), drawn):
            values = np.nanmean([np.asarray(r["history"][key], dtype=float) for r in runs], axis=0)
            kernel = np.ones(min(window, len(values)))
            # divided by the number of iterations inside the window, so the ends are not pulled to 0
            smooth = np.convolve(values, kernel, mode="same") / np.convolve(np.ones_like(values), kernel, mode="same")
            iterations = np.arange(1, len(values) + 1)
            ax.plot(iterations, smooth, label=mode, lw=1.3, ms=4, markerfacecolor="none", **run_look(index))
            curves.append((iterations, smooth))
    axes[0].set_title("share of updates with an objective's cosine < 0")
    axes[0].set_ylim(-0.02, 1.02)
    axes[1].set_title("worst objective's cosine with the applied update")
    axes[1].axhline(0.0, color="black", lw=0.5)
    for ax, curves in zip(axes, drawn):
        ax.set_xlabel("GRPO iteration")
        if curves:
            step_ticks(ax.xaxis, 1, max(len(x) for x, _ in curves))
            note_coinciding(ax, labels, curves, width=60, looks=looks)
    axes[0].legend(fontsize=7)
    fig.suptitle(f"Gradient conflict (mean over seeds, moving average over {window} iterations)")
    save(fig, path)
