"""Student's t distribution, exactly, in pure Python: its CDF through the regularized incomplete beta
function and its quantile by safeguarded Newton steps on that CDF, for every (also non-integer) df.

No table and no normal fallback: t_{0.975, 40} is 2.0211, not 1.96; an interval built on 1.96 for
df > 30 would be too narrow.
"""
from __future__ import annotations

import math

_TINY = 1e-300
_EPS = 1e-15


def _beta_continued_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of I_x(a, b) (modified Lentz), converging for x < (a + 1) / (a + b + 2)."""
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, 10_000):
        m2 = 2 * m
        for numerator in (m * (b - m) * x / ((qam + m2) * (a + m2)),
                          -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > _TINY else _TINY)
            c = 1.0 + numerator / c
            c = c if abs(c) > _TINY else _TINY
            h *= d * c
        if abs(d * c - 1.0) < _EPS:
            return h
    raise ArithmeticError(f"incomplete beta: no convergence for a={a}, b={b}, x={x}")


def _log_gamma_step(b: float, a: float) -> float:
    """ln Gamma(b + a) - ln Gamma(b), without the cancellation of two huge lgammas when b >> a
    (Stirling's series, written with log1p; its first omitted term is below 1e-20 for b > 1e4)."""
    if b < 1e4:
        return math.lgamma(b + a) - math.lgamma(b)
    c = b + a
    return ((b - 0.5) * math.log1p(a / b) + a * math.log(c) - a + (1.0 / c - 1.0 / b) / 12.0
            - (1.0 / c ** 3 - 1.0 / b ** 3) / 360.0)


def _log_beta_inverse(a: float, b: float) -> float:
    """-ln B(a, b) = ln Gamma(a + b) - ln Gamma(a) - ln Gamma(b), the smaller argument stepped."""
    small, large = min(a, b), max(a, b)
    return _log_gamma_step(large, small) - math.lgamma(small)


def regularized_beta(a: float, b: float, x: float, complement: float | None = None) -> float:
    """I_x(a, b), the regularized incomplete beta function, for a, b > 0 and x in [0, 1].
    ``complement``: 1 - x when the caller has it more precisely than 1 - x rounds (x near 1)."""
    y = 1.0 - x if complement is None else complement
    if not (0.0 <= x <= 1.0 and 0.0 <= y <= 1.0):
        raise ValueError(f"regularized_beta: x must lie in [0, 1], got {x}")
    if x == 0.0 or y == 0.0:
        return 0.0 if x == 0.0 else 1.0
    log_x = math.log(x) if x < 0.5 else math.log1p(-y)
    log_y = math.log(y) if y < 0.5 else math.log1p(-x)
    log_front = _log_beta_inverse(a, b) + a * log_x + b * log_y
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_continued_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_continued_fraction(b, a, y) / b


def t_tail(t: float, df: float) -> float:
    """P(T > |t|): computed directly, so a small tail keeps its digits (no ``1 - cdf``)."""
    if not df > 0:
        raise ValueError(f"t_tail: df must be positive, got {df}")
    square = t * t
    # I_x(df/2, 1/2) / 2 with x = df / (df + t^2); 1 - x passed exactly (small t, large df)
    return 0.5 * regularized_beta(df / 2.0, 0.5, df / (df + square), square / (df + square))


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` > 0 degrees of freedom."""
    tail = t_tail(t, df)
    return 1.0 - tail if t > 0 else tail


def t_pdf(t: float, df: float) -> float:
    log_density = (math.lgamma((df + 1.0) / 2.0) - math.lgamma(df / 2.0) - 0.5 * math.log(df * math.pi)
                   - (df + 1.0) / 2.0 * math.log1p(t * t / df))
    return math.exp(log_density)


def normal_quantile(p: float) -> float:
    """The standard normal quantile, to double precision: Acklam's rational approximation, then
    one Halley step on ``erfc``."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"normal_quantile: p must lie in (0, 1), got {p}")
    a = (-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02, 1.383577518672690e+02,
         -3.066479806614716e+01, 2.506628277459239e+00)
    b = (-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02, 6.680131188771972e+01,
         -1.328068155288572e+01)
    c = (-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00, -2.549732539343734e+00,
         4.374664141464968e+00, 2.938163982698783e+00)
    d = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00, 3.754408661907416e+00)
    q = min(p, 1.0 - p)
    if q < 0.02425:
        r = math.sqrt(-2.0 * math.log(q))
        z = (((((c[0] * r + c[1]) * r + c[2]) * r + c[3]) * r + c[4]) * r + c[5]) / \
            ((((d[0] * r + d[1]) * r + d[2]) * r + d[3]) * r + 1.0)
        z = z if p < 0.5 else -z
    else:
        r = p - 0.5
        s = r * r
        z = (((((a[0] * s + a[1]) * s + a[2]) * s + a[3]) * s + a[4]) * s + a[5]) * r / \
            (((((b[0] * s + b[1]) * s + b[2]) * s + b[3]) * s + b[4]) * s + 1.0)
    # Halley: e = Phi(z) - p, from the tail that does not cancel
    e = 0.5 * math.erfc(-z / math.sqrt(2.0)) - p if z < 0 else (1.0 - p) - 0.5 * math.erfc(z / math.sqrt(2.0))
    u = e * math.sqrt(2.0 * math.pi) * math.exp(z * z / 2.0)
    return z - u / (1.0 + z * u / 2.0)


#: above this df, the quantile's expansion in 1/df about the normal one (Hill 1970, ACM 396; the
#: first omitted term, O(z^11 / df^5), is below double precision) replaces the beta function, whose
#: continued fraction converges too slowly this far out
_LARGE_DF = 1e5


def _large_df_quantile(p: float, df: float) -> float:
    z = normal_quantile(p)
    z2 = z * z
    g1 = (z2 + 1.0) * z / 4.0
    g2 = ((5.0 * z2 + 16.0) * z2 + 3.0) * z / 96.0
    g3 = (((3.0 * z2 + 19.0) * z2 + 17.0) * z2 - 15.0) * z / 384.0
    g4 = ((((79.0 * z2 + 776.0) * z2 + 1482.0) * z2 - 1920.0) * z2 - 945.0) * z / 92160.0
    return z + (g1 + (g2 + (g3 + g4 / df) / df) / df) / df


def t_quantile(p: float, df: float) -> float:
    """The t with P(T <= t) = p, for p in (0, 1) and ``df`` > 0 (NaN for df <= 0 or NaN), to about
    1e-12 relative: Newton steps on ``t_cdf`` kept inside a bracket that bisection shrinks
    (for df > 1e5, the asymptotic expansion about the normal quantile)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"t_quantile: p must lie in (0, 1), got {p}")
    if not df > 0:
        return math.nan
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    if p == 0.5:
        return 0.0
    if df > _LARGE_DF:
        return _large_df_quantile(p, df)
    upper = 1.0 - p  # solved on the upper tail: p near 1 keeps its digits
    low, high = 0.0, 1.0
    while t_tail(high, df) > upper:  # the quantile's bracket [low, high]
        low, high = high, high * 2.0
    t = 0.5 * (low + high)
    for _ in range(500):
        error = upper - t_tail(t, df)  # cdf(t) - p, without cancelling
        if error == 0.0:
            return t
        if error > 0:
            high = t
        else:
            low = t
        candidate = t - error / t_pdf(t, df)
        if not low < candidate < high:  # Newton left the bracket: bisect
            candidate = 0.5 * (low + high)
        if abs(candidate - t) <= 1e-15 * abs(candidate) or high - low <= 1e-15 * high:
            return candidate
        t = candidate
    return t


def t_quantile_975(df: float) -> float:
    """t_{0.975, df}: the half-width factor of a two-sided 95% interval (NaN for df < 1 ... df <= 0)."""
    return t_quantile(0.975, df)
