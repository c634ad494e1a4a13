"""Cached experiment jobs of the bus study, each returning a dataclass.

Jobs take scenario *names* and keyword arguments (:func:`~llmtraffic.bus.scenarios.by_name`) and
plain dicts, so they are cheap to send to worker processes and their arguments double as cache
keys; the keys also carry a digest of the source they depend on, so editing the simulator or the
DQN retrains.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from .. import study
from ..rl import dqn as rl_dqn
from ..rl.dqn import DQNConfig, GreedyPolicy
from . import env, metrics, rewards, scenarios, sim, training
from .controllers import Feedback, NoHolding
from .evaluation import evaluate_lines
from .training import DQNController, check_disjoint, train_validated


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
        scenario, cfg = scenarios.by_name(case, **case_kwargs), dqn_config(dqn, agent_seed)
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


def train_each(runs: dict[tuple[str, int], tuple[str, dict, str, dict]], val_seeds: list[int],
               exclude: dict[str, list[int]], executor: str = "serial", jobs: int = 1,
               train_horizon_s: float | None = None, val_horizon_s: float | None = None) -> dict[tuple[str, int], Agent]:
    """Every (method, agent seed) → (case, case_kwargs, reward, dqn) of ``runs`` through the
    executor; ``val_seeds`` are checked disjoint from ``exclude`` (e.g. eval and design seeds, by
    name). Returns (method, agent seed) → :class:`Agent`."""
    check_disjoint(val_seeds, **exclude)
    tasks = [dict(method=m, case=c, case_kwargs=kw, reward=r, dqn=d, agent_seed=a, val_seeds=list(val_seeds),
                  train_horizon_s=train_horizon_s, val_horizon_s=val_horizon_s)
             for (m, a), (c, kw, r, d) in runs.items()]
    agents = study.run_grid(train_job, tasks, executor=executor, jobs=jobs, desc="DQN agents")
    return {(ag.method, ag.agent_seed): ag for ag in agents}


def train_all(runs: dict[str, tuple[str, dict, str, dict]], agent_seeds: list[int], val_seeds: list[int],
              exclude: dict[str, list[int]], executor: str = "serial", jobs: int = 1,
              train_horizon_s: float | None = None, val_horizon_s: float | None = None) -> dict[tuple[str, int], Agent]:
    """:func:`train_each` for every row of ``runs`` (method → (case, case_kwargs, reward, dqn)) and agent seed."""
    return train_each({(m, a): run for m, run in runs.items() for a in agent_seeds}, val_seeds, exclude,
                      executor, jobs, train_horizon_s, val_horizon_s)


# ---------------------------------------------------------------- case 2's agents, reused by case 3 and §5.5

TRAIN_HORIZON_S = 2 * scenarios.HOUR_S
"""Case 2 trains on 2-h episodes and tests on 4-h ones (§5.3.1)."""


def ours_label(llm: dict | None) -> str:
    """Row name of LLM-enhanced RL: the paper's "GPT-4 + RL" pattern with our designer (the
    model of the ``llm`` config, or the search designer (no LLM))."""
    from .reward_design.jobs import designer_label

    return f"{designer_label(llm)} + RL"


@dataclass
class Case2Agents:
    """Everything trained on case 2, per agent seed; case 3 (§5.4) and the generated systems
    (§5.5) reuse it unchanged, which the generic §3.2 state makes possible."""

    ours: str
    """Row label of the designed reward's agent (:func:`ours_label`)."""
    agents: dict[tuple[str, int], Agent]
    """(method, agent seed) → validation-selected agent: RL-local, RL-global and ``ours``."""
    designs: dict[int, Any]
    """Agent seed → the §4 loop (:class:`~.reward_design.jobs.DesignRun`) that chose ours' reward."""

    def codes(self) -> dict[int, str]:
        """Agent seed → the reward code the loop chose."""
        return {seed: run.final_code for seed, run in self.designs.items()}


def case2_agents(llm: dict | None, dqn: dict, loop: dict, agent_seeds: list[int], design_seeds: list[int],
                 val_seeds: list[int], eval_seeds: list[int], train_horizon_s: float = TRAIN_HORIZON_S,
                 test_horizon_s: float | None = None, executor: str = "serial", jobs: int = 1) -> Case2Agents:
    """Per agent seed: the §4 loop on case 2 (warm start from RL-local; candidates trained on 2-h
    episodes and tested on ``design_seeds``), then RL-local, RL-global and the loop's final reward,
    each trained with the same budget and validation-based checkpoint selection on validation
    episodes as long as the training ones (so the three rows differ only by their reward). The
    search designer runs unless ``llm`` configures an LLM. Cached."""
    from .reward_design.jobs import LLM_DESIGNER, SEARCH, design_run

    check_disjoint(val_seeds, eval_seeds=eval_seeds, design_seeds=design_seeds)
    unknown = sorted(set(loop) - {"iterations", "slack", "k", "tries"})
    if unknown:
        raise ValueError(f"unknown loop setting(s) {unknown}; known: iterations, slack, k, tries")
    designer = SEARCH if llm is None else LLM_DESIGNER
    tasks = [dict(designer=designer, llm=llm, variant="paradigm", seed=a, dqn=dqn, design_seeds=list(design_seeds),
                  eval_seeds=[], horizon_s=test_horizon_s, train_horizon_s=train_horizon_s, scenario="case2", **loop)
             for a in agent_seeds]
    designs = study.run_grid(design_run, tasks, executor=executor if llm is None else "serial", jobs=jobs,
                             desc="case-2 reward design")
    for run in designs:
        if not run.counted:
            raise ValueError(f"case-2 reward design has no reward: {run.unavailable or run.failure}")
    ours = ours_label(llm)
    runs = {(m, a): ("case2", {}, r, dqn) for a, run in zip(agent_seeds, designs)
            for m, r in (("RL-local", "rl_local"), ("RL-global", "rl_global"), (ours, run.final_code))}
    # validation episodes as long as the training ones: 4-h validation was four fifths of a case-2 agent's cost
    agents = train_each(runs, val_seeds, {}, executor, jobs, train_horizon_s, train_horizon_s)  # seeds checked above
    return Case2Agents(ours, agents, dict(zip(agent_seeds, designs)))


def fixed_controllers(feedback_slack_s: float) -> dict[str, Any]:
    """The controllers without training: no holding and feedback control (with the case's slack)."""
    return {"no holding": NoHolding(), "feedback": Feedback(slack_s=feedback_slack_s)}


# ---------------------------------------------------------------- test episodes


def evaluate_all(case: str, case_kwargs: dict, fixed: dict[str, Any], agents: dict[tuple[str, int], Agent],
                 seeds: list[int], executor: str = "serial", jobs: int = 1, horizon_s: float | None = None,
                 **tags: Any) -> pd.DataFrame:
    """:func:`evaluate_lines` for every fixed controller × seed and every (method, agent seed) ×
    seed, through the executor, as one frame (``agent_seed`` NaN for fixed controllers)."""
    tasks = [dict(method=name, controller=ctrl, seed=s) for name, ctrl in fixed.items() for s in seeds]
    tasks += [dict(method=m, controller=ag.controller(), seed=s, agent_seed=a)
              for (m, a), ag in agents.items() for s in seeds]
    tasks = [dict(case=case, case_kwargs=case_kwargs, horizon_s=horizon_s, **tags, **t) for t in tasks]
    found = study.run_grid(evaluate_lines, tasks, executor=executor, jobs=jobs, desc=f"{case} tests")
    return pd.DataFrame([r for rows in found for r in rows])


def llm_direct(case: str, case_kwargs: dict, llm: dict | None, fixed: dict[str, Any], seeds: list[int],
               horizon_s: float, table_seeds: list[int], table_horizon_s: float, paper_llm: str = "",
               executor: str = "serial", jobs: int = 1):
    """LLM-direct control (App. A.5 prompt) of a multi-line case on ``seeds`` of ``horizon_s``:
    (:class:`~.reward_design.jobs.DirectRun`, its rows, a note). Each decision is a request, so a
    profile may give it fewer or shorter episodes than the table's (``table_seeds`` of
    ``table_horizon_s``): the note says so, the label carries it, and the ``fixed`` controllers run
    on the same episodes beside it; otherwise the note is empty and the rows join the table's."""
    from .reward_design.jobs import direct_run

    own = list(seeds) != list(table_seeds) or horizon_s != table_horizon_s
    note = f"{len(seeds)} episode(s) of {horizon_s / scenarios.HOUR_S:g} h" if own else ""
    run = direct_run(llm=llm, eval_seeds=list(seeds), horizon_s=horizon_s, scenario=case, case_kwargs=case_kwargs,
                     paper_llm=paper_llm, note=note)
    rows = pd.DataFrame(run.rows)
    if own and not run.unavailable:
        rows = pd.concat([rows, evaluate_all(case, case_kwargs, fixed, {}, list(seeds), executor, jobs, horizon_s)],
                         ignore_index=True)
    return run, rows, note


def sensitivity(fixed: dict[str, Any], agents: dict[tuple[str, int], Agent], shares: list[float],
                demands: list[float], seeds: list[int], executor: str = "serial", jobs: int = 1,
                horizon_s: float | None = None) -> pd.DataFrame:
    """§5.3.3: case-2 test episodes with ``shared_share`` in ``shares`` (total demand kept) and
    ``demand_scale`` in ``demands``, every method with its status-quo agents. One row per
    (factor, level, method, agent seed, seed) with the overall measures."""
    levels = [({"shared_share": x}, "shared share", x) for x in shares] + [({"demand_scale": x}, "demand", x) for x in demands]
    frames = [evaluate_all("case2", kw, fixed, agents, seeds, executor, jobs, horizon_s, factor=f, level=x)
              for kw, f, x in levels]
    frame = pd.concat(frames, ignore_index=True)
    return frame[frame["line"] == "overall"].drop(columns=["by_stop", "line"])


# ---------------------------------------------------------------- generated systems (§5.5)


def generic_job(index: int, transferred: dict[str, list[GreedyPolicy]], codes: list[str] | None,
                feedback_slack_s: float, dqn: dict, agent_seeds: list[int], val_seeds: list[int],
                seeds: list[int], train_horizon_s: float = TRAIN_HORIZON_S,
                test_horizon_s: float | None = None) -> dict:
    """§5.5 for one system: its size and the mean overall travel time of no holding, feedback, the
    case-2 agents of ``transferred`` (column → one policy per agent seed) applied unchanged and —
    with ``codes`` (one reward per agent seed) — agents trained on this system with those rewards
    (column ``ours (trained per system)``, cached). A learned column's mean is over agent seeds ×
    ``seeds``, a fixed one's over ``seeds``; column ``"<name> · per agent"`` holds a learned
    column's mean over ``seeds`` per agent seed, its independent runs."""
    scenario = scenarios.generic(index)
    columns: dict[str, list] = {name: [ctrl] for name, ctrl in fixed_controllers(feedback_slack_s).items()}
    columns |= {name: [DQNController(p) for p in policies] for name, policies in transferred.items()}
    if codes is not None:
        trained = [train_job("ours (trained per system)", "generic", {"index": index}, code, dqn, a, val_seeds,
                             train_horizon_s, test_horizon_s) for a, code in zip(agent_seeds, codes)]
        columns["ours (trained per system)"] = [ag.controller() for ag in trained]
    row: dict[str, Any] = {"system": index, "lines": len(scenario.lines),
                           "stops": sum(ln.n_stops for ln in scenario.lines),
                           "shared stops": len(scenario.shared_nodes)}
    fixed = set(fixed_controllers(feedback_slack_s))
    for name, ctrls in columns.items():
        per_agent = [float(np.mean([sim.simulate(scenario, c, seed=s, horizon_s=test_horizon_s).metrics["travel_time_s"]
                                    for s in seeds])) for c in ctrls]
        row[name] = float(np.mean(per_agent))
        if name not in fixed:
            row[f"{name} · {PER_AGENT}"] = per_agent
    return row


PER_AGENT = "per agent"
"""Suffix of :func:`generic_job`'s per-agent-seed columns."""
