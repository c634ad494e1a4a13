"""Saving figures and tables into ``figures/<stem>/`` with a provenance sidecar each.

Every file is written atomically (temporary file in the same folder, then ``os.replace``), so an
interrupted run leaves either the previous version or the new one, never half of a file.
"""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import pandas as pd

from . import gallery, provenance
from .context import Context, current


def atomic_write(path: Path, write: Callable[[IO[bytes]], None]) -> Path:
    """Write ``path`` through ``write(fh)`` on a temporary file, then rename it into place."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    return path


def atomic_write_text(path: Path, text: str) -> Path:
    return atomic_write(path, lambda fh: fh.write(text.encode()))


def _sidecar(ctx: Context, kind: str, name: str, caption: str, files: list[str], extra: dict | None = None) -> dict:
    return {
        "kind": kind,
        "name": name,
        "caption": caption,
        "files": files,
        "notebook": ctx.stem,
        "title": ctx.title,
        "profile": ctx.profile,
        "label": ctx.label,
        "params": ctx.params,
        "changed_from_profile": ctx.changed,
        "seeds": ctx.seeds,
        "created": time.time(),
        "wall_time_s": round(time.time() - ctx.started, 3),
        **provenance.record(),
        **(extra or {}),
    }


def _write_sidecar(ctx: Context, name: str, meta: dict) -> None:
    atomic_write_text(ctx.out_dir / f"{name}.json", json.dumps(meta, indent=1, default=str) + "\n")
    gallery.write()


def save_figure(fig, name: str, caption: str = "", stamp: bool = True) -> Path:
    """Save ``fig`` as ``figures/<stem>/<name>.png`` and ``.svg`` with a provenance sidecar.

    ``stamp`` writes the run's label (profile, seeds, backbone/designer) in the figure's corner,
    so a figure seen out of context still says what produced it.
    """
    ctx = current()
    if stamp:
        fig.text(0.995, 0.005, ctx.label, ha="right", va="bottom", fontsize=6, color="0.45")
    for ext in ("png", "svg"):
        atomic_write(ctx.out_dir / f"{name}.{ext}", lambda fh, ext=ext: fig.savefig(fh, format=ext, dpi=150, bbox_inches="tight"))
    _write_sidecar(ctx, name, _sidecar(ctx, "figure", name, caption, [f"{name}.png", f"{name}.svg"]))
    return ctx.out_dir / f"{name}.png"


_NUMBER = re.compile(r"^\s*([-+]?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)")


def leading_number(value: Any) -> float | None:
    """The number a cell stands for: a float, or the first number of text like ``"12.3 ± 0.4"``."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return None if math.isnan(value) else float(value)
    match = _NUMBER.match(str(value))
    return float(match.group(1)) if match else None


def relative_difference(ours: Any, paper: Any) -> float | None:
    """``(ours − paper) / |paper|`` in percent, or None when either is not a number or paper is 0."""
    a, b = leading_number(ours), leading_number(paper)
    if a is None or b is None or b == 0:
        return None
    return 100.0 * (a - b) / abs(b)


def compare(ours: pd.DataFrame, paper: pd.DataFrame | dict) -> pd.DataFrame:
    """Long table with, per column ``c`` of ``ours``: ``c``, ``c [paper]``, ``c [Δ %]``.

    ``paper`` has the layout of ``ours`` (same row index and column names; a dict is read as
    ``{column: {row: value}}``); missing paper cells stay empty.
    """
    paper = pd.DataFrame(paper) if isinstance(paper, dict) else paper
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
    return str(value).replace("|", "\\|")


def to_markdown(df: pd.DataFrame, paper: pd.DataFrame | dict | None = None) -> str:
    """A Markdown table; with ``paper``, each cell reads ``ours · paper P (Δ +x.x %)``."""
    paper_df = None if paper is None else (pd.DataFrame(paper) if isinstance(paper, dict) else paper).reindex(index=df.index)
    header = [df.index.name or ""] + [str(c) for c in df.columns]
    rows = []
    for idx, row in df.iterrows():
        cells = [_cell(idx)]
        for col in df.columns:
            text = _cell(row[col])
            if paper_df is not None and col in paper_df.columns and _cell(paper_df.at[idx, col]):
                theirs = paper_df.at[idx, col]
                diff = relative_difference(row[col], theirs)
                text += f" · paper {_cell(theirs)}" + (f" (Δ {diff:+.1f} %)" if diff is not None else "")
            cells.append(text)
        rows.append(cells)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def save_table(df: pd.DataFrame, name: str, paper: pd.DataFrame | dict | None = None, caption: str = "") -> Path:
    """Save ``df`` as ``figures/<stem>/<name>.csv`` and ``.md`` with a provenance sidecar.

    ``paper`` holds the paper's reported values in the layout of ``df``; the CSV then carries
    ``[paper]`` and ``[Δ %]`` columns and the Markdown shows paper, ours and the difference per cell.
    """
    ctx = current()
    table = compare(df, paper) if paper is not None else df
    atomic_write_text(ctx.out_dir / f"{name}.csv", table.to_csv())
    md = (f"**{caption}**\n\n" if caption else "") + to_markdown(df, paper) + f"\n_{ctx.label}_\n"
    atomic_write_text(ctx.out_dir / f"{name}.md", md)
    _write_sidecar(
        ctx, name,
        _sidecar(ctx, "table", name, caption, [f"{name}.csv", f"{name}.md"], {"has_paper_values": paper is not None}),
    )
    return ctx.out_dir / f"{name}.csv"
