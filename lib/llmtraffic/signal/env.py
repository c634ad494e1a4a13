"""One signalised intersection in SUMO (libsumo) behind the Gymnasium API (OracleTSC §3.1, §4.1.3).

Episodes last ``episode_s`` simulated seconds (3600), a decision every ``decision_s`` (10) with
1-s simulation steps, seeded through SUMO's ``--seed``. The action is the index of the green
phase for the next slot. When it differs from the current phase, a ``clearance_s`` (5-s)
clearance is inserted first — links green now and not green next show yellow, links green in
both stay green, all others red — and the slot includes it (§4.1.3: "a fixed 5-second yellow
interval is inserted").

Phase timer: ``phase_time_s`` counts the green seconds of the current phase and restarts at 0
when the controller changes phase (after a change slot it is ``decision_s - clearance_s``).
This is LibSignal's intended rule; its July-2025 change of the phase-time check from ``==`` to
``>=`` resets the timer on every step instead, so minimum-green rules (MaxPressure's t_min,
SOTL's t_min) no longer bind.

Observation and reward are pluggable, as in sumo-rl: ``observation(state) -> np.ndarray`` and
``reward(prev_state, action, state) -> float``. Defaults: per incoming lane the §3.1 counts
(queued, and moving vehicles within 10 %, 10–33 % and beyond 33 % of the lane length from the
stop line) plus a one-hot current phase; the reward is eq. 7, R_env = queue_{t−1} − queue_t.

libsumo runs one simulation per process: a :class:`SignalEnv` owns it from construction until
:meth:`SignalEnv.close`; constructing a second while the first is open raises an error. Every
:meth:`SignalEnv.reset` restarts SUMO from scratch, so an exception inside an episode never
leaks into the next one.

Reproducibility: the same scenario, seed and actions give the same episode, with one caveat
in SUMO itself. On Cologne1 with phase changes, a later libsumo start in the same process
occasionally differs from the first by about one vehicle (a bare libsumo loop, without this
class, shows it too: 1748 vs 1747 arrivals for one random action sequence), apparently an
order that depends on memory addresses. The first simulation of a fresh process is stable;
the synthetic scenario showed no such difference.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Callable

import gymnasium as gym
import libsumo as ls
import numpy as np
from gymnasium.utils import seeding

from .metrics import EpisodeMetrics
from .scenarios import Scenario, load
from .state import IntersectionState, LaneCounts, Movement, Phase

QUEUE_SPEED = 0.1
"""Vehicles slower than this (m/s) count as queued/halting (§3.1, LibSignal)."""
NEAR, MID = 0.10, 0.33
"""Segment limits as fractions of the lane length from the stop line (§3.1)."""


@dataclass
class SignalConfig:
    """Timing and simulation settings of :class:`SignalEnv`."""

    episode_s: int = 3600
    """Simulated seconds per episode (§4.1.3: 3,600 timesteps)."""
    decision_s: int = 10
    """Seconds between decisions (§4.1.3: an action every 10 steps)."""
    clearance_s: int = 5
    """Clearance (yellow) seconds inserted on a phase change, part of the decision slot."""
    time_to_teleport: int = -1
    """SUMO's ``--time-to-teleport``: -1 turns teleporting off (LibSignal's Cologne1 setting)."""
    deadlock_s: int = 300
    """No vehicle moving and none arriving for this long (with vehicles present) is a deadlock."""

    def __post_init__(self) -> None:
        if not 0 <= self.clearance_s < self.decision_s:
            raise ValueError(f"SignalConfig.clearance_s ({self.clearance_s}) must lie in "
                             f"[0, decision_s={self.decision_s})")
        if self.episode_s < self.decision_s or self.episode_s % self.decision_s:
            raise ValueError(f"SignalConfig.episode_s ({self.episode_s}) must be a positive "
                             f"multiple of decision_s ({self.decision_s})")
        if self.deadlock_s < self.decision_s:
            raise ValueError(f"SignalConfig.deadlock_s must be >= decision_s, got {self.deadlock_s}")


@dataclass(frozen=True)
class SignalState(IntersectionState):
    """:class:`IntersectionState` plus what pressure-based controllers need."""

    phase_time_s: float = 0.0
    """Green seconds of the current phase since the last change (see the module docstring)."""
    outgoing: dict[str, int] = field(default_factory=dict)
    """Vehicles on each outgoing lane."""


# Observations and rewards (pluggable) -----------------------------------------------------

def lane_counts_phase(state: IntersectionState) -> np.ndarray:
    """§3.1 counts per incoming lane (queue, near, mid, far) followed by a one-hot phase."""
    counts = [v for c in state.lanes.values() for v in (c.queue, c.near, c.mid, c.far)]
    onehot = np.zeros(len(state.phases), np.float32)
    onehot[state.phase] = 1.0
    return np.concatenate([np.asarray(counts, np.float32), onehot])


def queue_difference(prev: IntersectionState, action: int, state: IntersectionState) -> float:
    """Eq. 7: R_env = queue_{t−1} − queue_t (halting vehicles on incoming lanes)."""
    return float(prev.total_queue - state.total_queue)


def negative_queue(prev: IntersectionState, action: int, state: IntersectionState) -> float:
    """−queue_t, the IDQN reward of LibSignal."""
    return -float(state.total_queue)


# Network discovery -----------------------------------------------------------------------

_TURN = {"s": "through", "t": "uturn", "l": "left", "L": "left", "r": "right", "R": "right"}
_TURN_LETTER = {"uturn": "U", "through": "T", "right": "R", "left": "L"}
_APPROACH_NAME = {"N": "northern", "S": "southern", "E": "eastern", "W": "western"}


def approach_of(shape: list[tuple[float, float]]) -> str:
    """Compass side a lane comes from, by the heading of its last segment (east-bound → ``"W"``)."""
    (x0, y0), (x1, y1) = shape[-2], shape[-1]
    dx, dy = x1 - x0, y1 - y0
    if abs(dx) >= abs(dy):
        return "W" if dx > 0 else "E"
    return "S" if dy > 0 else "N"


def _join(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def name_phase(movements: tuple[Movement, ...]) -> tuple[str, str]:
    """Mnemonic and description in the style of OracleTSC Tables 9–10.

    Approaches in N, S, E, W order, turns in U, T, R, L order. Several approaches: each
    approach letter followed by its turns ("NTST", "NUTRLSUTRL"); one approach: a letter pair
    per turn ("NTNL"), as Table 9 writes them.
    """
    served: dict[str, list[str]] = {}
    for a in "NSEW":
        turns = {m.turn for m in movements if m.approach == a}
        if turns:
            served[a] = [t for t in ("uturn", "through", "right", "left") if t in turns]
    if not served:
        return "NONE", "no movement"
    if len(served) == 1:
        (a, turns), = served.items()
        mnemonic = "".join(a + _TURN_LETTER[t] for t in turns)
    else:
        mnemonic = "".join(a + "".join(_TURN_LETTER[t] for t in turns) for a, turns in served.items())

    def lanes(turns: list[str]) -> str:
        return _join([t.replace("uturn", "U-turn").replace("left", "left-turn")
                      .replace("right", "right-turn") for t in turns]) + " lanes"

    groups = list(served.values())
    if all(g == groups[0] for g in groups):
        text = _join([_APPROACH_NAME[a] for a in served]) + " " + lanes(groups[0])
    else:
        text = _join([f"{_APPROACH_NAME[a]} {lanes(t)}" for a, t in served.items()])
    return mnemonic, text[0].upper() + text[1:]


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
    # links green in every phase (e.g. permissive right turns) tell no phase apart: names skip them
    always = {i for i in movements if all(s[i] in "Gg" for s in greens)} if len(greens) > 1 else set()
    phases, seen = [], {}
    for k, s in enumerate(greens):
        moves = tuple(movements[i] for i in sorted(movements) if s[i] in "Gg")
        mnemonic, text = name_phase(tuple(movements[i] for i in sorted(movements)
                                          if s[i] in "Gg" and i not in always))
        seen[mnemonic] = seen.get(mnemonic, 0) + 1
        if seen[mnemonic] > 1:  # keep names unique, as actions are chosen by name in prompts
            mnemonic = f"{mnemonic}{seen[mnemonic]}"
        phases.append(Phase(k, mnemonic, text, moves, s))
    incoming = tuple(dict.fromkeys(m.in_lane for m in movements.values()))
    outgoing = tuple(dict.fromkeys(m.out_lane for m in movements.values()))
    return tuple(phases), incoming, outgoing


def clearance(current: str, nxt: str) -> str:
    """Clearance signal state: green now and not next → yellow; green in both stays; else red."""
    return "".join(c if c in "Gg" and n in "Gg" else ("y" if c in "Gg" else "r")
                   for c, n in zip(current, nxt))


# The environment -------------------------------------------------------------------------

_owner: weakref.ref | None = None
"""The SignalEnv that currently owns this process's libsumo simulation."""


class SignalEnv(gym.Env):
    """Gymnasium environment for one signalised intersection (see the module docstring)."""

    metadata = {"render_modes": []}

    def __init__(self, scenario: Scenario | str = "synthetic", config: SignalConfig | None = None,
                 observation: Callable[[IntersectionState], np.ndarray] = lane_counts_phase,
                 reward: Callable[[IntersectionState, int, IntersectionState], float] = queue_difference,
                 seed: int = 0):
        self.scenario = load(scenario)
        self.config = config or SignalConfig()
        self.observation, self.reward = observation, reward
        self._np_random, _ = seeding.np_random(seed)
        self._seed, self._running, self._closed = seed, False, False
        self._claim()
        try:
            self._start(seed)
            self.tls = self._find_tls()
            self.phases, self.lanes, self.out_lanes = discover(self.tls)
            self._prepare_episode(seed)
            obs = self.observation(self.observe())
        except BaseException:
            self.close()
            raise
        self.action_space = gym.spaces.Discrete(len(self.phases))
        self.observation_space = gym.spaces.Box(0.0, np.inf, shape=obs.shape, dtype=np.float32)

    # process-wide ownership of libsumo
    def _claim(self) -> None:
        global _owner
        other = _owner() if _owner is not None else None
        if other is not None and not other._closed:
            raise RuntimeError(
                f"libsumo runs one simulation per process and a SignalEnv for scenario "
                f"{other.scenario.name!r} is open; call its close() first (or run the second "
                "environment in another process)")
        _owner = weakref.ref(self)

    def close(self) -> None:
        """Stop SUMO and release the process's libsumo slot (safe to call twice)."""
        global _owner
        if self._closed:
            return
        self._stop()
        self._closed = True
        if _owner is not None and _owner() is self:
            _owner = None

    def __enter__(self) -> SignalEnv:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _stop(self) -> None:
        if self._running or ls.simulation.isLoaded():
            try:
                ls.close()
            except ls.TraCIException:  # already closed by SUMO itself
                pass
        self._running = False

    def _start(self, seed: int) -> None:
        self._stop()
        cfg = self.scenario.sumo_config(seed)
        if not cfg.exists():
            raise FileNotFoundError(f"scenario {self.scenario.name!r}: SUMO config {cfg} does not exist")
        args = ["sumo", "-c", str(cfg), "--seed", str(seed), "--step-length", "1",
                "--time-to-teleport", str(self.config.time_to_teleport),
                "--no-step-log", "true", "--no-warnings", "true", "--duration-log.disable", "true"]
        try:
            ls.start(args)
        except ls.TraCIException as err:
            raise RuntimeError(f"SUMO could not start scenario {self.scenario.name!r} from {cfg}: {err}") from None
        self._running = True

    def _find_tls(self) -> str:
        ids = ls.trafficlight.getIDList()
        if len(ids) != 1:
            cfg = self.scenario.sumo_config(self._seed)
            what = "no traffic light" if not ids else f"{len(ids)} traffic lights {list(ids)}"
            raise ValueError(f"scenario {self.scenario.name!r} ({cfg}) has {what}; "
                             "SignalEnv needs exactly one signalised intersection")
        return ids[0]

    def _prepare_episode(self, seed: int) -> None:
        self.begin_s = ls.simulation.getTime()
        self.time_s = 0
        self.phase, self.phase_time_s = 0, 0.0
        self.episode_seed = seed
        ls.trafficlight.setRedYellowGreenState(self.tls, self.phases[0].sumo_state)
        self._lane_len = {lane: ls.lane.getLength(lane) for lane in self.lanes}
        self._lane_speed = {lane: ls.lane.getMaxSpeed(lane) for lane in self.lanes}
        self._edges = ls.edge.getIDList()
        self.metrics = EpisodeMetrics(self.config.deadlock_s)
        self.state = self.observe()

    # Gymnasium API
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Restart SUMO. The SUMO seed is ``seed``, or drawn from the env's seeded generator."""
        if self._closed:
            raise RuntimeError("SignalEnv.reset() after close()")
        if seed is not None:
            self._np_random, _ = seeding.np_random(seed)
        else:
            seed = int(self._np_random.integers(2**31 - 1))
        self._start(seed)
        self._prepare_episode(seed)
        return self.observation(self.state), self._info()

    def step(self, action: int):
        """Run one decision slot (clearance included) and return the Gymnasium 5-tuple."""
        if not self._running:
            raise RuntimeError("SignalEnv.step() before reset() (or after close())")
        if not 0 <= int(action) < len(self.phases):
            raise ValueError(f"action {action} is not a phase index in [0, {len(self.phases)})")
        action, cfg = int(action), self.config
        try:
            if action != self.phase:
                cur, nxt = self.phases[self.phase].sumo_state, self.phases[action].sumo_state
                ls.trafficlight.setRedYellowGreenState(self.tls, clearance(cur, nxt))
                self._advance(cfg.clearance_s)
                ls.trafficlight.setRedYellowGreenState(self.tls, nxt)
                self.phase, self.phase_time_s = action, 0.0
                green = cfg.decision_s - cfg.clearance_s
            else:
                green = cfg.decision_s
            self._advance(green)
            self.phase_time_s += green
            prev, self.state = self.state, self.observe()
            self.metrics.on_decision(self.time_s, self.state.total_queue, self._delay(), self._moving())
        except BaseException:
            self._stop()  # leave nothing half-run behind; the next reset() starts clean
            raise
        truncated = self.time_s >= cfg.episode_s
        return (self.observation(self.state), float(self.reward(prev, action, self.state)),
                False, truncated, self._info())

    def _info(self) -> dict:
        return {"state": self.state, "time_s": self.time_s, "deadlock": self.metrics.deadlock}

    def _advance(self, seconds: int) -> None:
        for _ in range(seconds):
            ls.simulationStep()
            self.time_s += 1
            departed = [(v, ls.vehicle.getDeparture(v) - self.begin_s, ls.vehicle.getDepartDelay(v))
                        for v in ls.simulation.getDepartedIDList()]
            self.metrics.on_step(self.time_s, departed, ls.simulation.getArrivedIDList())

    # What the controller sees
    def observe(self) -> SignalState:
        """Current intersection state (§3.1 counts per incoming lane) without advancing time."""
        lanes = {}
        for lane in self.lanes:
            length = self._lane_len[lane]
            q = near = mid = far = 0
            for veh in ls.lane.getLastStepVehicleIDs(lane):
                if ls.vehicle.getSpeed(veh) < QUEUE_SPEED:
                    q += 1
                    continue
                dist = (length - ls.vehicle.getLanePosition(veh)) / length
                if dist < NEAR:
                    near += 1
                elif dist < MID:
                    mid += 1
                else:
                    far += 1
            lanes[lane] = LaneCounts(q, near, mid, far)
        outgoing = {lane: ls.lane.getLastStepVehicleNumber(lane) for lane in self.out_lanes}
        return SignalState(float(self.time_s), self.phase, lanes, self.phases,
                           phase_time_s=self.phase_time_s, outgoing=outgoing)

    def _delay(self) -> float:
        """Mean over incoming lanes of 1 − mean speed / speed limit (LibSignal's SUMO delay)."""
        return float(np.mean([1.0 - min(ls.lane.getLastStepMeanSpeed(lane) / self._lane_speed[lane], 1.0)
                              for lane in self.lanes]))

    def _moving(self) -> bool:
        """Is any vehicle anywhere in the network moving (speed ≥ 0.1 m/s) right now?"""
        return any(ls.edge.getLastStepVehicleNumber(e) > ls.edge.getLastStepHaltingNumber(e)
                   for e in self._edges)

    def summary(self) -> dict:
        """Episode metrics so far (see :mod:`llmtraffic.signal.metrics`)."""
        waiting = [ls.vehicle.getDepartDelay(v) for v in ls.simulation.getPendingVehicles()] if self._running else []
        return self.metrics.summary(self.time_s, waiting)
