"""Cached experiment jobs of the bus study, each returning a dataclass.

Jobs take scenario *names* and keyword arguments (:func:`make_scenario`) and plain dicts, so they
are cheap to send to worker processes and their arguments double as cache keys; the keys also
carry a digest of the source they depend on, so editing the simulator or the DQN retrains.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .. import study
from ..rl import dqn as rl_dqn
from ..rl.dqn import DQNConfig, GreedyPolicy
from . import env, metrics, rewards, scenarios, sim, training
from .training import DQNController, check_disjoint, train_validated


def make_scenario(case: str, **kwargs: Any) -> scenarios.Scenario:
    """``case1`` / ``case2`` / ``case3`` / ``generic`` (with ``index``) by name."""
    builders = {"case1": scenarios.case1, "case2": scenarios.case2, "case3": scenarios.case3,
                "generic": scenarios.generic}
    if case not in builders:
        raise ValueError(f"unknown case {case!r}; known: {sorted(builders)}")
    return builders[case](**kwargs)


def dqn_config(dqn: dict, seed: int) -> DQNConfig:
    """A :class:`DQNConfig` from a ``dqn`` dict (e.g. :func:`~llmtraffic.bus.training.budget`)."""
    unknown = sorted(set(dqn) - set(DQNConfig.__dataclass_fields__))
    if unknown:
        raise ValueError(f"unknown dqn setting(s) {unknown}; known: {sorted(DQNConfig.__dataclass_fields__)}")
    return DQNConfig(**{**dqn, "seed": seed})


def source() -> str:
    """Digest of the modules a trained agent depends on."""
    return study.source_digest(sim, scenarios, metrics, env, rewards, training, rl_dqn)


@dataclass
class Agent:
    """One trained agent of one table row, or why the row has none."""

    method: str
    reward: str
    agent_seed: int
    policy: GreedyPolicy | None
    """Greedy policy of the validation-best checkpoint (None when unavailable)."""
    selected: int | None = None
    """Training episodes the selected checkpoint had seen."""
    curve: list[dict] = field(default_factory=list)
    """Greedy validation measures per checkpoint (:attr:`~llmtraffic.bus.training.TrainedAgent.curve`)."""
    unavailable: str = ""
    """Why there is no agent (e.g. reward code that failed validation); empty when there is one."""

    def controller(self) -> DQNController:
        if self.policy is None:
            raise ValueError(f"{self.method} (agent seed {self.agent_seed}) has no agent: {self.unavailable}")
        return DQNController(self.policy, self.method)


def train_job(method: str, case: str, case_kwargs: dict, reward: str, dqn: dict, agent_seed: int,
              val_seeds: list[int], train_horizon_s: float | None = None,
              val_horizon_s: float | None = None) -> Agent:
    """Train a shared DQN on ``reward`` (a name in :data:`~llmtraffic.bus.rewards.REWARDS`, or
    reward code run in the sandbox) with validation-based checkpoint selection. Cached."""
    params = dict(case=case, case_kwargs=case_kwargs, reward=reward, dqn=dqn, agent_seed=agent_seed,
                  val_seeds=list(val_seeds), train_horizon_s=train_horizon_s, val_horizon_s=val_horizon_s,
                  source=source())

    def build() -> Agent:
        scenario, cfg = make_scenario(case, **case_kwargs), dqn_config(dqn, agent_seed)
        if reward in rewards.REWARDS:
            trained = train_validated(scenario, reward, cfg, val_seeds, horizon_s=train_horizon_s,
                                      val_horizon_s=val_horizon_s)
        else:
            from .reward_design.sandbox import SandboxedReward

            with SandboxedReward(reward) as fn:
                trained = train_validated(scenario, fn, cfg, val_seeds, horizon_s=train_horizon_s,
                                          val_horizon_s=val_horizon_s)
        return Agent(method, reward, agent_seed, trained.policy, trained.selected, trained.curve)

    agent = study.cached("bus_agent_validated", params, build)
    agent.method = method  # the row label is not part of the artifact's identity
    return agent


def train_all(runs: dict[str, tuple[str, dict, str, dict]], agent_seeds: list[int], val_seeds: list[int],
              exclude: dict[str, list[int]], executor: str = "serial", jobs: int = 1,
              train_horizon_s: float | None = None, val_horizon_s: float | None = None) -> dict[tuple[str, int], Agent]:
    """Every row of ``runs`` (method → (case, case_kwargs, reward, dqn)) for every agent seed,
    through the executor; ``val_seeds`` are checked disjoint from ``exclude`` (e.g. eval and
    design seeds, by name). Returns (method, agent seed) → :class:`Agent`."""
    check_disjoint(val_seeds, **exclude)
    tasks = [dict(method=m, case=c, case_kwargs=kw, reward=r, dqn=d, agent_seed=a, val_seeds=list(val_seeds),
                  train_horizon_s=train_horizon_s, val_horizon_s=val_horizon_s)
             for m, (c, kw, r, d) in runs.items() for a in agent_seeds]
    agents = study.run_grid(train_job, tasks, executor=executor, jobs=jobs, desc="DQN agents")
    return {(a.method, a.agent_seed): a for a in agents}
