"""Training shared DQN holding agents on case 1: bookkeeping, controller, resume, learning."""

import numpy as np
import pytest

from llmtraffic.bus import Controller, scenarios, simulate
from llmtraffic.bus.evaluation import evaluate
from llmtraffic.bus.training import (
    BUDGETS, DQNController, budget, check_disjoint, episode_seed, resolve_reward, select_checkpoint, train_holding,
    train_validated, validate,
)
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


def test_select_checkpoint_picks_the_validation_best_episode_of_a_constructed_history():
    curve = [{"episode": 1, "val_travel_time_s": 1500.0}, {"episode": 2, "val_travel_time_s": float("nan")},
             {"episode": 3, "val_travel_time_s": 1410.0}, {"episode": 4, "val_travel_time_s": 1430.0},
             {"episode": 5, "val_travel_time_s": 1410.0}]  # a tie: the earlier checkpoint wins
    assert select_checkpoint(curve) == 2
    assert select_checkpoint(curve, "val_travel_time_s") == 2
    with pytest.raises(ValueError, match="no checkpoint has a finite 'val_headway_sd_s'"):
        select_checkpoint(curve, "val_headway_sd_s")


def test_validation_seeds_must_be_disjoint_from_eval_and_design_seeds():
    check_disjoint([200, 201], eval_seeds=list(range(30)), design_seeds=[100, 101])
    with pytest.raises(ValueError, match=r"val_seeds overlap design_seeds at \[101\]"):
        check_disjoint([101, 200], eval_seeds=list(range(30)), design_seeds=[100, 101])
    with pytest.raises(ValueError, match="val_seeds is empty"):
        check_disjoint([], eval_seeds=[0])


def test_train_validated_reports_the_validation_best_checkpoint_not_the_last(case1):
    cfg = small(episodes=5, eps_decay_episodes=3)
    trained = train_validated(case1, "rl_global", cfg, [200, 201], horizon_s=1800, val_horizon_s=1800)
    episodes = [r["episode"] for r in trained.curve]  # checkpoints after any update, then the final one
    assert episodes == list(range(episodes[0], 6)) and episodes[0] >= 1 and len(episodes) >= 3
    values = [r["val_travel_time_s"] for r in trained.curve]
    assert trained.selected == trained.curve[int(np.argmin(values))]["episode"]
    # the returned policy is that checkpoint: validating it again gives the curve's minimum
    again = validate(case1, trained.policy, [200, 201], 1800)
    assert again["val_travel_time_s"] == min(values)
    with pytest.raises(ValueError, match="select_by must be val_<measure>"):
        train_validated(case1, "rl_global", cfg, [200], select_by="return")


class BatchedRlGlobal:
    """RL-global behind the interface of a sandboxed reward: a call per transition, or a batch."""

    def __init__(self):
        self.calls, self.batches = 0, []

    def __call__(self, s, a, s2) -> float:
        self.calls += 1
        return resolve_reward("rl_global")(s, a, s2)

    def batch(self, states, actions, next_states) -> np.ndarray:
        self.batches.append(len(states))
        return np.array([resolve_reward("rl_global")(s, int(a), s2) for s, a, s2 in zip(states, actions, next_states)])


def test_a_batched_reward_scores_each_episode_once_and_trains_the_same_agent(case1):
    batched = BatchedRlGlobal()
    agent, history = train_holding(case1, batched, small(), horizon_s=1800, test_seed=None)
    plain, plain_history = train_holding(case1, "rl_global", small(), horizon_s=1800, test_seed=None)
    assert batched.calls == 0 and batched.batches == [h["decisions"] for h in history]
    assert [h["return"] for h in history] == [h["return"] for h in plain_history]
    for a, b in zip(agent.net.parameters(), plain.net.parameters()):
        assert np.array_equal(a.detach().numpy(), b.detach().numpy())


def test_val_every_validates_every_kth_checkpoint_and_always_the_last(case1):
    cfg = small(episodes=5, eps_decay_episodes=3, val_every=2)
    trained = train_validated(case1, "rl_global", cfg, [200], horizon_s=1800, val_horizon_s=1800)
    first = trained.curve[0]["episode"]
    assert [r["episode"] for r in trained.curve] == [e for e in range(first, 5) if e % 2 == 0] + [5]
    assert trained.selected in [r["episode"] for r in trained.curve]
    with pytest.raises(ValueError, match="val_every must be >= 1"):
        small(val_every=0)


def test_val_from_keeps_exploration_checkpoints_out_of_the_selection(case1):
    cfg = small(episodes=5, eps_decay_episodes=3, val_from=3)
    trained = train_validated(case1, "rl_global", cfg, [200], horizon_s=1800, val_horizon_s=1800)
    assert [r["episode"] for r in trained.curve] == [3, 4, 5]
    assert trained.selected >= 3
    with pytest.raises(ValueError, match="val_from \\(6\\) must be <= episodes \\(5\\)"):
        small(episodes=5, val_from=6)


def test_budgets_are_shared_by_name_and_unknown_ones_are_named():
    quick = budget("quick")
    assert DQNConfig(**quick).episodes == BUDGETS["quick"]["episodes"]
    assert DQNConfig(**budget("paper")).hidden == (400,) * 5
    assert budget("quick", episodes=3)["episodes"] == 3
    with pytest.raises(ValueError, match="unknown DQN budget 'fast'"):
        budget("fast")


def test_a_resumed_validated_run_keeps_the_best_checkpoint_of_the_first_part(case1, tmp_path):
    cfg = small(episodes=4, eps_decay_episodes=2)
    straight = train_validated(case1, "rl_global", cfg, [200], horizon_s=1800, val_horizon_s=1800)
    train_validated(case1, "rl_global", small(episodes=2, eps_decay_episodes=2), [200], horizon_s=1800,
                    val_horizon_s=1800, checkpoint_dir=tmp_path)
    resumed = train_validated(case1, "rl_global", cfg, [200], horizon_s=1800, val_horizon_s=1800, checkpoint_dir=tmp_path)
    assert resumed.selected == straight.selected
    assert [r["val_travel_time_s"] for r in resumed.curve] == [r["val_travel_time_s"] for r in straight.curve]
