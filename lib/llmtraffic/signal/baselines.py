"""Classic signal controllers of OracleTSC Table 1, configured as LibSignal configures them.

Every controller — these, the deep-RL ones (IDQN, PressLight) and the LLM policy —
implements one interface: ``act(state) -> int`` returns the index of the green phase for the
next decision slot; ``reset(seed)`` (optional) is called before each episode.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Protocol, runtime_checkable

import numpy as np

from llmtraffic.rl.dqn import DQNAgent, DQNConfig
from llmtraffic.rl.dqn import train as dqn_train

from . import rules
from .env import SignalConfig, SignalEnv, lane_counts_phase, negative_queue
from .scenarios import Scenario
from .state import IntersectionState, Phase


@runtime_checkable
class Controller(Protocol):
    """What :func:`llmtraffic.signal.evaluate` drives."""

    def act(self, state: IntersectionState) -> int: ...


def lane_vehicles(state: IntersectionState, lane: str) -> int:
    """All vehicles on an incoming lane (queued and moving), from the §3.1 counts."""
    c = state.lanes[lane]
    return c.queue + c.near + c.mid + c.far


def phase_pressure(state: IntersectionState, phase: Phase) -> int:
    """Max pressure (Varaiya 2013): Σ over the phase's movements of (vehicles on the in lane −
    vehicles on the out lane), out-lane counts from ``state.outgoing``
    (:class:`llmtraffic.signal.env.SignalState`).

    Under LibSignal's pressure rule (``state.rules``) it is LibSignal's pressure: its priority-green
    links only (:attr:`Phase.major`) and the vehicles it detects (``state.detected``: within 200 m
    of their next light in SUMO, so none on an outgoing lane; whole lanes in CityFlow).
    """
    outgoing = getattr(state, "outgoing", None)
    if outgoing is None:
        raise TypeError("pressure needs a SignalState (with outgoing lane counts), got "
                        f"{type(state).__name__}")
    if rules.has(state.rules, "pressure"):
        return rules.pressure(state.detected, state.detected, ((m.in_lane, m.out_lane) for m in phase.major))
    counts = {lane: lane_vehicles(state, lane) for lane in state.lanes}
    return rules.pressure(counts, outgoing, ((m.in_lane, m.out_lane) for m in phase.movements))


class FixedTime:
    """Cycle through the green phases, ``t_fixed`` seconds each (the clearance included)."""

    def __init__(self, t_fixed: int = 30):
        if t_fixed <= 0:
            raise ValueError(f"FixedTime.t_fixed must be positive, got {t_fixed}")
        self.t_fixed = t_fixed

    def act(self, state: IntersectionState) -> int:
        return int(state.time_s // self.t_fixed) % len(state.phases)

    def __repr__(self) -> str:
        return f"FixedTime(t_fixed={self.t_fixed})"


class MaxPressure:
    """The phase of largest pressure, once the current one has been green ``t_min`` seconds."""

    def __init__(self, t_min: int = 10):
        self.t_min = t_min

    def act(self, state: IntersectionState) -> int:
        if getattr(state, "phase_time_s", self.t_min) < self.t_min:
            return state.phase
        pressures = [phase_pressure(state, p) for p in state.phases]
        return max(range(len(pressures)), key=pressures.__getitem__)  # first of equal maxima

    def __repr__(self) -> str:
        return f"MaxPressure(t_min={self.t_min})"


class SOTL:
    """Self-organising traffic lights (Cools et al. 2013) in LibSignal's form.

    After ``t_min`` green seconds, move to the next phase in cycle order when at most
    ``min_green_vehicle`` vehicles wait on the green lanes and more than ``max_red_vehicle``
    wait on the others. Under LibSignal's pressure rule (``state.rules``), :func:`sotl_counts` and
    :func:`sotl_switches` as its ``SOTLAgent`` counts and decides.
    """

    def __init__(self, t_min: int = 5, min_green_vehicle: int = 3, max_red_vehicle: int = 6):
        self.t_min, self.min_green_vehicle, self.max_red_vehicle = t_min, min_green_vehicle, max_red_vehicle

    def act(self, state: IntersectionState) -> int:
        if getattr(state, "phase_time_s", self.t_min) < self.t_min:
            return state.phase
        libsignal = rules.has(getattr(state, "rules", "study"), "pressure")
        if libsignal:
            green, red = sotl_counts(state)
        else:
            green_lanes = {m.in_lane for m in state.phases[state.phase].movements}
            green = sum(c.queue for lane, c in state.lanes.items() if lane in green_lanes)
            red = state.total_queue - green
        if sotl_switches(green, red, self.min_green_vehicle, self.max_red_vehicle, libsignal):
            return (state.phase + 1) % len(state.phases)
        return state.phase

    def __repr__(self) -> str:
        return (f"SOTL(t_min={self.t_min}, min_green_vehicle={self.min_green_vehicle}, "
                f"max_red_vehicle={self.max_red_vehicle})")


def sotl_counts(state: IntersectionState) -> tuple[int, int]:
    """LibSignal's SOTL counts (``SOTLAgent.get_action``): waiting vehicles (its queue,
    ``state.queued``) on the current phase's start lanes (of its priority-green links,
    :attr:`Phase.major`), and on every other lane that starts such a link in some phase."""
    def lanes(phase: Phase) -> set[str]:
        return {m.in_lane for m in phase.major}

    green_lanes = lanes(state.phases[state.phase])
    start_lanes = set().union(*(lanes(p) for p in state.phases))
    green = sum(state.queued[lane] for lane in green_lanes)
    return green, sum(state.queued[lane] for lane in start_lanes) - green


def sotl_switches(green: int, red: int, min_green_vehicle: int, max_red_vehicle: int, libsignal: bool) -> bool:
    """SOTL's switching test: few waiting on green and many on red; LibSignal's agent also
    switches when none waits on green and any on red."""
    if green <= min_green_vehicle and red > max_red_vehicle:
        return True
    return libsignal and green == 0 and red > 0


# Deep RL: IDQN and PressLight on the shared DQN core -------------------------------------

def pressure_observation(state: IntersectionState) -> np.ndarray:
    """PressLight state (Wei et al. 2019): §3.1 segment counts per incoming lane, vehicles per
    outgoing lane, one-hot phase."""
    out = np.asarray(list(state.outgoing.values()), np.float32)
    base = lane_counts_phase(state)
    n = len(state.phases)
    return np.concatenate([base[:-n], out, base[-n:]])


def pressure_reward(prev: IntersectionState, action: int, state: IntersectionState) -> float:
    """PressLight reward: −|vehicles on incoming lanes − vehicles on outgoing lanes|."""
    inflow = sum(lane_vehicles(state, lane) for lane in state.lanes)
    return -abs(float(inflow - sum(state.outgoing.values())))


@dataclass
class DeepRLConfig:
    """Training of IDQN / PressLight on one intersection (LibSignal-like settings)."""

    dqn: DQNConfig = field(default_factory=lambda: DQNConfig(
        hidden=(64, 64), lr=1e-3, gamma=0.9, batch_size=64, updates_per_episode=360,
        buffer_size=20_000, learning_starts=360, eps_start=1.0, eps_end=0.05,
        eps_decay_episodes=8, eps_final=0.05, episodes=12, target_network=True,
        target_update_every=100, huber=True))
    """The shared DQN core's hyperparameters (one decision = one 10-s slot)."""
    episode_s: int = 3600
    """Simulated seconds per training episode."""
    reward_scale: float = 0.02
    """Rewards are multiplied by this before they are stored, keeping Q-values of order 10
    (Hangzhou's queues reach ~100 vehicles; with 0.1 its agents diverged in our runs)."""
    count_scale: float = 10.0
    """Vehicle counts in the observation are divided by this (the one-hot phase is not)."""
    seed: int = 0
    """Training episode ``k`` runs SUMO with seed ``seed * 1000 + k``."""


class IDQN:
    """Independent DQN (LibSignal): observation = lane counts + phase, reward = −queue."""

    observation = staticmethod(lane_counts_phase)
    reward = staticmethod(negative_queue)

    def __init__(self, agent: DQNAgent):
        self.agent = agent

    def act(self, state: IntersectionState) -> int:
        return self.agent.act(self.observation(state), explore=False)

    def __repr__(self) -> str:
        return type(self).__name__


class PressLight(IDQN):
    """PressLight (Wei et al. 2019): pressure observation and reward on the same DQN core."""

    observation = staticmethod(pressure_observation)
    reward = staticmethod(pressure_reward)


def train(kind: type[IDQN], scenario: Scenario | str, cfg: DeepRLConfig | None = None,
          checkpoint_dir: str | None = None) -> tuple[IDQN, list[dict]]:
    """Train an :class:`IDQN` or :class:`PressLight` controller; returns it and the per-episode history."""
    cfg = cfg or DeepRLConfig()
    # each SUMO episode in a fresh process: a later libsumo start in one process is not
    # bit-reproducible on Cologne1, so a training would depend on what ran before it
    env_cfg = SignalConfig(episode_s=cfg.episode_s, fresh_process=True)
    with SignalEnv(scenario, env_cfg, observation=kind.observation, reward=kind.reward, seed=cfg.seed) as env:
        n = env.action_space.n
        dim = env.observation_space.shape[0]
        scale = (cfg.count_scale,) * (dim - n) + (1.0,) * n
        agent = DQNAgent(dim, n, replace(cfg.dqn, obs_scale=scale))

        def episode(agent: DQNAgent, k: int) -> dict:
            obs, _ = env.reset(seed=cfg.seed * 1000 + k)
            total, done = 0.0, False
            while not done:
                action = agent.act(obs, explore=True)
                nxt, reward, terminated, truncated, _ = env.step(action)
                agent.remember(obs, action, reward * cfg.reward_scale, nxt, terminated)
                obs, total, done = nxt, total + reward, terminated or truncated
            summary = env.summary()
            return {"return": total, **{k: summary[k] for k in ("queue", "travel_time_s", "throughput")}}

        history = dqn_train(agent, episode, agent.cfg, checkpoint_dir)
    return kind(agent), history
