"""GreedyPolicy's numpy forward pass equals the torch network it was made from, survives pickling,
and any network it cannot evaluate in numpy still runs through torch."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest
import torch
from torch import nn

from llmtraffic.rl.dqn import DQNAgent, DQNConfig, GreedyPolicy

OBS_SCALE = (1000.0,) * 4 + (10.0, 10.0)  # the bus budgets' scaling: headways in km, counts in tens


def observations(n: int = 100, seed: int = 0) -> np.ndarray:
    """Bus-like §3.2 states: headways and their gaps up to 5000 m (some negative), passengers and
    seconds held up to a few hundred, plus a few exact zeros."""
    rng = np.random.default_rng(seed)
    obs = np.column_stack([rng.uniform(0, 5000, n), rng.uniform(0, 5000, n), rng.uniform(-5000, 5000, n),
                           rng.uniform(-5000, 5000, n), rng.uniform(0, 300, n), rng.uniform(0, 120, n)])
    obs[:5] = 0.0
    obs[5] = (5000.0, 5000.0, -5000.0, 5000.0, 300.0, 120.0)
    return obs


def torch_q(agent: DQNAgent, obs: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return agent.net(torch.as_tensor(np.asarray(obs, np.float32)) / agent.scale).numpy()


@pytest.mark.parametrize(("hidden", "obs_scale"), [
    ((128, 128, 128), OBS_SCALE),  # the "quick" budget
    ((400,) * 5, OBS_SCALE),  # the paper's network
    ((64, 64), ()),  # unscaled: raw 5000 m inputs reach the network
])
def test_numpy_forward_equals_the_torch_network(hidden, obs_scale):
    agent = DQNAgent(6, 2, DQNConfig(hidden=hidden, obs_scale=obs_scale, seed=7))
    obs = observations()
    # a fresh network prefers one action almost everywhere; shift the output bias so that each
    # action wins on half the observations and the argmax comparison means something
    gap = torch_q(agent, obs) @ np.array([-1.0, 1.0])
    with torch.no_grad():
        agent.net[-1].bias[1] -= float(np.median(gap))
    policy = agent.greedy_policy()
    assert policy._layers is not None  # the numpy path is the one under test
    expected = torch_q(agent, obs)
    single = np.stack([policy.q_values(o) for o in obs])
    assert single.dtype == np.float32 and single.shape == (100, 2)
    np.testing.assert_allclose(single, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(policy.q_values(obs), expected, rtol=1e-5, atol=1e-5)  # a batch too
    np.testing.assert_allclose(policy.q_values(obs.tolist()[0]), expected[0], rtol=1e-5, atol=1e-5)  # a list
    assert [policy(o) for o in obs] == [int(np.argmax(q)) for q in expected]
    assert 40 <= sum(policy(o) for o in obs) <= 60


def test_policy_is_frozen_when_the_agent_trains_on():
    agent = DQNAgent(6, 2, DQNConfig(hidden=(32, 32), obs_scale=OBS_SCALE))
    policy = agent.greedy_policy()
    obs = observations(10)
    before = torch_q(agent, obs)
    with torch.no_grad():
        for p in agent.net.parameters():
            p.add_(1.0)
    np.testing.assert_allclose(policy.q_values(obs), before, rtol=1e-5, atol=1e-5)


def test_pickled_policy_gives_the_same_values_and_keeps_the_old_format():
    agent = DQNAgent(6, 2, DQNConfig(hidden=(128, 128, 128), obs_scale=OBS_SCALE, seed=1))
    policy = agent.greedy_policy()
    obs = observations()
    restored = pickle.loads(pickle.dumps(policy, protocol=pickle.HIGHEST_PROTOCOL))
    assert restored._layers is not None
    np.testing.assert_array_equal(restored.q_values(obs), policy.q_values(obs))
    # only the network and the scale are pickled (as before the numpy path), so a policy
    # pickled by the earlier code (its __dict__ held just these two) loads onto the fast path
    assert set(policy.__getstate__()) == {"net", "scale"}
    old = GreedyPolicy.__new__(GreedyPolicy)
    old.__setstate__({"net": policy.net, "scale": policy.scale})
    np.testing.assert_array_equal(old.q_values(obs), policy.q_values(obs))


class TwoHeads(nn.Module):
    """Not an nn.Sequential: must run through torch."""

    def __init__(self):
        super().__init__()
        self.body, self.head = nn.Linear(6, 16), nn.Linear(16, 2)

    def forward(self, x):
        return self.head(torch.tanh(self.body(x)))


@pytest.mark.parametrize("make", [
    TwoHeads,
    lambda: nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 2)),  # another activation
    lambda: nn.Sequential(nn.Linear(6, 16), nn.LeakyReLU(0.1), nn.Linear(16, 2)),
    lambda: nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 2)).double(),  # float64 weights
])
def test_other_networks_run_through_torch(make):
    torch.manual_seed(0)
    net = make()
    scale = torch.tensor(OBS_SCALE, dtype=torch.float32)
    if next(net.parameters()).dtype == torch.float64:
        scale = scale.double()
    obs = observations(20)
    with torch.no_grad():
        x = torch.as_tensor(obs.astype(np.float32)).to(next(net.parameters()).dtype)
        expected = net(x / scale).numpy()
    policy = GreedyPolicy(net, scale)
    assert policy._layers is None
    np.testing.assert_allclose(np.stack([policy.q_values(o) for o in obs]), expected, rtol=1e-6, atol=1e-6)
    restored = pickle.loads(pickle.dumps(policy))
    np.testing.assert_array_equal(restored.q_values(obs), policy.q_values(obs))


def test_the_training_agent_acts_on_its_live_weights():
    """DQNAgent.q_values reads numpy views of the parameters: after gradient updates and after
    loading a checkpoint it must still equal the torch network, not a stale copy."""
    cfg = DQNConfig(hidden=(32, 32), obs_scale=OBS_SCALE, batch_size=16, learning_starts=16, seed=3)
    agent = DQNAgent(6, 2, cfg)
    start = copy.deepcopy(agent.state_dict())
    obs = observations()
    assert agent._layers is not None
    rng = np.random.default_rng(0)
    for s, s2 in zip(obs[:-1], obs[1:]):
        agent.remember(s, int(rng.integers(2)), float(rng.normal()), s2, False)
    before = agent.q_values(obs).copy()
    for _ in range(5):
        agent._update()
    assert not np.allclose(agent.q_values(obs), before)
    np.testing.assert_allclose(agent.q_values(obs), torch_q(agent, obs), rtol=1e-5, atol=1e-5)
    agent.load_state_dict(start)
    np.testing.assert_array_equal(agent.q_values(obs), before)
