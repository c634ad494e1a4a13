"""LibSignal's metrics for SUMO (OracleTSC §4.1.2), collected while an episode runs.

- travel time: mean over vehicles that arrived of arrival minus insertion time;
- travel time (all): every vehicle scheduled so far, from its scheduled departure to its
  arrival or, if still in the network or waiting to enter, to the end — closer to CityFlow's
  number, which counts unfinished trips;
- queue: time average over the decision points of the halting vehicles (speed < 0.1 m/s)
  summed over the incoming lanes;
- delay: per incoming lane 1 − mean speed / speed limit, averaged over lanes and decision
  points (one scale for every method; LibSignal sums it over lanes for FixedTime, MaxPressure
  and SOTL but averages it for RL agents);
- throughput: vehicles that arrived.

A deadlock — vehicles present, none moving and none arriving for ``deadlock_s`` — is reported
with the time it began, never averaged in silently.
"""

from __future__ import annotations

import numpy as np


class EpisodeMetrics:
    """Accumulates one episode's metrics; times are seconds since the episode began."""

    def __init__(self, deadlock_s: float):
        self.deadlock_s = deadlock_s
        self.depart: dict[str, float] = {}
        """Insertion time of every vehicle now in the network."""
        self.scheduled: dict[str, float] = {}
        """Scheduled departure of every vehicle now in the network."""
        self.travel: list[float] = []
        self.travel_all: list[float] = []
        self.queues: list[float] = []
        self.delays: list[float] = []
        self.last_move_s = 0.0
        self.deadlock = False
        self.deadlock_time_s: float | None = None

    def on_step(self, time_s: float, departed: list[tuple[str, float, float]], arrived: list[str]) -> None:
        """Record one simulation step: ``departed`` as (id, insertion time, departure delay)."""
        for veh, dep, delay in departed:
            self.depart[veh] = dep
            self.scheduled[veh] = dep - delay
        for veh in arrived:
            self.travel.append(time_s - self.depart.pop(veh))
            self.travel_all.append(time_s - self.scheduled.pop(veh))
        if arrived:
            self.last_move_s = max(self.last_move_s, time_s)

    def on_decision(self, time_s: float, queue: float, delay: float, moving: bool) -> None:
        """Record one decision point; ``moving``: some vehicle in the network is moving."""
        self.queues.append(queue)
        self.delays.append(delay)
        if moving or not self.depart:
            self.last_move_s = time_s
        elif not self.deadlock and time_s - self.last_move_s >= self.deadlock_s:
            self.deadlock, self.deadlock_time_s = True, self.last_move_s

    def summary(self, time_s: float, waiting_delays: list[float]) -> dict:
        """Metrics at ``time_s``; ``waiting_delays``: how long each vehicle not yet inserted has waited."""
        unfinished = [time_s - s for s in self.scheduled.values()] + list(waiting_delays)
        everyone = self.travel_all + unfinished

        def mean(xs: list[float]) -> float:
            return float(np.mean(xs)) if xs else float("nan")

        return {
            "travel_time_s": mean(self.travel),
            "travel_time_all_s": mean(everyone),
            "queue": mean(self.queues),
            "delay": mean(self.delays),
            "throughput": len(self.travel),
            "in_network": len(self.depart),
            "waiting_to_enter": len(waiting_delays),
            "deadlock": self.deadlock,
            "deadlock_time_s": self.deadlock_time_s,
            "episode_s": time_s,
        }
