"""Shared jobs of the real-world and generic bus studies (bus seed §5.3–5.5).

Case 2 trains everything: the expert agents (RL-local, RL-global) and the reward designed by the
§4 loop with the agent trained on it. Case 3 (§5.4) and the generated systems (§5.5) reuse that
reward and those agents unchanged, which the generic §3.2 state makes possible (same six inputs
whatever the lines and stops). All three notebooks get them from :func:`case2_agents`, cached by
its arguments through :func:`llmtraffic.study.cached`, so a notebook run after ``bus_case2`` with
the same parameters trains nothing.

Jobs take scenario *names* and keyword arguments (:func:`make_scenario`), so they are cheap to
send to worker processes and their parameters double as cache keys.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from .. import study
from ..rl.dqn import GreedyPolicy
from . import scenarios
from .controllers import Feedback, NoHolding
from .evaluation import MEASURES
from .jobs import dqn_config, make_scenario  # noqa: F401 (notebooks and cases 2, 3 use them from here)
from .reward_design.jobs import NEEDS_LLM  # noqa: F401 (the notebooks' text for LLM-only rows)
from .rewards import REWARDS
from .scenarios import HOUR_S, Scenario
from .sim import simulate
from .training import DQNController, train_holding

TRAIN_HORIZON_S = 2 * HOUR_S
"""Case 2 trains on 2-h episodes and tests on 4-h ones (§5.3.1)."""
COLUMNS = {**MEASURES, "incomplete_share": "Incomplete trips (%)"}
"""Table columns: the four §5.1 measures and the share of trips not completed (§5.3.2)."""


def ours_label(designer: str) -> str:
    """Row name of the LLM-enhanced RL method: the paper's "GPT-4 + RL" pattern with our
    designer; the offline rule-based designer says so."""
    from .reward_design.search import LABEL

    return f"{LABEL} + RL" if designer in ("rules", "search") else f"{designer} + RL"


# ---------------------------------------------------------------- training (cached)


def train_agent(case: str, case_kwargs: dict, reward: str, dqn: dict, seed: int,
                train_horizon_s: float | None = TRAIN_HORIZON_S) -> GreedyPolicy:
    """Greedy policy of a shared DQN trained on ``reward``: a name in
    :data:`~llmtraffic.bus.rewards.REWARDS`, or reward code (run in the sandbox). Cached."""
    params = dict(case=case, case_kwargs=case_kwargs, reward=reward, dqn=dqn, seed=seed,
                  train_horizon_s=train_horizon_s)

    def build() -> GreedyPolicy:
        scenario, cfg = make_scenario(case, **case_kwargs), dqn_config(dqn, seed)
        if reward in REWARDS:
            agent, _ = train_holding(scenario, reward, cfg, horizon_s=train_horizon_s, test_seed=None)
        else:
            from .reward_design.sandbox import SandboxedReward

            with SandboxedReward(reward) as fn:
                agent, _ = train_holding(scenario, fn, cfg, horizon_s=train_horizon_s, test_seed=None)
        return agent.greedy_policy()

    return study.cached("bus_agent", params, build)


@dataclass
class DesignedReward:
    """The reward the §4 loop chose on case 2 and the agent trained on it."""

    code: str
    policy: GreedyPolicy
    history: pd.DataFrame
    """One row per candidate reward (:meth:`~.reward_design.loop.Outcome.history`)."""
    designer: str


@dataclass
class Case2Agents:
    """Everything trained on case 2 and reused by cases 3 and the generated systems."""

    rl_local: GreedyPolicy
    rl_global: GreedyPolicy
    designed: DesignedReward


def design_case2(designer: str, llm: dict | None, dqn: dict, loop: dict, design_seeds: list[int],
                 agent_seed: int, train_horizon_s: float = TRAIN_HORIZON_S,
                 test_horizon_s: float | None = None) -> DesignedReward:
    """Run the §4 loop on case 2 (warm start from RL-local; 2-h training, 4-h tests on
    ``design_seeds``, kept apart from the test seeds) with the rule-based designer
    (``designer = "search"``, formerly "rules") or an LLM designer (any other name; ``llm`` configures it). Cached."""
    from .reward_design.experiment import DesignSetup, design_reward
    from .reward_design.loop import LoopConfig
    from .reward_design.jobs import make_designer

    if designer not in ("rules", "search") and llm is None:
        raise ValueError(f"designer {designer!r} needs an llm config (llmtraffic.llm.from_config); "
                         "without one the search designer runs (designer 'search')")
    params = dict(designer=designer, llm=llm if designer not in ("rules", "search") else None, dqn=dqn, loop=loop,
                  design_seeds=list(design_seeds), agent_seed=agent_seed, train_horizon_s=train_horizon_s,
                  test_horizon_s=test_horizon_s)

    def build() -> DesignedReward:
        scenario = scenarios.case2()
        setup = DesignSetup(scenario, dqn_config(dqn, agent_seed), design_seeds=list(design_seeds),
                            train_horizon_s=train_horizon_s, test_horizon_s=test_horizon_s)
        chosen, _ = make_designer(llm if designer not in ("rules", "search") else None, scenario, seed=agent_seed)
        outcome, best = design_reward(setup, chosen, LoopConfig(**loop), progress=False)
        return DesignedReward(best.code, best.controller.policy, outcome.history(), designer)

    return study.cached("bus_case2_design", params, build)


def case2_agents(designer: str, llm: dict | None, dqn: dict, loop: dict, design_seeds: list[int],
                 agent_seed: int, train_horizon_s: float = TRAIN_HORIZON_S, test_horizon_s: float | None = None,
                 executor: str = "serial", jobs: int = 1) -> Case2Agents:
    """The case-2 expert agents (trained in parallel through the executor) and the designed reward."""
    experts = study.run_grid(train_agent, study.grid(
        case=["case2"], case_kwargs=[{}], reward=["rl_local", "rl_global"], dqn=[dqn], seed=[agent_seed],
        train_horizon_s=[train_horizon_s]), executor=executor, jobs=jobs, desc="case-2 expert agents")
    designed = design_case2(designer, llm, dqn, loop, design_seeds, agent_seed, train_horizon_s, test_horizon_s)
    return Case2Agents(*experts, designed)


def baseline_controllers(agents: Case2Agents, feedback_slack_s: float, ours: str) -> dict[str, Any]:
    """Method name → controller: no holding, feedback (with the case's slack), the two expert
    agents and ours (the designed reward's agent)."""
    return {
        "no holding": NoHolding(),
        "feedback": Feedback(slack_s=feedback_slack_s),
        "RL-local": DQNController(agents.rl_local, "RL-local"),
        "RL-global": DQNController(agents.rl_global, "RL-global"),
        ours: DQNController(agents.designed.policy, ours),
    }


# ---------------------------------------------------------------- evaluation jobs


def evaluate_lines(case: str, case_kwargs: dict, method: str, controller, seed: int,
                   horizon_s: float | None = None, **tags: Any) -> list[dict]:
    """One test episode → one row per line and an ``overall`` row: the §5.1 measures and the
    incomplete share (in %), tagged with method, seed and ``tags``. The overall row also holds
    the headway SD at shared stops (``shared_headway_sd_s``, NaN without shared stops) and the
    per-stop headway SD (``by_stop``)."""
    scenario = make_scenario(case, **case_kwargs)
    m = simulate(scenario, controller, seed=seed, horizon_s=horizon_s).metrics
    base = {**tags, "method": method, "seed": seed}

    def row(line: str, values: dict) -> dict:
        return {**base, "line": line, **{k: values[k] for k in MEASURES},
                "incomplete_share": 100.0 * values["incomplete_share"]}

    rows = [row(scenario.line(name).label, values) for name, values in m["by_line"].items()]
    overall = row("overall", m)
    overall["shared_headway_sd_s"] = m["shared_stops"]["headway_sd_s"] if m["shared_stops"] else math.nan
    overall["by_stop"] = m["by_stop"]
    return rows + [overall]


def evaluate_methods(case: str, case_kwargs: dict, controllers: dict[str, Any], seeds: list[int],
                     executor: str = "serial", jobs: int = 1, horizon_s: float | None = None,
                     **tags: Any) -> pd.DataFrame:
    """:func:`evaluate_lines` over methods × seeds through the executor, as one frame."""
    tasks = [dict(case=case, case_kwargs=case_kwargs, method=name, controller=ctrl, seed=s, horizon_s=horizon_s, **tags)
             for name, ctrl in controllers.items() for s in seeds]
    return pd.DataFrame([r for rows in study.run_grid(evaluate_lines, tasks, executor=executor, jobs=jobs,
                                                      desc=f"{case} tests") for r in rows])


# ---------------------------------------------------------------- tables


def line_table(rows: pd.DataFrame, methods: list[str], missing: dict[str, str] | None = None) -> pd.DataFrame:
    """Tables 5–6 layout: one row ``"<line> · <method>"`` per line (then overall) and method,
    each measure as ``mean ± 95 % CI half-width`` over the test episodes
    (:func:`llmtraffic.study.stats.mean_ci`); ``missing`` maps a method without rows to the
    reason shown in its cells (e.g. :data:`NEEDS_LLM`)."""
    groups = dict(list(rows.groupby(["line", "method"])))
    lines = [x for x in dict.fromkeys(rows["line"]) if x != "overall"] + ["overall"]
    out = {}
    for line in lines:
        for method in methods:
            if (line, method) in groups:
                g = groups[(line, method)]
                out[f"{line} · {method}"] = {label: study.stats.mean_ci(g[k]).format(2) for k, label in COLUMNS.items()}
            elif missing and method in missing:
                out[f"{line} · {method}"] = {label: missing[method] for label in COLUMNS.values()}
    table = pd.DataFrame.from_dict(out, orient="index")
    table.index.name = "line · method"
    return table


def mean_of(rows: pd.DataFrame, measure: str, line: str = "overall") -> pd.Series:
    """Mean of ``measure`` per method over the seeds, for one line (default: overall)."""
    return rows[rows["line"] == line].groupby("method", sort=False)[measure].mean()


def reductions(rows: pd.DataFrame, ours: str, baselines: list[str], measure: str = "travel_time_s",
               line: str = "overall") -> pd.DataFrame:
    """How much ``ours`` lowers ``measure`` against each baseline: in seconds (baseline − ours,
    positive = ours better, as §5.4.2 reports) and in percent of the baseline (negative = ours
    lower, as §5.3.2's −3.14 %)."""
    means = mean_of(rows, measure, line)
    for name in [ours, *baselines]:
        if name not in means.index:
            raise ValueError(f"reductions: no rows for method {name!r}; have {sorted(means.index)}")
    return pd.DataFrame(
        {"reduction (s)": [means[b] - means[ours] for b in baselines],
         "change (%)": [100.0 * (means[ours] - means[b]) / means[b] for b in baselines]},
        index=pd.Index([f"vs {b}" for b in baselines], name="comparison"))


def shared_stop_sd(rows: pd.DataFrame, case: str, case_kwargs: dict) -> pd.DataFrame:
    """Mean over seeds of the headway SD at each shared stop, per line serving it (rows
    ``"<line label> @ <stop>"``) and method (columns)."""
    scenario = make_scenario(case, **case_kwargs)
    shared = set(scenario.shared_nodes)
    overall = rows[rows["line"] == "overall"]
    out = {}
    for method, group in overall.groupby("method", sort=False):
        values = {}
        for ln in scenario.lines:
            for i, node in enumerate(ln.nodes):
                if node in shared:
                    values[f"{ln.label} @ stop {i}"] = float(np.nanmean([b[ln.name][i] for b in group["by_stop"]]))
        out[method] = values
    return pd.DataFrame(out).rename_axis("line @ stop")


def shared_stops(scenario: Scenario) -> pd.DataFrame:
    """The shared stops of a scenario: name and the lines (with stop index) serving each."""
    rows = []
    for node in scenario.shared_nodes:
        served = [f"{ln.label} (stop {ln.nodes.index(node)})" for ln in scenario.lines if node in ln.nodes]
        name = scenario.stop_names[node].split(" = ")[0].split(" ", 1)
        rows.append({"stop": name[1] if len(name) > 1 else name[0], "lines": ", ".join(served), "count": len(served)})
    return pd.DataFrame(rows).set_index("stop")


# ---------------------------------------------------------------- sensitivity (§5.3.3)


def corridor_share(scenario: Scenario) -> float:
    """Share of the expected passengers whose whole trip lies in the shared corridor (between
    two shared stops), over all lines: the quantity §5.3.3 varies."""
    inside = total = 0.0
    shared = set(scenario.shared_nodes)
    for ln in scenario.lines:
        rates = np.asarray(ln.rates_ph).sum(axis=1)
        on = np.array([v in shared for v in ln.nodes])
        inside += float((rates[:, None] * np.asarray(ln.od) * np.outer(on, on)).sum())
        total += float(rates.sum())
    return inside / total


def sensitivity(controllers: dict[str, Any], shares: list[float], demands: list[float], seeds: list[int],
                executor: str = "serial", jobs: int = 1, horizon_s: float | None = None) -> pd.DataFrame:
    """§5.3.3: case-2 test episodes with ``shared_share`` in ``shares`` (total demand kept) and
    with ``demand_scale`` in ``demands``, every method with its status-quo agent. One row per
    (factor, level, method, seed) with the overall measures."""
    tasks = [dict(case="case2", case_kwargs={"shared_share": x}, factor="shared share", level=x)
             for x in shares]
    tasks += [dict(case="case2", case_kwargs={"demand_scale": x}, factor="demand", level=x) for x in demands]
    tasks = [{**t, "method": name, "controller": ctrl, "seed": s, "horizon_s": horizon_s}
             for t in tasks for name, ctrl in controllers.items() for s in seeds]
    rows = study.run_grid(evaluate_lines, tasks, executor=executor, jobs=jobs, desc="sensitivity")
    frame = pd.DataFrame([r for rs in rows for r in rs])
    return frame[frame["line"] == "overall"].drop(columns=["by_stop", "line"])


def plot_sensitivity(frame: pd.DataFrame, status_quo_share: float):
    """Two panels of average travel time per method: against the shared share and against demand."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2), sharey=False)
    for ax, factor, xlabel in zip(axes, ("shared share", "demand"),
                                  ("passengers travelling within the shared corridor (%)", "demand (% of status quo)")):
        part = frame[frame["factor"] == factor]
        means = part.groupby(["method", "level"], sort=False)["travel_time_s"].mean().unstack("method")
        for method in dict.fromkeys(part["method"]):
            ax.plot(100 * means.index, means[method], "o-", label=method)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("average travel time (s)")
        ax.grid(alpha=0.3)
    axes[0].axvline(100 * status_quo_share, color="0.5", ls=":", label="status quo")
    axes[1].axvline(100, color="0.5", ls=":")
    axes[0].legend(fontsize="small")
    return fig


# ---------------------------------------------------------------- trajectories on the corridor


def corridor_trajectories(result, ax=None, margin: int = 2):
    """Time–space diagram of every line on the shared corridor, in one frame of reference:
    distance from the first shared stop, from ``margin`` stops before it to ``margin`` after
    the last shared stop of each line (case 2: both lines' buses interleave on the corridor)."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    ax = ax if ax is not None else plt.subplots(figsize=(10, 5))[1]
    scenario, traj = result.scenario, result.trajectories
    shared = set(scenario.shared_nodes)
    handles = []
    for colour, ln in zip(plt.get_cmap("tab10").colors, scenario.lines):
        idx = [i for i, v in enumerate(ln.nodes) if v in shared]
        if not idx:
            continue
        lo, hi = max(idx[0] - margin, 0), min(idx[-1] + margin, ln.n_stops - 1)
        origin = ln.positions_m[idx[0]]
        mine = traj[(traj["line"] == ln.name) & traj["stop"].between(lo, hi)]
        for _, bus in mine.groupby("bus", sort=False):
            t = np.column_stack([bus["arrival_s"], bus["departure_s"]]).ravel()
            x = np.repeat(bus["position_m"].to_numpy() - origin, 2)
            ax.plot(t / 60, x / 1000, color=colour, lw=0.7)
        handles.append(Line2D([], [], color=colour, label=ln.label))
    for node in shared:
        ln = next(ln for ln in scenario.lines if node in ln.nodes)
        first = next(i for i, v in enumerate(ln.nodes) if v in shared)
        ax.axhline((ln.positions_m[ln.nodes.index(node)] - ln.positions_m[first]) / 1000, color="0.85", lw=0.5, zorder=0)
    ax.set_xlabel("time (min)")
    ax.set_ylabel("distance from the first shared stop (km)")
    ax.legend(handles=handles, loc="upper left", fontsize="small")
    return ax


# ---------------------------------------------------------------- generated systems (§5.5)


def generic_row(index: int, controllers: dict[str, Any], seeds: list[int], horizon_s: float | None = None) -> dict:
    """One generated system: its size and the mean overall travel time of each method over ``seeds``."""
    scenario = scenarios.generic(index)
    row: dict[str, Any] = {"system": index, "lines": len(scenario.lines),
                           "stops": sum(ln.n_stops for ln in scenario.lines),
                           "shared stops": len(scenario.shared_nodes)}
    for name, ctrl in controllers.items():
        row[name] = float(np.mean([simulate(scenario, ctrl, seed=s, horizon_s=horizon_s).metrics["travel_time_s"] for s in seeds]))
    return row


def generic_job(index: int, code: str | None, transferred: dict[str, GreedyPolicy], feedback_slack_s: float,
                dqn: dict, agent_seed: int, seeds: list[int], train_horizon_s: float = TRAIN_HORIZON_S,
                test_horizon_s: float | None = None) -> dict:
    """§5.5 for one system: no holding, feedback, the case-2 agents of ``transferred`` (column name →
    policy) applied unchanged and — when ``code`` is given — an agent trained on this system with that
    reward (column ``ours (trained per system)``, cached)."""
    controllers: dict[str, Any] = {"no holding": NoHolding(), "feedback": Feedback(slack_s=feedback_slack_s)}
    controllers |= {name: DQNController(policy) for name, policy in transferred.items()}
    if code is not None:
        policy = train_agent("generic", {"index": index}, code, dqn, agent_seed, train_horizon_s)
        controllers["ours (trained per system)"] = DQNController(policy)
    return generic_row(index, controllers, seeds, test_horizon_s)


def generic_summary(table: pd.DataFrame, ours: str) -> pd.DataFrame:
    """Table 7's summary for the method in column ``ours``: share of systems where it beats
    feedback, mean change vs no holding (% of its travel time, averaged over systems) and mean
    reduction vs feedback (s)."""
    return pd.DataFrame({"value": {
        "systems": float(len(table)),
        "beats feedback (% of systems)": 100.0 * float((table[ours] < table["feedback"]).mean()),
        "mean change vs no holding (%)": 100.0 * float(((table[ours] - table["no holding"]) / table["no holding"]).mean()),
        "mean reduction vs feedback (s)": float((table["feedback"] - table[ours]).mean()),
    }}).rename_axis("measure")


def llm_direct_rows(case: str, case_kwargs: dict, llm: dict | None, seeds: list[int],
                    horizon_s: float | None = None, **tags: Any) -> pd.DataFrame:
    """Test rows of the LLM-direct controller (App. A.5 prompt) with the configured LLM, run
    serially (one client); an empty frame without ``llm`` (tables then show :data:`NEEDS_LLM`).
    Unreadable answers release the bus and are counted in the ``direct_failures`` column."""
    if llm is None:
        return pd.DataFrame()
    from ..llm import from_config
    from .reward_design.direct import LLMDirect
    from .reward_design.prompts import Setting

    client = from_config(llm)
    rows = []
    for seed in seeds:
        direct = LLMDirect(client, Setting.of(make_scenario(case, **case_kwargs)))
        found = evaluate_lines(case, case_kwargs, "LLM-direct", direct, seed, horizon_s, **tags)
        rows += [{**r, "direct_failures": direct.failures} for r in found]
    return pd.DataFrame(rows)
