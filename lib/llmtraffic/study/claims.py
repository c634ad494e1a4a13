"""Comparative claims of the papers, checked against our runs, and the scorecard that lists them.

A claim is one comparative statement of a paper ("the LLM-enhanced reward lowers travel time
against the best expert reward by 3.73 %"), our estimate of the same comparison (a paired
difference with its 95 % CI over independent runs, see :mod:`llmtraffic.study.stats`, with n
and its unit, the per-run values and the minimum detectable effect) and a verdict:

- **reproduced**: the CI excludes no difference and points the paper's way;
- **opposite**: the CI excludes no difference and points the other way;
- **inconclusive**: the CI includes no difference;
- **inconclusive (n = 1)**: one run only, so no interval;
- **not run**: we could not compute it here; ``needs`` says what (an LLM backend, a GPU, …);
- **no result**: it ran, and its own outcome leaves nothing to compare (``finding`` says what, e.g.
  "no valid reward from SmolLM2-135M-Instruct in 4 tries", with its counts): a finding, not a gap.

Notebooks call :func:`claim`; the claims of one notebook go to ``figures/<stem>/claims.json``
(with provenance) and every claim of the study to ``figures/SCORECARD.md``.
"""

from __future__ import annotations

import json
import math
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..llm.models import MODELS
from . import provenance
from .atomic import atomic_write_text
from .context import current
from .paths import ROOT, figures_dir
from . import stats
from .stats import Estimate

REPRODUCED, OPPOSITE, INCONCLUSIVE, NOT_RUN = "reproduced", "opposite", "inconclusive", "not run"
INCONCLUSIVE_N1 = stats.INCONCLUSIVE_N1
NO_RESULT = "no result"
VERDICTS = (REPRODUCED, OPPOSITE, INCONCLUSIVE, INCONCLUSIVE_N1, NO_RESULT, NOT_RUN)

PAPERS = {
    "bus": "Yu, Wang, Ma — Large Language Model-Enhanced Reinforcement Learning for Generic Bus Holding Control Strategies",
    "tsc": "OracleTSC — Oracle-Informed Reward Hurdle and Uncertainty Regularization for Traffic Signal Control",
}


REAL_LLM, STAND_IN, NO_LLM, UNTESTED = "real LLM", "stand-in", "no LLM", "not tested"
KINDS = (REAL_LLM, STAND_IN, NO_LLM, UNTESTED)
STAND_INS = {
    "surrogate-tiny": "a 2-layer model trained in-process on max-queue labels, for the LLM policy",
    "search designer (no LLM)": "a seeded search over reward terms, for the LLM designer",
    "App. B reward": "the paper's printed final reward, for the LLM-designed one",
}
"""What stands in for an LLM in a claim, by the name its rows' labels use."""


def producer(c: dict) -> tuple[str, str]:
    """What a recorded claim was tested with — a real LLM, only a stand-in (:data:`STAND_INS`), no
    LLM at all, or nothing (not run) — and the names. The names come from ``extra["producer"]``
    where the notebook gave one (the rows compared), else from the claim's text and its notebook's
    ``backbone`` or ``backbones`` parameter; a real LLM is a packaged model (:data:`~llmtraffic.llm.models.MODELS`)
    by its title, or any other name a notebook gives as producer (an endpoint's model)."""
    if c.get("verdict") == NOT_RUN:
        return UNTESTED, ""
    given = (c.get("extra") or {}).get("producer")
    text = given if given is not None else " ".join(str(c.get(k) or "") for k in ("statement", "quantity", "note", "finding"))
    real = [m.title for m in MODELS.values() if m.title in text]
    stand = [name for name in STAND_INS if name in text]
    if not (given is not None or real or stand):
        params = c.get("_params") or {}
        stand = [b for b in dict.fromkeys([params.get("backbone"), *(params.get("backbones") or [])]) if b in STAND_INS]
    if real:
        return REAL_LLM, ", ".join(real)
    if stand:
        return STAND_IN, ", ".join(stand)
    return (REAL_LLM, given) if given else (NO_LLM, "")


def producer_text(c: dict) -> str:
    kind, names = producer(c)
    return f"{kind}: {names}" if names else kind


@dataclass
class Claim:
    id: str
    paper: str  # a key of PAPERS
    where: str  # section / table / figure of the paper, e.g. "§5.2.2, Table 1"
    statement: str  # the paper's statement, in words
    paper_value: float | None  # the paper's number for the comparison (None: stated without one)
    direction: int  # +1: the paper says ours-minus-reference is positive, −1: negative
    ours: dict | None  # Estimate.as_dict() of our comparison, or None when not run
    quantity: str  # what ``ours`` measures, e.g. "travel time, LLM − RL-global (%)"
    link: str  # the table or figure (relative to figures/) it comes from
    verdict: str
    needs: str = ""  # for "not run": what it needs
    finding: str = ""  # for "no result": what the run found instead of an estimate
    note: str = ""  # the measured reason where ours differs, or a caveat
    notebook: str = ""
    extra: dict = field(default_factory=dict)

    def reading(self) -> str:
        """One Markdown line for a notebook's rendered reading: the statement, the paper's value,
        ours with its CI, the verdict and the note (so the narrative cannot go stale)."""
        paper = "" if self.paper_value is None else f" (paper: {self.paper_value:g})"
        tail = f" {self.note}" if self.note else ""
        return (f"- {self.statement}{paper}: ours {self.quantity} = "
                f"{_ours({'ours': self.ours, 'needs': self.needs, 'finding': self.finding})}"
                f" → **{self.verdict}**.{tail}")


def judge(ours: Estimate | None, direction: int) -> str:
    """The verdict of an estimate against the paper's direction (see the module docstring)."""
    if ours is None:
        return NOT_RUN
    if ours.n == 1:
        return INCONCLUSIVE_N1
    if not ours.excludes_zero():
        return INCONCLUSIVE
    return REPRODUCED if math.copysign(1, ours.mean) == direction else OPPOSITE


def _direction(paper_value: float | None, direction: int | None) -> int:
    if direction is not None:
        if direction not in (-1, 1):
            raise ValueError(f"direction must be -1 or +1, got {direction!r}")
        return direction
    if paper_value is None or paper_value == 0:
        raise ValueError("a claim without a signed paper value needs direction=-1 or +1")
    return 1 if paper_value > 0 else -1


_recorded: dict[str, dict[str, Claim]] = {}  # notebook stem -> claim id -> claim (this process)


def claim(
    id: str,
    paper: str,
    where: str,
    statement: str,
    quantity: str,
    link: str,
    ours: Estimate | None = None,
    paper_value: float | None = None,
    direction: int | None = None,
    needs: str = "",
    note: str = "",
    finding: str = "",
    **extra,
) -> Claim:
    """Record one claim of the running notebook and rewrite its ``claims.json``.

    ``ours`` is our estimate of the same comparison (a paired difference, same sign convention as
    ``paper_value``); without it the claim is "not run" and ``needs`` must say why. ``link`` names
    the saved table or figure (``<notebook>/<name>``) the estimate comes from.
    """
    if paper not in PAPERS:
        raise ValueError(f"unknown paper {paper!r}; one of {sorted(PAPERS)}")
    if ours is None and not (needs or finding):
        raise ValueError(f"claim {id!r} has no estimate: say what it needs (needs='an LLM backend', …) "
                         "or what the run found instead (finding='no valid reward …')")
    ctx = current()
    record = Claim(
        id=id, paper=paper, where=where, statement=statement, paper_value=paper_value,
        direction=_direction(paper_value, direction), ours=None if ours is None else ours.as_dict(),
        quantity=quantity, link=link if "/" in link else f"{ctx.stem}/{link}",
        verdict="", needs=needs if ours is None and not finding else "", note=note, notebook=ctx.stem, extra=extra,
        finding=finding if ours is None else "",
    )
    record.verdict = NO_RESULT if record.finding else judge(ours, record.direction)
    _recorded.setdefault(ctx.stem, {})[id] = record
    _write(ctx.stem)
    return record


def _write(stem: str) -> Path:
    ctx = current()
    payload = {
        "kind": "claims",
        "notebook": stem,
        "profile": ctx.profile,
        "label": ctx.label,
        "params": ctx.params,
        "created": time.time(),
        **provenance.record(),
        "claims": [asdict(c) for c in _recorded[stem].values()],
    }
    path = atomic_write_text(figures_dir() / stem / "claims.json", json.dumps(payload, indent=1, default=str) + "\n")
    write_scorecard()
    return path


def load(root: Path | None = None) -> list[dict]:
    """Every recorded claim under ``root`` (default: the figures directory), with its run's label and commit."""
    root = Path(root or figures_dir())
    found = []
    for path in sorted(root.glob("*/claims.json")):
        try:
            payload = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        for c in payload.get("claims", []):
            c["_label"] = payload.get("label", "")
            c["_params"] = payload.get("params") or {}
            c["_commit"] = (payload.get("git") or {}).get("commit") or "unknown"
            found.append(c)
    return found


def _fmt(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return f"{value:.4g}"


def identical_runs(ours: dict) -> bool:
    """An estimate over n > 1 runs that all gave the same value (a deterministic simulator): its
    interval has no width, and its runs are one observation repeated."""
    return ours["n"] > 1 and ours["low"] is not None and ours["low"] == ours["high"]


def _ours(c: dict) -> str:
    if not c.get("ours"):
        return c["finding"] if c.get("finding") else f"not run: needs {c.get('needs')}"
    o = c["ours"]
    unit = f" {o['unit']}" if o.get("unit") else ""
    n = o.get("of") or o["n"]
    if o["low"] is None or (isinstance(o["low"], float) and math.isnan(o["low"])):
        return f"{o['mean']:.3g}{unit} (n = {n}, no CI)"
    if identical_runs(o):
        return f"{o['mean']:.3g}{unit} (n = {n}, identical runs: no spread to estimate)"
    return f"{o['mean']:.3g}{unit} [{o['low']:.3g}, {o['high']:.3g}] (n = {n})"


def minimum_effect(c: dict) -> str:
    """The claim's minimum detectable effect (paired t over its runs, α = 0.05, power 0.8), or why none."""
    o = c.get("ours") or {}
    if o.get("mde") is None:
        return "" if not o else "not recorded"
    if isinstance(o["mde"], float) and math.isnan(o["mde"]):
        return "none (n = 1)"
    return f"{o['mde']:.3g}{' ' + o['unit'] if o.get('unit') else ''}"


def link_target(link: str, root: Path | None = None) -> str:
    """The file a claim's link names, relative to the figures folder: the table's Markdown, else the figure's PNG."""
    return f"{link}.md" if (Path(root or figures_dir()) / f"{link}.md").exists() else f"{link}.png"


OPPOSITES_DOC = Path("docs") / "opposites.md"
"""Why each "opposite" claim points the other way, as measured: a ``### <claim id>`` section per
claim whose first paragraph is the reason (or, where it is unknown, the experiment run to look for
it and what it showed); the scorecard quotes that paragraph and links the section."""
NOT_INVESTIGATED = "reason not investigated"


def opposite_reasons(path: Path | None = None) -> dict[str, str]:
    """Claim id → the first paragraph of its section in :data:`OPPOSITES_DOC` (empty when none)."""
    path = Path(path or ROOT / OPPOSITES_DOC)
    if not path.exists():
        return {}
    sections = re.split(r"^### +(.+?) *$", path.read_text(), flags=re.M)[1:]
    found = {}
    for heading, body in zip(sections[::2], sections[1::2]):
        paragraph = body.strip().split("\n\n")[0]
        found[heading.strip("`")] = " ".join(line.strip() for line in paragraph.splitlines())
    return found


def anchor(heading: str) -> str:
    """The anchor a Markdown renderer (GitHub, JupyterLab) gives a heading: lower case, spaces as
    hyphens, other punctuation than ``-`` and ``_`` dropped."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def opposites_section(claims: list[dict], reasons: dict[str, str]) -> list[str]:
    """The scorecard's last section: each opposite claim with its measured reason, or
    :data:`NOT_INVESTIGATED` where :data:`OPPOSITES_DOC` has no section for it."""
    opposite = sorted((c for c in claims if c["verdict"] == OPPOSITE), key=lambda c: (c["paper"], c["id"]))
    if not opposite:
        return []
    doc = f"../{OPPOSITES_DOC.as_posix()}"
    lines = ["## Opposites and their measured reasons", "",
             f"Each claim whose interval excludes 0 on the other side from the paper's, with why, as measured "
             f"(the experiment behind each reason is in [{OPPOSITES_DOC.as_posix()}]({doc})).", ""]
    for c in opposite:
        why = reasons.get(c["id"])
        text = f"{why} ([details]({doc}#{anchor(c['id'])}))" if why else f"**{NOT_INVESTIGATED}** (no section in {OPPOSITES_DOC.as_posix()})"
        lines.append(f"- `{c['id']}` ({c['paper']}, ours {_ours(c)}): {text}")
    return lines + [""]


def render(root: Path | None = None, reasons: Path | None = None) -> str:
    """The scorecard: counts per paper and verdict, every claim grouped by paper and section, then
    each opposite claim's reason from ``reasons`` (default: :data:`OPPOSITES_DOC`)."""
    claims = load(root)
    lines = [
        "# Scorecard",
        "",
        "Every comparative claim of the two papers that the study checks: the paper's statement and",
        "value, ours (a paired difference with its 95 % t-interval over n independent runs: trained agents",
        "with their evaluation episodes averaged inside each, or evaluation seeds for a method without",
        "training; n names its unit), the minimum detectable effect (MDE: the true difference a paired",
        f"t-test over the same runs detects with power {stats.POWER} at α = {stats.ALPHA:.2f}, from the observed",
        "SD of the per-run differences, by the noncentral t) and the verdict — **reproduced** (CI excludes 0,",
        "the paper's direction), **opposite** (CI excludes 0, the other direction), **inconclusive** (CI",
        "includes 0), **inconclusive (n = 1)** (one run: no interval), **no result** (it ran; its outcome, e.g. no valid",
        "reward in K tries, leaves nothing to compare), **not run** (needs what it says).",
        "Regenerated from `figures/*/claims.json` after every run.",
        "",
        "| paper | claims | " + " | ".join(VERDICTS) + " |",
        "|---|---|" + "---|" * len(VERDICTS),
    ]
    for key in PAPERS:
        mine = [c for c in claims if c["paper"] == key]
        counts = [sum(c["verdict"] == v for c in mine) for v in VERDICTS]
        lines.append(f"| {key} | {len(mine)} | " + " | ".join(map(str, counts)) + " |")
    lines += ["", "What each claim was tested with: a real pretrained LLM, only a stand-in for one ("
              + "; ".join(f"{name}: {what}" for name, what in STAND_INS.items())
              + "), no LLM at all (baselines, simulators), or nothing (not run).",
              "", "| paper | " + " | ".join(KINDS) + " |", "|---|" + "---|" * len(KINDS)]
    for key in PAPERS:
        mine = [producer(c)[0] for c in claims if c["paper"] == key]
        lines.append(f"| {key} | " + " | ".join(str(mine.count(k)) for k in KINDS) + " |")
    lines.append("")
    for key, title in PAPERS.items():
        mine = [c for c in claims if c["paper"] == key]
        if not mine:
            continue
        lines += [f"## {title}", ""]
        lines += ["| where | claim | backbone or designer | paper | ours | MDE | verdict | quantity | source |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for c in sorted(mine, key=lambda c: (c["where"], c["id"])):
            link = c["link"]
            target = link_target(link, root)
            note = f" — {c['note']}" if c.get("note") else ""
            cells = [
                c["where"], f"`{c['id']}`: {c['statement']}{note}", producer_text(c), _fmt(c.get("paper_value")), _ours(c),
                minimum_effect(c), f"**{c['verdict']}**", c["quantity"], f"[{link}]({target}) · {c['_label']} · `{c['_commit'][:10]}`",
            ]
            lines.append("| " + " | ".join(str(x).replace("|", "\\|").replace("\n", " ") for x in cells) + " |")
        lines.append("")
    lines += opposites_section(claims, opposite_reasons(reasons))
    return "\n".join(lines).rstrip() + "\n"


def write_scorecard(root: Path | None = None) -> Path:
    root = Path(root or figures_dir())
    return atomic_write_text(root / "SCORECARD.md", render(root))


# ---------------------------------------------------------------- verdicts before and after a change


def load_commit(ref: str, root: Path | None = None) -> list[dict]:
    """Every claim committed at git ``ref`` under ``figures/*/claims.json`` (e.g. ``main``, the
    claims before a regeneration)."""
    import subprocess

    from .paths import ROOT

    repo = Path(root or ROOT)
    listed = subprocess.run(["git", "ls-tree", "-r", "--name-only", ref, "figures"], cwd=repo, capture_output=True,
                            text=True, check=True).stdout.split()
    found = []
    for name in sorted(n for n in listed if n.endswith("/claims.json") and n.count("/") == 2):
        payload = json.loads(subprocess.run(["git", "show", f"{ref}:{name}"], cwd=repo, capture_output=True, text=True,
                                            check=True).stdout)
        found += payload.get("claims", [])
    return found


def changed(before: list[dict], after: list[dict]) -> dict:
    """Verdict counts per paper before and after, and every claim whose verdict changed (or that
    appeared or went): ``{"counts": {paper: {"before": {...}, "after": {...}}}, "changed": [...]}``."""
    old, new = {c["id"]: c for c in before}, {c["id"]: c for c in after}
    counts = {}
    for paper in PAPERS:
        counts[paper] = {side: {v: sum(c["paper"] == paper and c["verdict"] == v for c in claims.values()) for v in VERDICTS}
                         for side, claims in (("before", old), ("after", new))}
    moved = [{"id": i, "paper": (new.get(i) or old[i])["paper"], "before": old[i]["verdict"] if i in old else "absent",
              "after": new[i]["verdict"] if i in new else "absent"}
             for i in sorted(set(old) | set(new)) if (old.get(i) or {}).get("verdict") != (new.get(i) or {}).get("verdict")]
    return {"counts": counts, "changed": moved}


def changed_text(diff: dict) -> str:
    """:func:`changed` as Markdown: a count table per paper, then one line per changed verdict."""
    lines = ["| paper | | " + " | ".join(VERDICTS) + " |", "|---|---|" + "---|" * len(VERDICTS)]
    for paper, sides in diff["counts"].items():
        for side, counts in sides.items():
            lines.append(f"| {paper} | {side} | " + " | ".join(str(counts[v]) for v in VERDICTS) + " |")
    lines += ["", f"{len(diff['changed'])} changed verdict(s):"]
    lines += [f"- `{c['id']}` ({c['paper']}): {c['before']} → {c['after']}" for c in diff["changed"]]
    return "\n".join(lines) + "\n"
