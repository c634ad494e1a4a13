"""One signalised intersection in SUMO (libsumo) or CityFlow behind the Gymnasium API (OracleTSC §3.1, §4.1.3).

The simulator is the scenario's (:mod:`llmtraffic.signal.backends`); everything below is
defined here once for both.

Episodes last ``episode_s`` simulated seconds (3600), a decision every ``decision_s`` (10) with
1-s simulation steps, seeded through SUMO's ``--seed`` or CityFlow's random seed. The action is
the index of the green phase for the next slot. When it differs from the current phase, a
``clearance_s`` (5-s) clearance is inserted first and the slot includes it (§4.1.3: "a fixed
5-second yellow interval is inserted"): in SUMO links green now and not green next show yellow,
links green in both stay green, all others red; in CityFlow the roadnet's all-red phase, as
LibSignal does.

Phase timer: ``phase_time_s`` counts the green seconds of the current phase and restarts at 0
when the controller changes phase (after a change slot it is ``decision_s - clearance_s``).

Rule sets (``SignalConfig.rules``, :mod:`llmtraffic.signal.rules`): ``"study"`` (the default)
is what this docstring describes; ``"libsignal"`` reproduces LibSignal's implemented rules as of
its code before July 2025 — its queue, pressure and delay, an all-red clearance, a timer that
counts the clearance (so its MaxPressure may change phase after 5 s of green), its departure
stamp and, on CityFlow, its throughput. In July 2025 LibSignal changed its SUMO phase-time check
from ``==`` to ``>=``: once its timer reaches the clearance length (5 s into the episode) the
check holds on every step, so every step switches straight to the chosen phase and the timer is
never reset — no clearance is ever shown, FixedTime changes phase every 10 s after t = 30 s, and
MaxPressure's t_min never applies.
Neither rule set reproduces that version.

Observation and reward are pluggable, as in sumo-rl: ``observation(state) -> np.ndarray`` and
``reward(prev_state, action, state) -> float``. Defaults: per incoming lane the §3.1 counts
(queued, and moving vehicles within 10 %, 10–33 % and beyond 33 % of the lane length from the
stop line) plus a one-hot current phase; the reward is eq. 7, R_env = queue_{t−1} − queue_t.

libsumo runs one simulation per process: a SUMO :class:`SignalEnv` owns it from construction
until :meth:`SignalEnv.close`; constructing a second while the first is open raises an error.
Every :meth:`SignalEnv.reset` restarts the simulation from scratch (unless it has not been
stepped since it started with the same seed), so an exception inside an episode never leaks
into the next one.

Reproducibility: the same scenario, seed and actions give the same episode, with one caveat
in SUMO itself. On Cologne1 with phase changes, a later libsumo start in the same process
occasionally differs from the first by about one vehicle (a bare libsumo loop, without this
class, shows it too: 1748 vs 1747 arrivals for one random action sequence), apparently an
order that depends on memory addresses. The first simulation of a fresh process is stable, so
:func:`llmtraffic.signal.evaluate` runs every SUMO episode in a fresh process
(``SignalConfig.fresh_process``); the synthetic scenario showed no such difference. CityFlow
episodes are reproducible in one process (the engine is reset and reseeded).
"""

from __future__ import annotations

import weakref
from functools import partial
from dataclasses import dataclass, field
from typing import Callable

import gymnasium as gym
import numpy as np
from gymnasium.utils import seeding

from . import rules as R
from .backends import MID, NEAR, QUEUE_SPEED, Backend, approach_of, name_phase  # noqa: F401  (re-exported)
from .metrics import EpisodeMetrics
from .scenarios import Scenario, load
from .state import IntersectionState


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
    fresh_process: bool = False
    """SUMO: run every episode's simulation in a new child process, so that its numbers do not
    depend on what ran before in this process (:mod:`llmtraffic.signal.backends.remote`).
    :func:`llmtraffic.signal.evaluate` turns it on; CityFlow ignores it (reproducible in-process)."""
    rules: str = "study"
    """``"study"`` (our definitions), ``"libsignal"`` (LibSignal's implemented control and metric
    rules) or the study's plus some of LibSignal's parts (:mod:`llmtraffic.signal.rules`)."""

    def __post_init__(self) -> None:
        R.check(self.rules)
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
    rules: str = "study"
    """The rule set that produced this state (:mod:`llmtraffic.signal.rules`)."""
    queued: dict[str, int] = field(default_factory=dict)
    """The rule set's queue per incoming lane (study: the §3.1 ``queue`` counts)."""
    detected: dict[str, int] = field(default_factory=dict)
    """Vehicles the rule set's pressure counts, per incoming and outgoing lane."""


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


# The environment -------------------------------------------------------------------------

_owner: weakref.ref | None = None
"""The SUMO SignalEnv that currently owns this process's libsumo simulation."""


def make_backend(scenario: Scenario, config: SignalConfig) -> Backend:
    """The backend for the scenario's simulator."""
    if scenario.simulator == "cityflow":
        from .backends.cityflow import CityFlowBackend

        return CityFlowBackend(config.rules)
    from .backends.sumo import SumoBackend

    if config.fresh_process:
        from .backends.remote import RemoteBackend

        return RemoteBackend(partial(SumoBackend, config.time_to_teleport, config.rules), "sumo")
    return SumoBackend(config.time_to_teleport, config.rules)


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
        self.sim: Backend = make_backend(self.scenario, self.config)
        self._claim()
        try:
            self._start(seed)
            self.phases, self.lanes, self.out_lanes = self.sim.discover()
            self._prepare_episode(seed)
            obs = self.observation(self.observe())
        except BaseException:
            self.close()
            raise
        self.action_space = gym.spaces.Discrete(len(self.phases))
        self.observation_space = gym.spaces.Box(0.0, np.inf, shape=obs.shape, dtype=np.float32)

    @property
    def simulator(self) -> str:
        """``"sumo"`` or ``"cityflow"``."""
        return self.sim.simulator

    @property
    def tls(self) -> str:
        """SUMO traffic-light id (SUMO scenarios)."""
        return self.sim.tls

    # process-wide ownership of libsumo
    def _claim(self) -> None:
        global _owner
        if self.simulator != "sumo" or self.config.fresh_process:
            return
        other = _owner() if _owner is not None else None
        if other is not None and not other._closed:
            raise RuntimeError(
                f"libsumo runs one simulation per process and a SignalEnv for scenario "
                f"{other.scenario.name!r} is open; call its close() first (or run the second "
                "environment in another process)")
        _owner = weakref.ref(self)

    def close(self) -> None:
        """Stop the simulation and release the process's libsumo slot (safe to call twice)."""
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
        self._untouched = False
        self.sim.close()
        self._running = False

    def _start(self, seed: int) -> None:
        self._stop()
        source = self.scenario.source(seed)
        if not source.exists():
            raise FileNotFoundError(f"scenario {self.scenario.name!r}: simulator input {source} does not exist")
        try:
            self.sim.start(str(source), seed)
            self._untouched = True
        except ValueError as err:
            raise ValueError(f"scenario {self.scenario.name!r} ({source}): {err}") from None
        except RuntimeError as err:
            raise RuntimeError(f"scenario {self.scenario.name!r}: {err}") from None
        self._running = True

    def _prepare_episode(self, seed: int) -> None:
        self.begin_s = self.sim.begin_s
        self.time_s = 0
        self.phase, self.phase_time_s = 0, 0.0
        self.episode_seed = seed
        self.sim.set_green(0)
        self.metrics = EpisodeMetrics(self.config.deadlock_s, partial(R.departure_stamp, self.config.rules,
                                                                      self.simulator))
        self.state = self.observe()

    # Gymnasium API
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Restart the simulation. Its seed is ``seed``, or drawn from the env's seeded generator."""
        if self._closed:
            raise RuntimeError("SignalEnv.reset() after close()")
        if seed is not None:
            self._np_random, _ = seeding.np_random(seed)
        else:
            seed = int(self._np_random.integers(2**31 - 1))
        if not (self._untouched and seed == self.episode_seed):  # else the simulation is as new
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
        self._untouched = False
        try:
            changed = action != self.phase
            if changed:
                self.sim.set_clearance(self.phase, action)
                self._advance(cfg.clearance_s)
                self.sim.set_green(action)
                self.phase = action
            self._advance(cfg.decision_s - cfg.clearance_s if changed else cfg.decision_s)
            self.phase_time_s = R.timer_after_slot(cfg.rules, self.phase_time_s, changed, cfg.clearance_s,
                                                   cfg.decision_s)
            prev = self.state
            self.state = self.observe()
            self.metrics.on_decision(self.time_s, sum(self.state.queued.values()),
                                     R.delay(cfg.rules, self._delays), R.rl_delay(cfg.rules, self._delays),
                                     self._moving)
        except BaseException:
            self._stop()  # leave nothing half-run behind; the next reset() starts clean
            raise
        truncated = self.time_s >= cfg.episode_s
        return (self.observation(self.state), float(self.reward(prev, action, self.state)),
                False, truncated, self._info())

    def _info(self) -> dict:
        return {"state": self.state, "time_s": self.time_s, "deadlock": self.metrics.deadlock}

    def _advance(self, seconds: int) -> None:
        for now, departed, arrived in self.sim.advance(seconds):
            self.metrics.on_step(now, departed, arrived)
        self.time_s += seconds

    # What the controller sees
    def observe(self) -> SignalState:
        """Current intersection state (§3.1 counts per incoming lane) without advancing time.

        Also keeps the rule set's lane delays and whether anything moves, for the metrics."""
        seen = self.sim.observe()
        self._delays, self._moving = seen.lane_delay, seen.moving
        return SignalState(float(self.time_s), self.phase, seen.lanes, self.phases,
                           phase_time_s=self.phase_time_s, outgoing=seen.outgoing, rules=self.config.rules,
                           queued=seen.queued, detected=seen.detected)

    def summary(self) -> dict:
        """Episode metrics so far (see :mod:`llmtraffic.signal.metrics`), with the rule set."""
        waiting = self.sim.waiting_delays() if self._running else []
        served = self.sim.served() if self._running else None
        return {**self.metrics.summary(self.time_s, waiting, served), "rules": self.config.rules}
