"""Shared-parameter DQN with one shared replay memory (bus paper §3.4).

All agents of a system act through ONE :class:`DQNAgent`: one Q-network, one replay
memory sampled uniformly, one ε schedule. Every agent's experience therefore trains the
policy every other agent uses — the knowledge sharing of §3.1/§3.4. The defaults follow the
authors' published setting (§5.1 and their code): an MLP of five hidden layers of 400 ReLU
units, Adam 1e-3, γ = 0.95, batch 200, 200 gradient updates after each episode, a replay of
50,000 transitions that trains only after 600, ε falling linearly from 1 to 0 over 50
episodes and then fixed at 0.02, 70 episodes, no target network.

Read top to bottom: config → network → replay → agent (act, remember, end_episode) →
checkpointed training loop.

Guards: every reward entering the replay must be finite in float32 and within
±``checks.REWARD_BOUND`` (`RewardFunctionError` otherwise); weights that turn non-finite in an
update raise `NonFiniteWeightsError` at once, and a greedy policy (what is tested, selected and
cached) can only be made from finite weights; a checkpoint resumes only the configuration and
seed that wrote it (`CheckpointMismatch`; only ``episodes`` may grow, to extend a run).
"""

from __future__ import annotations

import copy
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from ..study.atomic import atomic_write
from .checks import RewardFunctionError, check_reward  # noqa: F401  (raised here; importable from here)


class NonFiniteWeightsError(RuntimeError):
    """The Q-network's weights (or the TD loss) are no longer finite: the run has diverged."""


class CheckpointMismatch(ValueError):
    """A checkpoint was written by a run with another configuration (or seed)."""


@dataclass
class DQNConfig:
    """Hyperparameters of the shared DQN (bus paper §3.4, §5.1)."""

    hidden: tuple[int, ...] = (400,) * 5
    """Widths of the hidden ReLU layers of the Q-network."""
    lr: float = 1e-3
    """Adam learning rate."""
    gamma: float = 0.95
    """Discount factor per decision (one decision = one 5-s hold step)."""
    batch_size: int = 200
    """Transitions per gradient update, sampled uniformly from the shared replay."""
    updates_per_episode: int = 200
    """Gradient updates run by :meth:`DQNAgent.end_episode` (the authors' 'epochs')."""
    buffer_size: int = 50_000
    """Replay capacity; the oldest transitions are overwritten first."""
    learning_starts: int = 600
    """No update until the replay holds at least this many transitions."""
    eps_start: float = 1.0
    """ε in the first episode."""
    eps_end: float = 0.0
    """ε the linear schedule would reach at episode ``eps_decay_episodes``."""
    eps_decay_episodes: int = 50
    """Episodes of linear decay from ``eps_start`` towards ``eps_end``."""
    eps_final: float = 0.02
    """ε from episode ``eps_decay_episodes`` on."""
    episodes: int = 70
    """Training episodes run by :func:`train`."""
    target_network: bool = False
    """Bootstrap from a periodically synced copy of the network (off in the authors' code)."""
    target_update_every: int = 200
    """Gradient updates between target-network syncs (used only with ``target_network``)."""
    huber: bool = False
    """Huber (smooth L1) TD loss instead of squared error."""
    obs_scale: tuple[float, ...] = ()
    """Divide observations element-wise by these before the network (empty: no scaling).
    Headways in metres and passenger counts differ by two orders of magnitude."""
    seed: int = 0
    """Seeds the network initialisation, ε-greedy draws and replay sampling."""
    val_every: int = 1
    """Training episodes between two greedy validations, for trainers that select a checkpoint on
    validation episodes (``llmtraffic.bus.training.train_validated``; the last checkpoint is
    always validated). Validation costs several training episodes' worth of simulation."""
    val_from: int = 1
    """First training episode whose checkpoint may be selected (and is validated). A checkpoint
    from the exploration phase has seen a few hundred updates of nearly random play; where
    holding costs travel time it is an agent that has not yet learned to hold, and a
    travel-time criterion would pick it over every trained one."""
    threads: int = 1
    """Torch CPU threads during :func:`train`. One is fastest for these small batches (two
    threads on two busy cores were 8× slower) and keeps results independent of the machine."""

    def __post_init__(self) -> None:
        for name in ("batch_size", "updates_per_episode", "buffer_size", "episodes",
                     "eps_decay_episodes", "target_update_every", "val_every", "val_from"):
            if getattr(self, name) < 1:
                raise ValueError(f"DQNConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.learning_starts < self.batch_size:
            raise ValueError(f"DQNConfig.learning_starts ({self.learning_starts}) must be >= "
                             f"batch_size ({self.batch_size})")
        if self.val_from > self.episodes:
            raise ValueError(f"DQNConfig.val_from ({self.val_from}) must be <= episodes ({self.episodes}): "
                             "no checkpoint could be selected")
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError(f"DQNConfig.gamma must lie in [0, 1], got {self.gamma}")
        self.hidden = tuple(int(h) for h in self.hidden)
        self.obs_scale = tuple(float(s) for s in self.obs_scale)
        if any(s <= 0 for s in self.obs_scale):
            raise ValueError(f"DQNConfig.obs_scale must be positive, got {self.obs_scale}")


def epsilon(cfg: DQNConfig, episode: int) -> float:
    """ε of an episode: linear from eps_start towards eps_end, then eps_final (§5.1)."""
    if episode < cfg.eps_decay_episodes:
        return cfg.eps_start + (cfg.eps_end - cfg.eps_start) * episode / cfg.eps_decay_episodes
    return cfg.eps_final


def q_network(obs_dim: int, n_actions: int, hidden: tuple[int, ...], seed: int) -> nn.Sequential:
    """MLP Q(s, ·) with PyTorch's default uniform(±1/sqrt(fan_in)) init, drawn from a seeded generator."""
    sizes = (obs_dim, *hidden, n_actions)
    layers: list[nn.Module] = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        layers += [nn.Linear(fan_in, fan_out), nn.ReLU()]
    net = nn.Sequential(*layers[:-1])  # no ReLU after the output layer
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for layer in net:
            if isinstance(layer, nn.Linear):
                bound = 1.0 / np.sqrt(layer.in_features)
                layer.weight.uniform_(-bound, bound, generator=gen)
                layer.bias.uniform_(-bound, bound, generator=gen)
    return net


class Replay:
    """Ring buffer of (s, a, r, s', done), sampled uniformly (§3.4 shared replay memory)."""

    def __init__(self, obs_dim: int, capacity: int):
        self.capacity = capacity
        self.obs = np.zeros((capacity, obs_dim), np.float32)
        self.next_obs = np.zeros((capacity, obs_dim), np.float32)
        self.actions = np.zeros(capacity, np.int64)
        self.rewards = np.zeros(capacity, np.float32)
        self.dones = np.zeros(capacity, np.float32)
        self.pos = 0
        self.size = 0

    def add(self, s, a: int, r: float, s2, done: bool) -> None:
        i = self.pos
        self.obs[i], self.actions[i], self.rewards[i] = s, a, r
        self.next_obs[i], self.dones[i] = s2, float(done)
        self.pos = (i + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)

    def sample(self, rng: np.random.Generator, n: int) -> tuple[torch.Tensor, ...]:
        idx = rng.integers(0, self.size, size=n)
        return tuple(torch.from_numpy(x[idx]) for x in
                     (self.obs, self.actions, self.rewards, self.next_obs, self.dones))

    def state_dict(self) -> dict:
        n = self.size  # only the filled part; the rest is zeros
        arrays = {k: torch.from_numpy(getattr(self, k)[:n].copy())
                  for k in ("obs", "next_obs", "actions", "rewards", "dones")}
        return {**arrays, "pos": self.pos, "size": self.size}

    def load_state_dict(self, state: dict) -> None:
        n = state["size"]
        for k in ("obs", "next_obs", "actions", "rewards", "dones"):
            getattr(self, k)[:n] = state[k].numpy()
        self.pos, self.size = state["pos"], n


class DQNAgent:
    """The one Q-network + replay that every agent of a system shares (§3.4)."""

    def __init__(self, obs_dim: int, n_actions: int, cfg: DQNConfig):
        if cfg.obs_scale and len(cfg.obs_scale) != obs_dim:
            raise ValueError(f"DQNConfig.obs_scale has {len(cfg.obs_scale)} values, "
                             f"observations have {obs_dim}")
        self.obs_dim, self.n_actions, self.cfg = obs_dim, n_actions, cfg
        self.net = q_network(obs_dim, n_actions, cfg.hidden, cfg.seed)
        self.target = q_network(obs_dim, n_actions, cfg.hidden, cfg.seed) if cfg.target_network else None
        # fused: one kernel for all parameters instead of one per tensor and operation; on CPU it
        # halves the time of a 3×128 update at batch 200 (torch's per-op overhead dominates there)
        self.optimizer = torch.optim.Adam(self.net.parameters(), lr=cfg.lr, fused=True)
        self.replay = Replay(obs_dim, cfg.buffer_size)
        self.rng = np.random.default_rng(cfg.seed)
        self.scale = torch.tensor(cfg.obs_scale or (1.0,) * obs_dim, dtype=torch.float32)
        # acting asks the network one observation at a time, where torch's per-call overhead is
        # several times the arithmetic: numpy views of the live weights (updated in place by the
        # optimiser and by load_state_dict) answer instead, as in GreedyPolicy
        self._views()
        self.episode = 0
        self.updates = 0
        self.epsilon = epsilon(cfg, 0)

    def _views(self) -> None:
        self._layers = _numpy_layers(self.net, copy=False)
        self._np_scale = self.scale.numpy()

    def __getstate__(self) -> dict:
        # The numpy views are not pickled but rebuilt on the other side: they must view the
        # unpickled tensors. Pickled by value they would be frozen copies, and when pickled for
        # a process pool torch first moves each tensor's storage to shared memory, so a view
        # pickled after its tensor holds freed memory (IDQN agents came back acting on garbage).
        return {k: v for k, v in self.__dict__.items() if k not in ("_layers", "_np_scale")}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._views()

    def _forward(self, net: nn.Sequential, obs: torch.Tensor) -> torch.Tensor:
        # the layers' functions themselves: nn.Module.__call__'s hook checks cost more than a
        # 64-wide layer's arithmetic (the same kernels, so the same numbers)
        x = obs / self.scale
        for layer in net:
            x = nn.functional.linear(x, layer.weight, layer.bias) if type(layer) is nn.Linear else torch.relu(x)
        return x

    def q_values(self, obs) -> np.ndarray:
        """Q(s, ·) for one observation (shape (obs_dim,)) or a batch (shape (n, obs_dim))."""
        if self._layers is not None:
            return _numpy_forward(self._layers, self._np_scale, obs)
        x = torch.as_tensor(np.asarray(obs, np.float32))
        with torch.no_grad():
            return self._forward(self.net, x).numpy()

    def act(self, obs, explore: bool) -> int:
        """ε-greedy action when exploring, greedy otherwise."""
        if explore and self.rng.random() < self.epsilon:
            return int(self.rng.integers(self.n_actions))
        return int(np.argmax(self.q_values(obs)))

    def remember(self, s, a: int, r: float, s2, done: bool) -> None:
        """Store one transition of any agent in the shared replay (its reward checked first)."""
        if not 0 <= int(a) < self.n_actions:
            raise ValueError(f"action {a} outside [0, {self.n_actions})")
        def where() -> str:
            return f"the transition state={np.asarray(s).tolist()}, action={int(a)}, next_state={np.asarray(s2).tolist()}"

        self.replay.add(s, int(a), check_reward(r, where), s2, bool(done))

    def _update(self) -> float:
        s, a, r, s2, done = self.replay.sample(self.rng, self.cfg.batch_size)
        with torch.no_grad():
            bootstrap = self._forward(self.target or self.net, s2).max(dim=1).values
            target = r + self.cfg.gamma * (1.0 - done) * bootstrap
        q = self._forward(self.net, s).gather(1, a[:, None]).squeeze(1)
        loss_fn = nn.functional.smooth_l1_loss if self.cfg.huber else nn.functional.mse_loss
        loss = loss_fn(q, target)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        self.updates += 1
        if self.target is not None and self.updates % self.cfg.target_update_every == 0:
            self.target.load_state_dict(self.net.state_dict())
        return loss.item()

    def end_episode(self) -> dict:
        """Run the episode's gradient updates (once the replay is warm), then step ε."""
        losses = []
        if self.replay.size >= self.cfg.learning_starts:
            losses = [self._update() for _ in range(self.cfg.updates_per_episode)]
            self.check_finite(f"after the updates of episode {self.episode} (mean loss {np.mean(losses):.4g})")
        self.episode += 1
        self.epsilon = epsilon(self.cfg, self.episode)
        return {"loss": float(np.mean(losses)) if losses else float("nan"),
                "updates": len(losses), "replay": self.replay.size}

    def check_finite(self, when: str) -> None:
        """Raise `NonFiniteWeightsError` if any weight is NaN or infinite."""
        bad = nonfinite(self.net)
        if bad:
            raise NonFiniteWeightsError(
                f"Q-network weights {bad} are not finite {when}: training diverged (rewards too "
                f"large for the learning rate {self.cfg.lr:g}?); this agent cannot be used")

    def greedy_policy(self) -> "GreedyPolicy":
        """A detached copy of the current network that acts greedily (small, picklable)."""
        return GreedyPolicy(copy.deepcopy(self.net), self.scale.clone())

    def state_dict(self) -> dict:
        """Everything needed to continue bit for bit: weights, optimiser, replay, RNG, counters."""
        return {
            "config": asdict(self.cfg),
            "obs_dim": self.obs_dim,
            "n_actions": self.n_actions,
            "net": self.net.state_dict(),
            "target": self.target.state_dict() if self.target is not None else None,
            "optimizer": self.optimizer.state_dict(),
            "replay": self.replay.state_dict(),
            "rng": self.rng.bit_generator.state,
            "episode": self.episode,
            "updates": self.updates,
        }

    def load_state_dict(self, state: dict) -> None:
        """Continue from `state`; `CheckpointMismatch` when it comes from another configuration."""
        # `episodes` may differ: training extended to more episodes continues as if uninterrupted
        mine = {**asdict(self.cfg), "obs_dim": self.obs_dim, "n_actions": self.n_actions}
        mine.pop("episodes")
        theirs = {**state["config"], "obs_dim": state.get("obs_dim", self.obs_dim),
                  "n_actions": state.get("n_actions", self.n_actions)}
        differ = [f"{k}: checkpoint {theirs.get(k)!r}, this run {v!r}" for k, v in mine.items()
                  if _plain(theirs.get(k)) != _plain(v)]
        if differ:
            raise CheckpointMismatch("the checkpoint was written by another configuration ("
                                     + "; ".join(differ) + "); resume with the same configuration and "
                                     "seed, or train in another checkpoint directory")
        self.net.load_state_dict(state["net"])
        if self.target is not None and state["target"] is not None:
            self.target.load_state_dict(state["target"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.replay.load_state_dict(state["replay"])
        self.rng.bit_generator.state = state["rng"]
        self.episode, self.updates = state["episode"], state["updates"]
        self.epsilon = epsilon(self.cfg, self.episode)


def nonfinite(net: nn.Module) -> list[str]:
    """Names of the parameters of `net` holding NaN or infinite values."""
    return [name for name, p in net.named_parameters() if not torch.isfinite(p).all()]


def _plain(value):
    """Lists and tuples alike (a config read back from a checkpoint may hold either)."""
    return tuple(value) if isinstance(value, (list, tuple)) else value


class GreedyPolicy:
    """argmax_a Q(s, a) of a frozen network: what a trained agent does at test time. Only finite
    weights make one (`NonFiniteWeightsError`), so a diverged agent is never tested, selected
    or cached.

    It is asked once per decision, hundreds of thousands of times per trained agent (validation),
    one observation at a time, where torch's per-call overhead is several times the arithmetic.
    So a CPU float32 network made only of ``nn.Linear`` and ``nn.ReLU`` layers in an
    ``nn.Sequential`` (what :func:`q_network` builds) is evaluated in numpy, from weights copied
    once here; any other network goes through torch. Pickles hold only the network and the
    scale (as before this fast path), and the numpy weights are rebuilt on unpickling."""

    def __init__(self, net: nn.Module, scale: torch.Tensor):
        bad = nonfinite(net)
        if bad:
            raise NonFiniteWeightsError(f"Q-network weights {bad} are not finite: a diverged agent cannot act")
        self.net, self.scale = net.eval(), scale
        plain_scale = isinstance(scale, torch.Tensor) and scale.dtype == torch.float32 and scale.device.type == "cpu"
        self._layers = _numpy_layers(net) if plain_scale else None
        self._scale = scale.detach().numpy().copy() if self._layers is not None else None

    def q_values(self, obs) -> np.ndarray:
        """Q(s, ·) for one observation (shape (obs_dim,)) or a batch (shape (n, obs_dim)), float32."""
        if self._layers is None:
            with torch.no_grad():
                return self.net(torch.as_tensor(np.asarray(obs, np.float32)) / self.scale).numpy()
        return _numpy_forward(self._layers, self._scale, obs)

    def __call__(self, obs) -> int:
        return int(np.argmax(self.q_values(obs)))

    def __getstate__(self) -> dict:
        return {"net": self.net, "scale": self.scale}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["net"], state["scale"])


def _numpy_forward(layers: list[tuple[np.ndarray | None, np.ndarray | None]], scale: np.ndarray, obs) -> np.ndarray:
    """The forward pass of :func:`_numpy_layers`' network on ``obs / scale`` (float32)."""
    x = np.asarray(obs, np.float32) / scale  # float32 / float32: the same rounding as the torch division
    for weight_t, bias in layers:  # x is always a fresh array here: in place is safe
        if weight_t is None:
            np.maximum(x, 0, out=x)
        else:
            x = x @ weight_t
            if bias is not None:
                x += bias
    return x


def _numpy_layers(net: nn.Module, copy: bool = True) -> list[tuple[np.ndarray | None, np.ndarray | None]] | None:
    """``(W.T, b)`` per ``nn.Linear`` and ``(None, None)`` per ``nn.ReLU`` of a CPU float32
    ``nn.Sequential`` of exactly those layer types, in order; None for any other network (it then
    runs through torch). With ``copy`` the arrays are frozen copies; without, views that share
    memory with the parameters and so follow in-place updates."""
    if type(net) is not nn.Sequential or len(net) == 0:
        return None
    layers: list[tuple[np.ndarray | None, np.ndarray | None]] = []
    for layer in net:
        if type(layer) is nn.ReLU:
            layers.append((None, None))
        elif type(layer) is nn.Linear:
            params = [p for p in (layer.weight, layer.bias) if p is not None]
            if any(p.dtype != torch.float32 or p.device.type != "cpu" for p in params):
                return None
            weight_t = layer.weight.detach().numpy().T
            bias = layer.bias.detach().numpy() if layer.bias is not None else None
            if copy:  # C-order copies: frozen here
                weight_t, bias = weight_t.copy(), (bias.copy() if bias is not None else None)
            layers.append((weight_t, bias))
        else:
            return None
    return layers


CHECKPOINT = "checkpoint.pt"


def save_checkpoint(path: Path, agent: DQNAgent, history: list[dict]) -> None:
    """Write atomically so a kill mid-write leaves the last good one."""
    atomic_write(path, lambda fh: torch.save({"agent": agent.state_dict(), "history": history}, fh))


def train(agent: DQNAgent, run_episode: Callable[[DQNAgent, int], dict], cfg: DQNConfig,
          checkpoint_dir: str | os.PathLike | None = None) -> list[dict]:
    """Train for ``cfg.episodes`` episodes; resume from ``checkpoint_dir`` if it holds a checkpoint.

    ``run_episode(agent, episode)`` plays one episode — acting with ``agent.act(obs, explore=True)``
    and storing every agent's transitions with ``agent.remember`` — and returns its statistics
    (at least ``"return"``). It must seed its environment from ``episode`` so a resumed run
    replays the same episodes. Returns one dict per episode: the episode's statistics, the ε it
    was played with, and the update's loss.
    """
    history: list[dict] = []
    ckpt = Path(checkpoint_dir) / CHECKPOINT if checkpoint_dir is not None else None
    if ckpt is not None:
        ckpt.parent.mkdir(parents=True, exist_ok=True)
        if ckpt.exists():
            # our own file; it holds numpy RNG state and episode statistics, not only tensors
            saved = torch.load(ckpt, weights_only=False)
            try:
                agent.load_state_dict(saved["agent"])
            except CheckpointMismatch as error:
                raise CheckpointMismatch(f"{ckpt}: {error}") from None
            history = saved["history"]
    bar = tqdm(range(agent.episode, cfg.episodes), initial=agent.episode, total=cfg.episodes,
               desc="DQN", leave=False)
    threads = torch.get_num_threads()
    torch.set_num_threads(cfg.threads)
    try:
        for episode in bar:
            eps = agent.epsilon
            stats = run_episode(agent, episode)
            if "return" not in stats:
                raise KeyError("run_episode must return a dict with a 'return' entry")
            history.append({"episode": episode, "epsilon": eps, **stats, **agent.end_episode()})
            bar.set_postfix({"return": f"{stats['return']:.1f}", "eps": f"{eps:.2f}"})
            if ckpt is not None:
                save_checkpoint(ckpt, agent, history)
    finally:
        torch.set_num_threads(threads)
    return history
