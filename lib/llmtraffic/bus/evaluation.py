"""Test episodes and the tables of the bus study (§5.1 measures, Table 1 layout, relative changes)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from .metrics import DEFINITIONS
from .scenarios import Scenario, by_name
from .sim import simulate

MEASURES = {
    "headway_sd_s": "Headway SD (s)",
    "travel_time_s": "Avg travel time (s)",
    "wait_time_s": "Avg waiting time (s)",
    "hold_time_s": "Avg holding time (s)",
}
"""The four evaluation measures of §5.1 (metric key → Table 1 column)."""


EXTRA = ("incomplete_share", "service_failure_share", "passed_up", "implied_wait_s", "regular_wait_s",
         *(d["authors"] for d in DEFINITIONS.values()))
"""Scalar metrics :func:`evaluate` reports beside :data:`MEASURES`: the old incomplete share (horizon
cut-off included), service failures, the headway-implied and regular waits (room for holding) and
the authors' definitions of the four measures (:data:`~llmtraffic.bus.metrics.DEFINITIONS`)."""


def evaluate(scenario: Scenario, controller, seed: int, horizon_s: float | None = None) -> dict:
    """Metrics of one test episode (no trajectories): the §5.1 measures, :data:`EXTRA` and
    per-stop headway SD (``by_stop``)."""
    m = simulate(scenario, controller, seed=seed, horizon_s=horizon_s).metrics
    return {**{k: m[k] for k in (*MEASURES, *EXTRA)}, "by_stop": m["by_stop"]}


def evaluate_method(method: str, controller, scenario: Scenario, seed: int, horizon_s: float | None = None,
                    **tags) -> dict:
    """:func:`evaluate` labelled with its method, seed and ``tags`` (e.g. ``agent_seed``; one job
    of a seeds × methods grid)."""
    return {"method": method, "seed": seed, **tags, **evaluate(scenario, controller, seed, horizon_s)}


def evaluate_lines(case: str, case_kwargs: dict, method: str, controller, seed: int,
                   horizon_s: float | None = None, **tags: Any) -> list[dict]:
    """One test episode → one row per line and an ``overall`` row: the §5.1 measures under our
    and the authors' definitions (:data:`~llmtraffic.bus.metrics.DEFINITIONS`), the incomplete
    share (in %) and, overall, the service-failure share (in %), tagged with method, seed and
    ``tags`` (e.g. ``agent_seed``). The overall row also holds the headway SD at shared stops
    (``shared_headway_sd_s``, NaN without shared stops), the headway-implied and regular waits
    (room for holding) and the per-stop headway SD (``by_stop``)."""
    scenario = by_name(case, **case_kwargs)
    m = simulate(scenario, controller, seed=seed, horizon_s=horizon_s).metrics
    base = {**tags, "method": method, "seed": seed}

    def row(line: str, values: dict) -> dict:
        authors = {d["authors"]: values[d["authors"]] for d in DEFINITIONS.values()}
        return {**base, "line": line, **{k: values[k] for k in MEASURES}, **authors,
                "incomplete_share": 100.0 * values["incomplete_share"]}

    rows = [row(scenario.line(name).label, values) for name, values in m["by_line"].items()]
    overall = row("overall", m)
    overall["service_failure_share"] = 100.0 * m["service_failure_share"]
    overall["implied_wait_s"], overall["regular_wait_s"] = m["implied_wait_s"], m["regular_wait_s"]
    overall["shared_headway_sd_s"] = m["shared_stops"]["headway_sd_s"] if m["shared_stops"] else math.nan
    overall["by_stop"] = m["by_stop"]
    return rows + [overall]


def mean_std_table(rows: pd.DataFrame, methods: list[str]) -> pd.DataFrame:
    """Table 1 layout: one row per method, each measure as 'mean ± std' over the rows' seeds.

    Methods without rows (e.g. LLM rows with no backend) are left out; add them explicitly."""
    missing = set(MEASURES) - set(rows.columns)
    if missing:
        raise ValueError(f"mean_std_table: rows lack the measure column(s) {sorted(missing)}")
    stats = rows.groupby("method")[list(MEASURES)].agg(["mean", "std"])
    table = pd.DataFrame(index=pd.Index([m for m in methods if m in stats.index], name="method"))
    for key, label in MEASURES.items():
        table[label] = [f"{stats.at[m, (key, 'mean')]:.1f} ± {stats.at[m, (key, 'std')]:.1f}" for m in table.index]
    return table


def relative_change(rows: pd.DataFrame, method: str, reference: str, measure: str) -> float:
    """100 · (mean of ``method`` − mean of ``reference``) / mean of ``reference`` for one measure,
    as the paper reports its comparisons (§5.2.2: e.g. −59.50 % headway SD vs RL-local)."""
    means = rows.groupby("method")[measure].mean()
    for name in (method, reference):
        if name not in means.index:
            raise ValueError(f"relative_change: no rows for method {name!r}; have {sorted(means.index)}")
    return float(100.0 * (means[method] - means[reference]) / means[reference])


def per_stop_sd(rows: pd.DataFrame) -> pd.DataFrame:
    """Mean over seeds of each stop's headway SD: one column per method, one row per stop
    (single-line scenarios; stops keyed 'line/index' when there are several lines)."""
    out = {}
    for method, group in rows.groupby("method", sort=False):
        stacked = [np.concatenate([np.asarray(v, float) for v in by_stop.values()]) for by_stop in group["by_stop"]]
        out[method] = np.nanmean(np.vstack(stacked), axis=0)
    first = rows["by_stop"].iloc[0]
    index = [f"{line}/{i}" if len(first) > 1 else i for line, sds in first.items() for i in range(len(sds))]
    return pd.DataFrame(out, index=pd.Index(index, name="stop"))
