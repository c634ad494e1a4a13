"""LibSignal's metrics (OracleTSC §4.1.2), collected while an episode runs.

Under the study's rules (:mod:`llmtraffic.signal.rules` gives LibSignal's implemented ones):

- travel time: mean over vehicles that arrived of arrival minus insertion time (LibSignal's SUMO
  world: minus the end of the insertion step, ``departure_stamp``);
- travel time (all): every vehicle scheduled so far, from its scheduled departure to its
  arrival or, if still in the network or waiting to enter, to the end — closer to CityFlow's
  number, which counts unfinished trips;
- queue: time average over the decision points of the halting vehicles (speed < 0.1 m/s)
  summed over the incoming lanes;
- delay: per incoming lane 1 − mean speed / speed limit, averaged over lanes and decision
  points (one scale for every method; LibSignal sums it over lanes for FixedTime, MaxPressure
  and SOTL but averages it for RL agents);
- throughput: vehicles that arrived (LibSignal's CityFlow world: vehicles seen leaving a lane,
  passed in as ``served``);
- ``delay_rl``: the delay as LibSignal's RL agents report it (equal to ``delay`` under the
  study's rules).

A deadlock — vehicles present, none moving and none arriving for ``deadlock_s`` — is reported
with the time it began, never averaged in silently.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def _insertion(inserted_s: float, step_end_s: float) -> float:
    return inserted_s


class EpisodeMetrics:
    """Accumulates one episode's metrics; times are seconds since the episode began.

    ``stamp(insertion time, end of the step) -> departure time`` dates a trip's start for its
    travel time (:func:`llmtraffic.signal.rules.departure_stamp`; default: the insertion time)."""

    def __init__(self, deadlock_s: float, stamp: Callable[[float, float], float] = _insertion):
        self.deadlock_s = deadlock_s
        self.stamp = stamp
        self.depart: dict[str, float] = {}
        """Insertion time of every vehicle now in the network."""
        self.scheduled: dict[str, float] = {}
        """Scheduled departure of every vehicle now in the network."""
        self.travel: list[float] = []
        self.travel_all: list[float] = []
        self.queues: list[float] = []
        self.delays: list[float] = []
        self.rl_delays: list[float] = []
        self.last_move_s = 0.0
        self.deadlock = False
        self.deadlock_time_s: float | None = None

    def on_step(self, time_s: float, departed: list[tuple[str, float, float]], arrived: list[str]) -> None:
        """Record one simulation step: ``departed`` as (id, insertion time, departure delay)."""
        for veh, dep, delay in departed:
            self.depart[veh] = self.stamp(dep, time_s)
            self.scheduled[veh] = dep - delay
        for veh in arrived:
            self.travel.append(time_s - self.depart.pop(veh))
            self.travel_all.append(time_s - self.scheduled.pop(veh))
        if arrived:
            self.last_move_s = max(self.last_move_s, time_s)

    def on_decision(self, time_s: float, queue: float, delay: float, rl_delay: float, moving: bool) -> None:
        """Record one decision point; ``moving``: some vehicle in the network is moving."""
        self.queues.append(queue)
        self.delays.append(delay)
        self.rl_delays.append(rl_delay)
        if moving or not self.depart:
            self.last_move_s = time_s
        elif not self.deadlock and time_s - self.last_move_s >= self.deadlock_s:
            self.deadlock, self.deadlock_time_s = True, self.last_move_s

    def summary(self, time_s: float, waiting_delays: list[float], served: int | None = None) -> dict:
        """Metrics at ``time_s``; ``waiting_delays``: how long each vehicle not yet inserted has waited;
        ``served``: the throughput where it is not the arrivals."""
        unfinished = [time_s - s for s in self.scheduled.values()] + list(waiting_delays)
        everyone = self.travel_all + unfinished

        def mean(xs: list[float]) -> float:
            return float(np.mean(xs)) if xs else float("nan")

        return {
            "travel_time_s": mean(self.travel),
            "travel_time_all_s": mean(everyone),
            "queue": mean(self.queues),
            "delay": mean(self.delays),
            "delay_rl": mean(self.rl_delays),
            "throughput": len(self.travel) if served is None else served,
            "arrived": len(self.travel),
            "in_network": len(self.depart),
            "waiting_to_enter": len(waiting_delays),
            "deadlock": self.deadlock,
            "deadlock_time_s": self.deadlock_time_s,
            "episode_s": time_s,
        }
