"""``figures/README.md``: every saved figure and table, grouped by paper and case study; and
``figures/SCORECARD.md`` (:mod:`~llmtraffic.study.claims`), regenerated with it."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from . import claims
from .atomic import atomic_write_text, write_section
from .paths import ROOT, figures_dir
from .provenance import CODE_PATHS

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


def parts(summary: dict) -> list[dict]:
    """The parts of a run summary (``figures/run.json``): the runs of its code version, oldest
    first. A summary written before parts were recorded counts its last run as one part."""
    if "parts" in summary:
        return summary["parts"]
    last = summary.get("last_run")
    if not last:
        return []
    ran = [stem for stem, n in summary.get("notebooks", {}).items() if n.get("commit") == last.get("commit")]
    return [{**last, "notebooks": ran}]


def _minutes(seconds: float | None) -> str:
    return "—" if seconds is None else f"{seconds / 60:.1f}"


def _selection(part: dict) -> str:
    """What a part ran: ``all 17``, or its ``--only`` patterns and how many notebooks they matched."""
    n = len(part.get("notebooks") or [])
    return f"`{' '.join(part['only'])}` ({n})" if part.get("only") else f"all {n}"


def _machine(part: dict) -> str:
    speed = part.get("speed_reference") or {}
    return f"{speed['small_ops_us']:g} µs, {speed['matmul_gflops']:g} GFLOP/s" if speed else "—"


def whole(runs: list[dict]) -> tuple[float, float | None, int]:
    """Wall seconds, CPU seconds (None unless every part recorded it) and notebooks of ``runs``."""
    cpu = [p.get("cpu_s") for p in runs]
    notebooks = {stem for p in runs for stem in p.get("notebooks") or []}
    return (sum(p.get("wall_s") or 0.0 for p in runs), None if None in cpu else sum(cpu), len(notebooks))


def parts_table(runs: list[dict]) -> list[str]:
    """One row per part: what it ran, its wall and CPU time, the machine's speed reference, commit, failures."""
    lines = [
        "| part | profile | notebooks | wall (min) | CPU-min | studies done (min) | machine (`speed_reference`) | commit | failed |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for i, p in enumerate(runs, 1):
        spans = ", ".join(f"{study} {span / 60:.1f}" for study, span in (p.get("study_spans_s") or {}).items()) or "—"
        failed = ", ".join(p.get("jobs_failed") or []) or "none"
        skipped = ", ".join(p.get("skipped") or {})
        commit = f"`{(p.get('commit') or 'unknown')[:10]}`" + (f" {DIRTY}" if p.get("dirty") else "")
        lines.append(f"| {i} | {p.get('profile')} | {_selection(p)} | {_minutes(p.get('wall_s'))} | "
                     f"{_minutes(p.get('cpu_s'))} | {spans} | {_machine(p)} | {commit} | {failed}"
                     + (f"; skipped {skipped}" if skipped else "") + " |")
    return lines


def run_times(root: Path) -> list[str]:
    """The parts of the current code version and each notebook's latest time (from the runner's ``run.json``)."""
    try:
        summary = json.loads((root / "run.json").read_text())
    except (OSError, json.JSONDecodeError):
        return []
    runs = parts(summary)
    part_of = {stem: i for i, p in enumerate(runs, 1) for stem in p.get("notebooks") or []}
    lines = []
    if runs:
        wall, cpu, count = whole(runs)
        cpus = sorted({p.get("cpus") for p in runs if p.get("cpus")})
        lines += [
            f"Runs of this code version (equal trees of {', '.join(f'`{p}`' for p in CODE_PATHS)}; "
            "`python -m llmtraffic.study verify` checks the outputs): "
            f"{count} notebooks in {len(runs)} part{'s' if len(runs) > 1 else ''}, {_minutes(wall)} min on "
            f"{'/'.join(map(str, cpus)) or '?'} CPUs" + (f" ({_minutes(cpu)} CPU-min)" if cpu is not None else "") + ".",
            "Studies done: minutes after the part's start when each study's last notebook in it finished.",
            "",
            *parts_table(runs),
            "",
        ]
        for stem, why in (runs[-1].get("skipped") or {}).items():
            lines += [f"Skipped {stem} in part {len(runs)}: {why}.", ""]
    lines += [
        "LLM s: the LLM time its results rest on, as recorded in its `llm_cost` table (answers replayed from",
        "the cassette or served by a cached run count the time they first took; \"—\": no LLM requests).",
        "",
        "| notebook | part | profile | seconds | LLM s | ran (min after its part's start) | outcome | commit |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for stem, n in summary.get("notebooks", {}).items():
        outcome = "ok" if n.get("ok") else f"FAILED: {n.get('error', '')}".replace("|", "\\|")
        ran = f"{n['start_s'] / 60:.1f}–{n['end_s'] / 60:.1f}" if "start_s" in n else "—"
        lines.append(f"| {stem} | {part_of.get(stem, '—')} | {n.get('profile')} | {n.get('seconds')} | "
                     f"{llm_seconds(root, stem)} | {ran} | {outcome} | `{(n.get('commit') or 'unknown')[:10]}` |")
    return lines + [""]


README_BEGIN = "<!-- run-times:begin (generated by llmtraffic.study.gallery from figures/run.json) -->"
README_END = "<!-- run-times:end -->"


def profile_times(root: Path | None = None) -> list[str]:
    """The README's measured times: per profile in ``run.json``'s parts, the whole and each part."""
    root = Path(root or figures_dir())
    try:
        runs = parts(json.loads((root / "run.json").read_text()))
    except (OSError, json.JSONDecodeError):
        runs = []
    if not runs:
        return ["No run recorded in `figures/run.json` yet."]
    lines = []
    for profile in dict.fromkeys(p.get("profile") for p in runs):
        mine = [p for p in runs if p.get("profile") == profile]
        wall, cpu, count = whole(mine)
        cpus = "/".join(map(str, sorted({p.get("cpus") for p in mine if p.get("cpus")}))) or "?"
        commits = ", ".join(f"`{c[:7]}`" for c in dict.fromkeys(p.get("commit") or "unknown" for p in mine))
        each = ("in one part" if len(mine) == 1 else f"in {len(mine)} parts: " + ", ".join(
            f"part {runs.index(p) + 1} ({_selection(p)}) {_minutes(p.get('wall_s'))} min" for p in mine))
        lines.append(f"Measured at `{profile}` (the latest runs of one code version, from `figures/run.json`): "
                     f"{count} notebooks in {_minutes(wall)} min on {cpus} CPUs"
                     + (f" ({_minutes(cpu)} CPU-min)" if cpu is not None else "") + f", {each}; commit {commits}.")
    return lines


def update_readme(readme: Path | None = None, root: Path | None = None) -> Path:
    """Replace the measured times between the markers of ``README.md`` (the markers must be there)."""
    block = "\n".join([README_BEGIN, "", *profile_times(root), "", README_END])
    return write_section(Path(readme or ROOT / "README.md"), README_BEGIN, README_END, block)


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
