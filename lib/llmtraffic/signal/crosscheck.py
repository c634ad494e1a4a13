"""Our signal rules beside LibSignal's implemented ones, one rule at a time (``tsc_crosscheck``).

Every classic controller plays the same eval seeds under a ladder of rule sets
(:mod:`llmtraffic.signal.rules`), from ours to LibSignal's, adding its rules a few at a time:

1. ``study``: our definitions;
2. *measured as LibSignal*: LibSignal's queue, delay, departure stamp and throughput on the
   same trajectories (these rules change what is measured, not the control, so every difference
   from step 1 is a definition);
3. plus its all-red clearance (and, on SUMO, the program slip of a change that needs none);
4. plus its phase timer, which counts the clearance (its minimum green);
5. plus its MaxPressure pressure and SOTL counts: ``libsignal``, all its rules.

A step's effect is the paired difference (same seeds) of each metric from the step before, in %
of the step before. Episodes are cached and shared with ``tsc_baselines`` (kind ``tsc_episode``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from .. import study
from ..study import stats
from .baseline_jobs import evaluate_episode
from .rules import MEASURED, with_parts
from .scenarios import load

LADDER = {
    "study": "study",
    "measured as LibSignal": with_parts(*MEASURED),
    "+ all-red clearance": with_parts(*MEASURED, "clearance"),
    "+ timer counts the clearance": with_parts(*MEASURED, "clearance", "timer"),
    "+ pressure and SOTL counts (libsignal)": "libsignal",
}
"""Step name → rule set, from ours to LibSignal's."""

METRICS = {"travel_time": "Travel Time", "queue": "Queue", "delay": "Delay", "throughput": "Throughput"}
"""Row keys → column names; travel time is each simulator's LibSignal definition (:func:`travel_key`)."""


def travel_key(scenario: str) -> str:
    """The travel time LibSignal reports: CityFlow's own (unfinished trips counted) on CityFlow,
    arrived vehicles on SUMO."""
    return "travel_time_all_s" if load(scenario).simulator == "cityflow" else "travel_time_s"


def tasks(methods: Sequence[str], scenarios: Sequence[str], seeds: Sequence[int], episode_s: int) -> list[dict]:
    """:func:`~.baseline_jobs.evaluate_episode` arguments of every (method, scenario, step, seed)."""
    return [dict(method=m, scenario=sc, seed=s, episode_s=episode_s, rules=rules)
            for sc in scenarios for m in methods for rules in LADDER.values() for s in seeds]


def run_all(methods: Sequence[str], scenarios: Sequence[str], seeds: Sequence[int], episode_s: int,
            executor: str = "serial", jobs: int = 1) -> pd.DataFrame:
    """Every episode of the ladder (cached) as one row each, with ``step`` and the metrics of
    :data:`METRICS` (travel time by :func:`travel_key`)."""
    todo = tasks(methods, scenarios, seeds, episode_s)
    results = study.run_grid(evaluate_episode, todo, executor=executor, jobs=jobs, desc="rule ladder episodes")
    steps = {rules: step for step, rules in LADDER.items()}
    rows = [{"step": steps[t["rules"]], "rules": t["rules"], "method": t["method"], "scenario": t["scenario"],
             "seed": t["seed"], "travel_time": r[travel_key(t["scenario"])],
             **{k: r[k] for k in ("queue", "delay", "throughput", "arrived", "travel_time_s", "travel_time_all_s",
                                   "deadlock")}} for t, r in zip(todo, results)]
    return pd.DataFrame(rows)


def levels(rows: pd.DataFrame, scenario: str) -> pd.DataFrame:
    """Per method and step: each metric's mean ± 95 % CI over the seeds (each seed one run);
    ``table.attrs["estimates"]`` keeps them."""
    out, found = {}, {}
    for (method, step), runs in _groups(rows, scenario):
        cells = {}
        for key, name in METRICS.items():
            found[f"{method} / {step} / {name}"] = est = stats.estimate(runs.astype({key: float}), key)
            cells[name] = est.format(0 if key == "throughput" else 2)
        out[(method, step)] = cells
    table = pd.DataFrame.from_dict(out, orient="index").rename_axis(["Method", "Step"])
    table.attrs["estimates"] = found
    return table


def effects(rows: pd.DataFrame, scenario: str) -> pd.DataFrame:
    """Per method and step after the first: each metric's paired change from the step before (same
    seeds), in % of the step before, mean ± 95 % CI; ``table.attrs["estimates"]`` keeps them."""
    out, found, names = {}, {}, list(LADDER)
    for (method, step), runs in _groups(rows, scenario):
        k = names.index(step)
        if k == 0:
            continue
        before = rows[(rows["scenario"] == scenario) & (rows["method"] == method) & (rows["step"] == names[k - 1])]
        cells = {}
        for key, name in METRICS.items():
            est = stats.compare(runs, before, key, relative=True)
            found[f"{method} / {step} / {name}"] = est
            cells[f"{name} Δ"] = est.format(1)
        out[(method, step)] = cells
    table = pd.DataFrame.from_dict(out, orient="index").rename_axis(["Method", "Step"])
    table.attrs["estimates"] = found
    return table


def overall(rows: pd.DataFrame, scenario: str) -> pd.DataFrame:
    """Per method: LibSignal's rules against ours (the ladder's ends), each metric's paired change in %."""
    out, found = {}, {}
    first, last = list(LADDER)[0], list(LADDER)[-1]
    for method in dict.fromkeys(rows[rows["scenario"] == scenario]["method"]):
        sel = rows[(rows["scenario"] == scenario) & (rows["method"] == method)]
        cells = {}
        for key, name in METRICS.items():
            est = stats.compare(sel[sel["step"] == last], sel[sel["step"] == first], key, relative=True)
            found[f"{method} / {name}"] = est
            cells[f"{name}: libsignal − study"] = est.format(1)
        out[method] = cells
    table = pd.DataFrame.from_dict(out, orient="index").rename_axis("Method")
    table.attrs["estimates"] = found
    return table


def largest(rows: pd.DataFrame, scenario: str) -> list[tuple[str, str, str, float]]:
    """(method, metric, step, mean change in %) of each method's and metric's largest step."""
    out = []
    names = list(LADDER)
    for method in dict.fromkeys(rows[rows["scenario"] == scenario]["method"]):
        sel = rows[(rows["scenario"] == scenario) & (rows["method"] == method)]
        means = sel.groupby("step")[list(METRICS)].mean().reindex(names)
        for key, name in METRICS.items():
            change = 100 * means[key].diff() / means[key].shift()
            change = change.replace([np.inf, -np.inf], np.nan).dropna()
            if len(change):
                step = change.abs().idxmax()
                out.append((method, name, step, float(change[step])))
    return out


def _groups(rows: pd.DataFrame, scenario: str):
    sel = rows[rows["scenario"] == scenario]
    for method in dict.fromkeys(sel["method"]):
        for step in LADDER:
            runs = sel[(sel["method"] == method) & (sel["step"] == step)]
            if len(runs):
                yield (method, step), runs


COMPARED = [
    ("queue", "halting now (< 0.1 m/s), whole lane", "vehicles within 200 m that have ever waited (record never cleared)",
     "halting now, whole lane (CityFlow's count)", "world_sumo.py Intersection.observe; world_cityflow.py lane_waiting_count"),
    ("delay", "per lane 1 − mean speed / limit (≥ 0), mean over lanes",
     "the same within 200 m, uncapped, summed over lanes (RL agents: mean over roads)",
     "whole lane, uncapped, summed (RL agents: mean over roads)", "get_lane_delay; agent/*.py get_delay; common/metrics.py"),
    ("travel time", "arrival − insertion (SUMO); CityFlow's own (CityFlow)", "arrival − end of the insertion step (1 s less)",
     "CityFlow's own average (unfinished trips counted)", "world_sumo.py World.step; world_cityflow.py get_average_travel_time"),
    ("throughput", "vehicles arrived", "vehicles arrived", "vehicles seen leaving a lane (crossing or arriving)",
     "world_cityflow.py update_current_measurements, get_cur_throughput"),
    ("clearance", "yellow where green ends (SUMO); all-red phase (CityFlow)",
     "all-red where green ends; none needed: SUMO's program shows its next phase for 1 s", "the roadnet's all-red phase",
     "world_sumo.py create_yellows, prep_phase; world_cityflow.py Intersection.step"),
    ("phase timer", "green seconds since the change", "seconds since the change began (clearance counted)",
     "the same", "world_sumo.py pseudo_step (== check); world_cityflow.py Intersection.step"),
    ("MaxPressure", "Σ over G and g links of whole in lane − whole out lane",
     "Σ over G links of vehicles within 200 m (out lanes: none)", "Σ over the phase's lane links, whole lanes, in − out",
     "agent/maxpressure.py; world_sumo.py phase_available_lanelinks"),
    ("SOTL", "queued on the green phase's lanes vs the others", "its queue on G-link lanes; also switches when none waits "
     "on green and some on red", "the same on the phase's lane links", "agent/sotl.py"),
]
"""(rule, study, LibSignal's SUMO world, its CityFlow world, where in LibSignal's code)."""


def compared() -> pd.DataFrame:
    """:data:`COMPARED` as a table."""
    return pd.DataFrame(COMPARED, columns=["Rule", "study", "libsignal, SUMO", "libsignal, CityFlow (Hangzhou)",
                                           "LibSignal's code"]).set_index("Rule")
