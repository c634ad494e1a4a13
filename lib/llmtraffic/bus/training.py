"""Training shared-parameter DQN holding agents on :class:`~llmtraffic.bus.env.HoldingEnv` (§3.4, §5.1).

Every control stop is an agent, and all of them act through one :class:`~llmtraffic.rl.dqn.DQNAgent`
(one Q-network, one replay): the agents are homogeneous and share one reward (§3.2, §5).
Training episodes use seeds ``1_000_000 + 10_000·cfg.seed + episode``, far from the test seeds
the notebooks use (0–999), so an agent is never tested on an episode it trained on.
"""

from __future__ import annotations

import os
from typing import Callable

import numpy as np

from ..rl.dqn import DQNAgent, DQNConfig, GreedyPolicy, train
from .env import HoldingEnv
from .evaluation import MEASURES, evaluate
from .rewards import REWARDS
from .scenarios import Scenario

RewardFn = Callable[[np.ndarray, int, np.ndarray], float]


class DQNController:
    """A trained agent as a bus :class:`~llmtraffic.bus.controllers.Controller`: greedy, mode "step"
    (asked every 5 s while a bus is held; 1 = hold 5 s more, 0 = release)."""

    mode = "step"

    def __init__(self, policy: GreedyPolicy, name: str = "DQN"):
        self.policy, self.name = policy, name

    def act(self, obs: np.ndarray, info: dict) -> float:
        return float(self.policy(obs))


def episode_seed(agent_seed: int, episode: int) -> int:
    """Seed of training episode ``episode`` of the agent seeded ``agent_seed`` (see module doc)."""
    return 1_000_000 + 10_000 * agent_seed + episode


def resolve_reward(reward: str | RewardFn) -> RewardFn:
    """A reward function from its name in :data:`~llmtraffic.bus.rewards.REWARDS`, or the function itself."""
    if callable(reward):
        return reward
    if reward not in REWARDS:
        raise ValueError(f"unknown reward {reward!r}; known: {sorted(REWARDS)}")
    return REWARDS[reward]


def train_holding(
    scenario: Scenario,
    reward: str | RewardFn,
    cfg: DQNConfig,
    *,
    horizon_s: float | None = None,
    test_seed: int | None = 70,
    checkpoint_dir: str | os.PathLike | None = None,
) -> tuple[DQNAgent, list[dict]]:
    """Train one shared DQN for all control stops of ``scenario`` with ``reward``.

    Returns the agent and one dict per episode: ``return`` (sum of all agents' rewards),
    ``decisions``, ``hold_share`` (fraction of hold actions), ``epsilon``, ``loss``, and — when
    ``test_seed`` is set — the greedy policy's Table 1 measures on that one test episode,
    prefixed ``test_`` (the authors test on seed 70), measured for the policy the episode was
    played with (before that episode's updates). The episode end is a time limit, not a
    terminal state (buses keep running), so transitions are stored with ``done = False`` and
    bootstrapped through, as in the authors' code. Checkpoints every episode in
    ``checkpoint_dir``; a rerun resumes from the last one.
    """
    reward_fn = resolve_reward(reward)
    env = HoldingEnv(scenario, reward_fn, seed=episode_seed(cfg.seed, 0), horizon_s=horizon_s)
    agent = DQNAgent(scenario.state_dim, 2, cfg)

    def run_episode(agent: DQNAgent, episode: int) -> dict:
        env.reset(seed=episode_seed(cfg.seed, episode))
        total, decisions, holds = 0.0, 0, 0
        for _ in env.agent_iter():
            obs, _, terminated, truncated, _ = env.last()
            action = None if terminated or truncated else agent.act(obs, explore=True)
            env.step(action)
            for t in env.pop_transitions():
                agent.remember(t.state, t.action, t.reward, t.next_state, False)
                total, decisions, holds = total + t.reward, decisions + 1, holds + t.action
        stats = {"return": total, "decisions": decisions, "hold_share": holds / max(decisions, 1)}
        if test_seed is not None:
            test = evaluate(scenario, DQNController(agent.greedy_policy()), test_seed, horizon_s)
            stats |= {f"test_{k}": test[k] for k in MEASURES}
        return stats

    history = train(agent, run_episode, cfg, checkpoint_dir=checkpoint_dir)
    return agent, history
