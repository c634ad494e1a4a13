"""OracleTSC rewards (eqs. 7, 11–15) against hand-computed values."""

import math

import pytest

from llmtraffic.signal.oracle import (
    RewardConfig,
    naive_dse,
    oracle_reward,
    phase_counts,
    softmax_dse,
)
from llmtraffic.signal.state import IntersectionState, LaneCounts


def queued(n: int) -> IntersectionState:
    return IntersectionState(0.0, 0, {"a": LaneCounts(n - n // 2, 1, 1, 1), "b": LaneCounts(n // 2, 2, 0, 0)})


def test_phase_counts_is_algorithm_3_histogram():
    assert phase_counts([0, 2, 2, 1, 2, 0, 2, 2], 4).tolist() == [2, 1, 5, 0]
    with pytest.raises(ValueError, match=r"phases \[4\] are outside 0..3"):
        phase_counts([0, 4], 4)


def test_softmax_dse_tau_one_by_hand():
    # e^6 / (e^6 + e^2 + e^0) = 403.429 / 411.818
    assert softmax_dse([6, 2, 0], 0, tau=1.0) == pytest.approx(0.979629207, abs=1e-9)
    # tau = 2 halves the counts: e^3 / (e^3 + e^1 + 1)
    assert softmax_dse([6, 2, 0], 0, tau=2.0) == pytest.approx(0.843794734, abs=1e-9)


def test_softmax_dse_tau_zero_is_argmax_indicator_with_ties_split():
    assert softmax_dse([5, 3, 0], 0, tau=0) == 1.0
    assert softmax_dse([5, 3, 0], 1, tau=0) == 0.0
    assert softmax_dse([4, 4, 0], 0, tau=0) == 0.5
    assert softmax_dse([4, 4, 0], 2, tau=0) == 0.0
    assert softmax_dse([2, 2, 2, 2], 3, tau=0) == 0.25
    # the limit is continuous: a tiny tau gives the same values, without overflow
    assert softmax_dse([5, 3, 0], 0, tau=1e-4) == pytest.approx(1.0)
    assert softmax_dse([4, 4, 0], 1, tau=1e-4) == pytest.approx(0.5)


def test_softmax_dse_large_tau_tends_to_uniform():
    assert softmax_dse([8, 0, 0, 0], 0, tau=1e6) == pytest.approx(0.25, abs=1e-5)
    assert softmax_dse([8, 0, 0, 0], 1, tau=math.inf) == 0.25


def test_naive_dse_is_frequency():
    assert naive_dse([5, 3, 0], 1) == 0.375
    assert naive_dse([8, 0], 0) == 1.0


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: softmax_dse([1, 2], 0, tau=-1), "tau must be >= 0"),
        (lambda: softmax_dse([1, 2], 0, tau=math.nan), "tau must be >= 0"),
        (lambda: softmax_dse([1, 2], 2, tau=1), "chosen phase 2"),
        (lambda: softmax_dse([], 0, tau=1), "non-empty"),
        (lambda: naive_dse([0, 0], 0), "all zero"),
        (lambda: naive_dse([1, -1], 0), "non-negative"),
        (lambda: RewardConfig(entropy="token"), "RewardConfig.entropy"),
        (lambda: RewardConfig(env="delay"), "RewardConfig.env"),
    ],
)
def test_bad_inputs_raise_naming_the_field(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_oracle_reward_gates_entropy_on_hurdle_eq_12_14():
    assert oracle_reward(3.0, 2.5, 1.0, 0.8) == pytest.approx(1.3)  # 0.5 + 0.8
    assert oracle_reward(2.5, 2.5, 1.0, 0.8) == 0.0  # not strictly above the hurdle: no bonus
    assert oracle_reward(1.0, 2.5, 2.0, 1.0) == -1.5
    assert oracle_reward(-4.0, 0.0, 1.0, 1.0) == -4.0


def test_reward_config_combines_eq_7_8_11_12_14_and_eq_15():
    before, after = queued(10), queued(6)  # halting vehicles only count toward the queue
    full = RewardConfig(hurdle=2.5, entropy="softmax", tau=0.0, w_e=1.0)
    assert full(before, 0, after, [6, 2, 0]) == pytest.approx(4 - 2.5 + 1.0)
    assert full(before, 1, after, [6, 2, 0]) == pytest.approx(4 - 2.5 + 0.0)  # chosen is not the majority
    assert full(before, 0, queued(9), [6, 2, 0]) == pytest.approx(1 - 2.5)  # below hurdle: gated
    naive = RewardConfig(hurdle=1.0, entropy="naive", w_e=2.0)
    assert naive(before, 1, after, [6, 2, 0]) == pytest.approx(4 - 1 + 2 * 0.25)
    assert RewardConfig(env="queue")(before, 0, after, [8]) == -6.0
    assert RewardConfig()(before, 0, after, [8]) == 4.0
