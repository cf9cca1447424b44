"""Student-t quantiles, exact for every df (no table, no 1.96 beyond df = 30): against closed forms,
a printed table and reference values, each with its tolerance."""
import math

import pytest

from otca_patch.analysis.student_t import normal_quantile, t_cdf, t_quantile, t_quantile_975

P = (0.6, 0.9, 0.975, 0.995, 0.9999999)


@pytest.mark.parametrize("p", P)
def test_df_1_and_2_match_their_closed_forms(p):
    # df = 1 (Cauchy): tan(pi (p - 1/2)) = 1 / tan(pi (1 - p)) (the form that is well conditioned near 1);
    # df = 2: (2p - 1) / sqrt(2 p (1 - p))
    assert t_quantile(p, 1) == pytest.approx(1 / math.tan(math.pi * (1 - p)), rel=1e-12)
    assert t_quantile(p, 2) == pytest.approx((2 * p - 1) / math.sqrt(2 * p * (1 - p)), rel=1e-12)


def test_df_4_matches_its_closed_form():
    # df = 4: t = 2 sqrt(q - 1), q = cos(arccos(sqrt(a)) / 3) / sqrt(a), a = 4 p (1 - p)
    for p in P:
        a = 4 * p * (1 - p)
        q = math.cos(math.acos(math.sqrt(a)) / 3) / math.sqrt(a)
        assert t_quantile(p, 4) == pytest.approx(2 * math.sqrt(q - 1), rel=1e-10)


#: t_{0.975, df} as printed in the usual tables (3 decimals)
TABLE = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
         11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093,
         20: 2.086, 21: 2.080, 22: 2.074, 23: 2.069, 24: 2.064, 25: 2.060, 26: 2.056, 27: 2.052, 28: 2.048,
         29: 2.045, 30: 2.042, 40: 2.021, 60: 2.000, 120: 1.980}


@pytest.mark.parametrize("df,printed", sorted(TABLE.items()))
def test_the_printed_table_to_its_three_decimals(df, printed):
    assert abs(t_quantile_975(df) - printed) <= 0.0005 + 1e-12


#: reference values (scipy.stats.t.ppf 1.17, scipy.stats.norm.ppf), non-integer df included
REFERENCE = [(0.975, 3, 3.1824463052837078), (0.975, 7.5, 2.333039626864974), (0.975, 10, 2.228138851986274),
             (0.975, 31, 2.039513446396408), (0.975, 40, 2.021075390306273), (0.975, 60, 2.0002978220142604),
             (0.975, 120, 1.9799304050824402), (0.975, 1000, 1.9623390808264083),
             (0.975, 1e6, 1.959966356814107), (0.995, 50, 2.677793270940844), (0.9999999, 8, 16.32070379465559)]


@pytest.mark.parametrize("p,df,expected", REFERENCE)
def test_reference_values_to_1e_12(p, df, expected):
    assert t_quantile(p, df) == pytest.approx(expected, rel=1e-12)
    assert t_quantile(1 - p, df) == pytest.approx(-expected, rel=1e-12)


def test_beyond_df_30_the_interval_factor_is_not_the_normal_one():
    assert t_quantile_975(31) - 1.96 > 0.079 and t_quantile_975(40) - 1.96 > 0.06
    factors = [t_quantile_975(df) for df in (30, 31, 50, 100, 1e4, 1e5, 1e5 + 1, 1e8)]
    assert all(a > b for a, b in zip(factors, factors[1:])), factors  # decreasing in df, through the 1e5 switch
    assert t_quantile_975(1e15) == pytest.approx(1.959963984540054, rel=1e-13)  # the normal limit
    assert normal_quantile(0.975) == pytest.approx(1.959963984540054, rel=1e-15)


@pytest.mark.parametrize("df", [0.5, 1, 3, 17, 250, 5e4])
def test_the_quantile_inverts_the_cdf(df):
    for p in (0.51, 0.75, 0.975, 0.999):
        assert t_cdf(t_quantile(p, df), df) == pytest.approx(p, abs=1e-13)


def test_undefined_df_gives_nan_and_bad_p_an_error():
    assert math.isnan(t_quantile_975(0)) and math.isnan(t_quantile_975(-1))
    with pytest.raises(ValueError, match="p must lie in"):
        t_quantile(1.0, 5)
