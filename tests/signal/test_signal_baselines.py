"""Classic controllers: decisions on hand-built states, deadlock reporting, Cologne1 behaviour."""

import pytest

from llmtraffic.signal import SOTL, FixedTime, MaxPressure, SignalConfig, SyntheticScenario, evaluate
from llmtraffic.signal.env import SignalState
from llmtraffic.signal.state import LaneCounts, Movement, Phase

# two phases of a T-shaped toy: phase 0 serves lane a → x, phase 1 serves b → y and c → y
PHASES = (
    Phase(0, "NTST", "north-south", (Movement("a", "x", "N", "through"),), "Grr"),
    Phase(1, "ETWT", "east-west", (Movement("b", "y", "E", "through"), Movement("c", "y", "W", "through")), "rGG"),
)


def state(a, b, c, x=0, y=0, phase=0, phase_time_s=30.0, time_s=0.0):
    """Lanes given as (queue, near, mid, far); out lanes as vehicle counts."""
    lanes = {k: LaneCounts(*v) for k, v in zip("abc", (a, b, c))}
    return SignalState(time_s, phase, lanes, PHASES, phase_time_s=phase_time_s, outgoing={"x": x, "y": y})


def test_max_pressure_picks_the_largest_in_minus_out():
    # phase 0: 6 − 1 = 5; phase 1: (2 − 4) + (5 − 4) = −1
    assert MaxPressure().act(state((3, 1, 1, 1), (1, 1, 0, 0), (4, 0, 0, 1), x=1, y=4, phase=1)) == 0
    # phase 0: 6 − 5 = 1; phase 1: (2 − 0) + (5 − 0) = 7
    assert MaxPressure().act(state((3, 1, 1, 1), (1, 1, 0, 0), (4, 0, 0, 1), x=5, y=0)) == 1


def test_max_pressure_holds_the_phase_for_t_min():
    s = state((0, 0, 0, 0), (9, 0, 0, 0), (9, 0, 0, 0), phase=0, phase_time_s=5.0)
    assert MaxPressure(t_min=10).act(s) == 0
    assert MaxPressure(t_min=5).act(s) == 1


def test_sotl_switches_only_with_few_green_and_many_red_waiting():
    sotl = SOTL(t_min=5, min_green_vehicle=3, max_red_vehicle=6)
    assert sotl.act(state((3, 5, 0, 0), (4, 0, 0, 0), (3, 0, 0, 0))) == 1   # 3 ≤ 3 and 7 > 6
    assert sotl.act(state((4, 0, 0, 0), (4, 0, 0, 0), (3, 0, 0, 0))) == 0   # 4 green waiting
    assert sotl.act(state((0, 0, 0, 0), (3, 0, 0, 0), (3, 0, 0, 0))) == 0   # only 6 red
    assert sotl.act(state((0, 0, 0, 0), (4, 0, 0, 0), (3, 0, 0, 0), phase_time_s=4.0)) == 0  # t_min
    assert sotl.act(state((9, 0, 0, 0), (0, 0, 0, 0), (1, 0, 0, 0), phase=1)) == 0  # wraps around


def test_fixed_time_cycles_by_time():
    acts = [FixedTime(30).act(state((0,) * 4, (0,) * 4, (0,) * 4, time_s=t)) for t in range(0, 130, 10)]
    assert acts == [0, 0, 0, 1, 1, 1, 0, 0, 0, 1, 1, 1, 0]
    with pytest.raises(ValueError, match="t_fixed"):
        FixedTime(0)


def test_a_starved_intersection_is_reported_as_deadlocked():
    east_west_only = SyntheticScenario(rates={"ET": 900.0, "WT": 900.0, "EL": 300.0, "WL": 300.0})
    hold_north_south = type("Hold", (), {"act": staticmethod(lambda s: 0)})()
    stuck = evaluate(east_west_only, hold_north_south, seed=0, episode_s=1200)
    assert stuck["deadlock"] and stuck["throughput"] == 0
    # nothing moved from deadlock_time_s on, and it was found within the episode
    assert 0 < stuck["deadlock_time_s"] <= 1200 - SignalConfig().deadlock_s
    assert stuck["waiting_to_enter"] > 0 and stuck["travel_time_all_s"] > 0
    served = evaluate(east_west_only, MaxPressure(), seed=0, episode_s=1200)
    assert not served["deadlock"] and served["deadlock_time_s"] is None and served["throughput"] > 500


@pytest.mark.parametrize("seed", [0, 1])
def test_max_pressure_beats_fixed_time_on_cologne1(seed):
    mp = evaluate("cologne1", MaxPressure(), seed=seed)
    for fixed in (FixedTime(30), FixedTime(10)):
        ft = evaluate("cologne1", fixed, seed=seed)
        assert mp["travel_time_s"] < ft["travel_time_s"], fixed
        assert mp["queue"] < ft["queue"], fixed
    assert mp["throughput"] > 1900 and not mp["deadlock"]
    assert mp["config_time_to_teleport"] == -1


def test_mean_ci_table_counts_deadlocks_keeps_them_in_the_means_and_marks_them():
    import pandas as pd

    from llmtraffic.signal import evaluate_method, mean_ci_table

    base = dict(scenario="cologne1", travel_time_all_s=100.0, delay=0.5)
    rows = pd.DataFrame([
        dict(method="A", seed=0, travel_time_s=40.0, queue=4.0, throughput=2000, deadlock=False, deadlock_time_s=None, **base),
        dict(method="A", seed=1, travel_time_s=60.0, queue=8.0, throughput=1000, deadlock=True, deadlock_time_s=1010.0, **base),
        dict(method="B", seed=0, travel_time_s=50.0, queue=5.0, throughput=1990, deadlock=False, deadlock_time_s=None, **base),
    ])
    table = mean_ci_table(rows, ["A", "B", "C"], "cologne1")
    # n = 2: half-width t_{1, 0.975} · s / √2 = 12.706 · |a − b| / 2 (ddof = 1)
    assert table.loc["A"].tolist() == ["jammed: 50.0 ± 127.1", "jammed: 6.0 ± 25.4", "jammed: 0.50 (n = 2 eval seeds, all equal)",
                                       "jammed: 1500 ± 6353", "jammed: 100.0 (n = 2 eval seeds, all equal)", "2 eval seeds",
                                       "1/2 episodes (from 1010 s)"]
    assert table.loc["B", "Deadlocks"] == "0/1 episodes" and list(table.index) == ["A", "B"]
    assert table.loc["B", "Travel Time"] == "50.0 (n = 1 eval seed, no CI)"
    learned = rows.assign(method="L", agent_seed=[0, 0, 1], seed=[0, 1, 0])  # agent means 50 (of 40, 60) and 50
    cell = mean_ci_table(learned, ["L"], "cologne1").loc["L"]
    assert cell["n"] == "2 agents (× 1–2 episodes each)" and cell["Travel Time"] == "jammed: 50.0 (n = 2 agents, all equal)"
    with pytest.raises(ValueError, match="'IDQN' needs a trained controller"):
        evaluate_method("IDQN", "synthetic", seed=0)
