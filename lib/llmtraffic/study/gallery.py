"""``figures/README.md``: every saved figure and table, grouped by paper and case study; and
``figures/SCORECARD.md`` (:mod:`~llmtraffic.study.claims`), regenerated with it."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from . import claims
from .atomic import atomic_write_text
from .paths import figures_dir

PAPERS = {
    "bus": "Bus holding — LLM-enhanced RL for generic bus holding control",
    "tsc": "OracleTSC — an LLM as the traffic-signal policy",
}
OTHER = "Other notebooks"


def paper_of(stem: str) -> str:
    return PAPERS.get(stem.split("_", 1)[0], OTHER)


def outputs(root: Path | None = None) -> list[dict]:
    """Sidecars of every saved output under ``root`` (default: the figures directory)."""
    root = Path(root or figures_dir())
    found = []
    for sidecar in sorted(root.glob("*/*.json")):
        try:
            meta = json.loads(sidecar.read_text())
        except (OSError, json.JSONDecodeError):
            continue  # not ours, or being replaced right now
        if isinstance(meta, dict) and meta.get("kind") in ("figure", "table"):
            meta["_dir"] = sidecar.parent.name
            found.append(meta)
    return found


DIRTY = "⚠ **made from uncommitted code**"
"""Marks an output whose code was not committed (saved with ``LLMTRAFFIC_ALLOW_DIRTY``)."""


def is_dirty(meta: dict) -> bool:
    return bool(meta.get("allow_dirty") or (meta.get("git") or {}).get("dirty"))


def _entry(meta: dict, root: Path) -> list[str]:
    stem, name = meta["_dir"], meta["name"]
    commit = (meta.get("git") or {}).get("commit") or "unknown"
    mark = f" {DIRTY}" if is_dirty(meta) else ""
    source = f"_source: `notebooks/{meta['notebook']}.ipynb` · {meta.get('label', '')} · commit `{commit[:10]}`_{mark}"
    lines = [f"#### {meta.get('caption') or name}{mark}", ""]
    if meta["kind"] == "figure":
        lines += [f"![{meta.get('caption') or name}]({stem}/{name}.png)", ""]
    else:
        md = root / stem / f"{name}.md"
        body = md.read_text() if md.exists() else ""
        if meta.get("caption") and body.startswith(f"**{meta['caption']}**"):
            body = body.split("\n\n", 1)[-1]  # the caption is already the heading
        lines += [body.rstrip(), "", f"[CSV]({stem}/{name}.csv)", ""]
    return lines + [source, ""]


def _effort(last: dict) -> str:
    """`` (N CPU-min; machine: …)`` from a run summary's CPU time and speed reference, if recorded."""
    parts = []
    if last.get("cpu_s") is not None:
        parts.append(f"{last['cpu_s'] / 60:.1f} CPU-min")
    speed = last.get("speed_reference") or {}
    if speed:
        parts.append(f"machine: {speed['small_ops_us']:g} µs per small-op step, {speed['matmul_gflops']:g} GFLOP/s "
                     "(`provenance.speed_reference`)")
    return f" ({'; '.join(parts)})" if parts else ""


LLM_COST = ("llm_cost.csv", "LLM time (s)")
"""The table (and column) in which a notebook records the LLM requests its results rest on."""


def llm_seconds(root: Path, stem: str) -> str:
    """Total recorded LLM time of a notebook's results (the sum of its ``llm_cost`` table), or "—".

    Recorded, not spent in this run: a request answered from the cassette, or a cached run, counts
    the time it took when it was first asked."""
    name, column = LLM_COST
    try:
        with open(root / stem / name, newline="") as f:
            return f"{sum(float(row[column]) for row in csv.DictReader(f)):.0f}"
    except (OSError, KeyError, ValueError):
        return "—"


def run_times(root: Path) -> list[str]:
    """The latest run's wall time and each notebook's latest time (from the runner's ``run.json``)."""
    try:
        summary = json.loads((root / "run.json").read_text())
    except (OSError, json.JSONDecodeError):
        return []
    last = summary.get("last_run", {})
    only = f" (only {' '.join(last['only'])})" if last.get("only") else ""
    lines = [
        f"Latest run: profile `{last.get('profile')}`{only}, {last.get('notebooks')} notebooks in "
        f"{last.get('wall_s', 0) / 60:.1f} min on {last.get('cpus')} CPUs{_effort(last)}, commit `{(last.get('commit') or 'unknown')[:10]}`"
        + (f"; failed: {', '.join(last['jobs_failed'])}" if last.get("jobs_failed") else "; no failures") + ".",
    ]
    if last.get("study_spans_s"):
        lines.append("Each study's notebooks were done " + ", ".join(
            f"{study} {span / 60:.1f} min" for study, span in last["study_spans_s"].items()) + " after the run started.")
    for stem, why in (last.get("skipped") or {}).items():
        lines.append(f"Skipped {stem}: {why}.")
    lines += [
        "",
        "LLM s: the LLM time its results rest on, as recorded in its `llm_cost` table (answers replayed from",
        "the cassette or served by a cached run count the time they first took; \"—\": no LLM requests).",
        "",
        "| notebook | profile | seconds | LLM s | ran (min after the run's start) | outcome | commit |",
        "|---|---|---|---|---|---|---|",
    ]
    for stem, n in summary.get("notebooks", {}).items():
        outcome = "ok" if n.get("ok") else f"FAILED: {n.get('error', '')}".replace("|", "\\|")
        ran = f"{n['start_s'] / 60:.1f}–{n['end_s'] / 60:.1f}" if "start_s" in n else "—"
        lines.append(f"| {stem} | {n.get('profile')} | {n.get('seconds')} | {llm_seconds(root, stem)} | {ran} | {outcome} | "
                     f"`{(n.get('commit') or 'unknown')[:10]}` |")
    return lines + [""]


def render(root: Path | None = None) -> str:
    root = Path(root or figures_dir())
    metas = outputs(root)
    lines = [
        "# Figures and tables",
        "",
        "Regenerated by `python -m llmtraffic.study run` (and on every save). Each entry names the notebook,",
        "profile, seeds and commit that produced it; the JSON beside each file holds the full provenance.",
        "",
        "The papers' claims, our estimates and verdicts: [SCORECARD.md](SCORECARD.md).",
        "",
    ]
    lines += run_times(root)
    if not metas:
        lines += ["_No outputs yet._", ""]
    by_paper: dict[str, dict[str, list[dict]]] = {}
    for meta in metas:
        by_paper.setdefault(paper_of(meta["notebook"]), {}).setdefault(meta["_dir"], []).append(meta)
    order = list(PAPERS.values()) + [OTHER]
    for paper in sorted(by_paper, key=order.index):
        lines += [f"## {paper}", ""]
        for stem, items in sorted(by_paper[paper].items()):
            title = next((m.get("title") for m in items if m.get("title")), "")
            lines += [f"### {stem}" + (f" — {title}" if title else ""), ""]
            for meta in sorted(items, key=lambda m: (m.get("created", 0), m["name"])):
                lines += _entry(meta, root)
    return "\n".join(lines).rstrip() + "\n"


def write(root: Path | None = None) -> Path:
    """Regenerate ``<figures>/README.md`` and ``<figures>/SCORECARD.md`` (each atomically)."""
    root = Path(root or figures_dir())
    claims.write_scorecard(root)
    return atomic_write_text(root / "README.md", render(root))
