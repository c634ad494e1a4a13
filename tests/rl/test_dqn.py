"""Shared DQN: learns a toy task to its known optimum, shares its parameters, resumes exactly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from llmtraffic.rl.dqn import (
    CHECKPOINT, CheckpointMismatch, DQNAgent, DQNConfig, NonFiniteWeightsError, RewardFunctionError, epsilon, train,
)

# Two-state holding toy (actions: 0 = release, 1 = hold). In S0 holding is right: it earns 0 now
# and moves to S1, where releasing earns 1 (Q*(S0, hold) = γ·1); releasing in S0 earns only 0.5.
# In S1 holding is wrong (-1). Both S1 actions and S0-release end the mini-episode.
S0, S1 = np.array([1.0, 0.0]), np.array([0.0, 1.0])
GAMMA = 0.95
Q_STAR = {0: np.array([0.5, GAMMA * 1.0]), 1: np.array([1.0, -1.0])}


def toy_config(**overrides) -> DQNConfig:
    base = dict(hidden=(32, 32), lr=5e-3, gamma=GAMMA, batch_size=32, updates_per_episode=60,
                buffer_size=2000, learning_starts=64, eps_decay_episodes=10, episodes=25, seed=3)
    return DQNConfig(**{**base, **overrides})


def play_toy(agent: DQNAgent, episode: int) -> dict:
    """20 mini-episodes of the two-state toy; deterministic dynamics, ε from the agent."""
    total = 0.0
    for _ in range(20):
        a = agent.act(S0, explore=True)
        if a == 0:
            agent.remember(S0, 0, 0.5, S0, True)
            total += 0.5
            continue
        agent.remember(S0, 1, 0.0, S1, False)
        b = agent.act(S1, explore=True)
        r = 1.0 if b == 0 else -1.0
        agent.remember(S1, b, r, S1, True)
        total += r
    return {"return": total}


def test_epsilon_schedule_follows_the_authors():
    cfg = DQNConfig()
    assert [epsilon(cfg, e) for e in (0, 25, 49, 50, 69)] == pytest.approx([1.0, 0.5, 0.02, 0.02, 0.02])


def test_learns_two_state_toy_to_known_optimum():
    cfg = toy_config()
    agent = DQNAgent(2, 2, cfg)
    history = train(agent, play_toy, cfg)
    assert agent.act(S0, explore=False) == 1 and agent.act(S1, explore=False) == 0
    np.testing.assert_allclose(agent.q_values(S0), Q_STAR[0], atol=0.05)
    np.testing.assert_allclose(agent.q_values(S1), Q_STAR[1], atol=0.05)
    # greedy return is 20 x 1; with ε = 0.02 the last episodes must be close to it
    assert history[0]["return"] < 10 and history[-1]["return"] >= 17


def test_one_agents_experience_moves_every_agents_q_values():
    cfg = toy_config(learning_starts=32, updates_per_episode=5)
    shared = DQNAgent(2, 2, cfg)
    policies = {"stop_0": shared, "stop_5": shared}  # every agent points at the one network
    obs_other = np.array([0.3, 0.7])
    before = policies["stop_5"].q_values(obs_other).copy()
    for _ in range(40):  # only stop_0 experiences anything
        policies["stop_0"].remember(S0, 1, 1.0, S0, True)
    stats = policies["stop_0"].end_episode()
    assert stats["updates"] == 5
    assert not np.allclose(policies["stop_5"].q_values(obs_other), before)


def _torch_q(agent: DQNAgent, obs) -> np.ndarray:
    with torch.no_grad():
        return agent.net(torch.as_tensor(np.asarray(obs, np.float32)) / agent.scale).numpy()


def test_an_agent_sent_to_a_process_pool_acts_on_its_own_weights():
    """Pickled as a process pool pickles it (torch moves its tensors to shared memory first),
    the agent's fast numpy path must view the unpickled tensors: it answers as its network does,
    and keeps doing so after the optimiser changes the weights in place."""
    from multiprocessing.reduction import ForkingPickler

    cfg = toy_config(learning_starts=32, updates_per_episode=5, obs_scale=(2.0, 4.0))
    sent = DQNAgent(2, 2, cfg)
    for _ in range(40):
        sent.remember(S0, 1, 1.0, S0, True)
    got = ForkingPickler.loads(bytes(ForkingPickler.dumps(sent)))
    obs = np.array([[0.3, 0.7], [1.0, -2.0]])
    np.testing.assert_allclose(got.q_values(obs), _torch_q(got, obs), rtol=1e-6)
    got.end_episode()  # 5 updates, in place
    np.testing.assert_allclose(got.q_values(obs), _torch_q(got, obs), rtol=1e-6)


def test_no_update_before_learning_starts_and_bad_action_is_rejected():
    agent = DQNAgent(2, 2, toy_config())
    for _ in range(63):
        agent.remember(S0, 0, 0.5, S0, True)
    before = agent.q_values(S0).copy()
    assert agent.end_episode()["updates"] == 0
    np.testing.assert_array_equal(agent.q_values(S0), before)
    with pytest.raises(ValueError, match="action 2"):
        agent.remember(S0, 2, 0.0, S0, True)
    with pytest.raises(ValueError, match="learning_starts"):
        DQNConfig(batch_size=200, learning_starts=100)


SCRIPT = """
import os, signal, sys, torch
sys.path.insert(0, {testdir!r})
from test_dqn import play_toy, toy_config
from llmtraffic.rl.dqn import DQNAgent, train
kill_at = int(os.environ.get("KILL_AT", "-1"))
def episode(agent, e):
    if e == kill_at:
        os.kill(os.getpid(), signal.SIGKILL)  # a real kill: no cleanup, no exception handling
    return play_toy(agent, e)
cfg = toy_config(episodes=8, eps_decay_episodes=4)
agent = DQNAgent(2, 2, cfg)
train(agent, episode, cfg, checkpoint_dir=sys.argv[1])
torch.save(agent.net.state_dict(), sys.argv[2])
"""


def _run(tmp: Path, ckpt: str, out: str, kill_at: int | None) -> int:
    script = tmp / "run.py"
    script.write_text(SCRIPT.format(testdir=str(Path(__file__).parent)))
    env = {**os.environ, "KILL_AT": str(kill_at if kill_at is not None else -1)}
    return subprocess.run([sys.executable, str(script), str(tmp / ckpt), str(tmp / out)],
                          env=env, capture_output=True).returncode


def test_killed_training_resumes_to_the_same_weights(tmp_path):
    assert _run(tmp_path, "straight", "straight.pt", None) == 0
    assert _run(tmp_path, "resumed", "never.pt", kill_at=5) == -signal.SIGKILL
    saved = torch.load(tmp_path / "resumed" / CHECKPOINT, weights_only=False)
    assert len(saved["history"]) == 5 and not (tmp_path / "never.pt").exists()
    assert _run(tmp_path, "resumed", "resumed.pt", None) == 0
    a = torch.load(tmp_path / "straight.pt")
    b = torch.load(tmp_path / "resumed.pt")
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize(("reward", "message"), [
    (1e300, r"returned 1e\+300 for the transition state=\[1.0, 0.0\], action=1.*not finite in float32"),
    (float("nan"), r"returned nan for the transition state=\[1.0, 0.0\]"),
    (2e6, r"returned 2e\+06 for the transition state=\[1.0, 0.0\], action=1, next_state=\[0.0, 1.0\], outside \[-1e\+06, 1e\+06\]"),
])
def test_a_reward_the_replay_cannot_hold_is_refused_with_the_state(reward, message):
    agent = DQNAgent(2, 2, toy_config())
    with pytest.raises(RewardFunctionError, match=message):
        agent.remember(S0, 1, reward, S1, False)
    assert agent.replay.size == 0
    agent.remember(S0, 1, -1e6, S1, False)  # the bound itself is allowed
    assert agent.replay.rewards[0] == -1e6


def test_non_finite_weights_stop_training_and_make_no_policy():
    agent = DQNAgent(2, 2, toy_config())
    for episode in range(4):
        play_toy(agent, episode)
    with torch.no_grad():
        agent.net[0].weight[0, 0] = float("nan")
    with pytest.raises(NonFiniteWeightsError, match=r"Q-network weights \['0.weight'.*are not finite after the updates of episode 0"):
        agent.end_episode()
    with pytest.raises(NonFiniteWeightsError, match="a diverged agent cannot act"):
        agent.greedy_policy()


def test_resuming_with_another_seed_or_config_is_refused(tmp_path):
    cfg = toy_config(episodes=2, seed=0)
    train(DQNAgent(2, 2, cfg), play_toy, cfg, checkpoint_dir=tmp_path)
    other = toy_config(episodes=2, seed=1)
    with pytest.raises(CheckpointMismatch, match=r"checkpoint.pt: .*seed: checkpoint 0, this run 1\); resume with the same"):
        train(DQNAgent(2, 2, other), play_toy, other, checkpoint_dir=tmp_path)
    wider = toy_config(episodes=2, seed=0, lr=1e-2)
    with pytest.raises(CheckpointMismatch, match=r"lr: checkpoint 0.005, this run 0.01"):
        train(DQNAgent(2, 2, wider), play_toy, wider, checkpoint_dir=tmp_path)
    assert len(train(DQNAgent(2, 2, cfg), play_toy, cfg, checkpoint_dir=tmp_path)) == 2  # same config resumes
    longer = toy_config(episodes=3, seed=0)  # only the number of episodes may grow
    assert [h["episode"] for h in train(DQNAgent(2, 2, longer), play_toy, longer, checkpoint_dir=tmp_path)] == [0, 1, 2]
