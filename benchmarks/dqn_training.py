"""Cost of one shared-DQN training episode on case 1, split into simulation and updates, and the
update time with one torch thread (``DQNConfig.threads``, the default) versus torch's default
thread count measured in the same run.

The authors' network (5 × 400 ReLU, batch 200, 200 updates per episode) dominates an episode:
the 4-h simulation with ~600 decisions is a fraction of a second. On the 2-core study machine a
single thread was several times faster than two for these small batches.

It also reports the achieved GFLOP/s of one update against a plain matmul of the same shapes timed
in the same run (one thread both): an update is four matrix products per layer — the bootstrap
forward on s', the forward on s, and the backward products for the input and weight gradients —
so ``8 · batch · Σ fan_in · fan_out`` floating-point operations; the rest (Adam, the loss,
gathers) is overhead the ratio exposes.

Last, the cost of one greedy decision (``GreedyPolicy`` on one observation, what validation and
testing ask hundreds of thousands of times): the numpy forward pass against the torch forward of
the same network, timed in the same run (one torch thread, as during training). Run:

    .venv/bin/python benchmarks/dqn_training.py [--updates 50]
"""

from __future__ import annotations

import argparse
import copy
import time

import torch

from llmtraffic.bus import HoldingEnv, scenarios
from llmtraffic.bus.rewards import rl_global
from llmtraffic.rl.dqn import DQNAgent, DQNConfig, GreedyPolicy


def filled_agent(cfg: DQNConfig) -> DQNAgent:
    """An agent whose replay holds one ε = 1 case-1 episode (timed; acting runs the network)."""
    agent = DQNAgent(6, 2, cfg)
    env = HoldingEnv(scenarios.case1(), rl_global, seed=0)
    env.reset(seed=0)
    for _ in env.agent_iter():
        obs, _, terminated, truncated, _ = env.last()
        env.step(None if terminated or truncated else agent.act(obs, explore=True))
        for t in env.pop_transitions():
            agent.remember(t.state, t.action, t.reward, t.next_state, False)
    return agent


def seconds_per_update(agent: DQNAgent, threads: int, updates: int) -> float:
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        agent._update()  # warm-up (allocations)
        start = time.perf_counter()
        for _ in range(updates):
            agent._update()
        return (time.perf_counter() - start) / updates
    finally:
        torch.set_num_threads(before)


def update_flops(cfg: DQNConfig, obs_dim: int = 6, n_actions: int = 2) -> float:
    """Floating-point operations of the matrix products of one update (see the module docstring)."""
    sizes = (obs_dim, *cfg.hidden, n_actions)
    return 8.0 * cfg.batch_size * sum(a * b for a, b in zip(sizes[:-1], sizes[1:]))


def seconds_per_matmuls(cfg: DQNConfig, repeats: int, obs_dim: int = 6, n_actions: int = 2) -> float:
    """Time of the same products as plain ``torch.mm`` calls (four per layer), one thread."""
    sizes = (obs_dim, *cfg.hidden, n_actions)
    gen = torch.Generator().manual_seed(0)
    mats = [(torch.randn(cfg.batch_size, a, generator=gen), torch.randn(a, b, generator=gen),
             torch.randn(cfg.batch_size, b, generator=gen)) for a, b in zip(sizes[:-1], sizes[1:])]

    def once() -> None:
        for x, w, g in mats:
            torch.mm(x, w)  # forward on s'
            torch.mm(x, w)  # forward on s
            torch.mm(g, w.T)  # gradient w.r.t. the layer input
            torch.mm(x.T, g)  # gradient w.r.t. the weights

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        once()
        start = time.perf_counter()
        for _ in range(repeats):
            once()
        return (time.perf_counter() - start) / repeats
    finally:
        torch.set_num_threads(before)


def seconds_per_greedy_call(policy: GreedyPolicy, observations, repeats: int) -> float:
    for obs in observations[:100]:  # warm-up
        policy(obs)
    start = time.perf_counter()
    for _ in range(repeats):
        for obs in observations:
            policy(obs)
    return (time.perf_counter() - start) / (repeats * len(observations))


def greedy_call_costs(hidden: tuple[int, ...], observations, repeats: int) -> tuple[float, float]:
    """Seconds per greedy decision on the numpy path and on the torch path (same network, one torch thread)."""
    agent = DQNAgent(6, 2, DQNConfig(hidden=hidden, obs_scale=(1000.0,) * 4 + (10.0, 10.0)))
    fast = agent.greedy_policy()
    slow = copy.copy(fast)
    slow._layers = None  # GreedyPolicy's torch fallback on the very same network
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return seconds_per_greedy_call(fast, observations, repeats), seconds_per_greedy_call(slow, observations, repeats)
    finally:
        torch.set_num_threads(before)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=50)
    args = parser.parse_args()
    cfg = DQNConfig(learning_starts=200, obs_scale=(1000.0,) * 4 + (10.0, 10.0))
    start = time.perf_counter()
    agent = filled_agent(cfg)
    sim_s = time.perf_counter() - start
    default_threads = torch.get_num_threads()
    one = seconds_per_update(agent, 1, args.updates)
    many = seconds_per_update(agent, default_threads, args.updates)
    print(f"case-1 episode with {agent.replay.size} decisions: {sim_s:.2f} s")
    print(f"update (5x400, batch 200): 1 thread {one * 1e3:.1f} ms, {default_threads} threads {many * 1e3:.1f} ms "
          f"(ratio {many / one:.2f})")
    flops = update_flops(cfg)
    plain = seconds_per_matmuls(cfg, args.updates)
    print(f"achieved (1 thread): update {flops / one / 1e9:.2f} GFLOP/s, plain matmuls of the same shapes "
          f"{flops / plain / 1e9:.2f} GFLOP/s, ratio {plain / one:.2f}")
    print(f"one training episode ({cfg.updates_per_episode} updates, 1 thread): "
          f"{sim_s + cfg.updates_per_episode * one:.1f} s, of which updates "
          f"{100 * cfg.updates_per_episode * one / (sim_s + cfg.updates_per_episode * one):.0f} %")
    observations = agent.replay.obs[:agent.replay.size]  # the case-1 states just played
    for hidden in ((128, 128, 128), cfg.hidden):
        fast, slow = greedy_call_costs(hidden, observations, repeats=3)
        print(f"greedy decision ({'x'.join(map(str, hidden))}, one observation): numpy {fast * 1e6:.1f} us, "
              f"torch {slow * 1e6:.1f} us (torch/numpy {slow / fast:.1f})")


if __name__ == "__main__":
    main()
