"""Student t intervals and the paired t-test against hand-computed values, printed tables and
values computed with scipy."""

import math

import pytest

from dlrm_exp.record.stats import (
    estimate,
    paired_difference,
    regularized_incomplete_beta,
    student_t_cdf,
    student_t_ppf,
)

#: Reference values computed with scipy 1.17.1 (``scipy.stats.t.cdf`` / ``.ppf``,
#: ``scipy.special.betainc``, ``scipy.stats.ttest_rel``). scipy is not a dependency: importing it
#: makes every process that imports torchmetrics about 1.2 s slower.
SCIPY_T_CDF = {
    1: [
        (-4.0, 0.07797913037736932),
        (-1.3, 0.20871440016015272),
        (0.0, 0.5),
        (0.5, 0.6475836176504333),
        (2.2, 0.8642002512199081),
        (7.0, 0.9548327646991335),
    ],
    2: [
        (-4.0, 0.028595479208968315),
        (-1.3, 0.16162351590802015),
        (0.0, 0.5),
        (0.5, 0.6666666666666666),
        (2.2, 0.9205955120960299),
        (7.0, 0.9900980294098034),
    ],
    3: [
        (-4.0, 0.014004228005073076),
        (-1.3, 0.14223375436394853),
        (0.0, 0.5),
        (0.5, 0.6742760175759245),
        (2.2, 0.9424140240117647),
        (7.0, 0.9970068721511465),
    ],
    5: [
        (-4.0, 0.005161707740415725),
        (-1.3, 0.12515031708533855),
        (0.0, 0.5),
        (0.5, 0.6808505641795355),
        (2.2, 0.9604530510484088),
        (7.0, 0.9995416262428009),
    ],
    10: [
        (-4.0, 0.0012591663123683473),
        (-1.3, 0.1113829086034223),
        (0.0, 0.5),
        (0.5, 0.6860531971285135),
        (2.2, 0.9737794657753234),
        (7.0, 0.9999814220385915),
    ],
    29: [
        (-4.0, 0.00020003197282624587),
        (-1.3, 0.1019195918310149),
        (0.0, 0.5),
        (0.5, 0.6895759579031093),
        (2.2, 0.9820366204246587),
        (7.0, 0.9999999464986423),
    ],
    200: [
        (-4.0, 4.456547609296721e-05),
        (-1.3, 0.09754859465442814),
        (0.0, 0.5),
        (0.5, 0.6911876238417696),
        (2.2, 0.9855238453963356),
        (7.0, 0.9999999999810528),
    ],
}
SCIPY_T_PPF = {
    1: [
        (0.6, 0.32491969623290634),
        (0.9, 3.0776835371752544),
        (0.975, 12.706204736174694),
        (0.995, 63.656741162871526),
    ],
    2: [
        (0.6, 0.2886751345948128),
        (0.9, 1.8856180831641272),
        (0.975, 4.302652729749462),
        (0.995, 9.924843200918287),
    ],
    3: [
        (0.6, 0.2766706623326898),
        (0.9, 1.637744353696209),
        (0.975, 3.1824463052837078),
        (0.995, 5.840909309733355),
    ],
    5: [
        (0.6, 0.2671808657041451),
        (0.9, 1.4758840488244815),
        (0.975, 2.5705818356363146),
        (0.995, 4.032142983555228),
    ],
    10: [
        (0.6, 0.2601848294920803),
        (0.9, 1.372183641110336),
        (0.975, 2.228138851986274),
        (0.995, 3.16927267261695),
    ],
    29: [
        (0.6, 0.25568363457125604),
        (0.9, 1.311433647301551),
        (0.975, 2.045229642132703),
        (0.995, 2.756385903670605),
    ],
    200: [
        (0.6, 0.25368437919014747),
        (0.9, 1.2857987939948012),
        (0.975, 1.9718962236339088),
        (0.995, 2.600634436191558),
    ],
}
SCIPY_BETAINC = [
    (0.5, 0.5, 0.3, 0.36901011956554536),
    (2.0, 0.5, 0.9, 0.5414697392755851),
    (15.0, 0.5, 0.99, 0.5860649647763355),
    (3.0, 7.0, 0.2, 0.26180249600000016),
]
#: ``ttest_rel(TREATMENT, BASELINE)``: p-value and 95 % interval of the mean difference.
SCIPY_TTEST_REL = (0.08062857161132972, -3.488321958406131e-05, 0.0003948832195841549)


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
    half = 3.182446305 * sd / 2  # t(0.975, 3 df) x standard error
    assert (d.ci_low, d.ci_high) == (pytest.approx(0.125 - half), pytest.approx(0.125 + half))
    assert d.p_value == pytest.approx(0.2394, abs=1e-4) and not d.significant  # t 1.46385
    shifted = paired_difference([1.5, 2.4, 3.6, 4.5], [1.0, 2.0, 3.0, 4.0])
    assert shifted.significant and shifted.ci_low > 0
    same = paired_difference([1.0, 2.0], [1.0, 2.0])
    assert same.mean == 0 and same.p_value == 1.0


def test_against_scipy_reference_values():
    for df, points in SCIPY_T_CDF.items():
        for t, expected in points:
            assert student_t_cdf(t, df) == pytest.approx(expected, abs=1e-12), (df, t)
    for df, points in SCIPY_T_PPF.items():
        for q, expected in points:
            assert student_t_ppf(q, df) == pytest.approx(expected, rel=1e-9), (df, q)
    for a, b, x, expected in SCIPY_BETAINC:
        assert regularized_incomplete_beta(a, b, x) == pytest.approx(expected, abs=1e-13)
    treatment = [0.80117, 0.80203, 0.80051, 0.80188, 0.80140]
    baseline = [0.80101, 0.80177, 0.80060, 0.80150, 0.80121]
    ours = paired_difference(treatment, baseline)
    p_value, low, high = SCIPY_TTEST_REL
    assert ours.p_value == pytest.approx(p_value, rel=1e-9)
    assert (ours.ci_low, ours.ci_high) == (pytest.approx(low), pytest.approx(high))
