"""The comparison's and the demo's figures read back from matplotlib, as a reader would see them: steps
on whole-number ticks 1..T, labels that do not cover each other, and runs drawn over each other that
all stay visible, with a line saying they coincide."""
from pathlib import Path

import numpy as np
import pytest

from otca_patch.analysis import plots
from otca_patch.analysis.figure_style import coinciding
from otca_patch.analysis.logs import Run
from otca_patch.analysis.metrics import RunScores


@pytest.fixture
def figures(monkeypatch):
    """The figures the plot functions would save, kept open for reading (nothing is written)."""
    kept = []

    def keep(fig, path):
        fig.canvas.draw()
        kept.append(fig)
        return path

    import otca_patch.demo.plots as demo_plots

    monkeypatch.setattr(plots, "save", keep)
    monkeypatch.setattr(demo_plots, "save", keep)
    yield kept
    import matplotlib.pyplot as plt

    for fig in kept:
        plt.close(fig)


def run(label, values, sampling_steps=4):
    steps = np.arange(1, len(values) + 1)
    values = np.asarray(values, dtype=float)
    weights = np.array([[1.0 + 0.1 * s + 0.01 * t for s in range(sampling_steps)] for t in range(len(steps))])
    return Run(label=label, path=Path(label), source="run_log", objectives=("upstream",), steps=steps,
               reward_mean=values[:, None], reward_std=np.ones((len(steps), 1)), samples=np.full(len(steps), 4),
               mode="otca", step_weights=weights)


def tick_numbers(axis) -> list:
    """The tick labels a reader sees inside the axis' view, as numbers."""
    low, high = sorted(axis.get_view_interval())
    shown = []
    for tick, label in zip(axis.get_ticklocs(), axis.get_ticklabels()):
        if low <= tick <= high:
            shown.append(float(label.get_text().replace("\N{MINUS SIGN}", "-")))
    return shown


def test_the_step_weight_heatmap_and_its_profile_number_the_steps_alike(figures):
    plots.step_weight_heatmap(run("otca", [1, 2, 3, 4, 5, 6], sampling_steps=5), Path("unused.png"))
    heatmap, profile = figures[0].axes[:2]
    assert tick_numbers(heatmap.xaxis) == [1, 2, 3, 4, 5, 6]  # training steps
    assert tick_numbers(heatmap.yaxis) == [1, 2, 3, 4, 5]  # sampling steps, 1 = the noise side
    assert tick_numbers(profile.xaxis) == [1, 2, 3, 4, 5]  # the same sampling steps as the heatmap's rows
    assert [float(x) for x in profile.lines[0].get_xdata()] == [1, 2, 3, 4, 5]


def test_the_heatmaps_labels_are_distinct_and_apart(figures):
    plots.step_weight_heatmap(run("otca", [1, 2, 3, 4]), Path("unused.png"))
    fig = figures[0]
    renderer = fig.canvas.get_renderer()
    labels = [axis.label for ax in fig.axes for axis in (ax.xaxis, ax.yaxis) if axis.label.get_text()]
    texts = [label.get_text() for label in labels]
    boxes = [label.get_window_extent(renderer) for label in labels]
    for i, box in enumerate(boxes):
        for j in range(i + 1, len(boxes)):
            assert not box.padded(8).overlaps(boxes[j]), (texts[i], texts[j])
            if texts[i] == texts[j]:  # the same words twice side by side read as one label drawn over itself
                gap = max(boxes[j].x0 - box.x1, box.x0 - boxes[j].x1, boxes[j].y0 - box.y1, box.y0 - boxes[j].y1)
                assert gap > 100, (texts[i], gap)


@pytest.mark.parametrize("draw", ["reward", "balanced", "mixture"])
def test_a_two_step_run_gets_whole_step_ticks(figures, draw):
    first, second = run("vanilla", [0.1, 0.3]), run("otca", [0.2, 0.5])
    if draw == "reward":
        plots.reward_curves([first, second], "upstream", 1, Path("unused.png"))
    elif draw == "balanced":
        scores = [RunScores(r.label, r.steps, r.reward_mean[:, 0], r.reward_mean[:, 0], 0.0) for r in (first, second)]
        plots.balanced_curves(scores, 1, Path("unused.png"))
    else:
        second.mixture = np.array([[0.4, 0.6], [0.3, 0.7]])
        second.objectives = ("upstream", "clip_t")
        plots.mixture_over_training(second, 1, Path("unused.png"))
    assert tick_numbers(figures[0].axes[0].xaxis) == [1, 2]


def line_looks(ax) -> set:
    """(colour, line style) of every bold line, the ones a legend names."""
    return {(line.get_color(), line.get_linestyle()) for line in ax.lines if not line.get_label().startswith("_")}


def test_two_runs_that_coincide_both_stay_visible_and_the_title_says_so(figures):
    same = [0.1, 0.4, 0.2, 0.5, 0.3, 0.6]
    plots.reward_curves([run("vanilla", same), run("otca", np.add(same, 1e-5))], "upstream", 2, Path("unused.png"))
    ax = figures[0].axes[0]
    looks = line_looks(ax)
    assert len(looks) == 2 and len({style for _, style in looks}) == 2  # two lines, one solid, one dashed
    assert len({colour for colour, _ in looks}) == 2
    assert "vanilla and otca are equal here" in ax.get_title() and "otca is the dashed line on top" in ax.get_title()
    per_step = [line for line in ax.lines if line.get_label().startswith("_") and line.get_marker() not in ("None", "")]
    assert len({(line.get_color(), line.get_marker(), line.get_linestyle()) for line in per_step}) == 2


def test_runs_that_differ_get_no_coincidence_line(figures):
    plots.reward_curves([run("vanilla", [0.1, 0.4, 0.2]), run("otca", [0.3, 0.6, 0.5])], "upstream", 1,
                        Path("unused.png"))
    assert "equal" not in figures[0].axes[0].get_title()


def test_coinciding_groups_curves_within_a_hundredth_of_the_range():
    steps = np.arange(1, 5)
    curves = [(steps, np.array([0.0, 1.0, 0.0, 1.0])), (steps, np.array([0.3, 0.3, 0.3, 0.3])),
              (steps, np.array([0.005, 1.0, 0.0, 0.995])), (steps, np.array([0.0, 1.0, 0.0, 0.98]))]
    assert coinciding(curves) == [[0, 2]]  # 0.02 apart (curve 3) is 2% of the range: visible apart


def demo_result(iterations=2):
    """A demo result of two variants over ``iterations`` GRPO iterations whose conflict curves coincide."""
    def history(shift):
        return {"eval_iterations": list(range(iterations + 1)),
                "eval_rewards": [[0.5 + shift * i, 0.4 + i * 0.01] for i in range(iterations + 1)],
                "drift": [0.01 * i for i in range(iterations + 1)],
                "step_weights": [[0.9, 1.0, 1.1]] * iterations, "mixture": [[0.4, 0.6]] * iterations,
                "gradient_conflict": [0.5] * iterations, "worst_cosine": [-0.1 * (1 + i) for i in range(iterations)]}

    return {"objectives": ["palette", "shape"], "modes": ["multi_grpo", "otca"], "base": {"palette": 0.5, "shape": 0.4},
            "oracle": {"palette": 1.0, "shape": 1.0},
            "runs": [{"mode": "multi_grpo", "seed": 0, "history": history(0.0)},
                     {"mode": "otca", "seed": 0, "history": history(0.05)}]}


def test_the_demos_figures_number_iterations_on_whole_ticks(figures):
    from otca_patch.demo import plots as demo_plots

    result = demo_result(iterations=2)
    demo_plots.plot_reward_curves(result, Path("unused.png"))
    demo_plots.plot_step_weights(result, Path("unused.png"))
    demo_plots.plot_mixture(result, Path("unused.png"))
    demo_plots.plot_gradient_conflict(result, Path("unused.png"))
    curves, weights, mixture, conflict = figures
    assert tick_numbers(curves.axes[0].xaxis) == [0, 1, 2]  # 0 = the base model, before any iteration
    assert tick_numbers(weights.axes[0].xaxis) == [1, 2] and tick_numbers(weights.axes[0].yaxis) == [1, 2, 3]
    assert tick_numbers(mixture.axes[0].xaxis) == [1, 2]
    assert tick_numbers(conflict.axes[0].xaxis) == [1, 2]


def test_the_demos_coinciding_variants_stay_visible_and_are_named(figures):
    from otca_patch.demo import plots as demo_plots

    demo_plots.plot_gradient_conflict(demo_result(iterations=4), Path("unused.png"))
    share, worst = figures[0].axes[:2]
    assert len(line_looks(share)) == 2 and len({style for _, style in line_looks(share)}) == 2
    assert "multi_grpo and otca are equal here" in share.get_title()
    demo_plots.plot_reward_curves(demo_result(iterations=4), Path("unused.png"))
    palette, shape = figures[1].axes[:2]
    assert "equal" not in palette.get_title()  # otca closed more of palette's gap
    assert "multi_grpo and otca are equal here" in shape.get_title()
