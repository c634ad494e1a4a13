"""Table builders of the bus study: means with 95 % CIs, paired differences and verdicts
(:mod:`llmtraffic.study.stats`) over the independent runs of a row.

Rows are one test episode each: ``method``, ``seed`` (eval seed), ``agent_seed`` (learned
controllers; NaN for fixed ones) and the measures. The runs of a learned controller are its
trained agents, each the mean over its eval seeds; those of a fixed controller its eval seeds.
A learned row is compared with a fixed reference on its agents (each agent's mean minus the
reference's mean over the same eval seeds), with another learned row by agent seed
(:func:`llmtraffic.study.stats.compare`). Every builder leaves its estimates in
``table.attrs["estimates"]`` for :func:`~llmtraffic.study.save_table`'s sidecar.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..study import stats
from .evaluation import MEASURES
from .metrics import DEFINITIONS
from .jobs import PER_AGENT
from .scenarios import Scenario, by_name

NEVER_HOLDS = "never holds (equals no holding)"


def _units(rows: pd.DataFrame, method: str) -> pd.DataFrame:
    mine = rows[rows["method"] == method]
    if mine.empty:
        raise ValueError(f"no rows for method {method!r}; have {sorted(rows['method'].unique())}")
    return mine


def ci_table(rows: pd.DataFrame, methods: list[str], columns: dict[str, str], digits: int = 1,
             missing: dict[str, str] | None = None) -> pd.DataFrame:
    """One row per method: each measure of ``columns`` (key → label) as ``mean ± CI half-width``
    over its runs, ``n`` with its unit and, for learned controllers, whether its agents hold at
    all. ``missing`` maps a method without rows to the reason its cells show."""
    out, found = {}, {}
    for method in methods:
        if not (rows["method"] == method).any():
            if missing and method in missing:
                out[method] = {**{label: missing[method] for label in columns.values()}, "n": "", "holding": ""}
            continue
        mine = _units(rows, method)
        cells = {}
        for key, label in columns.items():
            found[f"{method} / {label}"] = est = stats.estimate(mine, key)
            cells[label] = est.format(digits)
        cells["n"] = stats.unit_of(mine)
        cells["holding"] = holding_note(mine)
        out[method] = cells
    table = pd.DataFrame.from_dict(out, orient="index")
    table.index.name = "method"
    table.attrs["estimates"] = found
    return table



def holding_note(mine: pd.DataFrame) -> str:
    """Per row: mean holding time per holding event, or that the controller never held."""
    held = mine["hold_time_s"].to_numpy(float)
    if not np.any(held > 0):
        return NEVER_HOLDS
    return f"holds {held.mean():.1f} s per hold"


def paired(rows: pd.DataFrame, method: str, reference: str, measure: str,
           relative: bool = False, noun: str = "agent") -> stats.Estimate:
    """Difference ``method − reference`` of ``measure`` over independent runs, paired as the module
    docstring says (:func:`llmtraffic.study.stats.compare`); ``noun``: what one run of ``method`` is
    (``design run`` for rows whose agents were averaged per design run)."""
    return stats.compare(_units(rows, method), _units(rows, reference), measure, relative, noun=noun)


def comparisons(rows: pd.DataFrame, methods: list[str], references: list[str], columns: dict[str, str],
                digits: int = 1) -> pd.DataFrame:
    """Paired differences of each method against each reference (not itself) for every measure:
    ``difference ± CI`` in the measure's unit, in percent of the reference, the verdict (lower is
    better for every measure of this study), n with its unit and the minimum detectable effect."""
    out, found = [], {}
    for method in methods:
        for ref in references:
            if ref == method:
                continue
            for key, label in columns.items():
                diff = paired(rows, method, ref, key)
                rel = paired(rows, method, ref, key, relative=True) if _nonzero(rows, ref, key) else None
                row = (method, ref, label)
                found[f"{' / '.join(row)} / difference"] = diff
                if rel:
                    found[f"{' / '.join(row)} / change (%)"] = rel
                out.append({"method": method, "vs": ref, "measure": label, "difference": diff.format(digits),
                            "change (%)": rel.format(1) if rel else "n/a", "verdict": stats.verdict(diff),
                            "n": diff.of, "MDE": stats.minimum_effect(diff)})
    table = pd.DataFrame(out).set_index(["method", "vs", "measure"])
    table.attrs["estimates"] = found
    return table


def _nonzero(rows: pd.DataFrame, method: str, key: str) -> bool:
    return float(_units(rows, method)[key].mean()) != 0.0


def best_of(rows: pd.DataFrame, methods: list[str], measure: str = "travel_time_s") -> str:
    """The method with the lowest mean ``measure`` (the paper's "best vanilla RL")."""
    means = {m: float(_units(rows, m)[measure].mean()) for m in methods}
    return min(means, key=lambda m: (math.inf if math.isnan(means[m]) else means[m]))


COLUMNS = {**MEASURES, "incomplete_share": "Incomplete trips (%)"}
"""Columns of Tables 5–6: the four §5.1 measures and the share of trips not completed (§5.3.2)."""
AUTHORS_COLUMNS = {DEFINITIONS[k]["authors"]: f"{v} [authors' definition]" for k, v in MEASURES.items()}
"""The same four measures under the bus authors' definitions (:data:`~llmtraffic.bus.metrics.DEFINITIONS`)."""


def measured(rows: pd.DataFrame, columns: dict[str, str] = COLUMNS) -> dict[str, str]:
    """The ``columns`` every row has a value of: a short episode may complete too few headways at
    a stop for their SD, or no trip on a line."""
    return {k: v for k, v in columns.items() if k in rows and rows[k].notna().all()}


def line_table(rows: pd.DataFrame, methods: list[str], missing: dict[str, str] | None = None,
               columns: dict[str, str] = COLUMNS) -> pd.DataFrame:
    """Tables 5–6 layout: one row ``"<line> · <method>"`` per line (then overall) and method,
    each measure as ``mean ± 95 % CI half-width`` over the row's units (eval seeds of a fixed
    controller, agent seeds × eval seeds of a learned one), with ``n`` and the holding note;
    ``columns`` maps row keys to labels (:data:`AUTHORS_COLUMNS` for the authors' definitions);
    ``missing`` maps a method without rows to the reason shown in its cells."""
    groups = dict(list(rows.groupby(["line", "method"])))
    lines = [x for x in dict.fromkeys(rows["line"]) if x != "overall"] + ["overall"]
    out, found = {}, {}
    for line in lines:
        for method in methods:
            name = f"{line} · {method}"
            if (line, method) in groups:
                g = groups[(line, method)]
                cells = {}
                for k, label in columns.items():
                    found[f"{name} / {label}"] = est = stats.estimate(g, k)
                    cells[label] = est.format(2)
                out[name] = {**cells, "n": stats.unit_of(g), "holding": holding_note(g)}
            elif missing and method in missing:
                out[name] = {**{label: missing[method] for label in columns.values()}, "n": "", "holding": ""}
    table = pd.DataFrame.from_dict(out, orient="index")
    table.index.name = "line · method"
    table.attrs["estimates"] = found
    return table


def reductions(rows: pd.DataFrame, ours: str, baselines: list[str], measure: str = "travel_time_s",
               line: str = "overall") -> pd.DataFrame:
    """How much ``ours`` lowers ``measure`` against each baseline, over ``ours``'s runs paired as
    :func:`paired` does: in seconds (baseline − ours, positive = ours better, as §5.4.2 reports)
    and in percent of the baseline (negative = ours lower, as §5.3.2's −3.14 %), each as
    ``mean ± CI half-width``; the verdicts are :func:`comparisons`'."""
    part = rows[rows["line"] == line]
    out, found = {}, {}
    for b in baselines:
        saved = paired(part, b, ours, measure)
        change = paired(part, ours, b, measure, relative=True)
        found[f"vs {b} / reduction (s)"], found[f"vs {b} / change (%)"] = saved, change
        out[f"vs {b}"] = {"reduction (s)": saved.format(1), "change (%)": change.format(2), "n": change.of}
    table = pd.DataFrame.from_dict(out, orient="index").rename_axis("comparison")
    table.attrs["estimates"] = found
    return table


def shared_stop_sd(rows: pd.DataFrame, case: str, case_kwargs: dict) -> pd.DataFrame:
    """Mean over seeds of the headway SD at each shared stop, per line serving it (rows
    ``"<line label> @ <stop>"``) and method (columns)."""
    scenario = by_name(case, **case_kwargs)
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


def generic_difference(table: pd.DataFrame, column: str, reference: str, relative: bool = False) -> stats.Estimate:
    """§5.5's comparison of a learned ``column`` with a fixed ``reference`` over the systems of
    Table 7, with the agents as independent runs (the same agents serve every system): per agent
    seed, the mean over systems of its difference to the reference (``relative``: in % of the
    reference's travel time on each system, averaged as §5.5 averages its changes)."""
    runs = np.vstack(table[f"{column} · {PER_AGENT}"].to_numpy())  # systems × agents
    base = table[reference].to_numpy(float)[:, None]
    diff = (runs - base) / (base / 100.0 if relative else 1.0)
    of = stats.count(runs.shape[1], "agent", runs.shape[0], inner="system")
    return stats.difference(diff.mean(axis=0), "%" if relative else "", of)


ROOM = ["implied_wait_s", "regular_wait_s", "wait_time_s", "travel_time_s"]


def room_for_holding(rows: pd.DataFrame, by: str | None = None) -> pd.DataFrame:
    """The most any holding could save on waits, measured without holding (mean over ``rows``,
    one row per ``by`` group, else one row ``no holding``): the wait implied by the observed
    headways, E[H²] / 2E[H] (:func:`.metrics.headway_implied_wait`), minus the wait with
    perfectly regular headways of the same mean, E[H] / 2, in seconds and as a share of the
    mean trip. A small room makes "holding cannot pay here" a measured statement."""
    missing = [c for c in ROOM if c not in rows]
    if missing:
        raise ValueError(f"room_for_holding: rows lack {missing}")
    room = rows.groupby(by)[ROOM].mean() if by else rows[ROOM].mean().to_frame("no holding").T
    room["room (s)"] = room["implied_wait_s"] - room["regular_wait_s"]
    room["room (% of travel time)"] = 100 * room["room (s)"] / room["travel_time_s"]
    return room.round(1)


def room_reading(room: pd.Series, where: str = "", more: str = "") -> str:
    """One Markdown bullet of a row of :func:`room_for_holding` (``more``: a clause to append)."""
    return (f"- Room for holding{f' ({where})' if where else ''}: regular headways would cut the headway-implied wait "
            f"from {room['implied_wait_s']:.0f} s to {room['regular_wait_s']:.0f} s, "
            f"{room['room (% of travel time)']:.1f} % of the mean trip{f'; {more}' if more else ''}.")
