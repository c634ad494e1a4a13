"""Cached jobs and units of Table 1's non-LLM rows (``tsc_baselines``).

:func:`train_baseline` trains one IDQN, PressLight or IPPO agent per (scenario, agent seed), cached
by its settings and the source it depends on; :func:`train_all` runs them through the executor.
:func:`evaluate_episode` plays one evaluation episode of a classic or trained controller, cached,
so ``tsc_baselines`` and ``tsc_main`` (which evaluate on the same seeds) play each once.

**Units.** A learned row's independent runs are its agent seeds, not its evaluation episodes: on
CityFlow a greedy controller gives the same run on every eval seed (the flows are fixed and the
seed only draws vehicle priorities at conflicts), so counting eval seeds as units would report a
zero-width interval for one trained agent. Each agent seed's eval runs are averaged into one run
(:func:`llmtraffic.study.stats.per_run`); a fixed controller's runs stay its eval seeds.
:func:`compare` pairs two rows on those runs (a fixed reference is averaged over the same eval
seeds).

**Convergence.** A learned row is only a yardstick if its agents stopped improving.
:func:`training_trend` measures, per agent, how much the mean queue of its last training
episodes changed against the episodes before them; :func:`convergence` states it for a row
("plateaued" when the 95 % CI of that change lies within ±``PLATEAU_PCT``, "still improving"
when it lies below 0).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd

from .. import study
from ..study import stats
from ..study.stats import Estimate, mean_ci
from .baselines import IDQN, DeepRLConfig, PressLight, train
from .evaluation import evaluate_method
from .ippo import IPPOConfig, train_ippo
from .scenarios import load

KINDS = {"IDQN": IDQN, "PressLight": PressLight}
LEARNED = (*KINDS, "IPPO")
TREND_WINDOW = 3
"""Training episodes per half of the trend comparison (the last 3 against the 3 before)."""
PLATEAU_PCT = 5.0
"""A row whose trend's 95 % CI lies within ±5 % of the earlier episodes' queue counts as plateaued."""


def train_baseline(method: str, scenario: str, agent_seed: int, episode_s: int, hidden: list[int],
                   episodes: int, ppo_episodes: int, eps_decay_episodes: int, updates_per_episode: int,
                   learning_starts: int) -> tuple[Any, list[dict]]:
    """One trained IDQN / PressLight (``episodes`` DQN episodes) or IPPO (``ppo_episodes``)
    controller and its per-episode training history. Cached."""
    if method not in LEARNED:
        raise ValueError(f"unknown learned baseline {method!r}; known: {', '.join(LEARNED)}")
    key = dict(method=method, scenario=scenario, simulator=load(scenario).simulator, episode_s=episode_s,
               seed=agent_seed, hidden=list(hidden))
    if method == "IPPO":
        cfg = IPPOConfig(hidden=tuple(hidden), episodes=ppo_episodes, episode_s=episode_s, seed=agent_seed)
        return study.cached("tsc_baselines_ppo", {**key, "episodes": ppo_episodes},
                            lambda: train_ippo(scenario, cfg, progress=False))
    base = DeepRLConfig(episode_s=episode_s)
    dqn = replace(base.dqn, hidden=tuple(hidden), episodes=episodes, eps_decay_episodes=eps_decay_episodes,
                  updates_per_episode=updates_per_episode, learning_starts=learning_starts, seed=agent_seed)
    key |= dict(episodes=episodes, eps_decay_episodes=eps_decay_episodes, updates_per_episode=updates_per_episode,
                learning_starts=learning_starts)
    return study.cached("tsc_baselines_dqn", key, lambda: train(KINDS[method], scenario, replace(base, dqn=dqn, seed=agent_seed)))


def trainings(methods: list[str], scenarios: list[str], agent_seeds: list[int],
              **settings: Any) -> dict[tuple[str, str, int], dict]:
    """(method, scenario, agent seed) → the :func:`train_baseline` arguments of that agent."""
    return {(m, sc, a): dict(method=m, scenario=sc, agent_seed=a, **settings)
            for m in methods for sc in scenarios for a in agent_seeds}


def train_all(methods: list[str], scenarios: list[str], agent_seeds: list[int], executor: str = "serial",
              jobs: int = 1, **settings: Any) -> dict[tuple[str, str, int], tuple[Any, list[dict]]]:
    """Every method × scenario × agent seed through the executor: (method, scenario, seed) → (controller, history)."""
    tasks = trainings(methods, scenarios, agent_seeds, **settings)
    results = study.run_grid(train_baseline, list(tasks.values()), executor=executor, jobs=jobs, desc="deep-RL agents")
    return dict(zip(tasks, results))


def evaluate_episode(method: str, scenario: str, seed: int, episode_s: int = 3600, training: dict | None = None,
                     controller: Any = None, rules: str = "study") -> dict:
    """:func:`~.evaluation.evaluate_method` of one episode under the rule set ``rules``. A classic
    ``method``, or a learned one given its ``training`` (:func:`train_baseline`'s arguments, see
    :func:`trainings`), is cached (kind ``tsc_episode``); a ``controller`` object is played as it
    is, uncached. A learned agent is trained once, under the study's rules, whatever ``rules``."""
    if controller is not None:
        if training is not None:
            raise ValueError("evaluate_episode: give a training or a controller, not both")
        return evaluate_method(method, scenario, seed, episode_s, controller, rules)
    if training is not None and training.get("method") != method:
        raise ValueError(f"evaluate_episode: a {method} episode of a {training.get('method')} training")
    params = dict(method=method, scenario=scenario, seed=seed, episode_s=episode_s, training=training)
    if rules != "study":  # the study's episodes keep their cache key
        params["rules"] = rules
    return study.cached("tsc_episode", params, lambda: evaluate_method(
        method, scenario, seed, episode_s, None if training is None else train_baseline(**training)[0], rules))


def evaluate_rows(classic: Sequence[str], classic_on: Sequence[str], agents: dict[tuple[str, str, int], dict],
                  eval_seeds: Sequence[int], episode_s: int, rules: Sequence[str] = ("study",),
                  executor: str = "serial", jobs: int = 1) -> pd.DataFrame:
    """Table 1's evaluation episodes under each rule set of ``rules`` (:mod:`llmtraffic.signal.rules`):
    the ``classic`` methods on the scenarios ``classic_on`` and every trained agent of ``agents``
    (:func:`trainings`: (method, scenario, agent seed) → training, each trained once under the
    study's rules), on every eval seed. One row per episode (cached, :func:`evaluate_episode`) with
    its ``rules`` and ``agent_seed`` (None for a classic method)."""
    tasks, agent_of = [], []
    for r in rules:
        for m in classic:
            for sc in classic_on:
                tasks += [dict(method=m, scenario=sc, seed=s, episode_s=episode_s, rules=r) for s in eval_seeds]
                agent_of += [None] * len(eval_seeds)
        for (m, sc, a), t in agents.items():
            tasks += [dict(method=m, scenario=sc, seed=s, episode_s=episode_s, training=t, rules=r) for s in eval_seeds]
            agent_of += [a] * len(eval_seeds)
    rows = pd.DataFrame(study.run_grid(evaluate_episode, tasks, executor=executor, jobs=jobs, desc="episodes"))
    rows["rules"] = [t["rules"] for t in tasks]
    rows["agent_seed"] = agent_of
    return rows


def runs_frame(evaluation: dict, method: str, rules: str = "study") -> pd.DataFrame:
    """The runs of an evaluation (:func:`~.controls.classic_evaluation`,
    :func:`~.controls.learned_evaluation`) as rows of :func:`evaluate_rows`' shape."""
    frame = pd.DataFrame(evaluation["runs"]).drop(columns=["queue_series", "r_env"], errors="ignore")
    frame["method"], frame["scenario"], frame["rules"] = method, evaluation["scenario"], rules
    if "agent_seed" not in frame:
        frame["agent_seed"] = None
    return frame


def rules_tables(rows: pd.DataFrame, methods: Sequence[str], scenario: str,
                 rules: Sequence[str]) -> dict[str, pd.DataFrame]:
    """Table 1's layout (:func:`~.evaluation.mean_ci_table`, the scenario's LibSignal columns) once
    per rule set of ``rules`` present in ``rows``."""
    from .evaluation import mean_ci_table, table_columns

    return {r: mean_ci_table(rows[rows["rules"] == r], list(methods), scenario, table_columns(scenario))
            for r in rules if (rows["rules"] == r).any()}


def paper_cells_within(table: pd.DataFrame, paper: pd.DataFrame, pct: float = 1.0) -> list[str]:
    """The ``"method / column"`` cells of a Table 1 layout (:func:`~.evaluation.mean_ci_table`,
    estimates in ``table.attrs``) whose mean lies within ``pct`` % of the paper's value."""
    found = table.attrs.get("estimates", {})
    close = []
    for method in paper.index:
        for column, value in paper.loc[method].items():
            est = found.get(f"{method} / {column}")
            if est is not None and pd.notna(value) and value and abs(est.mean - value) <= abs(value) * pct / 100:
                close.append(f"{method} / {column}")
    return close


def compare(rows: pd.DataFrame, method: str, reference: str, scenario: str, key: str,
            relative: bool = False) -> Estimate:
    """Difference ``method − reference`` of ``key`` on ``scenario`` over independent runs: two
    learned rows pair by agent seed, two fixed rows by eval seed, and a learned row against a
    fixed one pairs each agent seed's mean with the fixed row's mean over the same eval seeds
    (:func:`llmtraffic.study.stats.compare`)."""
    a = rows[(rows["method"] == method) & (rows["scenario"] == scenario)]
    b = rows[(rows["method"] == reference) & (rows["scenario"] == scenario)]
    if a.empty or b.empty:
        raise ValueError(f"compare: no rows for {method if a.empty else reference!r} on {scenario!r}")
    return stats.compare(a, b, key, relative)


def training_trend(history: Sequence[dict], window: int = TREND_WINDOW, key: str = "queue") -> float:
    """Change of the mean ``key`` over the last ``window`` training episodes against the
    ``window`` episodes before them, in % of the earlier mean (negative: the queue still falls)."""
    if window < 1:
        raise ValueError(f"training_trend: window must be >= 1, got {window}")
    values = np.array([float(h[key]) for h in history])
    if values.size < 2 * window:
        raise ValueError(f"training_trend: {values.size} training episodes, need at least {2 * window}")
    before, last = values[-2 * window : -window].mean(), values[-window:].mean()
    if before == 0:
        raise ValueError(f"training_trend: the mean {key} of the earlier episodes is 0")
    return float(100.0 * (last - before) / before)


def convergence(histories: Sequence[Sequence[dict]], window: int = TREND_WINDOW,
                plateau_pct: float = PLATEAU_PCT) -> str:
    """One learned row's convergence from its agents' training histories (one per agent seed),
    e.g. ``"still improving: -12.3 ± 4.0 % (queue, last 3 vs previous 3 training episodes)"``.
    The window shrinks to half the shortest history (short smoke runs)."""
    if not histories:
        raise ValueError("convergence: no training histories")
    window = min(window, min(len(h) for h in histories) // 2)
    if window < 1:
        return "too few training episodes to tell"
    est = mean_ci([training_trend(h, window) for h in histories], unit="%")
    low, high = (est.mean, est.mean) if math.isnan(est.low) else (est.low, est.high)  # one agent: its value
    if -plateau_pct <= low and high <= plateau_pct:
        state = f"plateaued (within ±{plateau_pct:g} %)"
    elif high < 0:
        state = "still improving"
    elif low > 0:
        state = "getting worse"
    else:
        state = f"not settled (the CI spans more than ±{plateau_pct:g} % around 0)"
    return f"{state}: {est.format(1)} (queue, last {window} vs previous {window} training episodes)"
