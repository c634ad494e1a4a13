"""IDQN and PressLight on the shared DQN core: hand-computed pressure features, learning on Cologne1."""

from dataclasses import replace

import pytest
import torch

from llmtraffic.rl.dqn import DQNAgent
from llmtraffic.signal import FixedTime, evaluate
from llmtraffic.signal.baselines import (IDQN, DeepRLConfig, PressLight, pressure_observation,
                                         pressure_reward, train)
from llmtraffic.signal.env import SignalState
from llmtraffic.signal.state import LaneCounts, Movement, Phase

PHASES = (
    Phase(0, "NTST", "n-s", (Movement("a", "x", "N", "through"),), "Gr"),
    Phase(1, "ETWT", "e-w", (Movement("b", "y", "E", "through"),), "rG"),
)
STATE = SignalState(30.0, 1, {"a": LaneCounts(3, 1, 0, 2), "b": LaneCounts(0, 1, 1, 0)}, PHASES,
                    phase_time_s=10.0, outgoing={"x": 4, "y": 1})


def test_presslight_observation_and_reward_by_hand():
    assert pressure_observation(STATE).tolist() == [3, 1, 0, 2, 0, 1, 1, 0, 4, 1, 0, 1]
    assert pressure_reward(STATE, 1, STATE) == -abs((6 + 2) - (4 + 1))
    assert IDQN.reward(STATE, 1, STATE) == -3.0


@pytest.mark.slow
def test_trained_idqn_beats_fixed_time_and_its_untrained_self_on_cologne1():
    cfg = DeepRLConfig()
    cfg = replace(cfg, dqn=replace(cfg.dqn, episodes=8, eps_decay_episodes=5))
    trained, history = train(IDQN, "cologne1", cfg)
    assert len(history) == 8 and history[-1]["updates"] == cfg.dqn.updates_per_episode
    untrained = IDQN(DQNAgent(trained.agent.obs_dim, trained.agent.n_actions, trained.agent.cfg))
    ours = evaluate("cologne1", trained, seed=0)
    before = evaluate("cologne1", untrained, seed=0)
    fixed = evaluate("cologne1", FixedTime(30), seed=0)
    assert ours["queue"] < fixed["queue"]
    assert ours["queue"] < before["queue"]
    assert not ours["deadlock"]


def test_presslight_trains_through_the_same_loop_on_synthetic():
    cfg = DeepRLConfig(episode_s=400)
    cfg = replace(cfg, dqn=replace(cfg.dqn, episodes=2, learning_starts=64, updates_per_episode=5))
    agent, history = train(PressLight, "synthetic", cfg)
    assert isinstance(agent, PressLight) and [h["updates"] for h in history] == [0, 5]
    assert agent.agent.obs_dim == 8 * 4 + 8 + 8  # incoming segments, outgoing lanes, phase
    result = evaluate("synthetic", agent, seed=0, episode_s=300)
    assert result["controller"] == "PressLight" and len(result["queue_series"]) == 30


def test_gae_by_hand():
    import numpy as np

    from llmtraffic.signal.ippo import bootstrapped_gae

    # γ = 0.5, λ = 1: δ2 = 1 + 0.5·4 − 2 = 1; δ1 = 0 + 0.5·2 − 1 = 0; A1 = 0 + 0.5·1 = 0.5
    adv, ret = bootstrapped_gae(np.array([0.0, 1.0], np.float32), np.array([1.0, 2.0], np.float32), 4.0, 0.5, 1.0)
    assert adv.tolist() == [0.5, 1.0] and ret.tolist() == [1.5, 3.0]


@pytest.mark.slow
def test_ippo_learns_to_beat_fixed_time_on_cologne1():
    from llmtraffic.signal.ippo import IPPO, IPPOConfig, train_ippo

    cfg = IPPOConfig(episodes=4)
    trained, history = train_ippo("cologne1", cfg)
    assert history[-1]["queue"] < history[0]["queue"]
    untrained = IPPO(trained.actor[0].in_features, trained.actor[-1].out_features, cfg)
    ours = evaluate("cologne1", trained, seed=0)
    assert ours["queue"] < evaluate("cologne1", FixedTime(30), seed=0)["queue"]
    assert ours["queue"] < evaluate("cologne1", untrained, seed=0)["queue"]


def test_ippo_samples_reproducibly_after_reset_and_greedy_takes_the_argmax():
    import torch

    from llmtraffic.signal.ippo import IPPO, IPPOConfig

    agent = IPPO(10, 2, IPPOConfig(hidden=(8,)))
    with torch.no_grad():
        agent.actor[-1].bias.copy_(torch.tensor([0.0, 0.4]))  # p(phase 1) ≈ 0.6
    agent.reset(3)
    first = [agent.act(STATE) for _ in range(50)]
    agent.reset(3)
    assert [agent.act(STATE) for _ in range(50)] == first and 10 < sum(first) < 45
    agent.greedy = True
    assert {agent.act(STATE) for _ in range(5)} == {1}


def test_deep_rl_training_is_reproducible_whatever_ran_before_it():
    """Cologne1 (SUMO): IDQN's training episodes run in fresh processes, so the same seed gives the
    same history and weights with other SUMO episodes before and between two runs (a later
    libsumo start in one process is not bit-reproducible)."""
    from llmtraffic.signal import SignalEnv

    cfg = DeepRLConfig(episode_s=1800)
    cfg = replace(cfg, dqn=replace(cfg.dqn, episodes=3, eps_decay_episodes=2, learning_starts=64, updates_per_episode=30))

    def disturb(seed):  # an in-process SUMO episode with many phase changes
        with SignalEnv("cologne1", seed=seed) as env:
            env.reset(seed=seed)
            for k in range(120):
                env.step(k % len(env.phases))

    def run():
        trained, history = train(IDQN, "cologne1", cfg)
        return [h["queue"] for h in history], trained.agent.net.state_dict()

    disturb(1)
    first, weights = run()
    disturb(2)
    second, again = run()
    assert first == second and len(set(first)) == 3
    assert all(torch.equal(weights[k], again[k]) for k in weights)
