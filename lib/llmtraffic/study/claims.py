"""Comparative claims of the papers, checked against our runs, and the scorecard that lists them.

A claim is one comparative statement of a paper ("the LLM-enhanced reward lowers travel time
against the best expert reward by 3.73 %"), our estimate of the same comparison (a paired
difference with its 95 % CI over independent runs, see :mod:`llmtraffic.study.stats`, with n
and its unit, the per-run values, the minimum detectable effect and the p-value of the t-test
behind the interval) and a verdict:

- **reproduced**: the Holm-adjusted p-value is below α = 0.05 and the difference points the paper's way;
- **opposite**: the adjusted p is below α and the difference points the other way;
- **inconclusive**: the adjusted p is not below α;
- **inconclusive (n = 1)**: one independent run only (one agent, or one design run whose agents
  are clustered under it), so no interval;
- **inconclusive (deterministic, n = 1)**: several runs that are one value up to float rounding
  (a deterministic simulator on several seeds): one distinct run, its single difference shown;
- **not run**: we could not compute it here; ``needs`` says what (an LLM backend, a GPU, …);
- **no result**: it ran, and its own outcome leaves nothing to compare (``finding`` says what, e.g.
  "no valid reward from SmolLM2-135M-Instruct in 4 tries", with its counts): a finding, not a gap.

**Family-wise error.** Holm's correction (:func:`llmtraffic.study.stats.holm`, statsmodels)
runs over each paper's family: every claim of that paper with a p-value, the study's own controls
included. The verdict uses the adjusted p; the unadjusted interval stays displayed, and the
unadjusted verdict is kept beside it (``verdict_unadjusted``). The family spans notebooks, so
:func:`load` re-adjusts whatever it reads and :func:`rejudge` rewrites every ``claims.json`` from
its stored per-run values (no simulation).

**Magnitude.** A claim with a paper value also says whether the paper's value lies inside our
(unadjusted) interval: "paper's value inside", or a "smaller" / "larger effect than the paper's".
Claims that are the study's own controls (``control=True``, or "(our control)" in ``where``) are
labelled so and counted apart from the paper's claims.

Notebooks call :func:`claim`; the claims of one notebook go to ``figures/<stem>/claims.json``
(with provenance) and every claim of the study to ``figures/SCORECARD.md``.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Sequence
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
DETERMINISTIC = stats.DETERMINISTIC
NO_RESULT = "no result"
VERDICTS = (REPRODUCED, OPPOSITE, INCONCLUSIVE, INCONCLUSIVE_N1, DETERMINISTIC, NO_RESULT, NOT_RUN)
DECIDED = (REPRODUCED, OPPOSITE)
PRINTED = 1e-3
"""A deterministic difference equals the paper's value when they agree within this relative
tolerance: the papers print their operands rounded (to 0.01 s), so their differences carry it."""
INSIDE, SMALLER, LARGER, NO_INTERVAL = ("paper's value inside", "smaller effect than the paper's",
                                        "larger effect than the paper's", "no interval")

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
    verdict: str  # with the Holm-adjusted p of the paper's family
    needs: str = ""  # for "not run": what it needs
    finding: str = ""  # for "no result": what the run found instead of an estimate
    note: str = ""  # the measured reason where ours differs, or a caveat
    notebook: str = ""
    extra: dict = field(default_factory=dict)
    control: bool = False  # the study's own control, not a claim of the paper
    agents: str = ""  # names the trained agents behind ``ours``; claims naming the same ones share them
    p_adjusted: float | None = None  # Holm over the paper's family
    verdict_unadjusted: str = ""  # with the raw p (the interval shown)
    magnitude: str = ""  # the paper's value against our interval

    def reading(self) -> str:
        """One Markdown line for a notebook's rendered reading: the statement, the paper's value,
        ours with its CI, the verdict and the note (so the narrative cannot go stale)."""
        paper = "" if self.paper_value is None else f" (paper: {self.paper_value:g})"
        tail = f" {self.note}" if self.note else ""
        size = f", {self.magnitude}" if self.magnitude else ""
        return (f"- {self.statement}{paper}: ours {self.quantity} = "
                f"{_ours({'ours': self.ours, 'needs': self.needs, 'finding': self.finding})}"
                f" → **{self.verdict}**{size}.{tail}")


def _get(ours: Estimate | dict, key: str, default=None):
    return getattr(ours, key, default) if isinstance(ours, Estimate) else ours.get(key, default)


def judge(ours: Estimate | dict | None, direction: int, p: float | None = None) -> str:
    """The verdict of an estimate against the paper's direction (see the module docstring), with
    the estimate's own p-value, or ``p`` (the Holm-adjusted one) where given."""
    if ours is None:
        return NOT_RUN
    n, k = _get(ours, "n"), _get(ours, "distinct")
    if n == 1:  # one run, or one cluster of runs (:func:`clustered`)
        return INCONCLUSIVE_N1
    if k == 1 or (k is None and _get(ours, "low") == _get(ours, "high")):
        return DETERMINISTIC
    p = _get(ours, "p") if p is None else p
    if p is None:  # an estimate stored before p-values: its interval decides
        low, high = _get(ours, "low"), _get(ours, "high")
        decided = low is not None and not math.isnan(low) and (low > 0 or high < 0)
    else:
        decided = p < stats.ALPHA
    if not decided:
        return INCONCLUSIVE
    return REPRODUCED if math.copysign(1, _get(ours, "mean")) == direction else OPPOSITE


def magnitude(c: dict) -> str:
    """Where the paper's value lies against our unadjusted interval (a deterministic difference:
    against its single value, equal within :data:`PRINTED`), in the paper's direction; ``""``
    without a paper value or estimate."""
    o, value = c.get("ours"), c.get("paper_value")
    if not o or value is None:
        return ""
    deterministic = o.get("distinct") == 1 and o["n"] > 1
    low, high = (o["mean"], o["mean"]) if deterministic else (o.get("low"), o.get("high"))
    if low is None or math.isnan(low):
        return NO_INTERVAL
    if (low <= value <= high and not deterministic) or (deterministic and math.isclose(value, low, rel_tol=PRINTED)):
        return INSIDE
    effect = c["direction"] * value  # the paper's effect, positive in its own direction
    ours = sorted((c["direction"] * low, c["direction"] * high))
    return SMALLER if effect > ours[1] else LARGER


def is_control(c: dict) -> bool:
    """Whether a recorded claim is the study's own control rather than the paper's claim."""
    return bool(c.get("control")) or "our control" in c.get("where", "")


def _direction(paper_value: float | None, direction: int | None) -> int:
    if direction is not None:
        if direction not in (-1, 1):
            raise ValueError(f"direction must be -1 or +1, got {direction!r}")
        return direction
    if paper_value is None or paper_value == 0:
        raise ValueError("a claim without a signed paper value needs direction=-1 or +1")
    return 1 if paper_value > 0 else -1


def clustered(est: Estimate, clusters: Sequence, noun: str = "design run") -> dict:
    """``est`` (over agents) re-expressed over the clusters its runs belong to (``clusters[i]``:
    the design run whose reward agent i was trained on): each cluster's mean is one run; the
    agents' own interval is kept as descriptive (``within``)."""
    if len(clusters) != len(est.runs):
        raise ValueError(f"clusters: {len(clusters)} ids for {len(est.runs)} runs")
    ids = list(dict.fromkeys(clusters))
    means = [sum(r for r, c in zip(est.runs, clusters) if c == i) / list(clusters).count(i) for i in ids]
    of = f"{stats.count(len(ids), noun)} ({est.of or stats.count(est.n, 'agent')})"
    outer = stats.difference(means, est.unit, of, est.seed_runs).as_dict()
    return {**outer, "clusters": list(clusters), "cluster_noun": noun, "within": est.as_dict()}


def rederive(ours: dict | None) -> dict | None:
    """A stored estimate recomputed from its stored per-run values under the rules in force
    (distinct runs, by their stored ``groups`` where the runs' identities were known, else by
    value; p-value; clusters; the eval-seed variance where ``seed_runs`` are stored); an estimate
    without per-run values (Welch's) is kept as it is."""
    if not ours or not ours.get("runs") or ours.get("method") == stats.WELCH:
        return ours
    inner = ours.get("within") or ours
    est = stats.difference(inner["runs"], inner.get("unit", ""), inner.get("of", ""), inner.get("seed_runs") or (),
                           inner.get("groups") or None)
    if ours.get("clusters") is not None:
        return clustered(est, ours["clusters"], ours.get("cluster_noun", "design run"))
    return est.as_dict()


def adjust(claims: list[dict]) -> list[dict]:
    """Holm-adjust each paper's family in place: ``p_adjusted``, ``verdict`` (adjusted),
    ``verdict_unadjusted``, ``magnitude`` and ``control`` of every claim. Returns ``claims``."""
    for paper in PAPERS:
        mine = [c for c in claims if c["paper"] == paper]
        family = [c for c in mine if c.get("ours") and c["ours"].get("p") is not None
                  and judge(c["ours"], c["direction"]) not in (INCONCLUSIVE_N1, DETERMINISTIC)]
        adjusted = dict(zip(map(id, family), stats.holm([c["ours"]["p"] for c in family])))
        for c in mine:
            c["p_adjusted"] = adjusted.get(id(c))
            c["control"] = is_control(c)
            c["magnitude"] = magnitude(c)
            if not c.get("ours"):
                c["verdict_unadjusted"] = c["verdict"]
                continue
            c["verdict_unadjusted"] = judge(c["ours"], c["direction"])
            c["verdict"] = judge(c["ours"], c["direction"], c["p_adjusted"])
    return claims


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
    control: bool | None = None,
    agents: str = "",
    clusters: Sequence | None = None,
    cluster_noun: str = "design run",
    **extra,
) -> Claim:
    """Record one claim of the running notebook and rewrite its ``claims.json``.

    ``ours`` is our estimate of the same comparison (a paired difference, same sign convention as
    ``paper_value``); without it the claim is "not run" and ``needs`` must say why. ``link`` names
    the saved table or figure (``<notebook>/<name>``) the estimate comes from. ``control``: the
    study's own control, not the paper's claim (default: "our control" in ``where``). ``agents``
    names the trained agents behind ``ours`` (claims naming the same ones are marked "same agents
    as …"). ``clusters``: per run of ``ours``, the unit it belongs to (the design run whose reward
    the agent was trained on): n then counts those units (``cluster_noun``) and the agents' spread
    is descriptive.
    """
    if paper not in PAPERS:
        raise ValueError(f"unknown paper {paper!r}; one of {sorted(PAPERS)}")
    if ours is None and not (needs or finding):
        raise ValueError(f"claim {id!r} has no estimate: say what it needs (needs='an LLM backend', …) "
                         "or what the run found instead (finding='no valid reward …')")
    ctx = current()
    stored = None if ours is None else clustered(ours, clusters, cluster_noun) if clusters is not None else ours.as_dict()
    record = Claim(
        id=id, paper=paper, where=where, statement=statement, paper_value=paper_value,
        direction=_direction(paper_value, direction), ours=stored,
        quantity=quantity, link=link if "/" in link else f"{ctx.stem}/{link}",
        verdict="", needs=needs if ours is None and not finding else "", note=note, notebook=ctx.stem, extra=extra,
        finding=finding if ours is None else "", control=bool(control) if control is not None else "our control" in where,
        agents=agents,
    )
    record.verdict = NO_RESULT if record.finding else judge(stored, record.direction)
    _recorded.setdefault(ctx.stem, {})[id] = record
    _write(ctx.stem)
    return record


def _write(stem: str) -> Path:
    ctx = current()
    mine = [asdict(c) for c in _recorded[stem].values()]
    others = [c for c in _read(figures_dir()) if c.get("notebook") != stem]
    adjust(others + mine)  # the family as it stands: the other notebooks' claims as last written
    for c, d in zip(_recorded[stem].values(), mine):
        c.verdict, c.p_adjusted, c.verdict_unadjusted, c.magnitude = (d["verdict"], d["p_adjusted"],
                                                                      d["verdict_unadjusted"], d["magnitude"])
    payload = {
        "kind": "claims",
        "notebook": stem,
        "profile": ctx.profile,
        "label": ctx.label,
        "params": ctx.params,
        "created": time.time(),
        **provenance.record(),
        "claims": mine,
    }
    path = atomic_write_text(figures_dir() / stem / "claims.json", json.dumps(payload, indent=1, default=str) + "\n")
    write_scorecard()
    return path


def _files(root: Path) -> list[tuple[Path, dict]]:
    found = []
    for path in sorted(Path(root).glob("*/claims.json")):
        try:
            found.append((path, json.loads(path.read_text())))
        except (OSError, json.JSONDecodeError):
            continue
    return found


def _read(root: Path) -> list[dict]:
    found = []
    for _, payload in _files(root):
        for c in payload.get("claims", []):
            c["_label"] = payload.get("label", "")
            c["_profile"] = payload.get("profile", "")
            c["_params"] = payload.get("params") or {}
            c["_commit"] = (payload.get("git") or {}).get("commit") or "unknown"
            found.append(c)
    return found


def load(root: Path | None = None) -> list[dict]:
    """Every recorded claim under ``root`` (default: the figures directory), with its run's label
    and commit, Holm-adjusted over each paper's family as it stands (:func:`adjust`)."""
    return adjust(_read(Path(root or figures_dir())))


def rejudge(root: Path | None = None) -> dict:
    """Re-derive every claim under ``root`` from its stored per-run values (:func:`rederive`, no
    simulation), Holm-adjust each paper's family, and rewrite every ``claims.json`` (nothing else
    in it changes) and the scorecard. Returns :func:`changed` from the claims as they were."""
    root = Path(root or figures_dir())
    files = _files(root)
    every = [c for _, payload in files for c in payload.get("claims", [])]
    before = [dict(c) for c in every]
    for c in every:
        c["ours"] = rederive(c.get("ours"))
        c.setdefault("agents", "")
    adjust(every)
    for path, payload in files:
        atomic_write_text(path, json.dumps(payload, indent=1, default=str) + "\n")
    write_scorecard(root)
    return changed(before, every)


def _fmt(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return f"{value:.4g}"


def _p(value: float | None) -> str:
    return "" if value is None or math.isnan(value) else f"{value:.2g}"


def identical_runs(ours: dict) -> bool:
    """An estimate over n > 1 runs that are all one value up to float rounding (a deterministic
    simulator): one distinct run repeated, no spread to estimate."""
    if ours["n"] <= 1:
        return False
    if ours.get("distinct") is not None:
        return ours["distinct"] == 1
    return ours["low"] is not None and ours["low"] == ours["high"]


def _n(o: dict) -> str:
    """n with its unit, counting duplicate runs once and saying how many there were."""
    of = o.get("of") or str(o["n"])
    k = o.get("distinct")
    if k is None or k >= o["n"] or k < 2:
        return of
    dup = o["n"] - k
    return f"{re.sub(r'^[0-9]+', str(k), of)}: {o['n']} runs with {dup} duplicate{'s' * (dup > 1)}, counted once"


def _ours(c: dict) -> str:
    if not c.get("ours"):
        return c["finding"] if c.get("finding") else f"not run: needs {c.get('needs')}"
    o = c["ours"]
    unit = f" {o['unit']}" if o.get("unit") else ""
    if identical_runs(o):
        return f"{o['mean']:.3g}{unit} (n = {o.get('of') or o['n']}, identical runs: one distinct run)"
    if o["low"] is None or (isinstance(o["low"], float) and math.isnan(o["low"])):
        inner = o.get("within") or {}
        spread = ""
        if inner.get("low") is not None and not math.isnan(inner["low"]) and inner.get("distinct") != 1:
            spread = f"; its agents: [{inner['low']:.3g}, {inner['high']:.3g}], descriptive"
        return f"{o['mean']:.3g}{unit} (n = {o.get('of') or o['n']}, no CI{spread})"
    return f"{o['mean']:.3g}{unit} [{o['low']:.3g}, {o['high']:.3g}] (n = {_n(o)})"


def minimum_effect(c: dict) -> str:
    """The claim's minimum detectable effect (paired t over its runs, α = 0.05, power 0.8), or why
    none: "—" for one distinct run (undefined, never 0)."""
    o = c.get("ours") or {}
    if not o:
        return ""
    if identical_runs(o):
        return "—"
    if o.get("mde") is None:
        return "not recorded"
    if isinstance(o["mde"], float) and math.isnan(o["mde"]):
        return "none (n = 1)"
    return f"{o['mde']:.3g}{' ' + o['unit'] if o.get('unit') else ''}"


def source_label(c: dict) -> str:
    """The run's label for a claim's source line. A real-backbone claim of a notebook whose
    ``real`` parameters set its own seeds names its backbone and those seeds, not the notebook's
    stand-in and its seeds."""
    params, kind = c.get("_params") or {}, producer(c)
    real = params.get("real")
    if kind[0] != REAL_LLM or not isinstance(real, dict):
        return c.get("_label", "")
    parts = [f"profile {c['_profile']}"] if c.get("_profile") else []
    parts.append(f"backbone {kind[1]}")
    parts += [f"{k} {real[k]}" for k in ("agent_seeds", "eval_seeds", "episode_s", "episodes") if k in real]
    return " · ".join(parts)


def shared_agents(claims: list[dict]) -> dict[str, list[str]]:
    """Claim id → the other claims whose estimates rest on the same agents (``agents``)."""
    by: dict[str, list[str]] = {}
    for c in claims:
        if c.get("agents"):
            by.setdefault(c["agents"], []).append(c["id"])
    return {i: [j for j in ids if j != i] for ids in by.values() for i in ids if len(ids) > 1}


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


def tally(claims: list[dict], key: str = "verdict") -> list[int]:
    return [sum(c[key] == v for c in claims) for v in VERDICTS]


def headline(claims: list[dict]) -> list[str]:
    """One table per paper: its claims by what they were tested with (a real LLM, a stand-in, no
    LLM), then the study's own controls, each row counting the verdicts in force (Holm-adjusted,
    deterministic runs as one)."""
    lines = []
    for key in PAPERS:
        mine = [c for c in claims if c["paper"] == key]
        if not mine:
            continue
        lines += [f"**{key}** (verdicts Holm-adjusted within the paper's family)", "",
                  "| tested with | claims | decided | " + " | ".join(VERDICTS) + " |", "|---|---|---|" + "---|" * len(VERDICTS)]
        for control in (False, True):
            for kind in KINDS:
                rows = [c for c in mine if is_control(c) == control and producer(c)[0] == kind]
                if not rows:
                    continue
                decided = sum(c["verdict"] in DECIDED for c in rows)
                label = f"our control, {kind}" if control else kind
                lines.append(f"| {label} | {len(rows)} | {decided} | " + " | ".join(map(str, tally(rows))) + " |")
        lines.append("")
    return lines


def render(root: Path | None = None, reasons: Path | None = None) -> str:
    """The scorecard: the headline per paper (:func:`headline`), counts per paper and verdict with
    and without Holm's adjustment, every claim grouped by paper and section, then each opposite
    claim's reason from ``reasons`` (default: :data:`OPPOSITES_DOC`)."""
    claims = load(root)
    lines = [
        "# Scorecard",
        "",
        "Every comparative claim of the two papers that the study checks, and the study's own controls.",
        "What each claim was tested with: a real pretrained LLM, only a stand-in for one ("
        + "; ".join(f"{name}: {what}" for name, what in STAND_INS.items())
        + "), no LLM at all (baselines, simulators), or nothing (not run).",
        "",
        *headline(claims),
        "How to read a row: the paper's statement and value; ours, a paired difference with its 95 % t-interval",
        "over n independent runs (trained agents with their evaluation episodes averaged inside each, design runs",
        "where agents were trained on one design's reward, or evaluation seeds for a method without training;",
        "runs equal up to float rounding count once, and n says how many there were); against a fixed or",
        "sampled reference the reference's eval-seed variance is propagated where its per-seed values are stored;",
        f"the minimum detectable effect (MDE: the true difference the same t-test detects with power {stats.POWER} at",
        f"α = {stats.ALPHA:.2f}; — where the runs are one value); the p-value of that t-test, raw and Holm-adjusted",
        "within the paper's family (every claim of that paper with a p-value, controls included); the verdict from",
        "the adjusted p — **reproduced** (p < α, the paper's direction), **opposite** (p < α, the other direction),",
        "**inconclusive** (p ≥ α), **inconclusive (n = 1)** (one independent run: no interval),",
        "**inconclusive (deterministic, n = 1)** (several runs, one value: a deterministic simulator), **no result**",
        "(it ran; its outcome, e.g. no valid reward in K tries, leaves nothing to compare), **not run** (needs what",
        "it says) — with the unadjusted verdict where it differs; and whether the paper's value lies inside our",
        "interval. Regenerated from `figures/*/claims.json` after every run (`python -m llmtraffic.study rejudge`",
        "re-derives every verdict from the stored per-run values).",
        "",
        "| paper | claims | verdicts | " + " | ".join(VERDICTS) + " |",
        "|---|---|---|" + "---|" * len(VERDICTS),
    ]
    for key in PAPERS:
        for control in (False, True):
            mine = [c for c in claims if c["paper"] == key and is_control(c) == control]
            if not mine:
                continue
            name = f"{key} (our controls)" if control else key
            for label, field_ in (("Holm-adjusted", "verdict"), ("unadjusted", "verdict_unadjusted")):
                lines.append(f"| {name} | {len(mine)} | {label} | " + " | ".join(map(str, tally(mine, field_))) + " |")
    lines.append("")
    shared = shared_agents(claims)
    for key, title in PAPERS.items():
        mine = [c for c in claims if c["paper"] == key]
        if not mine:
            continue
        lines += [f"## {title}", ""]
        lines += ["| where | claim | backbone or designer | paper | ours | MDE | p | p (Holm) | verdict | paper's value | quantity | source |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for c in sorted(mine, key=lambda c: (c["where"], c["id"])):
            link = c["link"]
            target = link_target(link, root)
            note = f" — {c['note']}" if c.get("note") else ""
            marks = (" · **our control**" if is_control(c) else "") + (
                f" · same agents as {', '.join(f'`{i}`' for i in shared[c['id']])}" if c["id"] in shared else "")
            verdict = f"**{c['verdict']}**" + (f" (unadjusted: {c['verdict_unadjusted']})"
                                              if c.get("verdict_unadjusted") not in ("", None, c["verdict"]) else "")
            cells = [
                c["where"], f"`{c['id']}`: {c['statement']}{note}{marks}", producer_text(c), _fmt(c.get("paper_value")),
                _ours(c), minimum_effect(c), _p((c.get("ours") or {}).get("p")), _p(c.get("p_adjusted")), verdict,
                c.get("magnitude", ""), c["quantity"], f"[{link}]({target}) · {source_label(c)} · `{c['_commit'][:10]}`",
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
