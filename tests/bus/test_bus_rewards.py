"""Rewards on hand-made §3.2 states against values computed by hand."""

from math import sqrt

import pytest

from llmtraffic.bus.rewards import headway_cv, paper_final, rl_global, rl_local

# a bus 1000 m behind its leader and 3000 m ahead of its follower, 25 onboard, held 30 s so far;
# one hold step (exaggerated to 100 m so the numbers are round) moves it towards the middle
S = [1000, 3000, 0, 0, 25, 30]
S_HELD = [1100, 2900, 0, 0, 25, 35]


def test_rl_local_is_own_balance_level_minus_hold_cost():
    assert rl_local(S, 1, S_HELD) == pytest.approx(-100 * 1800 / 4000 - 0.5)  # -45.5
    assert rl_local(S, 0, S_HELD) == pytest.approx(-45.0)
    assert rl_local(S, 0, [2000, 2000, 0, 0, 25, 0]) == 0.0


def test_rl_global_rewards_the_drop_in_headway_cv():
    # CV: std/mean = 1000/2000 = 0.5 before, 900/2000 = 0.45 after
    assert rl_global(S, 1, S_HELD) == pytest.approx(100 * 0.05 - 0.5)
    assert rl_global(S_HELD, 0, S) == pytest.approx(-5.0)


def test_headway_cv_uses_other_line_pair_only_at_a_shared_stop():
    # four headways 1000, 3000, 500, 1500: mean 1500, variance (500² + 1500² + 1000² + 0) / 4
    assert headway_cv([1000, 3000, 500, 1500, 0, 0]) == pytest.approx(sqrt(875_000) / 1500)
    assert headway_cv([1000, 3000, 0, 700, 0, 0]) == pytest.approx(0.5)


def test_paper_final_on_a_hold_step():
    # headway penalty (900 + 900) / 2000; hold (5/90)²; passengers 25/50 · 5/90;
    # bonus: std of [1000, 3000, 0, 0] = sqrt(1.5e6) falls to std of [1100, 2900, 0, 0] = sqrt(1.405e6)
    expected = -0.9 - (1 / 18) ** 2 - 0.5 / 18 + (sqrt(1.5e6) - sqrt(1.405e6)) / 2000
    assert paper_final(S, 1, S_HELD) == pytest.approx(expected)


def test_paper_final_long_hold_multiplier_and_release():
    long_before, long_after = [2000, 2000, 0, 0, 50, 60], [2000, 2000, 0, 0, 50, 65]
    # balanced, no std change: only 1.5 · (5/90)² and 50/50 · 5/90 remain
    assert paper_final(long_before, 1, long_after) == pytest.approx(-1.5 / 324 - 1 / 18)
    # release: holding time resets, no holding terms; std rises, so no bonus either
    released = [1000, 3000, 0, 0, 25, 0]
    assert paper_final(S_HELD, 0, released) == pytest.approx(-1.0)


def test_paper_final_adds_other_line_balance_at_shared_stop():
    before = [2000, 2000, 1000, 3000, 10, 0]
    after = [2000, 2000, 1000, 3000, 10, 0]
    assert paper_final(before, 0, after) == pytest.approx(-1.0)


def test_co_located_buses_count_as_fully_bunched():
    bunched, apart = [0, 0, 0, 0, 10, 0], [0, 1000, 0, 0, 10, 0]
    assert headway_cv(bunched) == headway_cv(apart) == 1.0
    assert rl_local(S, 0, bunched) == -100.0
    assert rl_global(bunched, 0, [500, 1500, 0, 0, 10, 0]) == pytest.approx(50.0)
    assert paper_final(S, 0, bunched) == pytest.approx(-2.0)


def test_malformed_states_are_rejected_by_name():
    with pytest.raises(ValueError, match="current_state must hold the 6 values"):
        rl_local([1, 2, 3], 0, S)
    with pytest.raises(ValueError, match="next_state has a negative space headway"):
        paper_final(S, 0, [-1, 2, 0, 0, 0, 0])
