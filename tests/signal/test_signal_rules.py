"""The two rule sets (``study`` and LibSignal's implemented ``libsignal``): each rule on hand-built cases."""

from itertools import groupby

import libsumo as ls
import pytest

from llmtraffic.signal import SOTL, FixedTime, MaxPressure, SignalConfig, SignalEnv, SyntheticScenario, evaluate
from llmtraffic.signal import rules as R
from llmtraffic.signal.env import SignalState
from llmtraffic.signal.evaluation import run_episode
from llmtraffic.signal.state import LaneCounts, Movement, Phase
from test_signal_env import TraceEnv, probe_type  # noqa: E402  (the signal tests' directory is on the path)

EMPTY = SyntheticScenario(rates={f"{a}{t}": 0.0 for a in "NESW" for t in "TL"})
COLOGNE = ["rrrrrGGGggrrrrrGGGgg", "rrrrrrrrGGrrrrrrrrGG", "GGGggrrrrrGGGggrrrrr", "rrrGGrrrrrrrrGGrrrrr"]
"""Cologne1's four green states, in its program's order."""


def place(placed):
    """Insert probes as (id, lane, front position, speed) on the synthetic network and hold their speed."""
    probe_type()
    for vid, lane, pos, speed in placed:
        route = lane[0] + ("T" if lane.endswith("0") else "L")
        ls.vehicle.add(vid, route, typeID="probe", depart="now", departLane=lane[-1], departPos=str(pos),
                       departSpeed=str(speed))
        ls.vehicle.setSpeed(vid, speed)


# Clearance --------------------------------------------------------------------------------

def test_clearance_strings_yellow_vs_all_red():
    # Cologne1 A → B: the through links (G → r) turn yellow in ours, red in LibSignal's; g → G stays
    assert R.yellow_clearance(COLOGNE[0], COLOGNE[1]) == "rrrrryyyggrrrrryyygg"
    assert R.all_red_clearance(COLOGNE[0], COLOGNE[1]) == "rrrrrrrrggrrrrrrrrgg"
    assert R.yellow_clearance("GGgrr", "rGGGr") == "yGgrr"
    assert R.all_red_clearance("GGgrr", "rGGGr") == "rGgrr"
    # B → A loses no green: LibSignal creates no clearance, and its program slips to its next phase
    assert R.all_red_clearance(COLOGNE[1], COLOGNE[0]) is None
    assert R.yellow_clearance(COLOGNE[1], COLOGNE[0]) == COLOGNE[1]
    program = R.libsignal_program(COLOGNE)
    assert program[:4] == COLOGNE and len(program) == 4 + 10  # 12 ordered pairs, 1 → 0 and 3 → 2 need none
    assert R.program_slip(COLOGNE, 1) == COLOGNE[2]
    assert R.program_slip(COLOGNE, 3) == program[4] == R.all_red_clearance(COLOGNE[0], COLOGNE[1])


def test_cologne_clearance_traces_under_both_rules():
    traces = {}
    for rules in R.RULES:
        with TraceEnv("cologne1", SignalConfig(episode_s=60, rules=rules)) as env:
            env.trace = []
            env.reset(seed=0)
            times = []
            for action in (0, 1, 0):
                env.step(action)
                times.append(env.state.phase_time_s)
        traces[rules] = ([(s, len(list(g))) for s, g in groupby(env.trace)], times)
    # ours: yellow A → B; B → A keeps B's links (none loses green) for the clearance
    assert traces["study"] == ([(COLOGNE[0], 10), ("rrrrryyyggrrrrryyygg", 5), (COLOGNE[1], 10), (COLOGNE[0], 5)],
                               [10, 5, 5])
    # LibSignal: all-red A → B; B → A sets nothing, so SUMO's program shows its next phase for 1 s;
    # its timer counts the clearance (10 s after each change)
    assert traces["libsignal"] == ([(COLOGNE[0], 10), ("rrrrrrrrggrrrrrrrrgg", 5), (COLOGNE[1], 5),
                                    (COLOGNE[2], 1), (COLOGNE[1], 4), (COLOGNE[0], 5)], [10, 10, 10])


def test_synthetic_fixed_time_shows_all_red_under_libsignal():
    with TraceEnv("synthetic", SignalConfig(episode_s=90, rules="libsignal")) as env:
        env.trace = []
        run_episode(env, FixedTime(30), seed=0)
    runs = [(s, len(list(g))) for s, g in groupby(env.trace)]
    # NTST → NLSL → NTNL: the links losing green turn red, the rest keep their state
    assert runs == [("GrrrGrrr", 30), ("rrrrrrrr", 5), ("rGrrrGrr", 25), ("rGrrrrrr", 5), ("GGrrrrrr", 25)]


# Phase timer and minimum green -------------------------------------------------------------

def test_timer_counts_the_clearance_under_libsignal():
    assert R.timer_after_slot("study", 30.0, True, 5, 10) == 5.0
    assert R.timer_after_slot("libsignal", 30.0, True, 5, 10) == 10.0
    assert R.timer_after_slot("libsignal", 10.0, False, 5, 10) == 20.0
    # so LibSignal's MaxPressure (t_min = 10) may change again after 5 s of green, ours after 15 s
    moves = (Movement("a", "x", "N", "through"),), (Movement("b", "y", "E", "through"),)
    phases = tuple(Phase(k, f"P{k}", "", m, "", m) for k, m in enumerate(moves))
    lanes = {"a": LaneCounts(0, 0, 0, 0), "b": LaneCounts(5, 0, 0, 0)}
    for rules, timer, expected in (("study", 5.0, 0), ("libsignal", 10.0, 1)):
        s = SignalState(10.0, 0, lanes, phases, phase_time_s=timer, outgoing={"x": 0, "y": 0}, rules=rules,
                        queued={"a": 0, "b": 5}, detected={"a": 0, "b": 5, "x": 0, "y": 0})
        assert MaxPressure(t_min=10).act(s) == expected


# Pressure ---------------------------------------------------------------------------------

def test_pressure_counts_g_links_only_under_libsignal():
    g = Movement("a2", "x", "N", "left")  # a permissive (g) link
    phases = (Phase(0, "NT", "", (Movement("a", "x", "N", "through"), g), "Gg", (Movement("a", "x", "N", "through"),)),
              Phase(1, "ET", "", (Movement("b", "y", "E", "through"),), "rrG", (Movement("b", "y", "E", "through"),)))
    lanes = {"a": LaneCounts(2, 0, 0, 0), "a2": LaneCounts(4, 0, 0, 0), "b": LaneCounts(3, 1, 0, 0)}
    study = SignalState(0.0, 1, lanes, phases, phase_time_s=30, outgoing={"x": 1, "y": 2})
    from llmtraffic.signal.baselines import phase_pressure

    # study: every green link, whole lanes, minus the out lanes: (2 − 1) + (4 − 1) = 4 and 4 − 2 = 2
    assert [phase_pressure(study, p) for p in phases] == [4, 2]
    # LibSignal: G links only, vehicles within 200 m (here 1 of a's 2 and 3 of b's 4), none out
    lib = SignalState(0.0, 1, lanes, phases, phase_time_s=30, outgoing={"x": 1, "y": 2}, rules="libsignal",
                      queued={}, detected={"a": 1, "a2": 4, "b": 3, "x": 0, "y": 0})
    assert [phase_pressure(lib, p) for p in phases] == [1, 3]
    assert MaxPressure().act(study) == 0 and MaxPressure().act(lib) == 1


def test_sotl_libsignal_also_switches_when_green_is_empty():
    moves = (Movement("a", "x", "N", "through"),), (Movement("b", "y", "E", "through"),)
    phases = tuple(Phase(k, f"P{k}", "", m, "", m) for k, m in enumerate(moves))
    lanes = {"a": LaneCounts(0, 0, 0, 0), "b": LaneCounts(2, 0, 0, 0)}
    for rules, expected in (("study", 0), ("libsignal", 1)):  # 0 green, 2 red waiting (≤ 6)
        s = SignalState(0.0, 0, lanes, phases, phase_time_s=30, outgoing={}, rules=rules, queued={"a": 0, "b": 2})
        assert SOTL().act(s) == expected


# Delay and departure stamp ----------------------------------------------------------------

def test_delay_sum_over_lanes_and_rl_mean_over_roads():
    lanes = {"r1_0": 0.5, "r1_1": 0.1, "r2_0": 0.3}
    assert R.delay("study", lanes) == pytest.approx(0.3)
    assert R.delay("libsignal", lanes) == pytest.approx(0.9)
    assert R.rl_delay("libsignal", lanes) == pytest.approx((0.3 + 0.3) / 2)
    assert R.study_lane_delay([12.0], 10.0) == 0.0 and R.libsignal_lane_delay([12.0], 10.0) == pytest.approx(-0.2)
    assert R.libsignal_lane_delay([], 10.0) == 0.0


def test_departure_stamp_is_one_step_later_in_libsignals_sumo():
    assert R.departure_stamp("libsignal", "sumo", 41.0, 42.0) == 42.0
    assert R.departure_stamp("study", "sumo", 41.0, 42.0) == 41.0
    assert R.departure_stamp("libsignal", "cityflow", 41.0, 42.0) == 41.0


def test_lone_vehicle_travel_time_is_one_second_shorter_under_libsignal():
    times = {}
    for rules in R.RULES:
        with SignalEnv(EMPTY, SignalConfig(episode_s=100, rules=rules)) as env:
            env.reset(seed=0)
            place([("probe", "N_in_0", 0, 11.11)])
            for _ in range(10):
                env.step(0)
            times[rules] = env.summary()["travel_time_s"]
    assert times["study"] - times["libsignal"] == 1.0


# Queue ------------------------------------------------------------------------------------

def test_queue_definitions_differ_by_the_far_halted_vehicle():
    # the synthetic lanes are 289.6 m long: a vehicle at 50 m is 239.6 m from the stop line,
    # beyond LibSignal's 200 m; one at 280 m is within
    placed = [("near", "N_in_0", 280, 0), ("far", "N_in_0", 50, 0), ("moving", "E_in_0", 100, 5)]
    queues = {}
    for rules in R.RULES:
        with SignalEnv(EMPTY, SignalConfig(rules=rules)) as env:
            env.reset(seed=0)
            place(placed)
            env._advance(3)
            state = env.observe()
            queues[rules] = (sum(state.queued.values()), state.detected["N_in_0"], state.total_queue)
    assert queues["study"] == (2, 2, 2)
    assert queues["libsignal"] == (1, 1, 2)  # the §3.1 counts stay the study's


def test_a_vehicle_that_waited_then_moved_counts_in_libsignal_only():
    queues = {}
    for rules in R.RULES:
        with SignalEnv(EMPTY, SignalConfig(rules=rules)) as env:
            env.reset(seed=0)
            place([("v", "N_in_0", 200, 0)])
            env._advance(3)
            waited = sum(env.observe().queued.values())
            ls.vehicle.setSpeed("v", 5.0)
            env._advance(3)
            state = env.observe()
            assert ls.vehicle.getSpeed("v") == pytest.approx(5.0) and ls.vehicle.getLaneID("v") == "N_in_0"
            queues[rules] = (waited, sum(state.queued.values()), state.total_queue)
    assert queues["study"] == (1, 0, 0)
    assert queues["libsignal"] == (1, 1, 0)


def test_libsignal_sumo_queue_of_a_hand_built_lane():
    # distances to the stop line and whether each vehicle ever registered a wait
    assert R.libsignal_sumo_queue([10, 150, 199.9, 200.0, 250], [True, False, True, True, True]) == 3
    assert R.registers_wait(True, 1.0) and not R.registers_wait(False, 5.0) and not R.registers_wait(True, 0.0)


def test_unknown_rules_are_refused():
    with pytest.raises(ValueError, match="unknown signal rules 'libsignl'.*study, libsignal"):
        SignalConfig(rules="libsignl")


def test_rule_sets_by_parts():
    assert R.parts("study") == frozenset() and R.parts("libsignal") == frozenset(R.PARTS)
    assert R.with_parts("timer", "queue") == "study+queue+timer" and R.with_parts(*R.PARTS) == "libsignal"
    assert R.has("study+queue", "queue") and not R.has("study+queue", "timer")
    with pytest.raises(ValueError, match="'study\\+yellow'"):
        R.check("study+yellow")


def test_measured_parts_keep_the_trajectories():
    # queue, delay, departure and throughput change what is measured, not the control: same
    # arrivals, and every arrived trip exactly 1 s shorter (LibSignal's departure stamp)
    study = evaluate("synthetic", MaxPressure(), seed=1, episode_s=600)
    measured = evaluate("synthetic", MaxPressure(), seed=1, episode_s=600,
                        config=SignalConfig(rules=R.with_parts(*R.MEASURED)))
    assert measured["throughput"] == study["throughput"] > 0
    assert study["travel_time_s"] - measured["travel_time_s"] == pytest.approx(1.0, abs=1e-9)
    assert measured["travel_time_all_s"] == study["travel_time_all_s"]
    assert measured["delay"] > study["delay"] and measured["rules"] == "study+queue+delay+departure+throughput"


# LibSignal's own numbers ------------------------------------------------------------------

@pytest.mark.parametrize("scenario, method, expected", [
    # its run.py (libsumo, world_sumo.py at 4dcfde1; SUMO's default seed 23423, as its runs get)
    ("cologne1", "FixedTime (t_fixed=30)", (116.1456, 46.1750, 5.3865, 1958)),
    # its run.py on CityFlow 1x1 (any seed: the flows are fixed); the paper's Table 1 prints the same
    # for MaxPressure, but 212.22 s / 69.11 / 5.42 / 1861 for SOTL
    ("hangzhou1x1", "MaxPressure", (303.8070, 100.9444, 6.7686, 1717)),
    ("hangzhou1x1", "SOTL", (218.0579, 68.9222, 5.4148, 1854)),
])
def test_libsignal_rules_give_libsignals_own_numbers(scenario, method, expected):
    from llmtraffic.signal.evaluation import evaluate_method

    r = evaluate_method(method, scenario, 23423, 3600, rules="libsignal")
    travel = r["travel_time_all_s" if scenario == "hangzhou1x1" else "travel_time_s"]
    assert (round(travel, 4), round(r["queue"], 4), round(r["delay"], 4), r["throughput"]) == expected
