"""IPPO baseline of OracleTSC Table 1: independent PPO, one agent per intersection.

It lives with the signal study, whose environment, observation and reward it trains on, and
uses the GAE of :mod:`llmtraffic.rl.llm_ppo` (the LLM's PPO).

On a single intersection IPPO is plain PPO (Schulman et al. 2017) with a categorical policy
over the green phases, written CleanRL-style: roll out one episode with the current policy,
compute GAE advantages, then a few epochs of clipped-surrogate minibatch updates. Observation
and reward are IDQN's (lane counts + phase, −queue). Read top to bottom: config → network →
controller → training loop.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.distributions import Categorical
from tqdm.auto import tqdm

from ..rl.llm_ppo import gae, torch_threads
from .env import SignalConfig, SignalEnv, lane_counts_phase, negative_queue
from .scenarios import Scenario
from .state import IntersectionState


@dataclass
class IPPOConfig:
    """Hyperparameters of IPPO on one intersection (one decision = one 10-s slot)."""

    hidden: tuple[int, ...] = (64, 64)
    """Hidden tanh layers of the actor and of the critic (separate networks)."""
    lr: float = 1e-3
    """Adam learning rate."""
    gamma: float = 0.9
    """Discount per decision."""
    gae_lambda: float = 0.95
    """λ of generalised advantage estimation."""
    clip: float = 0.2
    """PPO ratio clip ε."""
    epochs: int = 4
    """Passes over each episode's rollout."""
    minibatch: int = 60
    """Transitions per gradient step."""
    ent_coef: float = 0.01
    """Entropy bonus weight."""
    vf_coef: float = 0.5
    """Value-loss weight."""
    max_grad_norm: float = 0.5
    """Gradient-norm clip."""
    episodes: int = 20
    """Training episodes (one rollout and one update each)."""
    episode_s: int = 3600
    """Simulated seconds per training episode."""
    reward_scale: float = 0.1
    """Rewards are multiplied by this before advantages are computed."""
    count_scale: float = 10.0
    """Vehicle counts in the observation are divided by this."""
    seed: int = 0
    """Seeds the networks and action sampling; episode ``k`` runs SUMO with seed ``seed * 1000 + k``."""
    threads: int = 1
    """Torch CPU threads during :func:`train_ippo`, as ``DQNConfig.threads``: torch's default (one per
    core) made the results depend on the machine, and two trainings side by side on two cores ran
    2–3× slower with two threads each."""


def mlp(sizes: list[int], out_std: float, generator: torch.Generator) -> nn.Sequential:
    """Tanh MLP with orthogonal initialisation (CleanRL's PPO), seeded by ``generator``."""
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layer = nn.Linear(a, b)
        last = i == len(sizes) - 2
        weight = torch.empty(b, a)
        nn.init.orthogonal_(weight, gain=out_std if last else np.sqrt(2), generator=generator)
        layer.weight.data.copy_(weight)
        layer.bias.data.zero_()
        layers += [layer] if last else [layer, nn.Tanh()]
    return nn.Sequential(*layers)


class IPPO:
    """PPO policy as a controller.

    It acts by sampling its stochastic policy (seeded by :meth:`reset`), the policy PPO
    optimised; ``greedy=True`` takes the most probable phase instead. With our short training
    the policy is still spread out, and its argmax can be far worse than the policy itself (on
    Hangzhou 1x1 its argmax queued ~150 vehicles, the sampled policy ~70).
    """

    observation = staticmethod(lane_counts_phase)
    reward = staticmethod(negative_queue)

    def __init__(self, obs_dim: int, n_actions: int, cfg: IPPOConfig, greedy: bool = False):
        gen = torch.Generator().manual_seed(cfg.seed)
        self.actor = mlp([obs_dim, *cfg.hidden, n_actions], 0.01, gen)
        self.critic = mlp([obs_dim, *cfg.hidden, 1], 1.0, gen)
        self.scale = torch.full((obs_dim,), cfg.count_scale)
        self.scale[-n_actions:] = 1.0  # the one-hot phase stays as it is
        self.greedy = greedy
        self.rng = torch.Generator().manual_seed(cfg.seed)

    def _x(self, obs) -> torch.Tensor:
        return torch.as_tensor(np.asarray(obs, np.float32)) / self.scale

    def log_policy(self, x: torch.Tensor) -> torch.Tensor:
        """log π(·|x) normalised as ``Categorical(logits=actor(x)).logits`` is, without building
        the distribution (and checking its arguments) at every decision of a rollout."""
        logits = self.actor(x)
        return logits - logits.logsumexp(-1, keepdim=True)

    def reset(self, seed: int) -> None:
        self.rng = torch.Generator().manual_seed(seed)

    def act(self, state: IntersectionState) -> int:
        with torch.no_grad():
            logits = self.actor(self._x(self.observation(state)))
        if self.greedy:
            return int(logits.argmax())
        return int(torch.multinomial(logits.softmax(-1), 1, generator=self.rng)[0])

    def __repr__(self) -> str:
        return "IPPO (greedy)" if self.greedy else "IPPO"


def bootstrapped_gae(rewards: np.ndarray, values: np.ndarray, last_value: float, gamma: float,
                     lam: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages and returns of one truncated episode, bootstrapped from ``last_value``.

    :func:`llmtraffic.rl.llm_ppo.gae` ends at a terminal step (V = 0 after it); adding
    γ·V(s_T) to the last reward gives the same last TD error, δ = r + γV(s_T) − V(s_{T−1}),
    so that one GAE serves both.
    """
    r = torch.as_tensor(rewards, dtype=torch.float32).clone()
    r[-1] += gamma * last_value
    return gae(r, torch.as_tensor(values, dtype=torch.float32), gamma, lam)


def train_ippo(scenario: Scenario | str, cfg: IPPOConfig | None = None,
               progress: bool = True) -> tuple[IPPO, list[dict]]:
    """Train IPPO; returns the controller and one dict of statistics per episode.

    ``progress`` shows a bar over the training episodes with the last episode's queue."""
    cfg = cfg or IPPOConfig()
    with torch_threads(cfg.threads):
        return _train(scenario, cfg, progress)


def _train(scenario: Scenario | str, cfg: IPPOConfig, progress: bool) -> tuple[IPPO, list[dict]]:
    rng = torch.Generator().manual_seed(cfg.seed)
    history = []
    # SUMO episodes in fresh processes, as in the DQN baselines' training (reproducible on Cologne1)
    with SignalEnv(scenario, SignalConfig(episode_s=cfg.episode_s, fresh_process=True), observation=IPPO.observation,
                   reward=IPPO.reward, seed=cfg.seed) as env:
        agent = IPPO(env.observation_space.shape[0], env.action_space.n, cfg)
        params = [*agent.actor.parameters(), *agent.critic.parameters()]
        optimizer = torch.optim.Adam(params, lr=cfg.lr, eps=1e-5)
        bar = tqdm(range(cfg.episodes), desc=f"IPPO {env.scenario.name}",
                   unit="episode", disable=not progress, leave=False)
        for episode in bar:
            # rollout with the current policy
            obs, _ = env.reset(seed=cfg.seed * 1000 + episode)
            xs, actions, logps, rewards, done = [], [], [], [], False
            while not done:
                x = agent._x(obs)
                with torch.no_grad():
                    logp = agent.log_policy(x)
                    a = torch.multinomial(logp.softmax(-1), 1, generator=rng)[0]  # seeded sampling
                obs, r, terminated, truncated, _ = env.step(int(a))
                xs.append(x), actions.append(a), logps.append(logp[a]), rewards.append(r * cfg.reward_scale)
                done = terminated or truncated
            x = torch.stack(xs)
            act, old_logp = torch.stack(actions), torch.stack(logps)
            with torch.no_grad():
                values = agent.critic(x).squeeze(1).numpy()
                last = 0.0 if terminated else float(agent.critic(agent._x(obs)))
            adv, ret = bootstrapped_gae(np.asarray(rewards, np.float32), values, last, cfg.gamma, cfg.gae_lambda)
            # clipped-surrogate updates
            for _ in range(cfg.epochs):
                order = torch.randperm(len(x), generator=rng)
                for idx in order.split(cfg.minibatch):
                    dist = Categorical(logits=agent.actor(x[idx]))
                    ratio = (dist.log_prob(act[idx]) - old_logp[idx]).exp()
                    a_n = (adv[idx] - adv[idx].mean()) / (adv[idx].std() + 1e-8)
                    pg = -torch.min(ratio * a_n, ratio.clamp(1 - cfg.clip, 1 + cfg.clip) * a_n).mean()
                    v_loss = 0.5 * (agent.critic(x[idx]).squeeze(1) - ret[idx]).pow(2).mean()
                    loss = pg + cfg.vf_coef * v_loss - cfg.ent_coef * dist.entropy().mean()
                    optimizer.zero_grad()
                    loss.backward()
                    nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
                    optimizer.step()
            summary = env.summary()
            history.append({"episode": episode, "return": float(sum(rewards) / cfg.reward_scale),
                            **{k: summary[k] for k in ("queue", "travel_time_s", "throughput")}})
            bar.set_postfix(queue=f"{summary['queue']:.1f}")
    return agent, history
