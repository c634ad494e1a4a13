"""Tables of results built one way: ``mean ± 95 % CI half-width`` per method over its independent
runs, n with its unit, and paired differences against a named reference, with the caption
sentence that says so (:mod:`llmtraffic.study.stats`).

Notebooks collect long results (one row per method × run × evaluation episode, one column per
metric; a method without training has no ``agent_seed``) and call::

    summary = study.tables.summarize(rows, ["travel_s", "headway_sd"], reference="RL-global")
    study.save_table(summary.frame, "table1", caption=f"Case 1. {summary.caption}")
    study.claim(..., ours=summary.differences["LLM-enhanced RL", "travel_s"])

The estimates behind every cell stay available (``summary.estimates``, ``summary.differences``,
and ``summary.frame.attrs["estimates"]``, which :func:`~llmtraffic.study.save_table` stores with
their per-run values), so claims and narratives use the numbers the table shows.
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
    ``n`` (with its unit), and with a reference a ``Δ <metric> vs <reference>`` column per metric."""
    caption: str
    """What the intervals are and over what n (:func:`llmtraffic.study.stats.caption`)."""
    estimates: dict[tuple[str, str], Estimate]
    """(method, metric) → mean with its 95 % CI over the method's runs."""
    differences: dict[tuple[str, str], Estimate]
    """(method, metric) → paired difference method − reference (no entry for the reference)."""


def _check(results: pd.DataFrame, by: str, keys: list[str], metrics: list[str], reference: str | None) -> None:
    missing = [c for c in [by, keys[-1], *metrics] if c not in results.columns]
    if missing:
        raise ValueError(f"results lack the column(s) {missing}; they have {list(results.columns)}")
    present = [k for k in keys if k in results.columns]
    repeated = results[results.duplicated([by, *present], keep=False)]
    if len(repeated):
        raise ValueError(f"units must appear once per {by}; repeated: {repeated[[by, *present]].head(3).to_dict('records')}")
    if reference is not None and reference not in set(results[by]):
        raise ValueError(f"reference {reference!r} is not among the {by}s {list(dict.fromkeys(results[by]))}")


def summarize(
    results: pd.DataFrame,
    metrics: str | Sequence[str],
    run: str = "agent_seed",
    episode: str = "seed",
    noun: str = "agent",
    by: str = "method",
    reference: str | None = None,
    relative: bool = False,
    lower_is_better: bool | Mapping[str, bool] = True,
    digits: int = 1,
) -> Summary:
    """Summarise long ``results`` (one row per ``by`` × run × episode) into a table (see the module docstring).

    A method's runs are its ``run`` values (``noun``: what they are, see :func:`~.stats.count`),
    each averaged over its ``episode`` rows; a method without ``run`` values is not trained and its
    units are its episodes. With ``reference``, each other method gets per metric the paired
    difference method − reference (:func:`~.stats.compare`; ``relative``: in % of the reference's
    mean) with its verdict (``lower_is_better`` per metric or for all).
    """
    metrics = [metrics] if isinstance(metrics, str) else list(metrics)
    _check(results, by, [run, episode], metrics, reference)
    methods = list(dict.fromkeys(results[by]))
    estimates, differences, rows, cells, counts = {}, {}, {}, {}, []
    for method in methods:
        mine = results[results[by] == method]
        row = {}
        for metric in metrics:
            estimates[method, metric] = cells[f"{method} / {metric}"] = est = stats.estimate(mine, metric, run, episode, noun)
            row[metric] = est.format(digits)
        row["n"] = stats.unit_of(mine, run, episode, noun)
        counts.append(row["n"])
        if reference is not None:
            ref = results[results[by] == reference]
            for metric in metrics:
                column = f"Δ {metric} vs {reference}" + (" (%)" if relative else "")
                if method == reference:
                    row[column] = "reference"
                    continue
                diff = stats.compare(mine, ref, metric, relative, run, episode, noun)
                differences[method, metric] = cells[f"{method} / {column}"] = diff
                better = lower_is_better[metric] if isinstance(lower_is_better, Mapping) else lower_is_better
                row[column] = f"{diff.format(digits)} ({stats.verdict(diff, better)})"
        rows[method] = row
    frame = pd.DataFrame.from_dict(rows, orient="index")
    frame.index.name = by
    frame.attrs["estimates"] = cells
    return Summary(frame, _caption(counts, reference, relative), estimates, differences)


def _caption(counts: list[str], reference: str | None, relative: bool) -> str:
    text = stats.caption(*dict.fromkeys(counts))
    if reference is not None:
        scale = f" in % of {reference}'s mean" if relative else ""
        text += (f"; Δ: paired difference method − {reference}{scale} over the runs (by training seed, eval seed, "
                 "or the trained side's runs against a fixed method), same interval; better/worse only where it excludes 0")
    return text + "."


def caption_of(table: pd.DataFrame, paired: bool = False) -> str:
    """The interval sentence of a table whose builder left its estimates in ``table.attrs``: the
    method and every unit its estimates count (:func:`llmtraffic.study.stats.caption`)."""
    counts = dict.fromkeys(e.of for e in table.attrs.get("estimates", {}).values() if e.of)
    if not counts:
        raise ValueError("caption_of: the table carries no estimates in table.attrs['estimates']")
    return stats.caption(*counts, paired=paired)


def concat(frames: Sequence[pd.DataFrame], **kwargs) -> pd.DataFrame:
    """``pd.concat`` that keeps every frame's estimates (pandas drops ``attrs`` that differ)."""
    out = pd.concat(list(frames), **kwargs)
    out.attrs["estimates"] = {k: e for f in frames for k, e in f.attrs.get("estimates", {}).items()}
    return out
