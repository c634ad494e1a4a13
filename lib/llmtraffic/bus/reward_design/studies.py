"""Glue between the reward-design notebooks and the loop (bus seed §5.2.3–5.2.5).

The notebooks ``bus_llm_sensitivity`` (§5.2.3), ``bus_llm_methods`` (§5.2.4, Table 3, Fig. 10),
``bus_ablation`` (§5.2.5, Table 4) and the LLM rows of ``bus_case1`` (§5.2.2) all run the same
job: build a designer from the notebook's parameters (the rule-based designer, or an LLM from an
``llm`` config), run the §4 loop under one *variant* of its settings for one agent seed, then test
the best reward's agent on held-out evaluation episodes. :func:`design_run` is that job, cached
by its parameters; every candidate reward it trains is cached too, keyed by its code, so a reward
met again (in another variant or notebook with the same training setup) is trained once.

Variants: the §5.2.4 methods ``paradigm`` (warm start, analyzer, refiner), ``eureka``, ``critic``
and ``one_shot`` (see :func:`~.designer.method`), and the §5.2.5 ablations ``cold``,
``no_analyzer``, ``no_refiner`` and ``no_initializer`` (each one change from ``paradigm``).
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ... import study
from ...llm import LLM, from_config
from ...rl.dqn import DQNConfig
from .. import scenarios
from ..evaluation import MEASURES, evaluate, relative_change
from ..scenarios import Scenario
from .designer import METHODS, LLMDesigner, method
from .direct import LLMDirect
from .experiment import Designed, DesignSetup, design_reward, train_and_test
from .loop import Designer, LoopConfig, Outcome
from .prompts import Setting
from .rules import LABEL, RulesDesigner

NEEDS_LLM = "needs an LLM backend"
"""What a table cell says when its row needs an LLM and none is configured."""

ABLATIONS = {
    "cold": {"start": "cold"},
    "no_analyzer": {"analyzer": False},
    "no_refiner": {"refiner": False},
    "no_initializer": {"start": "none"},
}
"""§5.2.5: each ablation changes one setting of the full paradigm (warm start)."""

VARIANTS = (*METHODS, *ABLATIONS)

VARIANT_NAMES = {
    "paradigm": "paradigm (ours)", "eureka": "Eureka-style", "critic": "critic", "one_shot": "one-shot",
    "cold": "cold start", "no_analyzer": "without analyzer", "no_refiner": "without refiner",
    "no_initializer": "without initializer",
}
"""Row names of the variants in Tables 3 and 4."""

OBS_SCALE = [1000.0] * 4 + [10.0, 10.0]
"""Observation scaling of the Q-network: headways in metres ÷ 1000, passengers and seconds held
÷ 10 (the same as the expert-reward agents of ``bus_case1``)."""

SCENARIOS = {"case1": scenarios.case1, "case2": scenarios.case2}


def variant_config(variant: str, base: LoopConfig, k: int = 3) -> tuple[LoopConfig, bool]:
    """Loop settings of a variant and whether its designer is a critic (LLM designers only)."""
    if variant in ABLATIONS:
        return replace(base, **ABLATIONS[variant]), False
    if variant in METHODS:
        return method(variant, base, k)
    raise ValueError(f"unknown variant {variant!r}; known: {', '.join(VARIANTS)}")


def designer_label(name: str) -> str:
    """How tables and figures name a designer: the rule-based one says it uses no LLM."""
    return LABEL if name == "rules" else name


def row_label(variant: str, designer: str | None) -> str:
    """Table row of a variant run by ``designer`` (None: an LLM row that cannot run here)."""
    return f"{VARIANT_NAMES[variant]} · {designer_label(designer) if designer else 'LLM designer'}"


def dqn_params(hidden: list[int], episodes: int, eps_decay_episodes: int, updates_per_episode: int,
               target_network: bool, target_update_every: int) -> dict:
    """The ``dqn`` argument of :func:`design_run` from a notebook's DQN parameters."""
    return dict(hidden=list(hidden), episodes=episodes, eps_decay_episodes=eps_decay_episodes,
                updates_per_episode=updates_per_episode, target_network=target_network,
                target_update_every=target_update_every, obs_scale=OBS_SCALE)


def make_designer(name: str, llm: dict | None, scenario: Scenario, critic: bool = False,
                  seed: int = 0) -> tuple[Designer, LLM | None]:
    """The designer ``name``: ``rules`` (no LLM), or an LLM built from the ``llm`` config.

    The rule-based designer has no critic mode: under the critic's loop settings it edits from
    test metrics as always (the notebooks say so)."""
    if llm is None:
        if name != "rules":
            raise ValueError(f"designer {name!r} needs an llm config (llmtraffic.llm.from_config); "
                             "without one only the 'rules' designer runs")
        headway = float(np.mean([line.headway_s for line in scenario.lines]))
        return RulesDesigner(scheduled_headway_s=headway), None
    model = from_config(llm)
    return LLMDesigner(model, Setting.of(scenario), critic=critic, seed=seed), model


def runnable(designers: list[dict]) -> tuple[list[dict], list[str]]:
    """Split a ``designers`` parameter (entries ``{name, llm}``) into those that can run here
    and the names of those skipped for lack of an LLM backend."""
    run, skipped = [], []
    for entry in designers:
        unknown = set(entry) - {"name", "llm"}
        if "name" not in entry or unknown:
            raise ValueError(f"designers entry {entry!r}: needs 'name' and optionally 'llm', got keys {sorted(entry)}")
        (run if entry["name"] == "rules" or entry.get("llm") else skipped).append(entry)
    return run, [e["name"] for e in skipped]


@dataclass
class DesignRun:
    """One loop (designer × variant × agent seed) and its best reward tested on evaluation episodes."""

    designer: str
    variant: str
    seed: int
    outcome: Outcome
    """Every candidate, its check, test metrics on the loop's test seeds and the refiner's verdict."""
    eval_rows: list[dict]
    """The best reward's agent on each evaluation episode: ``seed`` and what
    :func:`~llmtraffic.bus.evaluation.evaluate` returns (§5.1 measures, incomplete share, ``by_stop``)."""
    usage: dict | None
    """LLM cost of the loop (``Usage.as_dict()``); None for the rule-based designer."""
    wall_s: float
    """Wall time of the loop when it ran (not when it came from the cache)."""

    @property
    def best_code(self) -> str:
        return self.outcome.best_code


LOOP_SOURCES = ("designer.py", "experiment.py", "loop.py", "prompts.py", "rules.py")
"""Modules whose code decides what a loop does; their digest is part of every run's cache key."""


def loop_source_digest() -> str:
    """Digest of :data:`LOOP_SOURCES`, so editing the loop, the prompts or the rule-based designer
    invalidates cached runs (the harness's cache key holds only parameters and the version)."""
    folder = Path(__file__).parent
    return hashlib.sha256(b"".join((folder / name).read_bytes() for name in LOOP_SOURCES)).hexdigest()[:16]


def _setup(scenario: str, dqn: dict, seed: int, test_seeds: list[int], horizon_s: float | None,
           train_horizon_s: float | None) -> DesignSetup:
    return DesignSetup(scenario=SCENARIOS[scenario](), dqn=DQNConfig(**{**dqn, "seed": seed}),
                       test_seeds=list(test_seeds), train_horizon_s=train_horizon_s, test_horizon_s=horizon_s)


def design_run(*, designer: str, llm: dict | None, variant: str, seed: int, dqn: dict,
               test_seeds: list[int], eval_seeds: list[int], iterations: int, slack: float | list[float],
               k: int = 3, max_retries: int = 3, horizon_s: float | None = None,
               train_horizon_s: float | None = None, scenario: str = "case1") -> DesignRun:
    """Run the loop for one designer, variant and agent seed (cached; a job for ``study.run_grid``).

    ``dqn`` holds :class:`~llmtraffic.rl.dqn.DQNConfig` fields (the seed comes from ``seed``);
    ``test_seeds`` are the episodes the loop tests each candidate on (its feedback, §4.3);
    ``eval_seeds`` are separate episodes on which the best reward's agent is reported, so the
    reported numbers are not the ones the loop selected on.
    """
    params = dict(designer=designer, llm=llm, variant=variant, seed=seed, dqn=dqn, test_seeds=list(test_seeds),
                  eval_seeds=list(eval_seeds), iterations=iterations, slack=slack, k=k, max_retries=max_retries,
                  horizon_s=horizon_s, train_horizon_s=train_horizon_s, scenario=scenario)
    candidate_key = {name: params[name] for name in ("seed", "dqn", "test_seeds", "horizon_s", "train_horizon_s", "scenario")}

    def train(setup: DesignSetup, code: str) -> Designed:
        return study.cached("bus_reward_candidate", {**candidate_key, "code": code}, lambda: train_and_test(setup, code))

    def build() -> DesignRun:
        start = time.perf_counter()
        setup = _setup(scenario, dqn, seed, test_seeds, horizon_s, train_horizon_s)
        loop, critic = variant_config(variant, LoopConfig(iterations=iterations, slack=slack, max_retries=max_retries), k)
        agent, model = make_designer(designer, llm, setup.scenario, critic=critic, seed=seed)
        outcome, best = design_reward(setup, agent, loop, progress=False, train=train)
        rows = [{"seed": s, **evaluate(setup.scenario, best.controller, s, horizon_s)} for s in eval_seeds]
        usage = model.usage().as_dict() if model is not None else None
        return DesignRun(designer, variant, seed, outcome, rows, usage, time.perf_counter() - start)

    return study.cached("bus_reward_design", {**params, "loop_source": loop_source_digest()}, build)


def direct_run(*, llm: dict, seeds: list[int], horizon_s: float | None = None, scenario: str = "case1",
               method: str = "LLM-direct control") -> tuple[list[dict], dict]:
    """The LLM-direct controller (App. A.5) on test episodes: one row per seed (``method``, ``seed``
    and the :func:`~llmtraffic.bus.evaluation.evaluate` measures, plus ``decisions`` and
    ``failures``, the answers it could not read), and the LLM cost of all of them."""
    case = SCENARIOS[scenario]()
    model = from_config(llm)
    rows = []
    for seed in seeds:
        controller = LLMDirect(model, Setting.of(case), name=method)
        rows.append({"method": method, "seed": seed, **evaluate(case, controller, seed, horizon_s),
                     "decisions": controller.decisions, "failures": controller.failures})
    return rows, model.usage().as_dict()


def eval_frame(runs: dict[str, list[DesignRun]]) -> pd.DataFrame:
    """Evaluation rows of every run, one per (row label, agent seed, evaluation episode), with a
    ``method`` column holding the row label (the layout of ``bus.evaluation.mean_std_table``)."""
    return pd.DataFrame([{"method": label, "agent_seed": r.seed, **row}
                         for label, group in runs.items() for r in group for row in r.eval_rows])


def cost_table(runs: dict[str, list[DesignRun]]) -> pd.DataFrame:
    """LLM cost per experiment (row), summed over its agent seeds; rows without an LLM are left out."""
    rows = {}
    for label, group in runs.items():
        usages = [r.usage for r in group if r.usage is not None]
        if usages:
            rows[label] = {key: sum(u[key] for u in usages)
                           for key in ("calls", "live_calls", "prompt_tokens", "completion_tokens", "total_tokens")}
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("experiment")


def loop_summary(runs: dict[str, list[DesignRun]]) -> pd.DataFrame:
    """Per row: candidates trained, invalid ones, valid ones not kept (rejected by the refiner, or
    beaten by another of the ``k`` samples of their iteration), best test travel time of the loop
    (on its test seeds; mean over agent seeds) and wall time of the loops."""
    out: dict[str, dict[str, Any]] = {}
    for label, group in runs.items():
        h = [r.outcome.history() for r in group]
        out[label] = {
            "candidates": sum(len(x) for x in h),
            "invalid": sum(int((~x["valid"]).sum()) for x in h),
            "not kept": sum(int((x["valid"] & ~x["accepted"]).sum()) for x in h),
            "best loop travel time (s)": round(float(np.mean([r.outcome.best.travel_time for r in group])), 1),
            "wall time (s)": round(sum(r.wall_s for r in group), 1),
        }
    return pd.DataFrame.from_dict(out, orient="index").rename_axis("experiment")


def best_so_far(run: DesignRun) -> list[float]:
    """Best accepted test travel time after each iteration (iteration 0: the starting reward).

    An iteration whose candidates were all rejected or invalid keeps the previous best, so the
    list has ``iterations + 1`` entries whenever the loop ran to its limit (§5.2.3's improvement
    per iteration)."""
    h = run.outcome.history()
    accepted = h[h["accepted"]].groupby("iteration")["travel_time_s"].min()
    best, out = float("inf"), []
    for i in range(int(h["iteration"].max()) + 1):
        best = min(best, float(accepted.get(i, float("inf"))))
        out.append(best)
    return out


def versus_best_other(frame: pd.DataFrame, label: str, others: list[str]) -> dict[str, Any]:
    """Relative change (%) of ``label`` against the other row with the lowest mean travel time,
    in travel and waiting time (§5.2.4: the paradigm vs the best existing method)."""
    means = frame.groupby("method")["travel_time_s"].mean()
    best = min(others, key=lambda o: means[o])
    return {"compared with": best,
            "travel time (%)": relative_change(frame, label, best, "travel_time_s"),
            "waiting time (%)": relative_change(frame, label, best, "wait_time_s")}
