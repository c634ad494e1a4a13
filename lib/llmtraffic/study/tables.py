"""Tables of results built one way: ``mean ± 95 % CI half-width`` per method, n, and paired
differences against a named reference, with the caption sentence that says so.

Notebooks collect long results (one row per method × unit, e.g. per agent seed × eval seed, with
one column per metric) and call::

    summary = study.tables.summarize(rows, ["travel_s", "headway_sd"], units=["agent_seed", "eval_seed"],
                                     units_label="agent seeds × eval seeds", reference="RL-global")
    study.save_table(summary.frame, "table1", caption=f"Case 1. {summary.caption}")
    study.claim(..., ours=summary.differences["LLM-enhanced RL", "travel_s"])

The estimates behind every cell stay available (``summary.estimates``, ``summary.differences``),
so claims and narratives use the numbers the table shows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pandas as pd

from . import stats
from .stats import Estimate


@dataclass
class Summary:
    frame: pd.DataFrame
    """Index: method (in order of first appearance); per metric a ``mean ± half-width`` column,
    ``n``, and with a reference a ``Δ <metric> vs <reference>`` column per metric."""
    caption: str
    """What the intervals are and over what n (:func:`llmtraffic.study.stats.caption`)."""
    estimates: dict[tuple[str, str], Estimate]
    """(method, metric) → mean with its 95 % CI."""
    differences: dict[tuple[str, str], Estimate]
    """(method, metric) → paired difference method − reference (no entry for the reference)."""


def _paired(results: pd.DataFrame, by: str, units: list[str], metric: str, method: str, reference: str) -> tuple[pd.Series, pd.Series]:
    series = {m: results[results[by] == m].set_index(units)[metric] for m in (method, reference)}
    mine, theirs = series[method], series[reference]
    if set(mine.index) != set(theirs.index):
        missing = sorted(set(theirs.index) ^ set(mine.index), key=str)[:5]
        raise ValueError(
            f"{metric}: {method!r} and the reference {reference!r} were not run on the same units "
            f"({', '.join(units)}); unpaired: {missing}"
        )
    return mine, theirs.reindex(mine.index)


def _check(results: pd.DataFrame, by: str, units: list[str], metrics: list[str], reference: str | None) -> None:
    missing = [c for c in [by, *units, *metrics] if c not in results.columns]
    if missing:
        raise ValueError(f"results lack the column(s) {missing}; they have {list(results.columns)}")
    repeated = results[results.duplicated([by, *units], keep=False)]
    if len(repeated):
        raise ValueError(f"units must appear once per {by}; repeated: {repeated[[by, *units]].head(3).to_dict('records')}")
    if reference is not None and reference not in set(results[by]):
        raise ValueError(f"reference {reference!r} is not among the {by}s {list(dict.fromkeys(results[by]))}")


def summarize(
    results: pd.DataFrame,
    metrics: str | Sequence[str],
    units: str | Sequence[str] = "eval_seed",
    units_label: str = "eval seeds",
    by: str = "method",
    reference: str | None = None,
    relative: bool = False,
    lower_is_better: bool | Mapping[str, bool] = True,
    digits: int = 1,
) -> Summary:
    """Summarise long ``results`` (one row per ``by`` × ``units``) into a table (see the module docstring).

    ``units`` are the columns that identify an independent unit (and pair two methods);
    ``units_label`` names them in the caption. With ``reference``, each other method gets per
    metric the paired difference method − reference (``relative``: in % of the reference's mean)
    with its verdict (``lower_is_better`` per metric or for all).
    """
    metrics = [metrics] if isinstance(metrics, str) else list(metrics)
    units = [units] if isinstance(units, str) else list(units)
    _check(results, by, units, metrics, reference)
    methods = list(dict.fromkeys(results[by]))
    estimates, differences, rows = {}, {}, {}
    for method in methods:
        mine = results[results[by] == method]
        row = {}
        for metric in metrics:
            estimates[method, metric] = est = stats.mean_ci(mine[metric].to_numpy())
            row[metric] = est.format(digits)
        row["n"] = len(mine)
        if reference is not None:
            for metric in metrics:
                column = f"Δ {metric} vs {reference}" + (" (%)" if relative else "")
                if method == reference:
                    row[column] = "reference"
                    continue
                a, b = _paired(results, by, units, metric, method, reference)
                differences[method, metric] = diff = stats.paired_difference(a.to_numpy(), b.to_numpy(), relative)
                better = lower_is_better[metric] if isinstance(lower_is_better, Mapping) else lower_is_better
                row[column] = f"{diff.format(digits)} ({stats.verdict(diff, better)})"
        rows[method] = row
    frame = pd.DataFrame.from_dict(rows, orient="index")
    frame.index.name = by
    return Summary(frame, _caption(frame["n"], units_label, reference, relative), estimates, differences)


def _caption(n: pd.Series, units_label: str, reference: str | None, relative: bool) -> str:
    sizes = sorted(set(n))
    if len(sizes) == 1:
        text = stats.caption(sizes[0], units_label)
    else:
        text = stats.caption(sizes[0], units_label).replace(f"n = {sizes[0]}", "n per row in column n,")
    if reference is not None:
        scale = f" in % of {reference}'s mean" if relative else ""
        text += (f"; Δ: paired difference method − {reference} over the same {units_label}{scale}, "
                 "same interval; better/worse only where it excludes 0")
    return text + "."
