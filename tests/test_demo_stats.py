"""Seed statistics of the demo: t-intervals, interval signs and the Pareto verdict."""
import math

import pytest

from otca_patch.demo.stats import mean_interval, pareto_verdict, sign_of


def test_mean_interval_is_the_student_t_interval():
    stat = mean_interval([1.0, 2.0, 3.0])  # mean 2, sample std 1, t_{0.975, 2} = 4.303
    half = 4.303 * 1.0 / math.sqrt(3)
    assert stat["mean"] == pytest.approx(2.0)
    assert (stat["low"], stat["high"]) == pytest.approx((2.0 - half, 2.0 + half))
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
