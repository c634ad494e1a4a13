"""CityFlow backend: exact values on a small roadnet written here, Hangzhou 1x1 against CityFlow's own numbers.

Where CityFlow and SUMO model the same thing the hand-computed values are the same as in
test_signal_env.py (segment counts, FixedTime's slots); where they differ the difference is
stated: CityFlow's vehicles start from standstill and accelerate at ``usualPosAcc`` (SUMO's
probe is inserted at the speed limit), and its clearance is the roadnet's all-red phase (SUMO
keeps links green that stay green and shows yellow).
"""

import json
import math
from itertools import groupby

import pytest

pytest.importorskip("cityflow", reason="CityFlow not built (make venv builds it; needs cmake and a C++ compiler)")

from llmtraffic.signal import FixedTime, SignalConfig, SignalEnv, evaluate  # noqa: E402
from llmtraffic.signal.backends.cityflow import read_roadnet  # noqa: E402
from llmtraffic.signal.scenarios import CityFlowScenario  # noqa: E402

ARMS = {"W": (-1, 0), "S": (0, -1), "E": (1, 0), "N": (0, 1)}
THROUGH = {"W": "E", "E": "W", "N": "S", "S": "N"}
LEFT = {"W": "N", "N": "E", "E": "S", "S": "W"}
GREENS = [("NT", "ST"), ("NL", "SL"), ("NT", "NL"), ("ST", "SL"), ("ET", "WT"), ("EL", "WL"), ("ET", "EL"), ("WT", "WL")]
ROAD, WIDTH, SPEED, ACC = 300.0, 10.0, 10.0, 2.0
VEHICLE = {"length": 5.0, "width": 2.0, "maxPosAcc": ACC, "maxNegAcc": 4.5, "usualPosAcc": ACC, "usualNegAcc": 4.5,
           "minGap": 2.5, "maxSpeed": SPEED, "headwayTime": 2.0}


def roadnet() -> dict:
    """Four arms of 300 m, two lanes each (0: left turn, 1: through, as Hangzhou 1x1), a 10-m junction,
    an all-red light phase and the eight green phases of Table 9."""
    inters = [{"id": "C", "point": {"x": 0, "y": 0}, "width": WIDTH, "virtual": False}]
    roads = []
    for a, (dx, dy) in ARMS.items():
        inters.append({"id": a, "point": {"x": dx * ROAD, "y": dy * ROAD}, "width": 0, "virtual": True,
                       "roads": [], "roadLinks": [], "trafficLight": {"roadLinkIndices": [], "lightphases": []}})
        for rid, s, e, p0, p1 in ((f"{a}_in", a, "C", (dx * ROAD, dy * ROAD), (0, 0)),
                                  (f"{a}_out", "C", a, (0, 0), (dx * ROAD, dy * ROAD))):
            roads.append({"id": rid, "startIntersection": s, "endIntersection": e,
                          "points": [{"x": p0[0], "y": p0[1]}, {"x": p1[0], "y": p1[1]}],
                          "lanes": [{"width": 3, "maxSpeed": SPEED}] * 2})
    links = []
    for a in ARMS:
        for kind, to, lane in (("go_straight", THROUGH[a], 1), ("turn_left", LEFT[a], 0)):
            links.append({"type": kind, "startRoad": f"{a}_in", "endRoad": f"{to}_out", "direction": 0,
                          "laneLinks": [{"startLaneIndex": lane, "endLaneIndex": lane, "points": []}]})
    index = {f"{a}{t}": 2 * k + (t == "L") for k, a in enumerate(ARMS) for t in "TL"}
    lights = [{"time": 5, "availableRoadLinks": []}]
    lights += [{"time": 30, "availableRoadLinks": sorted(index[m] for m in g)} for g in GREENS]
    inters[0].update(roads=[r["id"] for r in roads], roadLinks=links,
                     trafficLight={"roadLinkIndices": list(range(8)), "lightphases": lights})
    return {"intersections": inters, "roads": roads}


def scenario(tmp_path, vehicles: list[tuple[str, str, int]]) -> CityFlowScenario:
    """The roadnet with one vehicle per (from arm, turn "T"/"L", creation second)."""
    flows = [{"vehicle": VEHICLE, "route": [f"{a}_in", f"{(THROUGH if t == 'T' else LEFT)[a]}_out"],
              "interval": 1, "startTime": s, "endTime": s} for a, t, s in vehicles]
    (tmp_path / "roadnet.json").write_text(json.dumps(roadnet()))
    (tmp_path / "flow.json").write_text(json.dumps(flows))
    return CityFlowScenario("small", roadnet=tmp_path / "roadnet.json", flow=tmp_path / "flow.json")


def test_phases_lanes_and_lengths_of_the_small_roadnet(tmp_path):
    with SignalEnv(scenario(tmp_path, [])) as env:
        assert env.simulator == "cityflow"
        assert [p.mnemonic for p in env.phases] == ["NTST", "NLSL", "NTNL", "STSL", "ETWT", "ELWL", "ETEL", "WTWL"]
        assert env.phases[2].description == "Northern through and left-turn lanes"
        assert env.sim._length["W_in_1"] == ROAD - WIDTH  # the junction's width is cut off the lane
        assert env.observation_space.shape == (8 * 4 + 8,)


def test_lone_vehicle_travel_time(tmp_path):
    with SignalEnv(scenario(tmp_path, [("W", "T", 0)]), SignalConfig(episode_s=100)) as env:
        env.reset(seed=0)
        for _ in range(10):
            env.step(4)  # ETWT: west through stays green
        result = env.summary()
    # starts at rest, speeds 2, 4, ..., 10 m/s move it by their step averages (1 + 3 + ... + 9 =
    # v²/2a = 25 m), then 10 m/s; route 290 + 20 (straight across the junction) + 290 m. CityFlow
    # counts from the start of the creating step to the start of the removing step.
    route = 2 * (ROAD - WIDTH) + 2 * WIDTH
    assert result["travel_time_s"] == math.ceil(route / SPEED + SPEED / (2 * ACC)) - 1 == 62
    assert result["throughput"] == 1 and result["travel_time_all_s"] == 62


def test_queue_and_segments_of_vehicles_placed_by_timing(tmp_path):
    # three west-through vehicles stop at NTST's red; on the green south-through lane, vehicles
    # created 29, 24 and 10 s before t = 100 are 10·29 − 25 = 265 m (near: 25/290 < 10 %),
    # 215 m (mid: 75/290) and 75 m (far) from its start
    vehicles = [("W", "T", 0), ("W", "T", 5), ("W", "T", 10), ("S", "T", 71), ("S", "T", 76), ("S", "T", 90)]
    with SignalEnv(scenario(tmp_path, vehicles), SignalConfig(episode_s=100)) as env:
        env.reset(seed=0)
        for _ in range(10):
            _, _, _, _, info = env.step(0)
        lanes = info["state"].lanes
        waiting = env.sim.eng.get_lane_waiting_vehicle_count()
    assert tuple(vars(lanes["W_in_1"]).values()) == (3, 0, 0, 0)
    assert tuple(vars(lanes["S_in_1"]).values()) == (0, 1, 1, 1)
    assert info["state"].total_queue == sum(waiting[lane] for lane in lanes) == 3  # CityFlow's own count


class Recorder:
    """Stands in for the engine's set_tl_phase and keeps the light phase of every second."""

    def __init__(self, env):
        self.env, self.eng, self.trace, self.light = env, env.sim.eng, [], None

    def __getattr__(self, name):
        return getattr(self.eng, name)

    def set_tl_phase(self, node, light):
        self.light = light
        self.eng.set_tl_phase(node, light)

    def next_step(self):
        self.trace.append(self.light)
        self.eng.next_step()


def test_fixed_time_phase_sequence_with_all_red_clearance(tmp_path):
    with SignalEnv(scenario(tmp_path, []), SignalConfig(episode_s=480)) as env:
        env.reset(seed=0)
        rec = env.sim.eng = Recorder(env)
        rec.light = 1  # green phase 0 was set by reset
        _, info = env.reset(seed=0)
        done, ctrl = False, FixedTime(30)
        while not done:
            _, _, _, done, info = env.step(ctrl.act(info["state"]))
        env.sim.eng = rec.eng
    runs = [(light, len(list(g))) for light, g in groupby(rec.trace)]
    # as on SUMO: 30 s of phase 0, then per phase 5 s of clearance and 25 s of green; the
    # clearance here is light phase 0 (all red), green phase k is light phase k + 1
    expected = [(1, 30)]
    for k in list(range(1, 8)) + [0] + list(range(1, 8)) + [0]:
        expected += [(0, 5), (k + 1, 25)]
    assert runs == expected[:len(runs)] and len(rec.trace) == 480


def test_hangzhou_metrics_equal_cityflows_own():
    with SignalEnv("hangzhou1x1", SignalConfig(episode_s=600)) as env:
        assert [p.mnemonic for p in env.phases] == ["ETWT", "NTST", "ELWL", "NLSL", "WTWL", "ETEL", "STSL", "NTNL"]
        _, info = env.reset(seed=0)
        queues, done, ctrl = [], False, FixedTime(30)
        while not done:
            _, _, _, done, info = env.step(ctrl.act(info["state"]))
            waiting = env.sim.eng.get_lane_waiting_vehicle_count()
            queues.append(sum(waiting[lane] for lane in env.lanes))
        summary = env.summary()
        assert summary["travel_time_all_s"] == pytest.approx(env.sim.eng.get_average_travel_time(), rel=1e-9)
        assert summary["queue"] == pytest.approx(sum(queues) / len(queues))


def test_same_seed_same_numbers_whatever_ran_before():
    first = evaluate("hangzhou1x1", FixedTime(30), seed=3, episode_s=900)
    evaluate("hangzhou1x1", FixedTime(10), seed=4, episode_s=1200)
    again = evaluate("hangzhou1x1", FixedTime(30), seed=3, episode_s=900)
    assert first["queue_series"] == again["queue_series"] and first["travel_time_all_s"] == again["travel_time_all_s"]
    assert first["simulator"] == "cityflow" and first["simulator_version"] == "CityFlow 81ee0f4.inline"


def test_roadnet_without_all_red_phase_is_refused():
    net = roadnet()
    net["intersections"][0]["trafficLight"]["lightphases"].pop(0)
    with pytest.raises(ValueError, match="no all-red light phase"):
        read_roadnet(net)


class PerSecond:
    """Stands in for the engine and books every vehicle's creation and removal second by second."""

    def __init__(self, eng):
        self.eng, self.created, self.travel = eng, {}, []

    def __getattr__(self, name):
        return getattr(self.eng, name)

    def next_step(self):
        before = self.eng.get_current_time()
        self.eng.next_step()
        pool = set(self.eng.get_vehicles(include_waiting=True))
        for v in pool.difference(self.created):
            self.created[v] = before
        for v in [v for v in self.created if v not in pool]:
            self.travel.append(before - self.created.pop(v))


def test_hangzhou_per_call_booking_equals_per_second_booking():
    # the backend reads ids once per call and replays creation times from the flow file; a
    # second-by-second record of the same episode gives the same creations and the same means
    from llmtraffic.signal import MaxPressure

    with SignalEnv("hangzhou1x1", SignalConfig(episode_s=1200)) as env:
        _, info = env.reset(seed=1)
        rec = env.sim.eng = PerSecond(env.sim.eng)
        done, ctrl = False, MaxPressure(10)
        while not done:
            _, _, _, done, info = env.step(ctrl.act(info["state"]))
        env.sim.eng = rec.eng
        summary = env.summary()
        assert all(env.sim._creation(v) == t for v, t in rec.created.items())
        assert summary["throughput"] == len(rec.travel) > 500
        assert summary["travel_time_s"] == pytest.approx(sum(rec.travel) / len(rec.travel), rel=1e-9)


# LibSignal's rules on CityFlow (llmtraffic.signal.rules) ---------------------------------------

def test_libsignal_rules_on_cityflow_queue_delay_and_timer(tmp_path):
    # LibSignal's CityFlow world counts CityFlow's own waiting vehicles on whole lanes: the two
    # queue definitions agree here (unlike SUMO's), its pressure sees whole lanes, its delay is
    # the sum over the 8 incoming lanes instead of the mean
    vehicles = [("W", "T", 0), ("W", "T", 5), ("W", "T", 10), ("S", "T", 71), ("S", "T", 76), ("S", "T", 90)]
    seen = {}
    for rules in ("study", "libsignal"):
        with SignalEnv(scenario(tmp_path, vehicles), SignalConfig(episode_s=100, rules=rules)) as env:
            env.reset(seed=0)
            for _ in range(10):
                _, _, _, _, info = env.step(0)
            state, summary = info["state"], env.summary()
            seen[rules] = (sum(state.queued.values()), state.detected["S_in_1"], summary["delay"],
                           state.phase_time_s)
    assert seen["study"][:2] == seen["libsignal"][:2] == (3, 3)
    assert seen["libsignal"][2] == pytest.approx(8 * seen["study"][2]) and seen["study"][2] > 0
    with SignalEnv(scenario(tmp_path, []), SignalConfig(episode_s=30, rules="libsignal")) as env:
        env.reset(seed=0)
        env.step(1)
        assert env.state.phase_time_s == 10  # the clearance counts (ours: 5 green seconds)


def test_libsignal_throughput_counts_a_vehicle_that_left_its_lane(tmp_path):
    # the lone west-through vehicle leaves its 290-m lane at ~31.5 s, crosses the junction (on no
    # lane) and is on the outgoing lane at 40 s: LibSignal's CityFlow throughput counts it, arrivals do not
    counts = {}
    for rules in ("study", "libsignal"):
        with SignalEnv(scenario(tmp_path, [("W", "T", 0)]), SignalConfig(episode_s=100, rules=rules)) as env:
            env.reset(seed=0)
            for _ in range(4):
                env.step(4)
            at_40 = env.summary()["throughput"]
            for _ in range(6):
                env.step(4)
            counts[rules] = (at_40, env.summary()["throughput"])
    assert counts["study"] == (0, 1)
    assert counts["libsignal"] == (1, 1)
