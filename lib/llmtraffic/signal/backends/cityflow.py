"""CityFlow backend of :class:`~llmtraffic.signal.env.SignalEnv` (Hangzhou 1x1 as in the OracleTSC paper).

CityFlow is the simulator the paper and LibSignal ran CityFlow 1x1 (Hangzhou) on. Differences
from the SUMO backend, all from CityFlow's own model:

- clearance: the roadnet's all-red phase (a light phase with no road link), as LibSignal's
  CityFlow world does (under both rule sets); SUMO keeps links green that stay green and shows yellow. A roadnet
  without an all-red phase is refused.
- times: CityFlow counts a vehicle's travel time from the start of the step that created it
  (a vehicle waiting to enter is in the network) to the start of the step that removed it.
  Reading vehicle ids every second would cost more than the simulation (~0.1 ms a call), so
  :meth:`advance` reads them once per call and takes the finished vehicles' total travel
  time from CityFlow's own counter, with creation times replayed from the flow file
  (:class:`Creations`): the metrics' means are exact — travel time (all) equals CityFlow's
  ``get_average_travel_time()``, travel time (arrived) its finished vehicles' mean — while a
  vehicle arriving within a call is booked with that call's mean travel time, and vehicles
  waiting to enter count as in the network (``waiting_to_enter`` is 0).
- LibSignal's throughput rule (``rules``, :mod:`llmtraffic.signal.rules`) reads the lanes'
  vehicles every second (:meth:`CityFlowBackend._track_lanes`), as its CityFlow world does;
  the study's rules never do.
- seeds: flows are deterministic; the seed only draws vehicle priorities (who goes first at
  a conflict) and routes among equal choices.
- lane length: the road's polyline with its ends shortened by the width of a non-virtual
  intersection (CityFlow's ``Road::initLanesPoints``), exact for straight roads.

CityFlow's ``Engine`` destructor deadlocks at commit 81ee0f4 as released (a bare ``del engine``
never returns while its worker threads wait; our build, patched by
:func:`~llmtraffic.signal.backends.install.run_inline`, starts none at ``thread_num=1`` and its
destructor returns, but an unpatched build may still be imported), so engines are kept for the
life of the process and reset for every episode
(``reset()`` clears vehicles, flows and signals; then the seed is set), which also makes an
episode independent of what ran before it. An open environment holds its engine; episodes
played side by side (:func:`llmtraffic.signal.evaluation.evaluate_together`) each take an idle
one of their config file, or a new one when none is idle.
"""

from __future__ import annotations

import ctypes
import json
import math
from pathlib import Path

from .. import rules as R
from ..state import Movement
from . import Observation, Step, approach_of, make_phases, segment_counts
from .install import require_cityflow

_TURN = {"go_straight": "through", "turn_left": "left", "turn_right": "right"}
_idle: dict[str, list] = {}
"""Per config file, the engines no open environment holds (see the module docstring)."""


def acquire(config: str):
    """An idle CityFlow engine for ``config``, or a new one (never destroyed); give it back
    with :func:`release`."""
    if _idle.get(config):
        return _idle[config].pop()
    eng = require_cityflow().Engine(config, thread_num=1)
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(eng))  # never run the deadlocking destructor
    return eng


def release(config: str, eng) -> None:
    _idle.setdefault(config, []).append(eng)


class Creations:
    """Creation times of flow vehicles ``flow_<i>_<k>``, replaying CityFlow's ``Flow::nextStep``
    (one-second steps): from ``startTime`` on, a vehicle whenever the accumulated time reaches
    ``interval``, until ``endTime`` (−1: never ends)."""

    def __init__(self, flows: list[dict]):
        self.flows = [(f.get("startTime", 0), float(f["interval"]), f.get("endTime", -1)) for f in flows]
        self.times: dict[int, list[float]] = {}

    def __call__(self, vehicle: str) -> float | None:
        head, i, k = (vehicle.split("_") + ["", ""])[:3]
        if head != "flow" or not (i.isdigit() and k.isdigit()) or int(i) >= len(self.flows):
            return None
        times = self.times.setdefault(int(i), [])
        if len(times) <= int(k):
            self._replay(int(i), int(k), times)
        return times[int(k)] if len(times) > int(k) else None

    def _replay(self, i: int, k: int, times: list[float]) -> None:
        start, interval, end = self.flows[i]
        times.clear()
        now, t = interval, float(start)
        while len(times) <= k and (end == -1 or t <= end):
            while now >= interval:
                times.append(t)
                now -= interval
            now += 1.0
            t += 1.0


def lane_length(road: dict, inter: dict[str, dict]) -> float:
    """Length of a lane of ``road`` as CityFlow computes it (see the module docstring)."""
    pts = [(p["x"], p["y"]) for p in road["points"]]
    total = sum(math.dist(a, b) for a, b in zip(pts, pts[1:]))
    for end in ("startIntersection", "endIntersection"):
        node = inter[road[end]]
        if not node.get("virtual", False):
            total -= node["width"]
    return total


def read_roadnet(roadnet: dict):
    """(intersection id, phases, incoming, outgoing, light-phase index per green, all-red index,
    lane lengths, lane speed limits) of the roadnet's only non-virtual intersection."""
    inter = {i["id"]: i for i in roadnet["intersections"]}
    real = [i for i in roadnet["intersections"] if not i.get("virtual", False)]
    if len(real) != 1:
        raise ValueError(f"CityFlow roadnet has {len(real)} signalised intersections "
                         f"{[i['id'] for i in real]}; SignalEnv needs exactly one")
    node = real[0]
    roads = {r["id"]: r for r in roadnet["roads"]}
    links = []
    for link in node["roadLinks"]:
        road = roads[link["startRoad"]]
        approach = approach_of([(p["x"], p["y"]) for p in road["points"]])
        turn = _TURN.get(link["type"], "through")
        links.append(tuple(Movement(f"{link['startRoad']}_{ll['startLaneIndex']}",
                                    f"{link['endRoad']}_{ll['endLaneIndex']}", approach, turn)
                           for ll in link["laneLinks"]))
    lights = node["trafficLight"]["lightphases"]
    red = next((k for k, p in enumerate(lights) if not p["availableRoadLinks"]), None)
    if red is None:
        raise ValueError(f"CityFlow intersection {node['id']!r} has no all-red light phase "
                         "(availableRoadLinks: []) to use as the clearance")
    greens, light_index = [], []
    for k, p in enumerate(lights):
        served = sorted(set(p["availableRoadLinks"]))
        if served and served not in greens:
            greens.append(served)
            light_index.append(k)
    phases = make_phases([tuple(m for i in g for m in links[i]) for g in greens])
    moves = [m for group in links for m in group]
    incoming = tuple(dict.fromkeys(m.in_lane for m in moves))
    outgoing = tuple(dict.fromkeys(m.out_lane for m in moves))
    length, limit = {}, {}
    for r in roadnet["roads"]:
        for k, lane in enumerate(r["lanes"]):
            length[f"{r['id']}_{k}"] = lane_length(r, inter)
            limit[f"{r['id']}_{k}"] = lane["maxSpeed"]
    return node["id"], phases, incoming, outgoing, light_index, red, length, limit


class CityFlowBackend:
    """One CityFlow engine (see :mod:`llmtraffic.signal.backends`)."""

    simulator = "cityflow"
    begin_s = 0.0

    def __init__(self, rules: str = "study") -> None:
        self.eng, self.source = None, None
        self.rules = R.check(rules)
        self._tracks = R.has(rules, "throughput")

    def start(self, source: str, seed: int) -> None:
        if self.source != source:
            self.close()
            cfg = json.loads(Path(source).read_text())
            roadnet = json.loads(Path(cfg["dir"], cfg["roadnetFile"]).read_text())
            self._creation = Creations(json.loads(Path(cfg["dir"], cfg["flowFile"]).read_text()))
            (self.node, self.phases, self.lanes, self.out_lanes, self._light, self._red,
             self._length, self._limit) = read_roadnet(roadnet)
            self.source = source
        if self.eng is None:
            self.eng = acquire(source)
        self.eng.reset()
        self.eng.set_random_seed(seed)
        self._created: dict[str, float] = {}  # creation time of every vehicle in the network
        self._created_sum = 0.0
        self._finished, self._finished_time = 0, 0.0
        self._on_lanes: set[str] = set()  # LibSignal: vehicles on a lane after the last step
        self._left: set[str] = set()  # LibSignal: vehicles seen leaving a lane (its throughput)

    def close(self) -> None:
        """Give the engine back for the next episode (it is never destroyed)."""
        if self.eng is not None:
            release(self.source, self.eng)
            self.eng = None

    def discover(self):
        return self.phases, self.lanes, self.out_lanes

    def set_green(self, phase: int) -> None:
        self.eng.set_tl_phase(self.node, self._light[phase])

    def set_clearance(self, current: int, nxt: int) -> None:
        self.eng.set_tl_phase(self.node, self._red)

    def advance(self, seconds: int) -> list[Step]:
        eng, created = self.eng, self._created
        begin = eng.get_current_time()
        for _ in range(seconds):
            eng.next_step()
            if self._tracks:
                self._track_lanes()
        now = eng.get_current_time()
        pool = set(eng.get_vehicles(include_waiting=True))
        departed = []
        for v in pool.difference(created):
            e = self._creation(v)
            created[v] = begin if e is None else e  # a pushed vehicle: the call's start
            self._created_sum += created[v]
            departed.append((v, created[v], 0.0))
        gone = [v for v in created if v not in pool]
        steps: list[Step] = [(now, departed, [])]
        if gone:
            times = [created.pop(v) for v in gone]
            self._created_sum -= sum(times)
            self._finished += len(gone)
            # CityFlow's average counts finished vehicles and the pool: take the pool out
            total = eng.get_average_travel_time() * (self._finished + len(created))
            finished = total - (len(created) * now - self._created_sum)
            share = (finished - self._finished_time) / len(gone)
            self._finished_time = finished
            steps += [(e + share, [], [v]) for v, e in zip(gone, times)]
        return steps

    def _track_lanes(self) -> None:
        """LibSignal's CityFlow throughput record (``World.update_current_measurements``): a
        vehicle on some lane after one step and on none after the next gets a leave time, and
        ``get_cur_throughput`` counts the vehicles with one. A vehicle inside the intersection is
        on no lane, so a crossing counts once its vehicle is seen there, an arrival otherwise."""
        now = {v for vs in self.eng.get_lane_vehicles().values() for v in vs}
        self._left |= self._on_lanes - now
        self._on_lanes = now

    def observe(self) -> Observation:
        eng = self.eng
        on_lane = eng.get_lane_vehicles()
        speed, dist = eng.get_vehicle_speed(), eng.get_vehicle_distance()
        lane_delay = R.libsignal_lane_delay if R.has(self.rules, "delay") else R.study_lane_delay
        lanes, queued, delays = {}, {}, {}
        for lane in self.lanes:
            vs = on_lane[lane]
            lanes[lane] = segment_counts(self._length[lane], [(speed[v], dist[v]) for v in vs])
            queued[lane] = lanes[lane].queue  # CityFlow's waiting count (both rule sets, rules.halting)
            delays[lane] = lane_delay([speed[v] for v in vs], self._limit[lane])
        counts = eng.get_lane_vehicle_count()
        outgoing = {lane: counts[lane] for lane in self.out_lanes}
        detected = {lane: counts[lane] for lane in (*self.lanes, *self.out_lanes)}
        moving = any(s >= 0.1 for s in speed.values())
        return Observation(lanes, outgoing, queued, detected, delays, moving)

    def waiting_delays(self) -> list[float]:
        """None apart: vehicles waiting to enter are already in the network (module docstring)."""
        return []

    def served(self) -> int | None:
        """LibSignal's CityFlow throughput (:meth:`_track_lanes`); ``None`` without that rule."""
        return len(self._left) if self._tracks else None

    def version(self) -> str:
        from .install import VERSION

        return f"CityFlow {VERSION.split('+')[1]}"
