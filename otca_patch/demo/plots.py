"""The demo's three figures, each written atomically (matplotlib's Agg backend, no display)."""
from __future__ import annotations

import numpy as np

from otca_patch.credit import STEP_WEIGHTED_MODES

from .files import atomic_path

MOCA_MODES = ("moca", "otca")


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path) -> None:
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
    _pyplot().close(fig)


def moving_average(values: np.ndarray, window: int) -> np.ndarray:
    """Trailing mean over ``window`` entries along axis 0 (shorter at the start)."""
    values = np.asarray(values, dtype=float)
    cumulative = np.cumsum(values, axis=0)
    out = cumulative.copy()
    out[window:] = cumulative[window:] - cumulative[:-window]
    counts = np.minimum(np.arange(1, len(values) + 1), window).reshape((-1,) + (1,) * (values.ndim - 1))
    return out / counts


def plot_reward_curves(result: dict, path) -> None:
    """One panel per objective (evaluation mean, training-rollout mean faint) and one for the balanced score."""
    plt = _pyplot()
    objectives, modes = result["objectives"], result["modes"]
    fig, axes = plt.subplots(1, len(objectives) + 1, figsize=(4.2 * (len(objectives) + 1), 3.6),
                             constrained_layout=True)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for index, (mode, data) in enumerate(modes.items()):
        colour = colours[index % len(colours)]
        history = data["history"]
        iterations = np.asarray(history["eval_iterations"])
        evals = np.asarray(history["eval_rewards"])
        train = np.asarray(history["train_rewards"])
        for k, name in enumerate(objectives):
            ax = axes[k]
            ax.plot(iterations, evals[:, k], "-o", ms=3, color=colour, label=f"{mode} (eval)")
            if len(train):
                ax.plot(np.arange(1, len(train) + 1), moving_average(train[:, k], 5), color=colour, alpha=0.3, lw=1,
                        label=f"{mode} (rollouts, avg of 5)")
        axes[-1].plot(iterations, data["balanced"], "-o", ms=3, color=colour, label=mode)
    for k, name in enumerate(objectives):
        axes[k].set_title(name)
        axes[k].set_xlabel("GRPO iteration")
    reference = result["reference_mode"]
    axes[-1].axhline(modes[reference]["final_balanced"], color="grey", ls="--", lw=1, label=f"{reference} final")
    axes[-1].axhline(0.0, color="black", lw=0.5)
    axes[-1].set_title("balanced score (mean z vs base)")
    axes[-1].set_xlabel("GRPO iteration")
    axes[0].legend(fontsize=7)
    axes[-1].legend(fontsize=7)
    fig.suptitle("Evaluation reward per objective (fixed prompts and noise)")
    _save(fig, path)


def _pick(modes: dict, wanted) -> tuple[list, bool]:
    """Modes whose credit uses the quantity; else the first mode, flagged as 'computed, not applied'."""
    chosen = [m for m in modes if m in wanted]
    return (chosen, True) if chosen else (list(modes)[:1], False)


def plot_step_weights(result: dict, path) -> None:
    """TCD's mean step weight per sampling step over training: a heatmap per mode, and early vs late profiles."""
    plt = _pyplot()
    modes, applied = _pick(result["modes"], STEP_WEIGHTED_MODES)
    fig, axes = plt.subplots(1, len(modes) + 1, figsize=(5.0 * (len(modes) + 1), 3.8), squeeze=False,
                             constrained_layout=True)
    axes = axes[0]
    for index, mode in enumerate(modes):
        weights = np.asarray(result["modes"][mode]["history"]["step_weights"])  # [iters, T]
        image = axes[index].imshow(weights.T, aspect="auto", origin="lower", cmap="viridis",
                                   extent=(0.5, len(weights) + 0.5, 0.5, weights.shape[1] + 0.5))
        fig.colorbar(image, ax=axes[index], label="mean step weight")
        note = "" if applied else " (computed, not applied)"
        axes[index].set_title(f"{mode}: TCD step weights{note}")
        axes[index].set_xlabel("GRPO iteration")
        axes[index].set_ylabel("sampling step t (1 = noise side)")
        quarter = max(1, len(weights) // 4)
        steps = np.arange(1, weights.shape[1] + 1)
        axes[-1].plot(steps, weights[:quarter].mean(0), "-o", ms=3, label=f"{mode}: first {quarter} iters")
        axes[-1].plot(steps, weights[-quarter:].mean(0), "--o", ms=3, label=f"{mode}: last {quarter} iters")
    axes[-1].axhline(1.0, color="grey", lw=0.8, label="uniform (vanilla)")
    axes[-1].set_xlabel("sampling step t")
    axes[-1].set_ylabel("mean step weight")
    axes[-1].set_title("weight profile (the last step is not trained)")
    axes[-1].legend(fontsize=7)
    _save(fig, path)


def plot_mixture(result: dict, path) -> None:
    """MOCA's mean objective mixture over training (stacked, moving average of 5 iterations)."""
    plt = _pyplot()
    modes, applied = _pick(result["modes"], MOCA_MODES)
    objectives = result["objectives"]
    fig, axes = plt.subplots(1, len(modes), figsize=(5.2 * len(modes), 3.6), squeeze=False,
                             constrained_layout=True)
    for ax, mode in zip(axes[0], modes):
        mixture = moving_average(np.asarray(result["modes"][mode]["history"]["mixture"]), 5)  # [iters, K]
        iterations = np.arange(1, len(mixture) + 1)
        ax.stackplot(iterations, mixture.T, labels=objectives, alpha=0.85)
        note = "" if applied else " (computed, not applied)"
        ax.set_title(f"{mode}: MOCA mixture per objective{note}")
        ax.set_xlabel("GRPO iteration")
        ax.set_ylabel("mean mixture weight")
        ax.set_ylim(0, 1)
        ax.legend(fontsize=7, loc="upper right")
    _save(fig, path)
