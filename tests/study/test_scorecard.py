"""figures/SCORECARD.md must give every claim a verdict, a number and a link, with the verdict its CI implies.

``check`` reads the scorecard as a reader would (the Markdown, not the JSON behind it), so a
rendering bug or a hand edit that breaks it fails here; the committed scorecard is checked too.
"""

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from llmtraffic import study
from llmtraffic.study import claims
from llmtraffic.study.paths import ROOT
from llmtraffic.study.stats import difference

NUM = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:e[-+]?\d+)?"
OURS = re.compile(rf"^(?P<mean>{NUM})(?: \S+)? (?:\[(?P<low>{NUM}), (?P<high>{NUM})\] )?\(n = (?P<n>\d+[^\[\]]*?)"
                  rf"(?P<tail>, no CI(?:; its agents: \[{NUM}, {NUM}\], descriptive)?|(?P<same>, identical runs: one distinct run))?\)$")
"""Ours: mean [low, high] (n with its unit), one run without a CI (a design run's agents' spread
descriptive), or n runs that are one value (a deterministic simulator)."""
UNIT = re.compile(r"^\d+ (agent|eval seed|design run|system|training seed)s?\b")
"""n with its unit ("3 agents (× 10 episodes each)")."""
_V = "|".join(map(re.escape, claims.VERDICTS))
VERDICT = re.compile(rf"^\*\*(?P<adjusted>{_V})\*\*(?: \(unadjusted: (?P<raw>{_V})\))?$")
LINK = re.compile(r"\[[^\]]+\]\(([^)\s]+)\)")
CELLS = 12
"""where, claim, backbone or designer, paper, ours, MDE, p, p (Holm), verdict, paper's value, quantity, source."""


def _cells(line: str) -> list[str]:
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


def _rows(text: str) -> list[list[str]]:
    """The claim rows: table rows under a paper's section (where … source)."""
    rows, in_paper = [], False
    for line in text.splitlines():
        if line.startswith("## "):
            in_paper = True
        elif in_paper and line.startswith("|") and not line.startswith(("| where", "|---")):
            rows.append(_cells(line))
    return rows


def _direction(root: Path, notebook: str, claim_id: str) -> int | None:
    path = root / notebook / "claims.json"
    if not path.exists():
        return None
    found = [c for c in json.loads(path.read_text())["claims"] if c["id"] == claim_id]
    return found[0]["direction"] if found else None


def _decided(excludes: bool, sign: int, direction: int) -> str:
    if not excludes:
        return claims.INCONCLUSIVE
    return claims.REPRODUCED if sign == direction else claims.OPPOSITE


def check(text: str, root: Path) -> list[str]:
    """Problems of the scorecard ``text`` whose links are relative to ``root`` (empty: none)."""
    problems = []
    for row in _rows(text):
        if len(row) != CELLS:
            problems.append(f"row with {len(row)} cells, not {CELLS}: {row}")
            continue
        where, what, made_by, paper, ours, mde, p_raw, p_holm, verdict_cell, _, _, source = row
        name = f"{where} {what[:40]!r}"
        if not re.match(rf"^({'|'.join(map(re.escape, claims.KINDS))})(: \S|$)", made_by):
            problems.append(f"{name}: not said what it was tested with ({made_by!r})")
        verdict = VERDICT.match(verdict_cell)
        if not verdict:
            problems.append(f"{name}: no verdict ({verdict_cell!r})")
            continue
        adjusted, raw = verdict["adjusted"], verdict["raw"] or verdict["adjusted"]
        link = LINK.search(source)
        if not link:
            problems.append(f"{name}: no link to its table or figure")
        elif not (root / link.group(1)).exists():
            problems.append(f"{name}: link {link.group(1)} points at no file")
        if adjusted == claims.NOT_RUN:
            if not re.match(r"^not run: needs \S", ours):
                problems.append(f"{name}: 'not run' without what it needs ({ours!r})")
            continue
        if adjusted == claims.NO_RESULT:  # it ran; what it found instead of an estimate
            if not ours or OURS.match(ours):
                problems.append(f"{name}: 'no result' without what the run found ({ours!r})")
            continue
        number = OURS.match(ours)
        if not number or (number["low"] is None) != bool(number["tail"]):
            problems.append(f"{name}: no estimate with CI and n ({ours!r})")
            continue
        if not UNIT.match(number["n"]):
            problems.append(f"{name}: n without its unit ({number['n']!r})")
        if number["same"]:  # one value repeated: one distinct run, never a verdict
            if adjusted != claims.DETERMINISTIC or raw != claims.DETERMINISTIC:
                problems.append(f"{name}: identical runs but the verdict is {adjusted}")
            if mde != "—":
                problems.append(f"{name}: identical runs but the MDE is {mde!r}, not —")
            continue
        if number["low"] is None:
            if adjusted != claims.INCONCLUSIVE_N1:
                problems.append(f"{name}: one run but the verdict is {adjusted}")
            continue
        low, mean, high = float(number["low"]), float(number["mean"]), float(number["high"])
        if not low <= mean <= high:
            problems.append(f"{name}: mean {mean} outside its CI [{low}, {high}]")
        excludes, sign = low > 0 or high < 0, (1 if mean > 0 else -1)
        claim_id = re.match(r"^`([^`]+)`", what)
        direction = None
        if paper and re.fullmatch(NUM, paper) and float(paper) != 0:
            direction = 1 if float(paper) > 0 else -1
        elif claim_id and link:
            direction = _direction(root, link.group(1).split("/")[0], claim_id.group(1))
        if direction is None:
            problems.append(f"{name}: the paper's direction is unknown")
            continue
        if raw != _decided(excludes, sign, direction):
            problems.append(f"{name}: the CI {'excludes' if excludes else 'includes'} 0 "
                            f"{'on the ' + ('same' if sign == direction else 'other') + ' side as the paper ' if excludes else ''}"
                            f"but the unadjusted verdict is {raw}")
        if not (re.fullmatch(NUM, p_raw) and re.fullmatch(NUM, p_holm)):
            problems.append(f"{name}: p-values missing ({p_raw!r}, {p_holm!r})")
            continue
        if float(p_holm) < float(p_raw):
            problems.append(f"{name}: the adjusted p {p_holm} is below the raw p {p_raw}")
        if abs(float(p_raw) - 0.05) > 0.005 and (float(p_raw) < 0.05) != excludes:
            problems.append(f"{name}: p {p_raw} disagrees with the CI")
        if abs(float(p_holm) - 0.05) > 0.005 and adjusted != _decided(float(p_holm) < 0.05, sign, direction):
            problems.append(f"{name}: the adjusted p is {p_holm} but the verdict is {adjusted}")
    return problems


def recorded_ids(root: Path) -> set[str]:
    return {c["id"] for c in claims.load(root)}


def test_committed_scorecard_lists_every_claim_with_a_sound_verdict():
    root = ROOT / "figures"
    if not list(root.glob("*/claims.json")):
        pytest.skip("no notebook has recorded a claim into figures/ yet")
    card = root / "SCORECARD.md"
    assert card.exists(), "figures/*/claims.json exist but figures/SCORECARD.md does not: run `python -m llmtraffic.study gallery`"
    text = card.read_text()
    assert check(text, root) == []
    missing = {i for i in recorded_ids(root) if f"`{i}`" not in text}
    assert not missing, f"claims missing from the scorecard (regenerate it): {sorted(missing)}"


@pytest.fixture
def card(claims_ctx, outdirs):
    study.save_table(pd.DataFrame({"v": [1.0]}), "table1", descriptive=True)
    claims.claim("same_way", "bus", "§5.2, Table 1", "A beats B", "travel (%)", "table1",
                 ours=difference([-1.9, -2.0, -2.1], of="3 agents (× 10 episodes each)"), paper_value=-3.73)
    claims.claim("other_way", "bus", "§5.3", "C beats D", "travel (s)", "table1",
                 ours=difference([1.9, 2.0, 2.1], of="3 eval seeds"), direction=-1)
    claims.claim("unsure", "tsc", "§4.3, Table 2", "hurdle helps", "queue (veh)", "table1",
                 ours=difference([1.0, -2.0, 3.0], of="3 agents"), paper_value=-1.2)
    claims.claim("single", "tsc", "§4.4", "one seed", "queue (veh)", "table1", ours=difference([1.0], of="1 agent (× 3 episodes)"), paper_value=1.0)
    claims.claim("llm", "tsc", "§4.5", "GPT-4o", "queue (veh)", "table1", paper_value=-1.0, needs="an LLM backend")
    claims.claim("exact", "tsc", "§4.6", "deterministic", "queue (veh)", "table1", ours=difference([-4.0] * 3, of="3 eval seeds"), paper_value=-2.0)
    root = outdirs / "figures"
    return root, (root / "SCORECARD.md").read_text()


def test_rendered_scorecard_passes(card):
    root, text = card
    assert len(_rows(text)) == 6
    assert "-4 (n = 3 eval seeds, identical runs: one distinct run) | — |" in text
    assert "**inconclusive (deterministic, n = 1)**" in text
    assert "1 (n = 1 agent (× 3 episodes), no CI) | none (n = 1) |  |  | **inconclusive (n = 1)**" in text
    assert check(text, root) == []


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        ("**reproduced**", "reproduced", "no verdict"),
        ("**opposite**", "**reproduced**", "other side as the paper but the unadjusted verdict is reproduced"),
        ("**reproduced**", "**opposite**", "same side as the paper but the unadjusted verdict is opposite"),
        ("**inconclusive**", "**reproduced**", "includes 0 but the unadjusted verdict is reproduced"),
        ("-2 [-2.25, -1.75] (n = 3 agents (× 10 episodes each))", "about -2", "no estimate with CI and n"),
        ("-2 [-2.25, -1.75] (n = 3 agents (× 10 episodes each))", "-2 [-2.25, -1.75] (n = 30)", "n without its unit"),
        ("-2 [-2.25, -1.75] (n = 3 agents (× 10 episodes each))", "-2 [-2.25, 0.5] (n = 3 agents (× 10 episodes each))",
         "includes 0 but the unadjusted verdict is reproduced"),
        ("**inconclusive (n = 1)**", "**inconclusive**", "one run but the verdict is inconclusive"),
        ("[fx_plot/table1](fx_plot/table1.md)", "fx_plot/table1", "no link"),
        ("(fx_plot/table1.md)", "(fx_plot/table9.md)", "points at no file"),
        ("not run: needs an LLM backend", "not run: needs ", "without what it needs"),
        ("| no LLM |", "| surrogate |", "not said what it was tested with"),
        ("**inconclusive (deterministic, n = 1)**", "**reproduced**", "identical runs but the verdict is reproduced"),
        ("identical runs: one distinct run) | — |", "identical runs: one distinct run) | 0 |", "identical runs but the MDE is '0'"),
    ],
)
def test_check_finds_each_defect(card, old, new, problem):
    root, text = card
    head, sep, rows = text.partition("\n## ")  # edit a claim row, not the legend above them
    assert old in rows
    problems = check(head + sep + rows.replace(old, new, 1), root)
    assert any(problem in p for p in problems), problems


def test_each_opposite_quotes_its_measured_reason_or_says_it_was_not_investigated(card, tmp_path):
    root, text = card
    assert f"- `other_way` (bus, ours 2 [" in text  # the fixture's one opposite claim
    reasons = tmp_path / "opposites.md"
    reasons.write_text("# Opposites\n\n### `other_way`\n\nD was tuned\nfor this case: measured.\n\nThe experiment in detail.\n"
                       "\n### gone.claim\n\nA claim no longer opposite.\n")
    assert claims.opposite_reasons(reasons) == {"other_way": "D was tuned for this case: measured.",
                                                "gone.claim": "A claim no longer opposite."}
    rendered = claims.render(root, reasons)
    assert ("D was tuned for this case: measured. ([details](../docs/opposites.md#other_way))" in rendered
            and claims.NOT_INVESTIGATED not in rendered and "gone.claim" not in rendered)
    assert f"**{claims.NOT_INVESTIGATED}** (no section in docs/opposites.md)" in claims.render(root, tmp_path / "none.md")
    assert check(rendered, root) == []  # the section adds no claim rows
    assert claims.anchor("bus-5.2.3-gpt4o-vs-claude-opus") == "bus-523-gpt4o-vs-claude-opus"


def test_every_committed_opposite_has_its_measured_reason():
    root = ROOT / "figures"
    opposite = {c["id"] for c in claims.load(root) if c["verdict"] == claims.OPPOSITE}
    if not opposite:
        pytest.skip("no committed claim is opposite")
    missing = opposite - set(claims.opposite_reasons())
    assert not missing, f"opposite claims without a section in {claims.OPPOSITES_DOC}: {sorted(missing)}"
    assert claims.NOT_INVESTIGATED not in (root / "SCORECARD.md").read_text(), "regenerate the scorecard"
