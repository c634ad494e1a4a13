"""libsumo backend of :class:`~llmtraffic.signal.env.SignalEnv` (Cologne1, the synthetic scenario, any ``.sumocfg``).

libsumo runs one simulation per process; :class:`SignalEnv` guards that. Every
:meth:`SumoBackend.start` restarts SUMO from scratch. Under the study's rules the clearance keeps
links green that stay green, turns links that lose green yellow and leaves the rest red; under
LibSignal's (:mod:`llmtraffic.signal.rules`) it turns them red, and the backend tracks every
second which vehicles have waited within 200 m of the stop line (LibSignal's queue).
"""

from __future__ import annotations

import libsumo as ls

from .. import rules as R
from ..state import Movement, Phase
from . import Observation, Step, approach_of, make_phases, segment_counts

_TURN = {"s": "through", "t": "uturn", "l": "left", "L": "left", "r": "right", "R": "right"}
"""SUMO link directions → turns."""


def discover(tls: str) -> tuple[tuple[Phase, ...], tuple[str, ...], tuple[str, ...]]:
    """Green phases, incoming lanes and outgoing lanes of traffic light ``tls`` (running SUMO)."""
    links = ls.trafficlight.getControlledLinks(tls)
    program = ls.trafficlight.getProgram(tls)
    logic = next(g for g in ls.trafficlight.getAllProgramLogics(tls) if g.programID == program)
    greens: list[str] = []
    for p in logic.phases:
        s = p.state
        if any(c in "Gg" for c in s) and not any(c in "yYu" for c in s) and s not in greens:
            greens.append(s)
    if not greens:
        raise ValueError(f"traffic light {tls!r} has no green phase in program {program!r}")
    movements: dict[int, Movement] = {}
    for i, group in enumerate(links):
        for in_lane, out_lane, _via in group[:1]:
            turn = next((_TURN.get(lk[6], "through") for lk in ls.lane.getLinks(in_lane)
                         if lk[0] == out_lane), "through")
            movements[i] = Movement(in_lane, out_lane, approach_of(ls.lane.getShape(in_lane)), turn)
    greens_moves = [tuple(movements[i] for i in sorted(movements) if s[i] in "Gg") for s in greens]
    # LibSignal's phase links: G (and s), never g (world_sumo.py, phase_available_lanelinks)
    majors = [tuple(movements[i] for i in sorted(movements) if s[i] in "Gs") for s in greens]
    phases = make_phases(greens_moves, greens, majors)
    incoming = tuple(dict.fromkeys(m.in_lane for m in movements.values()))
    outgoing = tuple(dict.fromkeys(m.out_lane for m in movements.values()))
    return tuple(phases), incoming, outgoing


def to_light(vehicle: str) -> float:
    """Distance of ``vehicle`` to its next traffic light's stop line (``getNextTLS``), inf without one."""
    ahead = ls.vehicle.getNextTLS(vehicle)
    return ahead[0][2] if ahead else float("inf")


clearance = R.yellow_clearance
"""The study's clearance signal state (:func:`llmtraffic.signal.rules.yellow_clearance`)."""


class SumoBackend:
    """One SUMO simulation through libsumo (see :mod:`llmtraffic.signal.backends`)."""

    simulator = "sumo"

    def __init__(self, time_to_teleport: int = -1, rules: str = "study"):
        self.time_to_teleport = time_to_teleport
        self.rules = R.check(rules)
        self._waits = R.has(rules, "queue")
        self.running = False
        self.begin_s = 0.0
        self.source = ""

    def start(self, source: str, seed: int) -> None:
        self.close()
        self.source = source
        args = ["sumo", "-c", source, "--seed", str(seed), "--step-length", "1",
                "--time-to-teleport", str(self.time_to_teleport),
                "--no-step-log", "true", "--no-warnings", "true", "--duration-log.disable", "true"]
        try:
            ls.start(args)
        except ls.TraCIException as err:
            raise RuntimeError(f"SUMO could not start {source}: {err}") from None
        self.running = True
        self.begin_s = ls.simulation.getTime()
        self.waited: set[str] = set()  # LibSignal's waiting record (never cleared in an episode)
        self._then: str | None = None  # the state to show after the first second of a clearance
        self._slipped = False
        if not hasattr(self, "tls"):
            self.tls = self._find_tls()

    def close(self) -> None:
        if self.running or ls.simulation.isLoaded():
            try:
                ls.close()
            except ls.TraCIException:  # already closed by SUMO itself
                pass
        self.running = False

    def _find_tls(self) -> str:
        ids = ls.trafficlight.getIDList()
        if len(ids) != 1:
            what = "no traffic light" if not ids else f"{len(ids)} traffic lights {list(ids)}"
            raise ValueError(f"{self.source} has {what}; SignalEnv needs exactly one signalised intersection")
        return ids[0]

    def discover(self):
        self.phases, self.lanes, self.out_lanes = discover(self.tls)
        self._lane_len = {lane: ls.lane.getLength(lane) for lane in self.lanes}
        self._lane_speed = {lane: ls.lane.getMaxSpeed(lane) for lane in self.lanes}
        self._edges = ls.edge.getIDList()
        return self.phases, self.lanes, self.out_lanes

    def set_green(self, phase: int) -> None:
        ls.trafficlight.setRedYellowGreenState(self.tls, self.phases[phase].sumo_state)

    def set_clearance(self, current: int, nxt: int) -> None:
        now, then = self.phases[current].sumo_state, self.phases[nxt].sumo_state
        if not R.has(self.rules, "clearance"):
            state = R.yellow_clearance(now, then)
        else:
            state = R.all_red_clearance(now, then)
            if state is None:  # LibSignal sets nothing: its program slips for a second
                state, self._then = R.program_slip([p.sumo_state for p in self.phases], current), now
        ls.trafficlight.setRedYellowGreenState(self.tls, state)

    def advance(self, seconds: int) -> list[Step]:
        steps = []
        for _ in range(seconds):
            if self._then is not None and self._slipped:  # the slip lasts one second
                ls.trafficlight.setRedYellowGreenState(self.tls, self._then)
                self._then = None
            ls.simulationStep()
            self._slipped = self._then is not None
            if self._waits:
                self._record_waits()
            now = ls.simulation.getTime() - self.begin_s
            departed = [(v, ls.vehicle.getDeparture(v) - self.begin_s, ls.vehicle.getDepartDelay(v))
                        for v in ls.simulation.getDepartedIDList()]
            steps.append((now, departed, list(ls.simulation.getArrivedIDList())))
        return steps

    def _record_waits(self) -> None:
        """LibSignal's per-second waiting record (:func:`llmtraffic.signal.rules.registers_wait`)."""
        for lane in self.lanes:
            for v in ls.lane.getLastStepVehicleIDs(lane):
                if v not in self.waited:
                    waiting = ls.vehicle.getWaitingTime(v)
                    if waiting > 0 and R.registers_wait(R.detectable(to_light(v)), waiting):
                        self.waited.add(v)

    def observe(self) -> Observation:
        lanes, queued, detected, delays = {}, {}, {}, {}
        has = {part: R.has(self.rules, part) for part in ("queue", "delay", "pressure")}
        for lane in self.lanes:
            ids = ls.lane.getLastStepVehicleIDs(lane)
            vehicles = [(ls.vehicle.getSpeed(v), ls.vehicle.getLanePosition(v)) for v in ids]
            limit = self._lane_speed[lane]
            lanes[lane] = segment_counts(self._lane_len[lane], vehicles)
            to_stop = [to_light(v) for v in ids] if has["queue"] or has["delay"] or has["pressure"] else []
            seen = [speed for (speed, _), d in zip(vehicles, to_stop) if R.detectable(d)]
            queued[lane] = (R.libsignal_sumo_queue(to_stop, [v in self.waited for v in ids]) if has["queue"]
                            else lanes[lane].queue)
            detected[lane] = len(seen) if has["pressure"] else len(ids)
            # study: SUMO's lane mean (its limit when empty), as study_lane_delay
            delays[lane] = (R.libsignal_lane_delay(seen, limit) if has["delay"]
                            else 1.0 - min(ls.lane.getLastStepMeanSpeed(lane) / limit, 1.0))
        outgoing = {lane: ls.lane.getLastStepVehicleNumber(lane) for lane in self.out_lanes}
        # LibSignal sees a vehicle on an outgoing lane only with a light ahead (none past a network's only one)
        detected |= {lane: sum(R.detectable(to_light(v)) for v in ls.lane.getLastStepVehicleIDs(lane))
                     if has["pressure"] else n for lane, n in outgoing.items()}
        moving = any(ls.edge.getLastStepVehicleNumber(e) > ls.edge.getLastStepHaltingNumber(e)
                     for e in self._edges)
        return Observation(lanes, outgoing, queued, detected, delays, moving)

    def waiting_delays(self) -> list[float]:
        return [ls.vehicle.getDepartDelay(v) for v in ls.simulation.getPendingVehicles()] if self.running else []

    def served(self) -> int | None:
        return None

    def version(self) -> str:
        return ls.getVersion()[1]
