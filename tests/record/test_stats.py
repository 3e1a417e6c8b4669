"""Student t intervals and the paired t-test against hand-computed values, printed tables and
scipy (a test-only dependency)."""

import math

import pytest

from dlrm_exp.record.stats import (
    estimate,
    paired_difference,
    regularized_incomplete_beta,
    student_t_cdf,
    student_t_ppf,
)


@pytest.mark.parametrize(
    ("df", "quantile"),  # two-sided 95 % critical values from any printed t table
    [(1, 12.7062), (2, 4.3027), (4, 2.7764), (9, 2.2622), (30, 2.0423), (120, 1.9799)],
)
def test_t_quantiles_match_the_printed_table(df, quantile):
    assert student_t_ppf(0.975, df) == pytest.approx(quantile, abs=1e-4)


def test_mean_sd_and_interval_by_hand():
    e = estimate([1.0, 2.0, 3.0, 4.0, 5.0])
    assert e.n == 5 and e.mean == 3.0
    assert e.sd == pytest.approx(math.sqrt(2.5))  # sum of squares 10 over n - 1 = 4
    half = 2.776445105 * math.sqrt(2.5) / math.sqrt(5)
    assert (e.ci_low, e.ci_high) == (pytest.approx(3 - half), pytest.approx(3 + half))
    single = estimate([0.7])
    assert single.sd is None and single.ci_low is None and single.half_width is None


def test_paired_test_by_hand():
    # differences 0.1, 0.2, -0.1, 0.3: mean 0.125, sd 0.17078, t = 1.46385 with 3 df
    d = paired_difference([1.1, 2.2, 2.9, 4.3], [1.0, 2.0, 3.0, 4.0])
    assert d.n == 4 and d.mean == pytest.approx(0.125)
    sd = math.sqrt(sum((x - 0.125) ** 2 for x in (0.1, 0.2, -0.1, 0.3)) / 3)
    assert 0.125 / (sd / 2) == pytest.approx(1.46385, abs=1e-5)
    assert d.p_value == pytest.approx(0.2394, abs=1e-4) and not d.significant
    shifted = paired_difference([1.5, 2.4, 3.6, 4.5], [1.0, 2.0, 3.0, 4.0])
    assert shifted.significant and shifted.ci_low > 0
    same = paired_difference([1.0, 2.0], [1.0, 2.0])
    assert same.mean == 0 and same.p_value == 1.0


def test_against_scipy():
    stats = pytest.importorskip("scipy.stats")
    special = pytest.importorskip("scipy.special")
    for df in (1, 2, 3, 5, 10, 29, 200):
        for t in (-4.0, -1.3, 0.0, 0.5, 2.2, 7.0):
            assert student_t_cdf(t, df) == pytest.approx(stats.t.cdf(t, df), abs=1e-12)
        for q in (0.6, 0.9, 0.975, 0.995):
            assert student_t_ppf(q, df) == pytest.approx(stats.t.ppf(q, df), rel=1e-9)
    for a, b, x in ((0.5, 0.5, 0.3), (2.0, 0.5, 0.9), (15.0, 0.5, 0.99), (3.0, 7.0, 0.2)):
        assert regularized_incomplete_beta(a, b, x) == pytest.approx(
            special.betainc(a, b, x), abs=1e-13
        )
    treatment = [0.80117, 0.80203, 0.80051, 0.80188, 0.80140]
    baseline = [0.80101, 0.80177, 0.80060, 0.80150, 0.80121]
    ours = paired_difference(treatment, baseline)
    theirs = stats.ttest_rel(treatment, baseline)
    assert ours.p_value == pytest.approx(theirs.pvalue, rel=1e-9)
    low, high = theirs.confidence_interval(0.95)
    assert (ours.ci_low, ours.ci_high) == (pytest.approx(low), pytest.approx(high))
