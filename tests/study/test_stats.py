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
    assert stats.verdict(est) == stats.INCONCLUSIVE_N1


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
    # large between-unit spread, a small within-pair offset: unpaired CIs overlap, the paired one excludes 0
    b = [100.0, 300.0, 500.0, 700.0]
    a = [x - o for x, o in zip(b, (4.0, 5.5, 6.0, 4.5))]
    assert stats.mean_ci(a).high > stats.mean_ci(b).low
    d = stats.paired_difference(a, b)
    assert d.mean == -5.0 and d.half_width < 1.5
    assert stats.verdict(d) == stats.BETTER
    # a constant offset is one distinct difference: no spread to test against, no verdict
    assert stats.verdict(stats.paired_difference([x - 5.0 for x in b], b)) == stats.DETERMINISTIC


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


# ---------------------------------------------------------------- runs as units (issue 35)

import numpy as np
import pandas as pd


def _nested(agent_effects, episode_noise, method="A", agent_seeds=None):
    """Long rows: agent a's episode e scores agent_effects[a] + episode_noise[e]."""
    seeds = agent_seeds if agent_seeds is not None else range(len(agent_effects))
    return pd.DataFrame([{"method": method, "agent_seed": s, "seed": e, "x": u + v}
                         for s, u in zip(seeds, agent_effects) for e, v in enumerate(episode_noise)])


def test_agent_variance_dominates_pooled_interval_excludes_zero_per_run_does_not():
    # 3 agents with effects 3, -1, 1 (mean 1, SD 2), 10 episodes each with tiny noise ±0.1.
    noise = [0.1, -0.1] * 5
    rows = _nested([3.0, -1.0, 1.0], noise)
    pooled = stats.mean_ci(rows["x"])  # the old way: 30 episodes as units
    assert pooled.n == 30 and pooled.excludes_zero()
    est = stats.estimate(rows, "x")
    # per run: means 3, -1, 1 -> mean 1, s = 2, half = 4.302653 * 2 / sqrt(3) = 4.968276
    assert est.n == 3 and est.runs == (3.0, -1.0, 1.0)
    assert est.half_width == pytest.approx(4.968276, abs=1e-5)
    assert not est.excludes_zero()
    assert est.of == "3 agents (× 10 episodes each)"


def test_one_agent_has_no_interval_and_is_inconclusive():
    rows = _nested([2.0], [0.5, -0.5, 0.0])
    est = stats.estimate(rows, "x")
    assert est.n == 1 and math.isnan(est.low) and math.isnan(est.high)
    assert est.of == "1 agent (× 3 episodes)"
    assert est.format() == "2.0 (n = 1 agent, no CI)"
    ref = pd.DataFrame({"method": "ref", "seed": [0, 1, 2], "x": [1.0, 1.0, 1.0]})
    diff = stats.compare(rows, ref, "x")
    assert diff.n == 1 and diff.mean == pytest.approx(1.0)
    assert stats.verdict(diff) == stats.INCONCLUSIVE_N1 == "inconclusive (n = 1)"
    assert math.isnan(diff.mde)


def test_pairing_by_training_seed_narrows_the_interval_when_runs_share_seeds():
    # the agent seed shifts both methods alike (10, 20, 30, 40); B is A plus 1, 2, 1.4, 1.6 per seed
    effects = [10.0, 20.0, 30.0, 40.0]
    a = _nested(effects, [0.0, 0.0])
    b = _nested([e + d for e, d in zip(effects, [1.0, 2.0, 1.4, 1.6])], [0.0, 0.0], "B")
    paired = stats.compare(a, b, "x")
    # per-seed differences -1, -2, -1.4, -1.6: mean -1.5, s = 0.416333, half = 3.182446 * 0.416333 / 2 = 0.662478
    assert paired.mean == pytest.approx(-1.5)
    assert paired.half_width == pytest.approx(0.662478, abs=1e-5)
    assert stats.verdict(paired) == stats.BETTER
    disjoint = b.assign(agent_seed=b["agent_seed"] + 100)  # same values, no shared seeds: unpaired
    unpaired = stats.compare(a, disjoint, "x")
    assert unpaired.mean == pytest.approx(-1.5)
    assert unpaired.half_width > 10 * paired.half_width
    assert stats.verdict(unpaired) == stats.NO_DIFFERENCE


def test_trained_against_fixed_uses_the_trained_runs_as_units():
    learned = _nested([1.0, 2.0, 3.0], [0.0, 1.0])  # agent means 1.5, 2.5, 3.5
    fixed = pd.DataFrame({"method": "F", "seed": [0, 1, 2], "x": [1.0, 2.0, 100.0]})  # seed 2 is not shared
    d = stats.compare(learned, fixed, "x")  # fixed mean over seeds 0, 1 = 1.5
    assert d.runs == pytest.approx((0.0, 1.0, 2.0)) and d.n == 3
    assert d.of == "3 agents (× 2 episodes each)"
    r = stats.compare(fixed, learned, "x", relative=True)  # fixed − learned in % of the learned mean 2.5
    assert r.runs == pytest.approx((0.0, -40.0, -80.0))
    both_fixed = stats.compare(fixed, fixed.assign(x=fixed["x"] + 1), "x")
    assert both_fixed.of == "3 eval seeds" and both_fixed.mean == pytest.approx(-1.0)


def test_partly_shared_seeds_pair_on_the_shared_ones_and_say_which_were_left_out():
    a = _nested([1.0, 2.0, 7.0], [0.0])  # seeds 0, 1, 2
    b = _nested([0.5, 1.0], [0.0], agent_seeds=[1, 2])  # seed 2's partner scored 7.0: a − b = 1.5 and 6.0
    d = stats.compare(a, b, "x")
    assert d.runs == pytest.approx((1.5, 6.0)) and d.n == 2
    assert d.of == "2 agents (paired on the shared training seeds; unpaired left out: 0)"


def test_missing_episodes_are_refused():
    a = _nested([1.0, 2.0], [0.0])
    with pytest.raises(ValueError, match="not run on the same"):
        stats.compare(a, _nested([1.0, 2.0], [0.0, 0.0]), "x")
    with pytest.raises(ValueError, match="lacks eval seed"):
        stats.compare(_nested([1.0, 2.0], [0.0, 0.0]), pd.DataFrame({"seed": [0], "x": [1.0]}), "x")


def test_minimum_detectable_effect_by_the_noncentral_t():
    # n = 10, SD 1: the noncentral-t power equation gives δ = 0.996 (G*Power: d ≈ 0.996 for
    # a two-sided one-sample t-test, α = 0.05, power 0.8, n = 10); the normal approximation would say 0.886
    assert stats.mde(1.0, 10) == pytest.approx(0.9965, abs=2e-3)
    assert stats.mde(2.0, 10) == pytest.approx(2 * stats.mde(1.0, 10))
    assert stats.mde(1.0, 100) == pytest.approx(0.2829, abs=2e-3)
    assert math.isnan(stats.mde(1.0, 1)) and math.isnan(stats.mde(0.0, 5))  # no spread: undefined, not 0
    d = stats.paired_difference([1.0, 2.0, 3.0, 4.0], [0.0, 0.0, 0.0, 0.0])
    assert d.mde == pytest.approx(stats.mde(float(np.std([1, 2, 3, 4], ddof=1)), 4))


def test_counts_name_their_unit():
    assert stats.count(3, "agent", 10) == "3 agents (× 10 episodes each)"
    assert stats.count(10, "eval seed") == "10 eval seeds"
    assert stats.count(3, "design run", [10, 8]) == "3 design runs (× 8–10 episodes each)"
    with pytest.raises(ValueError, match="unknown unit"):
        stats.count(3, "agent seeds × eval seeds")


def test_a_caption_without_a_unit_is_refused():
    good = f"Case 1: {stats.caption(stats.count(3, 'agent', 10), stats.count(10, 'eval seed'))}"
    stats.check_caption(good)
    for bad in ("Case 1: mean ± CI", f"Case 1, {stats.caption(30, 'agent seeds × eval seeds')}",
                "Case 1: 95 % t-interval over 30 episodes"):
        with pytest.raises(ValueError, match="refused"):
            stats.check_caption(bad)
    est = stats.mean_ci([1.0, 2.0], of=stats.count(2, "design run", 10))
    with pytest.raises(ValueError, match="omits the unit"):
        stats.check_caption(good, [est])
