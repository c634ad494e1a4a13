"""Multi-agent bus-holding environment with the PettingZoo AEC API (bus paper §3.1–3.2).

Agents are the control stops, named ``"stop_<node>"`` (``<node>`` indexes
``scenario.stop_names``; a stop shared by two lines is one agent). The agent whose stop holds a
bus that needs a decision acts: 0 = release, 1 = hold 5 s more (release is forced at 90 s).
The observation is the §3.2 state of that bus (``scenario.state_dim`` 6, or 3 for case 1's
state of Appendix A.5).

Rewards follow the paper's generated code: ``reward_fn(current_state, action, next_state)``
with ``next_state`` the state of the same bus at the same stop 5 s after the decision (after a
release the bus has moved on and its holding time is back to 0). Each completed decision is a
:class:`Transition`, available from :meth:`HoldingEnv.pop_transitions` for replay-based
learners (the DQN of §3.4); in the AEC view its reward accumulates to the agent, which sees it
through ``last()`` at its next turn. Decisions still open at the horizon complete there with
``done = True``.

``info`` is the simulator's decision context (``Episode.info``), except that a headway that does
not exist (no bus ahead or behind) is `MISSING`: a NaN, so controllers test it with
``math.isnan`` as everywhere else, that compares equal to itself, so that two runs with the same
seed give equal infos (PettingZoo's ``seed_test``; a plain NaN is never equal to anything).

Every reward value must be finite in float32 and within ±``rl.checks.REWARD_BOUND``; a reward
that raises or breaks that bound raises `RewardFunctionError` naming the agent and the state.
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple

import numpy as np
from gymnasium import spaces
from pettingzoo import AECEnv

from ..rl.checks import RewardFunctionError, check_reward  # noqa: F401  (raised here; importable from here)
from .scenarios import Scenario
from .sim import Decision, EpisodeResult, Episode

RewardFn = Callable[[np.ndarray, int, np.ndarray], float]


class Missing(float):
    """NaN standing for a quantity that does not exist; equal to any NaN (see the module docstring)."""

    def __new__(cls, *_):
        return super().__new__(cls, math.nan)

    def __eq__(self, other) -> bool:
        return isinstance(other, float) and math.isnan(other)

    def __ne__(self, other) -> bool:
        return not self == other

    __hash__ = float.__hash__

    def __reduce__(self):
        return Missing, ()


MISSING = Missing()


class Transition(NamedTuple):
    """One decision and its outcome 5 s later."""

    agent: str
    state: np.ndarray
    action: int
    reward: float
    next_state: np.ndarray
    done: bool


def agent_name(node: int) -> str:
    """Name of the agent at a physical stop."""
    return f"stop_{node}"


class HoldingEnv(AECEnv):
    """Bus holding as an AEC game; see the module docstring.

    ``seed`` is the first episode's seed; ``reset(seed=s)`` runs episode ``s`` and reseeds the
    stream from which later ``reset()`` calls without a seed draw theirs (as in Gymnasium).
    ``infos=False`` leaves every agent's info dict empty (a learner that reads only observations,
    like the DQN trainer, saves about a third of each decision's cost)."""

    metadata = {"name": "bus_holding_v0", "is_parallelizable": False}

    def __init__(self, scenario: Scenario, reward_fn: RewardFn, seed: int = 0, horizon_s: float | None = None,
                 infos: bool = True):
        super().__init__()
        self.scenario, self.reward_fn, self.horizon_s = scenario, reward_fn, horizon_s
        self._with_infos = infos
        self.possible_agents = [agent_name(v) for v in scenario.control_stops]
        self._obs_space = spaces.Box(0.0, np.inf, shape=(scenario.state_dim,), dtype=np.float64)
        self._act_space = spaces.Discrete(2)
        self._next_seed: int | None = int(seed)
        self._seeds = np.random.default_rng(seed)
        self.episode: Episode | None = None

    def observation_space(self, agent: str) -> spaces.Box:
        return self._obs_space

    def action_space(self, agent: str) -> spaces.Discrete:
        return self._act_space

    # ------------------------------------------------------------------ AEC API

    def reset(self, seed: int | None = None, options: dict | None = None) -> None:
        if seed is not None:
            self._seeds = np.random.default_rng(seed)
            episode_seed = int(seed)
        elif self._next_seed is not None:
            episode_seed = self._next_seed
        else:
            episode_seed = int(self._seeds.integers(2**31))
        self._next_seed = None
        self.episode = Episode(self.scenario, episode_seed, self.horizon_s, mode="step")
        self.agents = list(self.possible_agents)
        self.rewards = {a: 0.0 for a in self.agents}
        self._cumulative_rewards = {a: 0.0 for a in self.agents}
        self.terminations = {a: False for a in self.agents}
        self.truncations = {a: False for a in self.agents}
        self.infos = {a: {} for a in self.agents}
        self._obs = {a: np.zeros(self.scenario.state_dim) for a in self.agents}
        self._transitions: list[Transition] = []
        self._open: dict[int, tuple[str, np.ndarray, int, Decision]] = {}
        self._opened = 0
        self._decision: Decision | None = None
        self._advance()

    def observe(self, agent: str) -> np.ndarray:
        return self._obs[agent].copy()

    def step(self, action: int | None) -> None:
        if self.episode is None:
            raise RuntimeError("HoldingEnv: call reset() before step()")
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            self._was_dead_step(action)
            return
        if action not in (0, 1):
            raise ValueError(f"HoldingEnv: action of agent {agent!r} must be 0 (release) or 1 (hold), got {action!r}")
        action = int(action)
        self._cumulative_rewards[agent] = 0.0
        self._clear_rewards()
        decision = self._decision
        key, self._opened = self._opened, self._opened + 1
        self._open[key] = (agent, self._obs[agent].copy(), action, decision)
        self.episode.after(self.scenario.hold_step_s, lambda: self._close(key, done=False))
        self.episode.decide(decision, action)
        self._advance()

    # ------------------------------------------------------------------ transitions

    def pop_transitions(self) -> list[Transition]:
        """Transitions completed since the last call (in completion order)."""
        out, self._transitions = self._transitions, []
        return out

    def result(self) -> EpisodeResult:
        """Metrics and trajectories of the episode (so far, if it has not finished)."""
        if self.episode is None:
            raise RuntimeError("HoldingEnv: call reset() before result()")
        return self.episode.result()

    def _advance(self) -> None:
        decision = self.episode.next_decision()
        if decision is None:
            self._finish()
            return
        agent = agent_name(decision.node)
        self._decision = decision
        self.agent_selection = agent
        self._obs[agent] = self.episode.state(decision.bus, decision.node)
        if self._with_infos:
            self.infos[agent] = {k: MISSING if isinstance(v, float) and math.isnan(v) else v
                                 for k, v in self.episode.info(decision).items()}

    def _finish(self) -> None:
        for key in list(self._open):
            self._close(key, done=True)
        for a in self.agents:
            self.truncations[a] = True
        self._decision = None
        self.agent_selection = self.agents[0] if self.agents else None

    def _close(self, key: int, done: bool) -> None:
        agent, state, action, decision = self._open.pop(key)
        next_state = self.episode.state(decision.bus, decision.node)
        reward = self._reward(agent, state, action, next_state)
        self._transitions.append(Transition(agent, state, action, reward, next_state, done))
        self.rewards[agent] += reward
        self._cumulative_rewards[agent] += reward

    def _reward(self, agent: str, state: np.ndarray, action: int, next_state: np.ndarray) -> float:
        def where() -> str:
            return f"agent {agent!r}, current_state={state.tolist()}, action={action}, next_state={next_state.tolist()}"

        try:
            value = self.reward_fn(state.copy(), action, next_state.copy())
        except Exception as err:
            raise RewardFunctionError(f"reward function failed for {where()}: {type(err).__name__}: {err}") from err
        return check_reward(value, where)
