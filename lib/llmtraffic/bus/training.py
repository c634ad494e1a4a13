"""Training shared-parameter DQN holding agents on :class:`~llmtraffic.bus.env.HoldingEnv` (§3.4, §5.1).

Every control stop is an agent, and all of them act through one :class:`~llmtraffic.rl.dqn.DQNAgent`
(one Q-network, one replay): the agents are homogeneous and share one reward (§3.2, §5).
Training episodes use seeds ``1_000_000 + 10_000·cfg.seed + episode``, far from the test seeds
the notebooks use (0–999), so an agent is never tested on an episode it trained on.

**Checkpoint selection.** :func:`train_validated` plays, before every ``DQNConfig.val_every``-th
training episode from ``DQNConfig.val_from`` on and after the last, the greedy policy on
``val_seeds`` (validation episodes, disjoint from eval and design seeds) and reports the
checkpoint with the best mean validation travel time (:func:`select_checkpoint`), not the last
one: a DQN without a target network swings between regular service and heavy
bunching from one episode to the next. Every bus notebook takes its DQN budget from
:data:`BUDGETS` by profile name, so all of them train with one setting.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from ..rl.dqn import DQNAgent, DQNConfig, GreedyPolicy, train
from ..study.atomic import atomic_write
from .env import HoldingEnv
from .evaluation import MEASURES, evaluate
from .rewards import REWARDS
from .scenarios import Scenario

RewardFn = Callable[[np.ndarray, int, np.ndarray], float]

OBS_SCALE = (1000.0,) * 4 + (10.0, 10.0)
"""Observation scaling of the §3.2 state: headways in km, passengers and seconds held in tens."""

BUDGETS: dict[str, dict] = {
    "smoke": dict(hidden=(64, 64), episodes=6, eps_decay_episodes=4, updates_per_episode=40, batch_size=64, learning_starts=128,
                  target_network=True, target_update_every=40, obs_scale=OBS_SCALE),
    "quick": dict(hidden=(128, 128, 128), episodes=30, eps_decay_episodes=20, updates_per_episode=100,
                  target_network=True, target_update_every=100, val_from=15, obs_scale=OBS_SCALE),
    # DQNConfig's defaults: the authors' 5×400, 70 × 200 updates, ε over 50 episodes
    "paper": dict(val_from=38, obs_scale=OBS_SCALE),
}
"""The one DQN budget per profile shared by every bus notebook (``DQNConfig`` fields). ``quick``
is the smallest budget that lets RL-local and RL-global each lower case 1's headway SD against no
holding with a 95 % CI that excludes zero; ``paper`` is the paper's protocol (§5.1: 5×400 MLP,
70 episodes × 200 updates, ε over 50 episodes). Both select among the checkpoints from ε ≤ 0.25
on (``val_from``), validated after every episode: with every checkpoint a candidate, RL-local's
travel-time selection picked the one-episode network of an agent seed, which never holds
(docs/performance.md has the measurements)."""


def budget(profile: str, **overrides) -> dict:
    """The DQN settings of a profile's budget (a plain dict: a cache key), with ``overrides``."""
    if profile not in BUDGETS:
        raise ValueError(f"unknown DQN budget {profile!r}; known: {sorted(BUDGETS)}")
    unknown = sorted(set(overrides) - set(DQNConfig.__dataclass_fields__))
    if unknown:
        raise ValueError(f"unknown dqn setting(s) {unknown}")
    return {k: list(v) if isinstance(v, tuple) else v for k, v in {**BUDGETS[profile], **overrides}.items()}


def describe(dqn: dict) -> str:
    """A DQN setting in words for captions, e.g. "3×128 MLP, 30 episodes × 100 updates, validated every episode from episode 15"."""
    cfg = DQNConfig(**dqn)
    widths = sorted(set(cfg.hidden))
    net = f"{len(cfg.hidden)}×{widths[0]}" if len(widths) == 1 else "-".join(map(str, cfg.hidden))
    every = "every episode" if cfg.val_every == 1 else f"every {cfg.val_every} episodes"
    start = f" from episode {cfg.val_from}" if cfg.val_from > 1 else ""
    return f"{net} MLP, {cfg.episodes} episodes × {cfg.updates_per_episode} updates, validated {every}{start}"


class DQNController:
    """A trained agent as a bus :class:`~llmtraffic.bus.controllers.Controller`: greedy, mode "step"
    (asked every 5 s while a bus is held; 1 = hold 5 s more, 0 = release)."""

    mode = "step"
    uses_info = False  # it sees only the §3.2 state: simulate() skips building the info dict

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


def _unscored(current_state, action, next_state) -> float:
    """Placeholder reward while a batched reward scores the episode's transitions at its end."""
    return 0.0


def train_holding(
    scenario: Scenario,
    reward: str | RewardFn,
    cfg: DQNConfig,
    *,
    horizon_s: float | None = None,
    test_seed: int | None = 70,
    checkpoint_dir: str | os.PathLike | None = None,
    before_episode: Callable[[DQNAgent, int], dict] | None = None,
) -> tuple[DQNAgent, list[dict]]:
    """Train one shared DQN for all control stops of ``scenario`` with ``reward``.

    Returns the agent and one dict per episode: ``return`` (sum of all agents' rewards),
    ``decisions``, ``hold_share`` (fraction of hold actions), ``epsilon``, ``loss``, and — when
    ``test_seed`` is set — the greedy policy's Table 1 measures on that one test episode,
    prefixed ``test_`` (the authors test on seed 70), measured for the policy the episode was
    played with (before that episode's updates). The episode end is a time limit, not a
    terminal state (buses keep running), so transitions are stored with ``done = False`` and
    bootstrapped through, as in the authors' code. Checkpoints every episode in
    ``checkpoint_dir``; a rerun resumes from the last one. ``before_episode(agent, episode)`` is
    called before each training episode is played; the dict it returns joins that episode's row
    (validation hooks in there).
    """
    reward_fn = resolve_reward(reward)
    # A reward that runs elsewhere (generated code in its sandbox worker) is asked once per
    # episode for all transitions instead of once per transition: the gradient updates come
    # after the episode anyway, and each call is a round trip to another process.
    batched = callable(getattr(reward_fn, "batch", None))
    env = HoldingEnv(scenario, _unscored if batched else reward_fn, seed=episode_seed(cfg.seed, 0),
                     horizon_s=horizon_s, infos=False)
    agent = DQNAgent(scenario.state_dim, 2, cfg)

    def run_episode(agent: DQNAgent, episode: int) -> dict:
        before = before_episode(agent, episode) if before_episode is not None else {}
        env.reset(seed=episode_seed(cfg.seed, episode))
        played = []
        for _ in env.agent_iter():
            obs, _, terminated, truncated, _ = env.last()
            action = None if terminated or truncated else agent.act(obs, explore=True)
            env.step(action)
            played += env.pop_transitions()
        rewards = [t.reward for t in played]
        if batched and played:
            rewards = reward_fn.batch(np.array([t.state for t in played]), np.array([t.action for t in played]),
                                      np.array([t.next_state for t in played])).tolist()
        for t, r in zip(played, rewards):
            agent.remember(t.state, t.action, r, t.next_state, False)
        total, decisions, holds = float(sum(rewards)), len(played), sum(t.action for t in played)
        stats = {"return": total, "decisions": decisions, "hold_share": holds / max(decisions, 1), **before}
        if test_seed is not None:
            test = evaluate(scenario, DQNController(agent.greedy_policy()), test_seed, horizon_s)
            stats |= {f"test_{k}": test[k] for k in MEASURES}
        return stats

    history = train(agent, run_episode, cfg, checkpoint_dir=checkpoint_dir)
    return agent, history


# ---------------------------------------------------------------- validation and checkpoint selection


def check_disjoint(val_seeds: list[int], **others: list[int]) -> None:
    """Raise when validation episodes overlap the eval or design episodes (``others`` by name)."""
    if not val_seeds:
        raise ValueError("val_seeds is empty: checkpoint selection needs validation episodes")
    for name, seeds in others.items():
        shared = sorted(set(val_seeds) & set(seeds))
        if shared:
            raise ValueError(f"val_seeds overlap {name} at {shared}: validation episodes must be disjoint")


def select_checkpoint(curve: list[dict], key: str = "val_travel_time_s") -> int:
    """Index of the validation-best checkpoint in ``curve`` (lowest ``key``; the earliest on ties;
    rows without a finite value are skipped)."""
    values = [row.get(key, math.nan) for row in curve]
    finite = [i for i, v in enumerate(values) if v is not None and math.isfinite(v)]
    if not finite:
        raise ValueError(f"select_checkpoint: no checkpoint has a finite {key!r}")
    return min(finite, key=lambda i: values[i])


@dataclass
class TrainedAgent:
    """A trained agent as reported: the validation-best checkpoint and how training went."""

    policy: GreedyPolicy
    """Greedy policy of the selected checkpoint."""
    selected: int
    """Training episodes whose updates the selected checkpoint has seen."""
    curve: list[dict]
    """One row per checkpoint that had any update: ``episode`` (episodes trained so far) and the
    greedy validation measures ``val_<measure>`` (mean over ``val_seeds``)."""
    history: list[dict] = field(default_factory=list)
    """Per training episode: return, decisions, hold share, ε, loss (see :func:`train_holding`)."""
    select_by: str = "val_travel_time_s"

    def controller(self, name: str = "DQN") -> DQNController:
        return DQNController(self.policy, name)


def validate(scenario: Scenario, policy: GreedyPolicy, val_seeds: list[int], horizon_s: float | None) -> dict:
    """Mean §5.1 measures of the greedy ``policy`` over ``val_seeds``, keys prefixed ``val_``."""
    runs = [evaluate(scenario, DQNController(policy), s, horizon_s) for s in val_seeds]
    return {f"val_{k}": float(np.mean([r[k] for r in runs])) for k in MEASURES}


BEST = "best.pt"


def train_validated(
    scenario: Scenario,
    reward: str | RewardFn,
    cfg: DQNConfig,
    val_seeds: list[int],
    *,
    horizon_s: float | None = None,
    val_horizon_s: float | None = None,
    select_by: str = "val_travel_time_s",
    checkpoint_dir: str | os.PathLike | None = None,
) -> TrainedAgent:
    """:func:`train_holding`, validating the greedy policy on ``val_seeds`` before every
    ``cfg.val_every``-th episode and after the last, and keeping the checkpoint with the lowest
    ``select_by`` (among checkpoints that saw at least one gradient update). ``val_horizon_s``
    defaults to the test horizon of the scenario."""
    if select_by.removeprefix("val_") not in MEASURES:
        raise ValueError(f"select_by must be val_<measure> with a measure of {sorted(MEASURES)}, got {select_by!r}")
    best_file = Path(checkpoint_dir) / BEST if checkpoint_dir is not None else None
    best: dict = {"value": math.inf, "episode": -1, "policy": None}
    if best_file is not None and best_file.exists():
        saved = torch.load(best_file, weights_only=False)  # our own file (a network and two numbers)
        best.update(saved)

    def check(agent: DQNAgent, episode: int) -> dict:
        if agent.updates == 0 or episode < cfg.val_from or (episode % cfg.val_every and episode != cfg.episodes):
            return {}
        row = validate(scenario, agent.greedy_policy(), val_seeds, val_horizon_s)
        if row[select_by] < best["value"]:
            best.update(value=row[select_by], episode=episode, policy=agent.greedy_policy())
            if best_file is not None:
                atomic_write(best_file, lambda fh: torch.save(best, fh))
        return row

    agent, history = train_holding(scenario, reward, cfg, horizon_s=horizon_s, test_seed=None,
                                   checkpoint_dir=checkpoint_dir, before_episode=check)
    final = check(agent, cfg.episodes)
    if best["policy"] is None:
        raise ValueError("train_validated: no gradient update happened (replay never reached learning_starts)")
    curve = [{"episode": h["episode"], **{k: v for k, v in h.items() if k.startswith("val_")}}
             for h in history if select_by in h]
    curve.append({"episode": cfg.episodes, **final})
    chosen = curve[select_checkpoint(curve, select_by)]["episode"]
    if chosen != best["episode"]:  # the kept network must be the one the curve calls best
        raise RuntimeError(f"train_validated kept checkpoint {best['episode']}, the curve's best is {chosen}")
    return TrainedAgent(best["policy"], chosen, curve, history, select_by)
