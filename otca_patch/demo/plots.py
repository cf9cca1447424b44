"""The demo's three figures, each written atomically (matplotlib's Agg backend, no display)."""
from __future__ import annotations

import numpy as np

from .files import atomic_path
from .variants import VARIANTS


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path) -> None:
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
    _pyplot().close(fig)


def _seed_mean(result: dict, mode: str, key: str) -> np.ndarray:
    """The mean over seeds of one history list of ``mode``."""
    return np.mean([np.asarray(r["history"][key], dtype=float) for r in result["runs"] if r["mode"] == mode], axis=0)


def plot_reward_curves(result: dict, path) -> None:
    """One panel per objective: the evaluation's fraction of the base-to-oracle gap closed over training
    (mean over seeds, each seed faint), and one for the drift from the base model."""
    plt = _pyplot()
    objectives, modes = result["objectives"], result["modes"]
    base, oracle = (np.array([result[key][k] for k in objectives]) for key in ("base", "oracle"))
    fig, axes = plt.subplots(1, len(objectives) + 1, figsize=(4.2 * (len(objectives) + 1), 3.6),
                             constrained_layout=True)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for index, mode in enumerate(modes):
        colour = colours[index % len(colours)]
        for run in (r for r in result["runs"] if r["mode"] == mode):
            iterations = np.asarray(run["history"]["eval_iterations"])
            closed = (np.asarray(run["history"]["eval_rewards"]) - base) / np.maximum(oracle - base, 1e-8)
            for k in range(len(objectives)):
                axes[k].plot(iterations, closed[:, k], color=colour, alpha=0.25, lw=1)
            axes[-1].plot(iterations, run["history"]["drift"], color=colour, alpha=0.25, lw=1)
        iterations = np.asarray(next(r for r in result["runs"] if r["mode"] == mode)["history"]["eval_iterations"])
        closed = (_seed_mean(result, mode, "eval_rewards") - base) / np.maximum(oracle - base, 1e-8)
        for k in range(len(objectives)):
            axes[k].plot(iterations, closed[:, k], "-o", ms=3, color=colour, label=mode)
        axes[-1].plot(iterations, _seed_mean(result, mode, "drift"), "-o", ms=3, color=colour, label=mode)
    for k, name in enumerate(objectives):
        axes[k].axhline(0.0, color="black", lw=0.5)
        axes[k].set_title(f"{name}: gap to oracle closed")
        axes[k].set_xlabel("GRPO iteration")
    axes[-1].set_title("drift: mean per-step KL to the base")
    axes[-1].set_xlabel("GRPO iteration")
    axes[0].legend(fontsize=7)
    fig.suptitle("Evaluation (fixed prompts and noise); bold: mean over seeds, faint: each seed")
    _save(fig, path)


def _pick(modes: list, wanted) -> tuple[list, bool]:
    """Variants whose credit uses the quantity; else the first, flagged as 'computed, not applied'."""
    chosen = [m for m in modes if wanted(VARIANTS[m])]
    return (chosen, True) if chosen else (modes[:1], False)


def plot_step_weights(result: dict, path) -> None:
    """TCD's mean step weight per sampling step over training (mean over seeds): a heatmap per variant."""
    plt = _pyplot()
    modes, applied = _pick(result["modes"], lambda v: v.step_weighted)
    fig, axes = plt.subplots(1, len(modes), figsize=(5.0 * len(modes), 3.8), squeeze=False, constrained_layout=True)
    for ax, mode in zip(axes[0], modes):
        weights = _seed_mean(result, mode, "step_weights")  # [iters, T]
        image = ax.imshow(weights.T, aspect="auto", origin="lower", cmap="viridis",
                          extent=(0.5, len(weights) + 0.5, 0.5, weights.shape[1] + 0.5))
        fig.colorbar(image, ax=ax, label="mean step weight")
        ax.set_title(f"{mode}: TCD step weights" + ("" if applied else " (computed, not applied)"))
        ax.set_xlabel("GRPO iteration")
        ax.set_ylabel("sampling step (1 = first denoising step, noise side)")
    _save(fig, path)


def plot_mixture(result: dict, path) -> None:
    """MOCA's mean objective mixture over training (mean over seeds, stacked)."""
    plt = _pyplot()
    modes, applied = _pick(result["modes"], lambda v: v.fuses)
    objectives = result["objectives"]
    fig, axes = plt.subplots(1, len(modes), figsize=(5.2 * len(modes), 3.6), squeeze=False, constrained_layout=True)
    for ax, mode in zip(axes[0], modes):
        mixture = _seed_mean(result, mode, "mixture")  # [iters, K]
        ax.stackplot(np.arange(1, len(mixture) + 1), mixture.T, labels=objectives, alpha=0.85)
        ax.set_title(f"{mode}: MOCA mixture per objective" + ("" if applied else " (computed, not applied)"))
        ax.set_xlabel("GRPO iteration")
        ax.set_ylabel("mean mixture weight")
        ax.set_ylim(0, 1)
        ax.legend(fontsize=7, loc="upper right")
    _save(fig, path)


def plot_gradient_conflict(result: dict, path, window: int = 5) -> None:
    """The gradient-conflict diagnostic over training, one line per variant (mean over seeds, then a
    moving average over ``window`` iterations): the share of updates in which some objective's gradient
    has a negative cosine with the applied update, and the worst objective's cosine."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10.5, 3.8), constrained_layout=True)
    for mode in result["modes"]:
        runs = [r for r in result["runs"] if r["mode"] == mode and r["history"].get("worst_cosine")]
        if not runs:
            continue
        for ax, key in zip(axes, ("gradient_conflict", "worst_cosine")):
            values = np.nanmean([np.asarray(r["history"][key], dtype=float) for r in runs], axis=0)
            kernel = np.ones(min(window, len(values)))
            # divided by the number of iterations inside the window, so the ends are not pulled to 0
            smooth = np.convolve(values, kernel, mode="same") / np.convolve(np.ones_like(values), kernel, mode="same")
            ax.plot(np.arange(1, len(values) + 1), smooth, label=mode, lw=1.3)
    axes[0].set_title("share of updates with an objective's cosine < 0")
    axes[0].set_ylim(-0.02, 1.02)
    axes[1].set_title("worst objective's cosine with the applied update")
    axes[1].axhline(0.0, color="black", lw=0.5)
    for ax in axes:
        ax.set_xlabel("GRPO iteration")
    axes[0].legend(fontsize=7)
    fig.suptitle(f"Gradient conflict (mean over seeds, moving average over {window} iterations)")
    _save(fig, path)
