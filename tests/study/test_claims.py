"""Claims and the scorecard: verdicts follow the CI and the paper's direction."""

import json
import math

import pytest

from llmtraffic.study import claims
from llmtraffic.study.stats import Estimate, mean_ci


@pytest.mark.parametrize(
    ("ours", "direction", "expected"),
    [
        (Estimate(-3.0, -5.0, -1.0, 10), -1, claims.REPRODUCED),
        (Estimate(-3.0, -5.0, -1.0, 10), +1, claims.OPPOSITE),
        (Estimate(3.0, 1.0, 5.0, 10), +1, claims.REPRODUCED),
        (Estimate(-3.0, -5.0, 0.5, 10), -1, claims.INCONCLUSIVE),
        (Estimate(-3.0, -5.0, 0.0, 10), -1, claims.INCONCLUSIVE),  # touching 0 is not excluding it
        (Estimate(-3.0, math.nan, math.nan, 1), -1, claims.INCONCLUSIVE_N1),
        (None, -1, claims.NOT_RUN),
    ],
)
def test_verdict(ours, direction, expected):
    assert claims.judge(ours, direction) == expected


def test_claim_direction_comes_from_the_paper_value(claims_ctx):
    c = claims.claim("x", "bus", "§5.2", "A beats B", "travel A − B (%)", "table1",
                     ours=mean_ci([-1.9, -2.0, -2.1]), paper_value=-3.73)
    assert c.direction == -1 and c.verdict == claims.REPRODUCED
    assert c.link == "fx_plot/table1"


def test_claim_without_estimate_must_say_what_it_needs(claims_ctx):
    with pytest.raises(ValueError, match="needs"):
        claims.claim("y", "bus", "§5.2", "LLM-direct", "q", "table1", paper_value=-1.0)
    c = claims.claim("y", "bus", "§5.2", "LLM-direct", "q", "table1", paper_value=-1.0, needs="an LLM backend")
    assert c.verdict == claims.NOT_RUN


def test_bad_paper_and_direction_are_refused(claims_ctx):
    with pytest.raises(ValueError, match="unknown paper"):
        claims.claim("z", "busx", "§5", "s", "q", "t", ours=mean_ci([1, 2]), paper_value=1.0)
    with pytest.raises(ValueError, match="direction"):
        claims.claim("z", "bus", "§5", "s", "q", "t", ours=mean_ci([1, 2]))


def test_claims_file_and_scorecard(claims_ctx, outdirs):
    claims.claim("a", "bus", "§5.2, Table 1", "A beats B", "travel A − B (%)", "table1",
                 ours=mean_ci([-1.9, -2.0, -2.1]), paper_value=-3.73)
    claims.claim("b", "tsc", "§4.3, Table 2", "hurdle helps", "queue (veh)", "table2",
                 ours=mean_ci([1.0, -2.0, 3.0]), paper_value=-1.2)
    claims.claim("a", "bus", "§5.2, Table 1", "A beats B", "travel A − B (%)", "table1",
                 ours=mean_ci([1.9, 2.0, 2.1]), paper_value=-3.73)  # same id replaces
    payload = json.loads((outdirs / "figures" / "fx_plot" / "claims.json").read_text())
    assert [c["id"] for c in payload["claims"]] == ["a", "b"]
    assert payload["claims"][0]["verdict"] == claims.OPPOSITE
    assert "git" in payload and payload["profile"] == "smoke"
    card = (outdirs / "figures" / "SCORECARD.md").read_text()
    assert "| bus | 1 | Holm-adjusted | 0 | 1 | 0 | 0 | 0 | 0 | 0 |" in card
    assert "| tsc | 1 | Holm-adjusted | 0 | 0 | 1 | 0 | 0 | 0 | 0 |" in card
    assert "**opposite**" in card and "[fx_plot/table1]" in card


def test_changed_verdicts_are_listed_with_counts_per_paper():
    before = [{"id": "a", "paper": "bus", "verdict": claims.REPRODUCED}, {"id": "b", "paper": "bus", "verdict": claims.OPPOSITE},
              {"id": "c", "paper": "tsc", "verdict": claims.INCONCLUSIVE}, {"id": "gone", "paper": "tsc", "verdict": claims.NOT_RUN}]
    after = [{"id": "a", "paper": "bus", "verdict": claims.INCONCLUSIVE}, {"id": "b", "paper": "bus", "verdict": claims.OPPOSITE},
             {"id": "c", "paper": "tsc", "verdict": claims.INCONCLUSIVE_N1}, {"id": "new", "paper": "tsc", "verdict": claims.REPRODUCED}]
    diff = claims.changed(before, after)
    assert diff["counts"]["bus"]["before"][claims.REPRODUCED] == 1 and diff["counts"]["bus"]["after"][claims.REPRODUCED] == 0
    assert diff["counts"]["bus"]["after"][claims.INCONCLUSIVE] == 1
    assert [(c["id"], c["before"], c["after"]) for c in diff["changed"]] == [
        ("a", "reproduced", "inconclusive"), ("c", "inconclusive", "inconclusive (n = 1)"),
        ("gone", "not run", "absent"), ("new", "absent", "reproduced")]
    text = claims.changed_text(diff)
    assert "| bus | before | 1 | 1 | 0 | 0 | 0 |" in text and "- `a` (bus): reproduced → inconclusive" in text


@pytest.mark.parametrize(("claim", "expected"), [
    ({"statement": "fine-tuning lowers the queue (paper: Qwen3-0.6B; ours: SmolLM2-135M-Instruct, 200-s episodes)"},
     ("real LLM", "SmolLM2-135M-Instruct")),
    ({"statement": "fine-tuning lowers the queue (paper: Qwen3-0.6B; ours: surrogate-tiny)"}, ("stand-in", "surrogate-tiny")),
    ({"statement": "an intermediate hurdle helps", "_params": {"backbones": ["surrogate-tiny"]}}, ("stand-in", "surrogate-tiny")),
    ({"statement": "MaxPressure beats FixedTime", "_params": {}}, ("no LLM", "")),
    ({"statement": "x", "note": "App. B reward (the paper's final LLM reward) stands in"}, ("stand-in", "App. B reward")),
    ({"statement": "x", "extra": {"producer": "cold start · Qwen2.5-Coder-1.5B-Instruct (paper: GPT-4) vs "
                                              "paradigm (ours) · search designer (no LLM)"}},
     ("real LLM", "Qwen2.5-Coder-1.5B-Instruct")),
    ({"statement": "x", "extra": {"producer": "paradigm (ours) · search designer (no LLM) vs no holding"}},
     ("stand-in", "search designer (no LLM)")),
    ({"statement": "x", "extra": {"producer": "paradigm (ours) · gpt-4o (paper: GPT-4) vs no holding"}},
     ("real LLM", "paradigm (ours) · gpt-4o (paper: GPT-4) vs no holding")),
    ({"statement": "x (ours: SmolLM2-135M-Instruct)", "verdict": "not run"}, ("not tested", "")),
])
def test_producer_says_what_a_claim_was_tested_with(claim, expected):
    assert claims.producer({"verdict": "inconclusive", **claim}) == expected
