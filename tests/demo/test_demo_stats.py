"""Seed statistics of the demo: t-intervals, interval signs and the Pareto verdict."""
import math

import numpy as np
import pytest

from otca_patch.analysis.intervals import mean_interval, pareto_verdict, plain_line, sign_of


def test_mean_interval_is_the_student_t_interval():
    stat = mean_interval([1.0, 2.0, 3.0])  # mean 2, sample std 1, t_{0.975, 2} = 0.95 / sqrt(2 * 0.975 * 0.025)
    half = 0.95 / math.sqrt(2 * 0.975 * 0.025) * 1.0 / math.sqrt(3)
    assert stat["mean"] == pytest.approx(2.0)
    # scipy's t quantile is exact to about 1e-11 relative
    assert (stat["low"], stat["high"]) == pytest.approx((2.0 - half, 2.0 + half), rel=1e-10)
    # 41 seeds: t_{0.975, 40} = 2.021075390306273 (scipy.stats.t.ppf), not the normal 1.96
    values = np.arange(41, dtype=float)
    wide = mean_interval(values)
    expected = 2.021075390306273 * values.std(ddof=1) / math.sqrt(41)
    assert wide["high"] - wide["mean"] == pytest.approx(expected, rel=1e-10)
    single = mean_interval([0.5])
    assert single["mean"] == 0.5 and math.isnan(single["low"]) and sign_of(single) == 0


def _diff(values):
    return mean_interval(values)


def test_pareto_verdicts():
    up, down, flat = _diff([0.1, 0.11, 0.12]), _diff([-0.2, -0.21, -0.19]), _diff([-0.1, 0.0, 0.1])
    assert sign_of(up) == 1 and sign_of(down) == -1 and sign_of(flat) == 0
    assert pareto_verdict({"a": up, "b": flat}, "otca", "multi_grpo").startswith("`otca` Pareto-dominates")
    assert pareto_verdict({"a": down, "b": flat}, "otca", "multi_grpo").startswith("`multi_grpo` Pareto-dominates")
    assert "trade-off" in pareto_verdict({"a": up, "b": down}, "otca", "multi_grpo")
    assert pareto_verdict({"a": flat, "b": flat}, "otca", "multi_grpo").startswith("Not separated")


def test_an_interval_reaching_across_the_threshold_is_not_decided_with_its_effect_and_seeds():
    """A label the next seeds could flip is not given: the effect, its interval and the seed count are."""
    wide = mean_interval([-0.1, 0.0, 0.1], threshold=0.01)  # [-0.248, +0.248]: contains 0, reaches past +-0.01
    gain_or_not = mean_interval([0.015, 0.02, 0.025], threshold=0.01)  # [+0.008, +0.032]: excludes 0, straddles +0.01
    assert wide["verdict"] == gain_or_not["verdict"] == "not decided" and sign_of(gain_or_not) == 0
    verdict = pareto_verdict({"palette": mean_interval([-0.001, -0.001, -0.001], threshold=0.01), "shape": wide},
                             "otca", "sum")
    assert verdict.startswith("Not decided at 3 seeds: ") and "shape +0.000 [-0.248, +0.248]" in verdict
    assert "negligible on palette" in verdict
    line = plain_line({"shape": gain_or_not}, ["shape"], "OTCA", "Multi-GRPO")
    assert line == "OTCA vs Multi-GRPO: shape +0.020 \u2192 not decided at 3 seeds"
    # a trade-off decided on two objectives stays one, whatever the third turns out to be
    up, down = mean_interval([0.1, 0.11, 0.12], threshold=0.01), mean_interval([-0.2, -0.21, -0.19], threshold=0.01)
    assert pareto_verdict({"a": up, "b": down, "c": wide}, "otca", "sum").startswith("A trade-off")


def test_a_certain_but_tiny_difference_is_negligible_not_pareto_dominance():
    # the demo's palette case: -0.001 [-0.001, -0.001] with a practical threshold of 0.01
    tiny = mean_interval([-0.001, -0.001, -0.001], threshold=0.01)
    up = mean_interval([0.1, 0.11, 0.12], threshold=0.01)
    assert tiny["verdict"] == "negligible" and sign_of(tiny) == 0 and sign_of(up) == 1
    within = mean_interval([-0.001, 0.0, 0.001], threshold=0.01)  # contains 0, wholly within the threshold
    verdict = pareto_verdict({"palette": tiny, "shape": within}, "otca", "sum")
    assert verdict.startswith("No practical difference") and "negligible" in verdict and "palette +-0.01" in verdict
    assert pareto_verdict({"palette": tiny, "shape": up}, "otca", "sum").startswith("`otca` Pareto-dominates")
    # thresholds given to the verdict itself (call sites whose intervals carry none)
    bare = mean_interval([-0.001, -0.001, -0.001])
    assert pareto_verdict({"palette": bare}, "otca", "sum").startswith("`sum` Pareto-dominates")
    assert pareto_verdict({"palette": bare}, "otca", "sum", thresholds={"palette": 0.01}).startswith("No practical")


def test_the_demo_summary_calls_a_certain_tiny_gap_negligible_in_base_sample_stds():
    """summarise: the practical threshold of each objective is --threshold base-model eval-sample stds,
    in gap-closed units; a -0.001 palette gap, the same on every seed, is negligible, not dominance."""
    from types import SimpleNamespace

    from otca_patch.demo.experiment import summarise
    from otca_patch.demo.jobs import Job

    base_eval = [[0.0, 0.0, 0.0], [0.2, 0.2, 0.2], [0.4, 0.4, 0.4]]  # eval-sample std 0.1633 per objective
    oracle_eval = [[1.2, 1.2, 1.2]] * 3  # gap 1.0 from the base mean 0.2

    def output(final):
        return {"base_eval": base_eval, "oracle_eval": oracle_eval, "seconds": 1.0,
                "history": {"eval_rewards": [final], "drift": [0.0]}}  # the last evaluation's objective means

    jobs, outputs = [], []
    for seed in (0, 1, 2):
        for mode, palette in (("multi_grpo", 0.5), ("otca", 0.499)):  # gap closed 0.3 vs 0.299
            jobs.append(Job(config={}, mode=mode, seed=seed, base_path=""))
            outputs.append(output([palette, 0.6 + 0.01 * seed, 0.6 - 0.01 * seed]))
    config = SimpleNamespace(threshold=0.1, sampling_steps=4, shift=3.0, to_dict=lambda: {}, regime="conflicting",
                             objectives=("palette", "shape", "edges"))
    result = summarise(config, jobs, outputs, info={})
    threshold = 0.1 * np.std([0.0, 0.2, 0.4], ddof=1) / 1.0
    assert result["thresholds"]["palette"] == pytest.approx(threshold, rel=1e-4)
    palette = result["comparisons"]["otca"]["palette"]
    assert palette["mean"] == pytest.approx(-0.001, abs=1e-6) and palette["verdict"] == "negligible"
    assert result["verdicts"]["otca"].startswith("No practical difference")
