"""Statistics that separate an effect from noise: Student t intervals, the paired t-test and
Welch's unpaired t-test.

Only the standard library: the Student t distribution function comes from the regularized
incomplete beta function (``I_x(a, b)``, evaluated with Lentz's continued fraction as in
Numerical Recipes, 3rd ed., section 6.4), ``P(T <= t) = 1 - I_{df/(df+t^2)}(df/2, 1/2) / 2``
for ``t >= 0``; its quantile by bisection. Tests check both against scipy and printed tables
(e.g. the 0.975 quantile at 4 degrees of freedom is 2.7764).
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass

#: Two-sided confidence level of every interval.
CONFIDENCE = 0.95


def _beta_continued_fraction(a: float, b: float, x: float) -> float:
    tiny, eps = 1e-300, 1e-15
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < eps:
            break
    return h


def regularized_incomplete_beta(a: float, b: float, x: float) -> float:
    """``I_x(a, b)`` for ``a, b > 0`` and ``0 <= x <= 1``."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_continued_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_continued_fraction(b, a, 1.0 - x) / b


def student_t_cdf(t: float, df: float) -> float:
    """``P(T <= t)`` for Student's t with ``df`` degrees of freedom."""
    tail = 0.5 * regularized_incomplete_beta(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def student_t_ppf(q: float, df: float) -> float:
    """The ``q`` quantile of Student's t with ``df`` degrees of freedom (bisection to 1e-12)."""
    if not 0.0 < q < 1.0:
        raise ValueError(f"quantile level must be in (0, 1), got {q}")
    low, high = -1.0, 1.0
    while student_t_cdf(low, df) > q:
        low *= 2.0
    while student_t_cdf(high, df) < q:
        high *= 2.0
    while high - low > 1e-12 * max(1.0, abs(high)):
        mid = (low + high) / 2.0
        low, high = (mid, high) if student_t_cdf(mid, df) < q else (low, mid)
    return (low + high) / 2.0


@dataclass(frozen=True)
class Estimate:
    """Mean of ``n`` repeats with its sample standard deviation (``n - 1`` denominator) and
    the 95 % Student t confidence interval ``mean +- t_{0.975, n-1} * sd / sqrt(n)``; sd and
    the interval are None for ``n < 2``."""

    n: int
    mean: float
    sd: float | None
    ci_low: float | None
    ci_high: float | None

    @property
    def half_width(self) -> float | None:
        """Half the interval's width (None for ``n < 2``)."""
        return None if self.ci_high is None else self.ci_high - self.mean


def estimate(values: Sequence[float]) -> Estimate:
    """The :class:`Estimate` of ``values`` (raises ValueError on an empty sequence)."""
    n = len(values)
    if n == 0:
        raise ValueError("no values to estimate from")
    mean = math.fsum(values) / n
    if n < 2:
        return Estimate(n, mean, None, None, None)
    sd = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1))
    half = student_t_ppf(0.5 + CONFIDENCE / 2, n - 1) * sd / math.sqrt(n)
    return Estimate(n, mean, sd, mean - half, mean + half)


@dataclass(frozen=True)
class Difference:
    """``treatment - baseline``: the mean difference with its 95 % Student t interval and the
    two-sided p-value of its t-test (H0: no difference).

    ``method`` is ``paired`` (repeats paired by seed: ``t = mean / (sd / sqrt(n))`` of the
    per-seed differences, ``n - 1`` degrees of freedom) or ``welch`` (unpaired: Welch's t with
    the Welch-Satterthwaite degrees of freedom). Without enough repeats for an interval
    (fewer than 2 pairs, or fewer than 2 runs on a side) ``ci_low``, ``ci_high`` and
    ``p_value`` are None; with zero spread the interval is the point ``mean`` and the p-value
    is 0 unless the difference is 0 (then 1)."""

    n: int
    mean: float
    ci_low: float | None
    ci_high: float | None
    p_value: float | None
    method: str = "paired"
    df: float | None = None

    @property
    def significant(self) -> bool:
        """The 95 % interval excludes 0 (equivalently p < 0.05)."""
        return self.p_value is not None and self.p_value < 1 - CONFIDENCE

    @property
    def half_width(self) -> float | None:
        """Half the interval's width: the smallest mean difference these repeats can tell
        from 0 at 95 % (None without an interval)."""
        return None if self.ci_high is None else self.ci_high - self.mean


def _difference(mean: float, se: float, df: float, n: int, method: str) -> Difference:
    if se == 0.0:
        return Difference(n, mean, mean, mean, 1.0 if mean == 0.0 else 0.0, method, df)
    half = student_t_ppf(0.5 + CONFIDENCE / 2, df) * se
    p = 2.0 * (1.0 - student_t_cdf(abs(mean / se), df))
    return Difference(n, mean, mean - half, mean + half, p, method, df)


def paired_difference(treatment: Sequence[float], baseline: Sequence[float]) -> Difference:
    """Paired t-test of ``treatment[i] - baseline[i]`` (same seed at the same index).

    Raises:
        ValueError: the two sequences differ in length, or are empty.
    """
    if len(treatment) != len(baseline):
        raise ValueError("paired samples must have the same length")
    diffs = [t - b for t, b in zip(treatment, baseline, strict=True)]
    summary = estimate(diffs)
    if summary.n < 2 or summary.sd is None:
        return Difference(summary.n, summary.mean, None, None, None)
    se = summary.sd / math.sqrt(summary.n)
    return _difference(summary.mean, se, summary.n - 1, summary.n, "paired")


def welch_difference(treatment: Sequence[float], baseline: Sequence[float]) -> Difference:
    """Welch's unpaired t-test of ``mean(treatment) - mean(baseline)`` (Welch, Biometrika 1947):
    ``se = sqrt(s1^2/n1 + s2^2/n2)``, degrees of freedom by Welch-Satterthwaite,
    ``se^4 / ((s1^2/n1)^2/(n1-1) + (s2^2/n2)^2/(n2-1))``. ``n`` is the smaller side's count.

    Raises:
        ValueError: either sequence is empty.
    """
    new, old = estimate(treatment), estimate(baseline)
    mean, n = new.mean - old.mean, min(new.n, old.n)
    if new.sd is None or old.sd is None:
        return Difference(n, mean, None, None, None, "welch")
    v_new, v_old = new.sd**2 / new.n, old.sd**2 / old.n
    se = math.sqrt(v_new + v_old)
    if se == 0.0:
        return _difference(mean, 0.0, new.n + old.n - 2, n, "welch")
    df = se**4 / (v_new**2 / (new.n - 1) + v_old**2 / (old.n - 1))
    return _difference(mean, se, df, n, "welch")
