"""Candidate rewards on the bus simulator: train agents on a reward, test them, and run the loop on them.

``design_reward(setup, designer, loop)`` runs the §4 paradigm where every candidate reward is
validated in the sandbox, then a shared DQN is trained on it (the reward evaluated in a sandboxed
worker process, never in the notebook's process) and tested greedily on the design seeds. The
analyzer gets the training-return curve, the test metrics, the headway SD per stop and the last
test transitions (§4.3).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from ...rl.dqn import DQNConfig
from ..env import HoldingEnv
from ..scenarios import Scenario
from ..evaluation import MEASURES, evaluate
from ..training import DQNController, train_holding
from .loop import Designer, LoopConfig, Outcome, Trial, run_loop
from .sandbox import SandboxedReward, example_transitions, validate_reward_code
from .search import EXPERT, EXPERT_LABEL, render


def expert_code(state_dim: int) -> str:
    """The warm start: the RL-local expert reward (``rewards.rl_local``) written as code for a
    ``state_dim``-value state; a test checks the two agree."""
    return render(EXPERT, state_dim, EXPERT_LABEL)


@dataclass
class DesignSetup:
    """How each candidate reward is trained and tested."""

    scenario: Scenario
    dqn: DQNConfig
    design_seeds: list[int] = field(default_factory=lambda: [0])
    """Episodes each candidate is tested on (the training episodes use seeds from 1,000,000 up)."""
    train_horizon_s: float | None = None
    """Training episode length (None: the scenario's; case 2 trains on 2 h, §5.1)."""
    test_horizon_s: float | None = None
    last_transitions: int = 20
    """Test transitions shown to the analyzer."""
    reward_timeout_s: float = 5.0
    """Per-call limit on generated reward code during training."""


@dataclass
class Designed:
    """A trained reward: the code, the agent trained on it and its test metrics."""

    code: str
    controller: DQNController
    trial: Trial


def mean_metrics(per_seed: list[dict]) -> dict[str, float]:
    keys = (*MEASURES, "incomplete_share")
    return {k: float(np.mean([m[k] for m in per_seed])) for k in keys}


def stop_sd(per_seed: list[dict]) -> list[float]:
    """Headway SD per control stop (all lines in order), mean over episodes."""
    rows = np.vstack([np.concatenate([np.asarray(v, float) for v in m["by_stop"].values()]) for m in per_seed])
    seen = (~np.isnan(rows)).sum(axis=0)  # a stop without two departures in an episode has no SD
    means = np.where(seen > 0, np.nansum(rows, axis=0) / np.maximum(seen, 1), np.nan)
    return [round(float(v), 1) for v in means]


def last_transitions(setup: DesignSetup, controller: DQNController, reward: SandboxedReward) -> list[dict]:
    """The last transitions of a greedy test episode on the first design seed, for the analyzer."""
    env = HoldingEnv(setup.scenario, reward, seed=setup.design_seeds[0], horizon_s=setup.test_horizon_s, infos=False)
    env.reset(seed=setup.design_seeds[0])
    kept: list[dict] = []
    for _ in env.agent_iter():
        obs, _, terminated, truncated, info = env.last()
        env.step(None if terminated or truncated else int(controller.act(obs, info)))
        for t in env.pop_transitions():
            kept.append({"agent": t.agent, "state": np.round(t.state, 1).tolist(), "action": t.action,
                         "reward": round(t.reward, 3), "next_state": np.round(t.next_state, 1).tolist()})
        kept = kept[-setup.last_transitions:]
    return kept


def train_and_test(setup: DesignSetup, code: str, seed: int | None = None) -> Designed:
    """Train a shared DQN on sandboxed ``code`` and test it on ``setup.design_seeds``."""
    cfg = setup.dqn if seed is None else replace(setup.dqn, seed=seed)
    with SandboxedReward(code, timeout_s=setup.reward_timeout_s) as reward:
        agent, history = train_holding(setup.scenario, reward, cfg, horizon_s=setup.train_horizon_s, test_seed=None)
        controller = DQNController(agent.greedy_policy(), name="LLM-enhanced RL")
        transitions = last_transitions(setup, controller, reward)
    per_seed = [evaluate(setup.scenario, controller, s, setup.test_horizon_s) for s in setup.design_seeds]
    trial = Trial(mean_metrics(per_seed), [h["return"] for h in history], transitions, stop_sd(per_seed))
    return Designed(code, controller, trial)


def design_reward(setup: DesignSetup, designer: Designer, loop: LoopConfig,
                  start_code: str | None = None, progress: bool = True,
                  train: Callable[[DesignSetup, str], Designed] = train_and_test) -> tuple[Outcome, Designed | None]:
    """Run the loop; return its outcome and the final (last accepted) reward with the agent
    trained on it (None when the loop found no valid starting reward; ``outcome.failure`` says when
    the designer wrote no valid reward). ``start_code``: the warm start (default: :func:`expert_code`).

    ``train(setup, code)`` trains and tests one candidate (default :func:`train_and_test`; the
    notebooks pass a cached version, so a reward met again in another loop is not retrained)."""
    trained: dict[str, Designed] = {}

    def evaluate_code(code: str, iteration: int) -> Trial:
        trained[code] = train(setup, code)
        return trained[code].trial

    examples = example_transitions(setup.scenario.state_dim)  # the state the agents will see

    def validate(code: str) -> tuple[bool, str]:
        check = validate_reward_code(code, transitions=examples)
        return check.ok, check.reason

    start = start_code or expert_code(setup.scenario.state_dim)
    outcome = run_loop(designer, evaluate_code, validate, loop, expert_code=start, progress=progress)
    return outcome, trained.get(outcome.final_code)
