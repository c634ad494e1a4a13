"""Control rows for the OracleTSC tables (issue 15): what a reward shaping must beat.

The surrogate is pre-trained on labels of the max-queue heuristic, so any sharpening of its
answers moves it toward that heuristic and improves control, whatever the reward. Three rows
separate "the reward taught something" from "PPO made the policy more decisive":

- ``PPO, random reward``: the same fine-tune with R_env replaced by N(0, σ) noise
  (:attr:`~.oracle_training.OracleConfig.random_reward_std`), same agent seeds;
- ``before, greedy``: the backbone before fine-tuning decoded greedily (temperature 0), the most
  decisive the starting policy can be without learning;
- ``max-queue heuristic``: the phase serving the most queued vehicles, the heuristic the
  surrogate's labels come from.

A shaping "helps" only where it beats the plain reward *and* these controls (see
:func:`llmtraffic.signal.llm_tables.shaping_claim`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .. import study
from .baseline_jobs import evaluate_episode
from .evaluation import CLASSIC, COLUMNS, evaluate
from .state import IntersectionState
from .surrogate import max_queue_phase

RANDOM_REWARD = "PPO, random reward"
GREEDY_BEFORE = "before, greedy"
MAX_QUEUE = "max-queue heuristic"
CONTROLS = (RANDOM_REWARD, GREEDY_BEFORE, MAX_QUEUE)

RANDOM_REWARD_STD = 3.0
"""σ of the random reward: about the spread of R_env per 10-s decision on Cologne1."""


class MaxQueueController:
    """``act(state)``: the phase whose lanes hold the most queued vehicles (first on ties)."""

    def act(self, state: IntersectionState) -> int:
        return max_queue_phase(state)

    def __repr__(self) -> str:
        return "MaxQueueController()"


def _run(seed: int, result: dict) -> dict:
    """One run of an evaluation (see :mod:`.llm_jobs`) from an :func:`.evaluation.evaluate` result."""
    queues = result["queue_series"]
    return {"seed": seed, **{k: result[k] for k in (*COLUMNS, "deadlock", "deadlock_time_s")},
            "invalid_rate": 0.0, "queue_series": list(queues),
            "r_env": [float(a - b) for a, b in zip(queues, queues[1:])]}


def controller_evaluation(controller, scenario: str, eval_seeds: Sequence[int], episode_s: int = 3600) -> dict:
    """A controller without answers on ``eval_seeds`` as an evaluation (the shape of
    :func:`llmtraffic.signal.llm_jobs.evaluate_run`; no agreement or traces)."""
    runs = [_run(seed, evaluate(scenario, controller, seed=seed, episode_s=episode_s)) for seed in eval_seeds]
    return {"scenario": scenario, "episode_s": episode_s, "runs": runs, "agreement": [], "traces": []}


def learned_evaluation(method: str, scenario: str, agents: dict[int, Any], eval_seeds: Sequence[int],
                       episode_s: int = 3600, executor: str = "serial", jobs: int | None = None,
                       rules: str = "study") -> dict:
    """A deep-RL row of Table 1 (IDQN, PressLight, IPPO: one trained agent per agent seed) on the
    LLM rows' eval seeds, so that one table holds the classic, deep-RL and LLM rows on the same
    episodes. An agent is its training (:func:`.baseline_jobs.trainings`; its episodes are
    cached and shared with ``tsc_baselines``) or a controller object (played uncached).

    Its runs carry their ``agent_seed``, and its units are the agent seeds (``"units": "agent
    seeds"``, see :func:`llmtraffic.study.stats.per_run`): a greedy agent gives one run whatever the eval
    seed on CityFlow, so its eval runs are not independent. ``rules``: the environment's rule set
    (:mod:`llmtraffic.signal.rules`; the agents are trained under the study's)."""
    if not agents:
        raise ValueError(f"learned_evaluation: no trained {method} agents")
    tasks = [dict(method=method, scenario=scenario, seed=s, episode_s=episode_s, rules=rules,
                  **({"training": a} if isinstance(a, dict) else {"controller": a}))
             for a in agents.values() for s in eval_seeds]
    results = study.run_grid(evaluate_episode, tasks, executor=executor, jobs=jobs, desc=f"{method} episodes")
    seeds = [a for a in agents for _ in eval_seeds]
    runs = [{**_run(t["seed"], r), "agent_seed": a} for t, r, a in zip(tasks, results, seeds)]
    return {"scenario": scenario, "episode_s": episode_s, "runs": runs, "agreement": [], "traces": [],
            "units": "agent seeds", "rules": rules}


def _cached(kind: str, name: str, make, scenario: str, eval_seeds: Sequence[int], episode_s: int) -> dict:
    params = {"controller": name, "scenario": scenario, "eval_seeds": list(eval_seeds), "episode_s": episode_s}
    return study.cached(kind, params, lambda: controller_evaluation(make(), scenario, eval_seeds, episode_s))


def heuristic_evaluation(scenario: str, eval_seeds: Sequence[int], episode_s: int = 3600) -> dict:
    """The max-queue heuristic on ``eval_seeds`` (cached, kind ``tsc_heuristic``)."""
    return _cached("tsc_heuristic", MAX_QUEUE, MaxQueueController, scenario, eval_seeds, episode_s)


def classic_evaluation(method: str, scenario: str, eval_seeds: Sequence[int], episode_s: int = 3600,
                       rules: str = "study") -> dict:
    """A classic Table 1 row (``"MaxPressure"``, ``"FixedTime (t_fixed=30)"``, …) on the same eval
    seeds as the LLM rows (each episode cached, kind ``tsc_episode``, shared with ``tsc_baselines``),
    under the rule set ``rules`` (:mod:`llmtraffic.signal.rules`)."""
    if method not in CLASSIC:
        raise ValueError(f"classic_evaluation: {method!r} is not one of {sorted(CLASSIC)}")
    runs = [_run(seed, evaluate_episode(method, scenario, seed, episode_s, rules=rules)) for seed in eval_seeds]
    return {"scenario": scenario, "episode_s": episode_s, "runs": runs, "agreement": [], "traces": [], "rules": rules}


def random_reward_oracle(oracle: dict, std: float = RANDOM_REWARD_STD) -> dict:
    """The ``oracle`` fields of the random-reward control of a fine-tune: R_env → N(0, std), the
    hurdle and entropy term off (they would shape the noise)."""
    return {**oracle, "random_reward_std": std, "reward": {}}


def greedy(ppo: dict | None) -> dict:
    """PPO overrides that decode greedily (temperature 0)."""
    return {**(ppo or {}), "temperature": 0.0}
