"""libsumo backend of :class:`~llmtraffic.signal.env.SignalEnv` (Cologne1, the synthetic scenario, any ``.sumocfg``).

libsumo runs one simulation per process; :class:`SignalEnv` guards that. Every
:meth:`SumoBackend.start` restarts SUMO from scratch. The clearance keeps links green that stay
green, turns links that lose green yellow and leaves the rest red.
"""

from __future__ import annotations

import libsumo as ls

from ..state import LaneCounts, Movement, Phase
from . import Step, approach_of, make_phases, segment_counts

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
    phases = make_phases(greens_moves, greens)
    incoming = tuple(dict.fromkeys(m.in_lane for m in movements.values()))
    outgoing = tuple(dict.fromkeys(m.out_lane for m in movements.values()))
    return tuple(phases), incoming, outgoing


def clearance(current: str, nxt: str) -> str:
    """Clearance signal state: green now and not next → yellow; green in both stays; else red."""
    return "".join(c if c in "Gg" and n in "Gg" else ("y" if c in "Gg" else "r")
                   for c, n in zip(current, nxt))


class SumoBackend:
    """One SUMO simulation through libsumo (see :mod:`llmtraffic.signal.backends`)."""

    simulator = "sumo"

    def __init__(self, time_to_teleport: int = -1):
        self.time_to_teleport = time_to_teleport
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
        state = clearance(self.phases[current].sumo_state, self.phases[nxt].sumo_state)
        ls.trafficlight.setRedYellowGreenState(self.tls, state)

    def advance(self, seconds: int) -> list[Step]:
        steps = []
        for _ in range(seconds):
            ls.simulationStep()
            now = ls.simulation.getTime() - self.begin_s
            departed = [(v, ls.vehicle.getDeparture(v) - self.begin_s, ls.vehicle.getDepartDelay(v))
                        for v in ls.simulation.getDepartedIDList()]
            steps.append((now, departed, list(ls.simulation.getArrivedIDList())))
        return steps

    def observe(self):
        lanes = {}
        for lane in self.lanes:
            vehicles = [(ls.vehicle.getSpeed(v), ls.vehicle.getLanePosition(v))
                        for v in ls.lane.getLastStepVehicleIDs(lane)]
            lanes[lane] = segment_counts(self._lane_len[lane], vehicles)
        outgoing = {lane: ls.lane.getLastStepVehicleNumber(lane) for lane in self.out_lanes}
        # an empty lane's mean speed is its limit, so its delay is 0 as in lane_delay
        delay = sum(1.0 - min(ls.lane.getLastStepMeanSpeed(lane) / self._lane_speed[lane], 1.0)
                    for lane in self.lanes) / len(self.lanes)
        moving = any(ls.edge.getLastStepVehicleNumber(e) > ls.edge.getLastStepHaltingNumber(e)
                     for e in self._edges)
        return lanes, outgoing, delay, moving

    def waiting_delays(self) -> list[float]:
        return [ls.vehicle.getDepartDelay(v) for v in ls.simulation.getPendingVehicles()] if self.running else []

    def version(self) -> str:
        return ls.getVersion()[1]
