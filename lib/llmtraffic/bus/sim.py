"""Event-driven bus network simulation on simpy (bus paper §3.3).

Each bus is one simpy process: travel a link → arrive (alight, then board) → dwell →
hold (control stops) → depart. Passengers are not processes: each stop's arrivals are drawn in
bulk per episode (Poisson, piecewise-constant hourly rates) and wait in arrival-ordered queues,
one queue per (stop, set of lines that serve the trip). A bus boards the earliest passengers
that arrived before it reached the stop, up to its capacity; those left behind keep their place.

Holding decisions leave the bus process through :class:`Decision` objects so that both
:func:`simulate` (a controller answers at once) and the PettingZoo environment (the caller
answers later) drive the same code. All randomness comes from generators spawned from the
episode seed: demand from one stream, each bus's link times from its own, so controllers
never shift the random draws of an episode.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pandas as pd
import simpy

from . import metrics
from .scenarios import HOUR_S, Line, Scenario


@dataclass
class EpisodeResult:
    """What one simulated episode produced."""

    scenario: Scenario
    seed: int
    horizon_s: float
    metrics: dict
    """See :func:`llmtraffic.bus.metrics.episode_metrics`."""
    trajectories: pd.DataFrame
    """One row per bus arrival at a stop: line, bus, stop (index on the line), position_m,
    arrival_s, departure_s (NaN if still there), hold_s, boarded, alighted, onboard (after
    boarding), initial (True for buses standing there at t = 0), left_behind (ready passengers
    a full bus could not take), idle_s (time stood at an empty stop, see
    :attr:`~llmtraffic.bus.scenarios.Scenario.empty_stop_dwell`)."""
    passengers: pd.DataFrame
    """One row per generated passenger: line (where generated), rode (line boarded or ""),
    origin, destination (nodes), arrival_s, board_s, alight_s (NaN when it did not happen)."""


@dataclass
class Passengers:
    """Passenger arrays of one episode, indexed by passenger id (sorted by nothing in particular)."""

    arrival_s: np.ndarray
    origin: np.ndarray
    destination: np.ndarray
    line: np.ndarray
    """Index of the line whose demand generated the passenger."""


def draw_passengers(scenario: Scenario, rng: np.random.Generator, horizon_s: float) -> Passengers:
    """Poisson arrivals with hourly rates, in bulk: one count per (stop, hour), uniform times
    within the hour, destinations by inverse CDF of each origin's row; plus ``scenario.trips``."""
    hours = math.ceil(horizon_s / HOUR_S)
    parts = []
    for k, ln in enumerate(scenario.lines):
        rates = np.asarray(ln.rates_ph, dtype=float)
        if hours > rates.shape[1]:
            raise ValueError(
                f"horizon_s={horizon_s:g} exceeds the {rates.shape[1]} h of demand of line {ln.name!r} (field 'rates_ph')"
            )
        rates = rates[:, :hours]
        if scenario.base_rate is not None:
            lo, hi = scenario.base_rate
            rates = rates * rng.integers(lo, hi + 1, size=(ln.n_stops, 1))
        if scenario.rate_jitter:
            j = scenario.rate_jitter
            rates = rates * rng.uniform(1 - j, 1 + j, size=rates.shape)
        length = np.minimum(HOUR_S, horizon_s - HOUR_S * np.arange(hours))
        counts = rng.poisson(rates * length / HOUR_S)
        stop_of = np.repeat(np.repeat(np.arange(ln.n_stops), hours), counts.ravel())
        hour_of = np.repeat(np.tile(np.arange(hours), ln.n_stops), counts.ravel())
        times = HOUR_S * hour_of + rng.random(stop_of.size) * length[hour_of]
        cdf = np.cumsum(np.asarray(ln.od, dtype=float), axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):  # rows without demand are never used
            cdf /= cdf[:, -1:]  # exactly 1 from the last stop with mass on: u < 1 never lands past it
        dest = (rng.random(stop_of.size)[:, None] >= cdf[stop_of]).sum(axis=1)
        nodes = np.asarray(ln.nodes)
        parts.append((times, nodes[stop_of], nodes[dest], np.full(stop_of.size, k)))
    index = {ln.name: k for k, ln in enumerate(scenario.lines)}
    for t, name, o, d in scenario.trips:
        if t <= horizon_s:
            ln = scenario.lines[index[name]]
            parts.append((np.array([t], float), np.array([ln.nodes[o]]), np.array([ln.nodes[d]]), np.array([index[name]])))
    arrays = [np.concatenate(col) if parts else np.zeros(0) for col in zip(*parts)]
    return Passengers(arrays[0].astype(float), *(a.astype(np.int64) for a in arrays[1:]))


@dataclass
class _Queue:
    """Passengers waiting at one node for one set of lines, earliest arrival first."""

    times: list[float]
    ids: np.ndarray
    head: int = 0


class Bus:
    """A bus's state; positions are odometer readings (metres along its line, laps added)."""

    def __init__(self, name: str, line: int, ln: Line, rng: np.random.Generator | None,
                 start_s: float, start_stop: int | None):
        self.name, self.line, self.ln, self.rng = name, line, ln, rng
        self.start_s = start_s
        """Dispatch time (0 for buses standing on the line at t = 0)."""
        self.start_stop = start_stop
        """Stop where the bus stands at t = 0, or None if it is dispatched."""
        self.in_service = False
        self.odo0 = self.odo1 = 0.0
        self.t0 = self.t1 = 0.0
        self.moving = False
        self.onboard: dict[int, list[int]] = {}
        self.n_onboard = 0
        self.hold_start: float | None = None
        self.visit = -1
        self.leader: int | None = None
        self.links: np.ndarray | None = None

    def odometer(self, t: float) -> float:
        if self.moving and self.t1 > self.t0:
            return self.odo0 + (self.odo1 - self.odo0) * min(1.0, (t - self.t0) / (self.t1 - self.t0))
        return self.odo1 if self.moving else self.odo0


@dataclass
class Decision:
    """A bus at a control stop waiting for a holding decision."""

    bus: Bus
    stop: int
    """Stop index on the bus's line."""
    node: int
    time_s: float
    event: simpy.Event = field(repr=False)


class Episode:
    """One episode of a scenario; drive it with :meth:`next_decision` / :meth:`decide`.

    ``mode`` is the holding protocol: None (never hold, no decisions), ``"step"`` (a decision
    every ``hold_step_s`` while held: 1 = hold on, 0 = release; forced release at
    ``max_hold_s``) or ``"duration"`` (one decision: the holding time, clipped to [0, max])."""

    def __init__(self, scenario: Scenario, seed: int = 0, horizon_s: float | None = None, mode: str | None = None):
        if mode not in (None, "step", "duration"):
            raise ValueError(f"holding mode must be None, 'step' or 'duration', got {mode!r}")
        self.scenario, self.seed, self.mode = scenario, int(seed), mode
        self.horizon_s = float(scenario.horizon_s if horizon_s is None else horizon_s)
        if not self.horizon_s > 0:
            raise ValueError(f"horizon_s must be positive, got {horizon_s}")
        demand_seed, travel_seed = np.random.SeedSequence(self.seed).spawn(2)
        self.pax = draw_passengers(scenario, np.random.default_rng(demand_seed), self.horizon_s)
        n = self.pax.arrival_s.size
        self.board_s = np.full(n, np.nan)
        self.alight_s = np.full(n, np.nan)
        self.rode = np.full(n, -1)
        self.queues = self._build_queues()
        self.control = set(scenario.control_stops)
        self.env = simpy.Environment()
        self.pending: deque[Decision] = deque()
        self.buses: list[list[Bus]] = []
        self.routes = [_Route(ln) for ln in scenario.lines]
        self.next_dispatch: list[float] = []
        self._log: dict[str, list] = {c: [] for c in _COLUMNS}
        self._last_visit: dict[tuple[int, int], int] = {}
        for k, (ln, seeds) in enumerate(zip(scenario.lines, travel_seed.spawn(len(scenario.lines)))):
            self._start_line(k, ln, seeds)

    # ------------------------------------------------------------------ setup

    def _build_queues(self) -> dict[tuple[int, int], list[_Queue]]:
        """Queues per (line, node): passengers group by origin and by the set of lines that
        serve their origin and, later, their destination (a loop serves every pair)."""
        sc, pax = self.scenario, self.pax
        order = [{v: i for i, v in enumerate(ln.nodes)} for ln in sc.lines]

        def serving(o: int, d: int) -> tuple[int, ...]:
            return tuple(
                k for k, ln in enumerate(sc.lines)
                if o in order[k] and d in order[k] and (ln.is_loop or order[k][o] < order[k][d])
            )

        n_nodes = len(sc.stop_names)
        pairs, pair_of = np.unique(pax.origin * n_nodes + pax.destination, return_inverse=True)
        group_ids: dict[tuple[int, tuple[int, ...]], int] = {}
        group_of_pair = np.array(
            [group_ids.setdefault((p // n_nodes, serving(p // n_nodes, p % n_nodes)), len(group_ids)) for p in pairs.tolist()],
            dtype=np.int64,
        )
        group = group_of_pair[pair_of] if pairs.size else np.zeros(0, np.int64)
        ids = np.lexsort((pax.arrival_s, group))
        bounds = np.searchsorted(group[ids], np.arange(len(group_ids) + 1))
        queues: dict[tuple[int, int], list[_Queue]] = {}
        for (node, lines), g in group_ids.items():
            members = ids[bounds[g]:bounds[g + 1]]
            q = _Queue(pax.arrival_s[members].tolist(), members)
            for k in lines:
                queues.setdefault((k, node), []).append(q)
        return queues

    def _start_line(self, k: int, ln: Line, seeds: np.random.SeedSequence) -> None:
        if ln.n_dispatch is not None:
            dispatch = [ln.first_dispatch_s + i * ln.headway_s for i in range(ln.n_dispatch)]
        else:
            dispatch = np.arange(ln.first_dispatch_s, self.horizon_s, ln.headway_s).tolist()
        starts = [(0.0, s) for s in ln.preplaced] + [(t, None) for t in dispatch]
        random = self.scenario.travel_shape is not None
        buses = []
        for i, ((t, stop), s) in enumerate(zip(starts, seeds.spawn(len(starts)))):
            bus = Bus(f"{ln.name}#{i}", k, ln, np.random.default_rng(s) if random else None, t, stop)
            buses.append(bus)
            self.env.process(self._run(bus))
        self.buses.append(buses)
        self.next_dispatch.append(dispatch)

    # ------------------------------------------------------------------ bus process

    def _run(self, bus: Bus):
        env, ln, stop = self.env, bus.ln, bus.start_stop
        if bus.start_s > 0:
            yield env.timeout(bus.start_s)
        bus.in_service = True
        initial = stop is not None
        if stop is None:
            stop = 0
            if ln.access_s > 0:
                bus.moving, bus.odo0, bus.odo1, bus.t0, bus.t1 = True, 0.0, ln.positions_m[0], env.now, env.now + ln.access_s
                yield env.timeout(ln.access_s)
        lap = 0
        while True:
            bus.moving = False
            bus.odo0 = ln.positions_m[stop] + lap * (ln.loop_m or 0.0)
            dwell = self._arrive(bus, stop, initial)
            initial = False
            if self.scenario.empty_stop_dwell and self._log["boarded"][bus.visit] == 0 \
                    and self._log["left_behind"][bus.visit] == 0:
                dwell = yield from self._stand_until_boarding(bus, stop)
            if dwell > 0:
                yield env.timeout(dwell)
            last = stop == ln.n_stops - 1 and not ln.is_loop
            hold = 0.0
            if self.mode is not None and not last and ln.nodes[stop] in self.control:
                hold = yield from self._hold(bus, stop)
            self._log["departure_s"][bus.visit] = env.now
            self._log["hold_s"][bus.visit] = hold
            if last:
                bus.in_service = False
                return
            link = self._link_time(bus, stop)
            nxt = stop + 1
            if nxt == ln.n_stops:
                nxt, lap = 0, lap + 1
            odo1 = ln.positions_m[nxt] + lap * (ln.loop_m or 0.0)
            bus.moving, bus.odo1, bus.t0, bus.t1 = True, odo1, env.now, env.now + link
            yield env.timeout(link)
            stop = nxt

    def _link_time(self, bus: Bus, stop: int) -> float:
        """Median time, or a gamma draw (mean = median, shape from the scenario) clipped to
        ``travel_clip`` × median; each bus draws a whole lap of links at once."""
        median = bus.ln.link_s[stop]
        if bus.rng is None:
            return median
        if stop == 0 or bus.links is None:
            sc = self.scenario
            med = np.asarray(bus.ln.link_s)
            lo, hi = sc.travel_clip
            bus.links = np.clip(bus.rng.gamma(sc.travel_shape, med / sc.travel_shape), lo * med, hi * med)
        return float(bus.links[stop])

    def _arrive(self, bus: Bus, stop: int, initial: bool) -> float:
        """Alight, then board (capacity permitting); log the visit; return the dwell time."""
        sc, now, node = self.scenario, self.env.now, bus.ln.nodes[stop]
        gone = bus.onboard.pop(node, None)
        n_alight = 0
        if gone:
            n_alight = len(gone)
            self.alight_s[gone] = now
            bus.n_onboard -= n_alight
        n_board, left = self._board_into(bus, node, now)
        log = self._log
        bus.visit = len(log["line"])
        bus.leader = self._last_visit.get((bus.line, stop))
        self._last_visit[(bus.line, stop)] = bus.visit
        log["line"].append(bus.ln.name)
        log["bus"].append(bus.name)
        log["stop"].append(stop)
        log["position_m"].append(bus.ln.positions_m[stop])
        log["arrival_s"].append(now)
        log["departure_s"].append(math.nan)
        log["hold_s"].append(0.0)
        log["boarded"].append(n_board)
        log["alighted"].append(n_alight)
        log["onboard"].append(bus.n_onboard)
        log["initial"].append(initial)
        log["left_behind"].append(left)
        log["idle_s"].append(0.0)
        return max(sc.board_s * n_board, sc.alight_s * n_alight, sc.min_dwell_s)

    def _board_into(self, bus: Bus, node: int, now: float) -> tuple[int, int]:
        """Board the waiting passengers the bus has room for; returns (boarded, left behind by a full bus)."""
        sc = self.scenario
        room = math.inf if sc.capacity is None else sc.capacity - bus.n_onboard
        boarding, left = self._board(bus.line, node, now, room)
        n_board = 0
        for ids in boarding:
            n_board += ids.size
            self.board_s[ids] = now
            self.rode[ids] = bus.line
            for pid, dest in zip(ids.tolist(), self.pax.destination[ids].tolist()):
                bus.onboard.setdefault(dest, []).append(pid)
        bus.n_onboard += n_board
        return n_board, left

    def _stand_until_boarding(self, bus: Bus, stop: int):
        """:attr:`Scenario.empty_stop_dwell`: stand until the next passenger of this line arrives
        at the stop (for ever if none will), board everyone there by then; returns the boarding
        time that follows. The visit's ``idle_s`` records the time stood empty."""
        env, node = self.env, bus.ln.nodes[stop]
        later = [q.times[i] for q in self.queues.get((bus.line, node), ())
                 if (i := bisect.bisect_right(q.times, env.now)) < len(q.times)]
        if not later:
            yield env.event()  # never triggered: the bus stands here until the horizon
        start = env.now
        yield env.timeout(min(later) - start)
        n_board, _ = self._board_into(bus, node, env.now)
        log, visit = self._log, bus.visit
        log["idle_s"][visit] = env.now - start
        log["boarded"][visit] += n_board
        log["onboard"][visit] = bus.n_onboard
        return max(self.scenario.board_s * n_board, self.scenario.min_dwell_s)

    def _board(self, line: int, node: int, now: float, room: float) -> tuple[list[np.ndarray], int]:
        """Ids of the passengers who board, earliest arrivals first across this line's queues, and
        how many ready passengers a full bus leaves behind."""
        queues = self.queues.get((line, node), ())
        ready = [(q, bisect.bisect_right(q.times, now)) for q in queues]
        total = sum(hi - q.head for q, hi in ready)
        left = 0
        if total > room:  # capacity binds: take the `room` earliest arrivals over all queues
            left = int(total - room)
            times = np.concatenate([q.times[q.head:hi] for q, hi in ready])
            owner = np.repeat(np.arange(len(ready)), [hi - q.head for q, hi in ready])
            taken = np.bincount(owner[np.argsort(times, kind="stable")[: int(room)]], minlength=len(ready))
            ready = [(q, q.head + int(n)) for (q, _), n in zip(ready, taken)]
        out = []
        for q, hi in ready:
            if hi > q.head:
                out.append(q.ids[q.head:hi])
                q.head = hi
        return out, left

    def _hold(self, bus: Bus, stop: int):
        """Holding at a control stop (§3.2); returns the seconds held. Nobody boards or alights
        while held: passengers who arrive meanwhile wait for the next bus."""
        env, sc = self.env, self.scenario
        bus.hold_start = env.now
        if self.mode == "duration":
            held = yield self._ask(bus, stop)
            held = min(max(float(held), 0.0), sc.max_hold_s)
            if held > 0:
                yield env.timeout(held)
        else:
            held = 0.0
            while held < sc.max_hold_s:
                action = yield self._ask(bus, stop)
                if not action:
                    break
                yield env.timeout(sc.hold_step_s)
                held += sc.hold_step_s
        bus.hold_start = None
        return held

    def _ask(self, bus: Bus, stop: int) -> simpy.Event:
        event = self.env.event()
        self.pending.append(Decision(bus, stop, bus.ln.nodes[stop], self.env.now, event))
        return event

    # ------------------------------------------------------------------ driving

    def next_decision(self) -> Decision | None:
        """Advance to the next pending decision, or None once the horizon is reached."""
        env = self.env
        while not self.pending:
            if env.peek() > self.horizon_s:
                if env.now < self.horizon_s:  # let the clock reach the horizon (final states)
                    env.run(until=self.horizon_s)
                return None
            env.step()
        return self.pending[0]

    def decide(self, decision: Decision, value: float) -> None:
        """Answer the oldest pending decision (hold 1/0 in step mode, seconds in duration mode)."""
        if not self.pending or self.pending[0] is not decision:
            raise ValueError("decide() must answer the decision returned by next_decision()")
        self.pending.popleft()
        decision.event.succeed(value)

    def after(self, delay_s: float, callback: Callable[[], None]) -> None:
        """Call ``callback`` ``delay_s`` seconds from now (if that is within the horizon)."""
        event = self.env.timeout(delay_s)
        event.callbacks.append(lambda _: callback())

    @property
    def now(self) -> float:
        return self.env.now

    # ------------------------------------------------------------------ observation (§3.2)

    def state(self, bus: Bus, node: int) -> np.ndarray:
        """§3.2 state of ``bus`` at ``node`` now: [forward, backward same-line space headway,
        forward, backward other-line space headway at the node (0 where no other line serves
        it), onboard passengers, elapsed holding time]; ``state_dim`` 3 keeps entries 0, 1, 4.
        A headway with no bus on that side is 0, as in the authors' code."""
        now = self.env.now
        fwd, bwd = self._same_line_gaps(bus, now)
        ofwd = obwd = 0.0
        if node in self.scenario.shared_nodes:
            ofwd, obwd = self._other_line_gaps(bus.line, node, now)
        held = _held(bus, now)
        if self.scenario.state_dim == 3:
            return np.array([fwd, bwd, float(bus.n_onboard)])
        return np.array([fwd, bwd, ofwd, obwd, float(bus.n_onboard), held])

    def _same_line_gaps(self, bus: Bus, now: float) -> tuple[float, float]:
        return _or_zero(*_nearest(bus.ln, self.buses[bus.line], bus.odometer(now), now, skip=bus))

    def _other_line_gaps(self, line: int, node: int, now: float) -> tuple[float, float]:
        ahead, behind = math.inf, math.inf
        for k, ln in enumerate(self.scenario.lines):
            if k != line and node in ln.nodes:
                a, b = _nearest(ln, self.buses[k], ln.positions_m[ln.nodes.index(node)], now)
                ahead, behind = min(ahead, a), min(behind, b)
        return _or_zero(ahead, behind)

    def info(self, decision: Decision) -> dict:
        """Context for controllers: time, line, stop (node), bus, scheduled headway, the time
        since the previous bus of the line left this stop (forward time headway; 0 while that
        bus is still there, NaN if none), the nominal time until the next bus of the line
        reaches it (backward time headway, NaN if none), onboard count and seconds held."""
        bus, now = decision.bus, self.env.now
        return {
            "time_s": now,
            "line": bus.ln.name,
            "stop": decision.node,
            "stop_index": decision.stop,
            "bus": bus.name,
            "scheduled_headway_s": bus.ln.headway_s,
            "forward_time_headway_s": self._forward_time_headway(bus, now),
            "backward_time_headway_s": self._backward_time_headway(bus, decision.stop, now),
            "onboard": bus.n_onboard,
            "held_s": _held(bus, now),
        }

    def _forward_time_headway(self, bus: Bus, now: float) -> float:
        if bus.leader is None:
            return math.nan
        dep = self._log["departure_s"][bus.leader]
        return 0.0 if math.isnan(dep) else now - dep

    def _backward_time_headway(self, bus: Bus, stop: int, now: float) -> float:
        """Nominal time (median link times, no dwell) for the closest follower to get here; on an
        open line with no follower on the road, the next dispatch plus its nominal run."""
        ln, me = bus.ln, bus.odometer(now)
        route = self.routes[bus.line]
        _, behind = _nearest(ln, self.buses[bus.line], me, now, skip=bus)
        if behind < math.inf:
            return route.time_at(me) - route.time_at(me - behind)
        later = [t for t in self.next_dispatch[bus.line] if t > now]
        return later[0] - now + route.time_at(me) if later and not ln.is_loop else math.nan

    # ------------------------------------------------------------------ results

    def result(self) -> EpisodeResult:
        """Trajectories, passengers and metrics of the episode so far."""
        traj = pd.DataFrame(self._log, columns=_COLUMNS)
        names = np.array([ln.name for ln in self.scenario.lines] + [""])
        pax = pd.DataFrame({
            "line": names[self.pax.line], "rode": names[self.rode], "origin": self.pax.origin,
            "destination": self.pax.destination, "arrival_s": self.pax.arrival_s,
            "board_s": self.board_s, "alight_s": self.alight_s,
        })
        return EpisodeResult(
            self.scenario, self.seed, self.horizon_s,
            metrics.episode_metrics(self.scenario, traj, pax, self.horizon_s), traj, pax,
        )


_COLUMNS = (
    "line", "bus", "stop", "position_m", "arrival_s", "departure_s", "hold_s",
    "boarded", "alighted", "onboard", "initial", "left_behind", "idle_s",
)


def _held(bus: Bus, now: float) -> float:
    """Seconds the bus has been held so far (0 when not held), to the microsecond so that
    5-s steps add up exactly."""
    return 0.0 if bus.hold_start is None else round(now - bus.hold_start, 6)


def _nearest(ln: Line, buses: list[Bus], at: float, now: float, skip: Bus | None = None) -> tuple[float, float]:
    """Distance to the closest in-service bus ahead of and behind odometer ``at`` (inf if none)."""
    ahead, behind = math.inf, math.inf
    loop_m = ln.loop_m  # None on an open line
    for other in buses:
        if other is skip or not other.in_service:
            continue
        d = other.odometer(now) - at
        if loop_m is not None:
            d %= loop_m
            if d < ahead:
                ahead = d
            d = (loop_m - d) % loop_m
            if d < behind:
                behind = d
        elif d >= 0:
            if d < ahead:
                ahead = d
        elif -d < behind:
            behind = -d
    return ahead, behind


def _or_zero(*gaps: float) -> tuple[float, ...]:
    """The state's convention (authors' code): a headway with no bus on that side is 0."""
    return tuple(0.0 if g == math.inf else g for g in gaps)


class _Route:
    """Nominal (median) travel time from a line's origin to any odometer reading."""

    def __init__(self, ln: Line):
        self.loop_m = ln.loop_m
        self.pos = list(ln.positions_m) + ([ln.positions_m[0] + ln.loop_m] if ln.is_loop else [])
        self.cum = [0.0, *np.cumsum(ln.link_s).tolist()]

    def time_at(self, odometer: float) -> float:
        lap = 0.0
        x = odometer
        if self.loop_m is not None:
            lap, x = divmod(odometer, self.loop_m)
            if x < self.pos[0]:  # between the dispatch point and the first stop: end of the last link
                x, lap = x + self.loop_m, lap - 1
        i = min(max(bisect.bisect_right(self.pos, x) - 1, 0), len(self.pos) - 2)
        frac = (x - self.pos[i]) / (self.pos[i + 1] - self.pos[i])
        return lap * self.cum[-1] + self.cum[i] + frac * (self.cum[i + 1] - self.cum[i])


def simulate(scenario: Scenario, controller=None, seed: int = 0, horizon_s: float | None = None) -> EpisodeResult:
    """Run one episode; ``controller`` is a :class:`~llmtraffic.bus.controllers.Controller`
    (its ``mode`` says step-wise or duration holding) or None for no holding."""
    mode = None if controller is None else getattr(controller, "mode", None)
    if controller is not None and mode not in ("step", "duration"):
        raise ValueError(f"controller.mode must be 'step' or 'duration', got {mode!r}")
    if controller is not None and hasattr(controller, "reset"):
        controller.reset(seed)
    episode = Episode(scenario, seed, horizon_s, mode)
    # a controller that says it never reads ``info`` (a trained DQN) is spared its cost: about a
    # third of each decision, which validation and testing make hundreds of thousands of times
    wants_info = getattr(controller, "uses_info", True)
    while (decision := episode.next_decision()) is not None:
        obs = episode.state(decision.bus, decision.node)
        episode.decide(decision, controller.act(obs, episode.info(decision) if wants_info else {}))
    return episode.result()
