"""Saving figures and tables into ``figures/<stem>/`` with a provenance sidecar each.

The files of one output (``name.png`` + ``name.svg`` or ``name.csv`` + ``name.md``, and the sidecar
``name.json`` holding their SHA-256) are rendered in memory and written as one unit
(:func:`~llmtraffic.study.atomic.write_unit`): an interrupted or a racing run leaves the previous
unit or a complete new one. Saving into the repository's ``figures/`` from uncommitted code stops
(see :mod:`~llmtraffic.study.provenance`).

For notebook authors, :func:`plot_series` draws named series so that none hides another (own
dash pattern and staggered markers per series) and draws runs × points arrays as a mean with a
95 % t-interval band (learning curves over agent seeds).
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import re
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from . import gallery, provenance, stats
from .atomic import atomic_write, atomic_write_text, write_unit
from .context import Context, current

__all__ = [
    "atomic_write", "atomic_write_text", "compare", "leading_number", "plot_series", "relative_difference",
    "cell", "save_figure", "save_table", "to_markdown",
]

DIRTY_MARK = "UNCOMMITTED CODE"
"""Added to the stamp and the Markdown label of outputs made from a dirty tree."""


def _label(ctx: Context, meta: dict, rows: str | None = None) -> str:
    base = f"profile {ctx.profile} · {rows}" if rows else ctx.label
    return base + (f" · {DIRTY_MARK}" if meta["git"].get("dirty") else "")


def _save_unit(ctx: Context, kind: str, name: str, caption: str, files: dict[str, bytes], meta: dict) -> None:
    """Write ``files`` with their sidecar as one unit, then regenerate the gallery and scorecard."""
    sidecar = {
        "kind": kind,
        "name": name,
        "caption": caption,
        "files": list(files),
        "sha256": {f: hashlib.sha256(data).hexdigest() for f, data in files.items()},
        "notebook": ctx.stem,
        "title": ctx.title,
        "profile": ctx.profile,
        "label": ctx.label,
        "params": ctx.params,
        "changed_from_profile": ctx.changed,
        "seeds": ctx.seeds,
        "created": time.time(),
        "wall_time_s": round(time.time() - ctx.started, 3),
        **meta,
    }
    payload = json.dumps(sidecar, indent=1, default=str) + "\n"
    write_unit(ctx.out_dir, {**files, f"{name}.json": payload.encode()})
    gallery.write()


# ---------------------------------------------------------------- figures


def _renderer(fig):
    canvas = fig.canvas
    return canvas.get_renderer() if hasattr(canvas, "get_renderer") else fig._get_renderer()


def add_stamp(fig, text: str, gap_pt: float = 4.0):
    """Put ``text`` in a margin of its own below everything the figure draws (tick labels, axis
    labels, legends), right-aligned; ``bbox_inches="tight"`` then grows the figure to hold it.
    Returns the text artist (remove it after saving)."""
    box = fig.get_tightbbox(_renderer(fig))  # inches
    width, height = fig.get_size_inches()
    y = (box.y0 - gap_pt / 72) / height
    return fig.text(box.x1 / width, y, text, ha="right", va="top", fontsize=6, color="0.45")


def save_figure(fig, name: str, caption: str = "", stamp: bool = True, stats: dict | None = None,
                rows: str | None = None) -> Path:
    """Save ``fig`` as ``figures/<stem>/<name>.png`` and ``.svg`` with a provenance sidecar.

    ``stamp`` writes the run's label (profile, seeds, backbone/designer; a mark when made from
    uncommitted code) in a strip below the figure, so a figure seen out of context still says what
    produced it; the stamp is removed from ``fig`` afterwards. ``rows`` replaces the notebook's
    seeds and backbone in the stamp for a figure whose rows ran with their own (it goes into the
    sidecar too). ``stats`` goes into the sidecar (e.g. a bootstrap's seed, method and per-run values).
    """
    ctx = current()
    meta = provenance.record(ctx.out_dir)
    if rows:
        meta = {**meta, "rows": rows}
    text = add_stamp(fig, _label(ctx, meta, rows)) if stamp else None
    try:
        files = {}
        for ext in ("png", "svg"):
            buf = io.BytesIO()
            fig.savefig(buf, format=ext, dpi=150, bbox_inches="tight")
            files[f"{name}.{ext}"] = buf.getvalue()
    finally:
        if text is not None:
            text.remove()
    _save_unit(ctx, "figure", name, caption, files, meta if stats is None else {**meta, "stats": stats})
    return ctx.out_dir / f"{name}.png"


STYLES = (("-", "o"), ("--", "s"), (":", "^"), ("-.", "D"), ((0, (5, 1, 1, 1)), "v"), ((0, (1, 1)), "X"))
"""(dash pattern, marker) per series, in order."""


def plot_series(ax, x: Sequence[float], series: Mapping[str, Any], markers: int = 8, band: bool = True, **kw) -> list:
    """Plot named series on ``ax`` so that a series hidden under another stays visible.

    Each series gets its own dash pattern and marker (:data:`STYLES`); markers sit at about
    ``markers`` points per series, staggered between series so that coinciding lines show every
    marker; earlier series are drawn wider and below later ones. A 2-D value (runs × points, e.g.
    agent seeds × episodes) is drawn as its mean with a shaded 95 % t-interval band over the runs
    (``band=False``: the mean only). ``kw`` goes to every ``ax.plot``. Returns the lines.
    """
    x = np.asarray(x)
    count = len(series)
    step = max(count, len(x) // markers, 1)  # at least one slot per series, so offsets differ
    lines = []
    for i, (label, values) in enumerate(series.items()):
        values = np.asarray(values, dtype=float)
        if values.ndim == 2:
            mean, low, high = _band(values)
        else:
            mean, low, high = values, None, None
        if mean.shape != x.shape:
            raise ValueError(f"series {label!r} has {mean.shape[0]} points, x has {x.shape[0]}")
        dash, marker = STYLES[i % len(STYLES)]
        (line,) = ax.plot(
            x, mean, label=label, linestyle=dash, marker=marker, markevery=((i * step // count) % max(len(x), 1), step),
            linewidth=max(1.0, 2.6 - 0.4 * i), markersize=max(4.0, 7.0 - 0.6 * i), zorder=2 + i,
            markerfacecolor="none" if i % 2 else None, **kw,
        )
        if band and low is not None:
            ax.fill_between(x, low, high, color=line.get_color(), alpha=0.18, linewidth=0, zorder=1 + i)
        lines.append(line)
    return lines


def _band(runs: np.ndarray) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """Mean and 95 % t-interval per column of ``runs`` (rows: independent runs)."""
    if runs.shape[0] == 1:
        return runs[0], None, None
    estimates = [stats.mean_ci(column) for column in runs.T]
    return (np.array([e.mean for e in estimates]), np.array([e.low for e in estimates]),
            np.array([e.high for e in estimates]))


# ---------------------------------------------------------------- tables

_NUMBER = re.compile(r"^\s*([-+−]?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)")


def leading_number(value: Any) -> float | None:
    """The number a cell stands for: a float, or the first number of text like ``"12.3 ± 0.4"``."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float, np.integer, np.floating)):
        return None if math.isnan(value) else float(value)
    match = _NUMBER.match(str(value))
    return float(match.group(1).replace("−", "-")) if match else None


def relative_difference(ours: Any, paper: Any) -> float | None:
    """``(ours − paper) / |paper|`` in percent, or None when either is not a number or paper is 0."""
    a, b = leading_number(ours), leading_number(paper)
    if a is None or b is None or b == 0:
        return None
    return 100.0 * (a - b) / abs(b)


def _flat(label: Any) -> str:
    """A column or index label as text; a multi-level label joins its non-empty levels with " / "."""
    if isinstance(label, tuple):
        return " / ".join(str(part) for part in label if str(part) != "")
    return str(label)


def _flat_columns(df: pd.DataFrame) -> pd.DataFrame:
    if not isinstance(df.columns, pd.MultiIndex):
        return df
    out = df.copy()
    out.columns = [_flat(c) for c in df.columns]
    return out


def compare(ours: pd.DataFrame, paper: pd.DataFrame | dict) -> pd.DataFrame:
    """Long table with, per column ``c`` of ``ours``: ``c``, ``c [paper]``, ``c [Δ %]``.

    ``paper`` has the layout of ``ours`` (same row index and column names; a dict is read as
    ``{column: {row: value}}``); missing paper cells stay empty. Multi-level columns of both are
    flattened to ``"level 1 / level 2"``.
    """
    ours = _flat_columns(ours)
    paper = _flat_columns(pd.DataFrame(paper) if isinstance(paper, dict) else paper)
    paper = paper.reindex(index=ours.index)
    out = {}
    for col in ours.columns:
        theirs = paper[col] if col in paper.columns else pd.Series([None] * len(ours), index=ours.index)
        out[col] = ours[col]
        out[f"{col} [paper]"] = theirs
        out[f"{col} [Δ %]"] = [relative_difference(a, b) for a, b in zip(ours[col], theirs)]
    return pd.DataFrame(out, index=ours.index)


def _cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def to_markdown(df: pd.DataFrame, paper: pd.DataFrame | dict | None = None) -> str:
    """A GitHub Markdown table; with ``paper``, each cell reads ``ours · paper P (Δ +x.x %)``.

    A multi-level index becomes one column per level; multi-level columns become one header row
    whose labels join the levels with " / " (GitHub tables have a single header row).
    """
    df = _flat_columns(df)
    paper_df = None if paper is None else _flat_columns(pd.DataFrame(paper) if isinstance(paper, dict) else paper)
    if paper_df is not None:
        paper_df = paper_df.reindex(index=df.index)
    levels = df.index.nlevels
    names = list(df.index.names)
    header = [_cell(n) if n is not None else "" for n in names] + [_cell(c) for c in df.columns]
    rows = []
    for position, (idx, row) in enumerate(df.iterrows()):
        cells = [_cell(part) for part in (idx if levels > 1 else (idx,))]
        for col in df.columns:
            text = _cell(row[col])
            if paper_df is not None and col in paper_df.columns and _cell(paper_df[col].iloc[position]):
                theirs = paper_df[col].iloc[position]
                diff = relative_difference(row[col], theirs)
                text += f" · paper {_cell(theirs)}" + (f" (Δ {diff:+.1f} %)" if diff is not None else "")
            cells.append(text)
        rows.append(cells)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def save_table(df: pd.DataFrame, name: str, paper: pd.DataFrame | dict | None = None, caption: str = "",
               estimates: Mapping[str, stats.Estimate] | None = None, descriptive: bool = False,
               rows: str | None = None) -> Path:
    """Save ``df`` as ``figures/<stem>/<name>.csv`` and ``.md`` with a provenance sidecar.

    ``paper`` holds the paper's reported values in the layout of ``df``; the CSV then carries
    ``[paper]`` and ``[Δ %]`` columns and the Markdown shows paper, ours and the difference per cell.

    A comparative table stores the estimates behind its cells (``estimates``: ``"row / column"`` →
    :class:`~llmtraffic.study.stats.Estimate`, default ``df.attrs["estimates"]``, which the table
    builders fill) with their per-run values in the sidecar, and its caption must state the
    interval and n with its unit (:func:`~llmtraffic.study.stats.check_caption`). A table without
    a comparison (parameters, reference values, a one-seed sweep) says ``descriptive=True``.
    ``rows`` replaces the notebook's seeds and backbone in the footer for a table whose rows ran with
    their own, as in :func:`save_figure`.
    """
    ctx = current()
    found = dict(df.attrs.get("estimates", {}) if estimates is None else estimates)
    if descriptive:
        if stats.DESCRIPTIVE not in caption:
            caption = f"{caption} ({stats.DESCRIPTIVE})" if caption else stats.DESCRIPTIVE.capitalize()
    else:
        if not found:
            raise ValueError(f"table {name!r}: a comparative table stores its estimates (estimates=..., or "
                             "df.attrs['estimates']); a table without a comparison says descriptive=True")
        stats.check_caption(caption, found.values())
    meta = provenance.record(ctx.out_dir)
    if rows:
        meta = {**meta, "rows": rows}
    table = compare(df, paper) if paper is not None else df
    md = (f"**{caption}**\n\n" if caption else "") + to_markdown(df, paper) + f"\n_{_label(ctx, meta, rows)}_\n"
    files = {f"{name}.csv": table.to_csv().encode(), f"{name}.md": md.encode()}
    record = {"format": STATS_FORMAT, "descriptive": descriptive, "estimates": {k: e.as_dict() for k, e in found.items()}}
    _save_unit(ctx, "table", name, caption, files, {**meta, "has_paper_values": paper is not None, "stats": record})
    return ctx.out_dir / f"{name}.csv"


STATS_FORMAT = 2
"""Version of a table sidecar's ``stats`` record (per-run values of every estimate, issue 35)."""


def cell(row: object, column: object) -> str:
    """The key of a table cell in ``estimates``: ``"row / column"``."""
    return f"{_flat(row)} / {_flat(column)}"
