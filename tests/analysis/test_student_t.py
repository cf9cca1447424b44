"""The Student-t factor of the seed intervals, exact for every df (no table, no 1.96 beyond df = 30):
``mean_interval``'s half-width over its standard error, and Welch's interval, against closed forms,
a printed table and reference values, each with its tolerance."""
import math
import statistics

import numpy as np
import pytest

from otca_patch.analysis.difference import welch_interval
from otca_patch.analysis.intervals import mean_interval


def factor(n: int) -> float:
    """t_{0.975, n-1} as ``mean_interval`` applies it: its half-width over s / sqrt(n), on n spread values."""
    values = [float(i) for i in range(n)]
    interval = mean_interval(values)
    return (interval["high"] - interval["mean"]) / (statistics.stdev(values) / math.sqrt(n))


def test_df_1_2_and_4_match_their_closed_forms():
    # df = 1 (Cauchy): 1 / tan(pi (1 - p)); df = 2: (2p - 1) / sqrt(2 p (1 - p)); df = 4: 2 sqrt(q - 1) with
    # q = cos(arccos(sqrt(a)) / 3) / sqrt(a), a = 4 p (1 - p); here p = 0.975
    p = 0.975
    a = 4 * p * (1 - p)
    q = math.cos(math.acos(math.sqrt(a)) / 3) / math.sqrt(a)
    assert factor(2) == pytest.approx(1 / math.tan(math.pi * (1 - p)), rel=1e-10)
    assert factor(3) == pytest.approx((2 * p - 1) / math.sqrt(2 * p * (1 - p)), rel=1e-10)
    assert factor(5) == pytest.approx(2 * math.sqrt(q - 1), rel=1e-10)


#: t_{0.975, df} as printed in the usual tables (3 decimals)
TABLE = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
         11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093,
         20: 2.086, 21: 2.080, 22: 2.074, 23: 2.069, 24: 2.064, 25: 2.060, 26: 2.056, 27: 2.052, 28: 2.048,
         29: 2.045, 30: 2.042, 40: 2.021, 60: 2.000, 120: 1.980}


@pytest.mark.parametrize("df,printed", sorted(TABLE.items()))
def test_the_printed_table_to_its_three_decimals(df, printed):
    assert abs(factor(df + 1) - printed) <= 0.0005 + 1e-9


#: reference values of t_{0.975, df} (scipy.stats.t.ppf 1.17)
REFERENCE = [(3, 3.1824463052837078), (10, 2.228138851986274), (31, 2.039513446396408), (40, 2.021075390306273),
             (60, 2.0002978220142604), (120, 1.9799304050824402), (1000, 1.9623390808264083)]


@pytest.mark.parametrize("df,expected", REFERENCE)
def test_reference_values_to_1e_10(df, expected):
    assert factor(df + 1) == pytest.approx(expected, rel=1e-10)


def test_beyond_df_30_the_interval_factor_is_not_the_normal_one():
    assert factor(32) - 1.96 > 0.079 and factor(41) - 1.96 > 0.06
    factors = [factor(n) for n in (31, 32, 51, 101, 1001)]
    assert all(a > b for a, b in zip(factors, factors[1:])), factors  # decreasing in df


def test_one_value_has_no_interval_and_constant_values_a_zero_width_one():
    single = mean_interval([0.5])
    assert math.isnan(single["low"]) and math.isnan(single["high"])
    constant = mean_interval([0.25, 0.25, 0.25])
    assert constant["low"] == constant["high"] == pytest.approx(0.25, abs=1e-15)


def test_welch_interval_with_equal_sizes_and_spreads_is_t_at_twice_n_minus_one():
    """Equal n and variances: Welch-Satterthwaite's df is 2 (n - 1); n = 5 gives t_{0.975, 8} = 2.306."""
    reference = np.array([0.0, 1.0, 2.0, 3.0, 4.0])
    candidate = reference + 10.0
    interval = welch_interval(reference, candidate)
    standard_error = math.sqrt(2 * statistics.variance(reference.tolist()) / 5)
    assert interval["mean"] == pytest.approx(10.0)
    assert abs((interval["high"] - interval["mean"]) / standard_error - 2.306) <= 0.0005
    assert interval["mean"] - interval["low"] == pytest.approx(interval["high"] - interval["mean"], rel=1e-12)


def test_welch_interval_of_two_constant_sides_has_zero_width():
    interval = welch_interval(np.array([1.0, 1.0, 1.0]), np.array([1.5, 1.5]))
    assert interval == {"mean": pytest.approx(0.5), "low": pytest.approx(0.5), "high": pytest.approx(0.5)}
