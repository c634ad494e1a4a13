"""Training shared DQN holding agents on case 1: bookkeeping, controller, resume, learning."""

import numpy as np
import pytest

from llmtraffic.bus import Controller, scenarios, simulate
from llmtraffic.bus.evaluation import evaluate
from llmtraffic.bus.training import DQNController, episode_seed, resolve_reward, train_holding
from llmtraffic.rl.dqn import DQNConfig

SCALE = (1000.0,) * 4 + (10.0, 10.0)


def small(**kw) -> DQNConfig:
    base = dict(hidden=(32, 32), episodes=3, eps_decay_episodes=2, updates_per_episode=10,
                batch_size=32, learning_starts=64, obs_scale=SCALE, seed=0)
    return DQNConfig(**{**base, **kw})


@pytest.fixture(scope="module")
def case1():
    return scenarios.case1()


def test_history_counts_every_stops_transitions_in_one_replay(case1):
    agent, history = train_holding(case1, "rl_global", small(), horizon_s=1800, test_seed=3)
    assert [h["episode"] for h in history] == [0, 1, 2]
    assert [h["epsilon"] for h in history] == [1.0, 0.5, 0.02]
    assert agent.replay.size == sum(h["decisions"] for h in history)
    assert all(0 <= h["hold_share"] <= 1 and np.isfinite(h["test_headway_sd_s"]) for h in history)
    # the greedy controller is a step-mode Controller that simulate() accepts
    ctrl = DQNController(agent.greedy_policy())
    assert isinstance(ctrl, Controller) and ctrl.mode == "step"
    res = simulate(case1, ctrl, seed=3, horizon_s=1800)
    assert evaluate(case1, ctrl, 3, 1800)["headway_sd_s"] == res.metrics["headway_sd_s"]  # greedy: deterministic


def test_resumed_training_equals_uninterrupted(case1, tmp_path):
    cfg = small(episodes=4)
    straight, h1 = train_holding(case1, "rl_local", cfg, horizon_s=1200, test_seed=None)
    train_holding(case1, "rl_local", small(episodes=2), horizon_s=1200, test_seed=None, checkpoint_dir=tmp_path)
    resumed, h2 = train_holding(case1, "rl_local", cfg, horizon_s=1200, test_seed=None, checkpoint_dir=tmp_path)
    assert [h["return"] for h in h1] == [h["return"] for h in h2]
    obs = np.array([[800, 2500, 0, 0, 20, 10], [2000, 900, 0, 0, 5, 0]], float)
    np.testing.assert_array_equal(straight.q_values(obs), resumed.q_values(obs))


def test_training_seeds_stay_clear_of_test_seeds_and_unknown_reward_is_named():
    assert min(episode_seed(s, e) for s in range(30) for e in range(1000)) >= 1_000_000
    with pytest.raises(ValueError, match="unknown reward 'rl_globl'"):
        resolve_reward("rl_globl")


def test_rl_global_agent_learns_to_lower_headway_sd(case1):
    """A short training run must beat no holding on headway SD on held-out seeds."""
    cfg = DQNConfig(hidden=(64, 64), episodes=14, eps_decay_episodes=10, updates_per_episode=60,
                    target_network=True, target_update_every=60, obs_scale=SCALE, seed=0)
    agent, _ = train_holding(case1, "rl_global", cfg, horizon_s=7200, test_seed=None)
    ctrl = DQNController(agent.greedy_policy())
    seeds = range(5)
    trained = np.mean([evaluate(case1, ctrl, s, 7200)["headway_sd_s"] for s in seeds])
    none = np.mean([evaluate(case1, None, s, 7200)["headway_sd_s"] for s in seeds])
    print(f"headway SD trained {trained:.1f} s vs no holding {none:.1f} s")
    assert trained < 0.8 * none
