"""The statistics helper on hand-computed cases."""

import math

import pytest

from llmtraffic.study import stats


def test_t_interval_matches_hand_computation():
    # values 1..5: mean 3, s = sqrt(2.5) = 1.5811, t(0.975, 4) = 2.776445, half = 2.776445 * 1.5811 / sqrt(5) = 1.96324
    est = stats.mean_ci([1, 2, 3, 4, 5])
    assert est.n == 5
    assert est.mean == 3.0
    assert est.half_width == pytest.approx(1.963243, abs=1e-5)
    assert (est.low, est.high) == pytest.approx((1.036757, 4.963243), abs=1e-5)
    assert est.format(2) == "3.00 ± 1.96"


def test_two_values_use_t_with_one_degree_of_freedom():
    # t(0.975, 1) = 12.7062; s = sqrt(2) for (0, 2); half = 12.7062 * sqrt(2) / sqrt(2) = 12.7062
    est = stats.mean_ci([0.0, 2.0])
    assert est.half_width == pytest.approx(12.7062, abs=1e-4)


def test_single_value_has_no_interval_and_no_verdict():
    est = stats.mean_ci([4.2])
    assert math.isnan(est.low) and math.isnan(est.high)
    assert est.format() == "4.2 (n = 1, no CI)"
    # identical units (a deterministic simulator on several seeds): no "± 0.0" that reads as precision
    assert stats.mean_ci([7.0, 7.0, 7.0]).format() == "7.0 (n = 3, all equal)"
    assert stats.verdict(est) == stats.NO_DIFFERENCE


def test_paired_difference_on_constructed_data():
    # per-unit differences 1, 2, 3 (a is b plus 1..3): mean 2, s = 1, half = 4.302653 / sqrt(3) = 2.484138
    b = [10.0, 20.0, 30.0]
    a = [11.0, 22.0, 33.0]
    d = stats.paired_difference(a, b)
    assert d.mean == pytest.approx(2.0)
    assert d.half_width == pytest.approx(2.484138, abs=1e-5)
    # relative: in percent of mean(b) = 20 -> mean 10 %, half 12.42 %
    r = stats.paired_difference(a, b, relative=True)
    assert r.mean == pytest.approx(10.0)
    assert r.half_width == pytest.approx(12.42069, abs=1e-4)
    assert r.unit == "%"


def test_pairing_removes_shared_noise():
    # large between-unit spread, constant within-pair offset: unpaired CIs overlap, the paired one excludes 0
    b = [100.0, 300.0, 500.0, 700.0]
    a = [x - 5.0 for x in b]
    assert stats.mean_ci(a).high > stats.mean_ci(b).low
    d = stats.paired_difference(a, b)
    assert d.mean == -5.0 and d.half_width == 0.0
    assert stats.verdict(d) == stats.BETTER


def test_verdict_flips_exactly_when_the_interval_crosses_zero():
    # differences (x, x+2, x+4): half-width 4.302653 * 2 / sqrt(3) = 4.968276; the CI excludes 0 iff |mean| > half
    half = 4.302653 * 2 / math.sqrt(3)
    def diff(mean):
        return stats.mean_ci([mean - 2, mean, mean + 2])
    assert stats.verdict(diff(-half - 1e-3)) == stats.BETTER
    assert stats.verdict(diff(-half + 1e-3)) == stats.NO_DIFFERENCE
    assert stats.verdict(diff(half - 1e-3)) == stats.NO_DIFFERENCE
    assert stats.verdict(diff(half + 1e-3)) == stats.WORSE
    assert stats.verdict(diff(half + 1e-3), lower_is_better=False) == stats.BETTER


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="equally many"):
        stats.paired_difference([1, 2], [1, 2, 3])
    with pytest.raises(ValueError, match="non-finite"):
        stats.mean_ci([1.0, float("nan")])
    with pytest.raises(ValueError, match="at least one"):
        stats.mean_ci([])
