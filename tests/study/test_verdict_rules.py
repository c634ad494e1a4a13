"""Verdicts a reviewer accepts (issue 51): no verdict from zero spread, Holm's family-wise
correction, n that counts independent units, the fixed side's variance, magnitude beside direction."""

import json
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps
from statsmodels.stats.multitest import multipletests

from llmtraffic.study import claims, findings, stats


def _rows(method, agents, seeds, values):
    """Long rows: ``values[a][s]`` of agent ``agents[a]`` on eval seed ``seeds[s]`` (agents None: a fixed method)."""
    if agents is None:
        return pd.DataFrame({"method": method, "agent_seed": math.nan, "seed": list(seeds), "x": values})
    return pd.DataFrame([{"method": method, "agent_seed": a, "seed": s, "x": v}
                         for a, row in zip(agents, values) for s, v in zip(seeds, row)])


# ---------------------------------------------------------------- zero spread


def test_zero_spread_gives_no_verdict_and_an_undefined_mde(claims_ctx):
    # 3 eval seeds of a deterministic simulator: one run repeated, whatever its size
    d = stats.paired_difference([923.6, 923.6, 923.6], [552.7, 552.7, 552.7])
    assert d.n == 3 and d.distinct == 1 and d.deterministic
    assert math.isnan(d.mde) and d.p is None and not d.excludes_zero()
    assert stats.verdict(d) == stats.DETERMINISTIC == "inconclusive (deterministic, n = 1)"
    assert stats.minimum_effect(d) == "MDE —" and math.isnan(stats.mde(0.0, 5))
    c = claims.claim("fixed", "tsc", "§4.2", "FT10 is slower", "travel (s)", "t", ours=d, paper_value=371.0)
    assert c.verdict == claims.DETERMINISTIC
    recorded = claims.load()[0]
    assert claims._ours(recorded) == "371 (n = 3, identical runs: one distinct run)"
    assert claims.minimum_effect(recorded) == "—"


def test_rounding_noise_is_one_value():
    # FixedTime 10 vs 30: the same difference summed in another order, sd 7e-14
    runs = [370.94160583941607, 370.941605839416, 370.94160583941613]
    assert np.std(runs) > 0 and stats.distinct(runs).size == 1
    d = stats.difference(runs)
    assert d.deterministic and d.low == d.high == d.mean
    assert stats.mean_ci(runs).format(0) == "371 (n = 3, all equal)"
    assert stats.distinct([1.0, 1.0 + 1e-6]).size == 2  # a real difference stays one


# ---------------------------------------------------------------- Holm


def _family(claims_ctx, ps):
    """One claim per p-value, each from 4 runs whose t-test gives that p (mean 1, chosen SD)."""
    made = []
    for i, p in enumerate(ps):
        s = 2 / sps.t.ppf(1 - p / 2, 3)  # t = mean / (s / 2) with mean 1, n = 4: s = 2 / t
        z = np.array([-1.5, -0.5, 0.5, 1.5])
        runs = 1 + z / z.std(ddof=1) * s
        est = stats.difference(runs, of="4 agents")
        assert est.p == pytest.approx(p, rel=1e-6)
        made.append(claims.claim(f"c{i}", "bus", "§5", f"claim {i}", "q", "t", ours=est, paper_value=1.0))
    return made


def test_holm_matches_statsmodels_on_a_hand_made_family(claims_ctx):
    ps = [0.01, 0.04, 0.03, 0.005, 0.2]
    _family(claims_ctx, ps)
    family = {c["id"]: c for c in claims.load()}
    expected = multipletests(ps, method="holm")[1]
    # by hand: sorted 0.005, 0.01, 0.03, 0.04, 0.2 → ×5, ×4, ×3, ×2, ×1 with the running maximum
    assert expected == pytest.approx([0.04, 0.09, 0.09, 0.025, 0.2])
    assert [family[f"c{i}"]["p_adjusted"] for i in range(5)] == pytest.approx(expected)
    assert stats.holm(ps) == pytest.approx(expected)
    # the verdict follows the adjusted p, the interval and the unadjusted verdict stay
    assert family["c3"]["verdict"] == family["c0"]["verdict"] == claims.REPRODUCED  # 0.025, 0.04
    assert family["c1"]["verdict"] == claims.INCONCLUSIVE and family["c1"]["verdict_unadjusted"] == claims.REPRODUCED
    assert family["c1"]["ours"]["low"] > 0  # its unadjusted interval, as displayed


def test_each_paper_is_its_own_family_and_the_scorecard_counts_both_ways(claims_ctx, outdirs):
    _family(claims_ctx, [0.01, 0.04])
    claims.claim("t", "tsc", "§4", "other paper", "q", "t", ours=stats.difference([1.0, 1.1, 0.9, 1.05]), paper_value=1.0)
    found = {c["id"]: c for c in claims.load()}
    assert found["t"]["p_adjusted"] == pytest.approx(found["t"]["ours"]["p"])  # alone in its family
    assert found["c0"]["p_adjusted"] == pytest.approx(0.02) and found["c1"]["p_adjusted"] == pytest.approx(0.04)
    card = (outdirs / "figures" / "SCORECARD.md").read_text()
    assert "| bus | 2 | Holm-adjusted | 2 | 0 | 0 | 0 | 0 | 0 | 0 |" in card
    assert "| bus | 2 | unadjusted | 2 | 0 | 0 | 0 | 0 | 0 | 0 |" in card


# ---------------------------------------------------------------- n counts independent units


def test_a_design_run_cluster_of_five_agents_counts_n_equal_1(claims_ctx):
    agents = stats.difference([-5.0, -6.0, -4.0, -5.5, -4.5], "%", "5 agents (× 10 episodes each)")
    assert agents.excludes_zero()  # over agents it would be "reproduced"
    c = claims.claim("llm", "bus", "§5.2.2", "LLM beats RL", "travel (%)", "t", ours=agents, paper_value=-3.73,
                     clusters=[0] * 5)
    assert c.verdict == claims.INCONCLUSIVE_N1
    assert c.ours["n"] == 1 and c.ours["of"] == "1 design run (5 agents (× 10 episodes each))"
    assert c.ours["within"]["n"] == 5  # the agents' spread, descriptive
    text = claims._ours(claims.load()[0])
    assert text.startswith("-5 % (n = 1 design run (5 agents (× 10 episodes each)), no CI; its agents: [")
    assert text.endswith("], descriptive)")
    # two design runs with their agents: n = 2, each design run's mean one run
    two = claims.claim("llm2", "bus", "§5.2.2", "LLM beats RL", "travel (%)", "t", ours=agents, paper_value=-3.73,
                       clusters=[0, 0, 0, 1, 1])
    assert two.ours["n"] == 2 and two.ours["runs"] == pytest.approx([-5.0, -5.0]) and two.ours["distinct"] == 1


def test_a_duplicate_agent_counts_once(claims_ctx):
    # agents 0 and 2 bit-identical (a fine-tune equal to its base, a loop that kept its warm start)
    d = stats.difference([22.2552, -4.451, 22.2552, 10.0])
    once = stats.difference([22.2552, -4.451, 10.0])
    assert d.n == 4 and d.distinct == 3
    assert (d.mean, d.low, d.high, d.p) == pytest.approx((once.mean, once.low, once.high, once.p))
    c = claims.claim("dup", "tsc", "§4.2", "x", "queue (%)", "t", ours=stats.difference([22.2552, -4.451, 22.2552, 10.0],
                     "%", "4 agents (× 3 episodes each)"), direction=-1)
    assert "(n = 3 agents (× 3 episodes each): 4 runs with 1 duplicate, counted once)" in claims._ours(claims.load()[0])
    assert c.ours["distinct"] == 3


def test_compare_finds_duplicates_from_the_runs_episodes_not_from_coincident_differences():
    seeds = [0, 1]
    base = _rows("base", [0, 1, 2, 3], seeds, [[5.0, 7.0], [6.0, 6.5], [4.0, 9.0], [5.5, 5.0]])
    # agents 0 and 1 kept their base (a loop that kept its warm start): their differences are 0 by construction
    tuned = _rows("tuned", [0, 1, 2, 3], seeds, [[5.0, 7.0], [6.0, 6.5], [3.0, 7.0], [4.0, 4.5]])
    d = stats.compare(tuned, base, "x")
    assert d.n == 4 and d.distinct == 3 and d.runs == pytest.approx((0.0, 0.0, -1.5, -1.0))
    assert d.mean == pytest.approx(np.mean([0.0, -1.5, -1.0]))
    # two agents whose differences coincide (-1.0) but whose episodes differ stay two runs
    other = stats.compare(_rows("tuned", [0, 1, 2, 3], seeds, [[4.0, 6.0], [5.0, 5.5], [3.0, 7.0], [4.0, 4.5]]), base, "x")
    assert other.distinct == 4 and claims.rederive(other.as_dict())["distinct"] == 4  # stored, re-derived alike
    assert claims.rederive(d.as_dict())["distinct"] == 3
    # a fine-tune identical to its untrained, evaluated base (a fixed reference) is that base
    before = _rows("before", None, seeds, [5.0, 7.0])
    same = _rows("tuned", [0, 1, 2], seeds, [[5.0, 7.0], [5.0, 7.0], [3.0, 4.0]])
    assert stats.compare(same, before, "x").distinct == 2


def test_claims_that_share_agents_say_so(claims_ctx, outdirs):
    for i in ("a", "b"):
        claims.claim(i, "bus", "§5.3", "x", "q", "t", ours=stats.difference([1.0, 2.0, 3.0]), paper_value=1.0,
                     agents="case-2 agents, seeds 0–2")
    claims.claim("c", "bus", "§5.3", "x", "q", "t", ours=stats.difference([1.0, 2.0, 3.0]), paper_value=1.0)
    assert claims.shared_agents(claims.load()) == {"a": ["b"], "b": ["a"]}
    assert "same agents as `b`" in (outdirs / "figures" / "SCORECARD.md").read_text()


# ---------------------------------------------------------------- the fixed side's variance


def test_a_trained_vs_fixed_interval_widens_when_the_fixed_sides_eval_seeds_vary():
    seeds = [0, 1, 2]
    learned = _rows("A", [0, 1, 2, 3], seeds, [[8.0, 8.0, 8.0], [9.0, 9.0, 9.0], [7.5, 7.5, 7.5], [8.5, 8.5, 8.5]])
    steady = stats.compare(learned, _rows("F", None, seeds, [10.0, 10.0, 10.0]), "x")
    varying = stats.compare(learned, _rows("F", None, seeds, [6.0, 10.0, 14.0]), "x")  # same mean, seeds vary
    assert steady.mean == pytest.approx(varying.mean) == pytest.approx(-1.75)
    assert steady.runs == pytest.approx(varying.runs)  # the per-run differences are the same
    assert varying.half_width > 3 * steady.half_width and varying.p > steady.p
    # by hand: SE² = s²_run / 4 + s²_seed / 3 = (0.41667 / 4) + (16 / 3); Satterthwaite df
    a, b = np.var([-2.0, -1.0, -2.5, -1.5], ddof=1) / 4, 16.0 / 3
    df = (a + b) ** 2 / (a**2 / 3 + b**2 / 2)
    assert varying.half_width == pytest.approx(sps.t.ppf(0.975, df) * math.sqrt(a + b))
    assert varying.method == stats.CROSSED and steady.method == stats.METHOD
    assert varying.seed_runs == pytest.approx((2.25, -1.75, -5.75))
    # stored, the interval is recomputable from the per-run and per-seed values
    assert claims.rederive(varying.as_dict())["low"] == pytest.approx(varying.low)


# ---------------------------------------------------------------- magnitude and controls


@pytest.mark.parametrize(("paper", "low", "high", "expected"), [
    (-3.0, -5.0, -1.0, claims.INSIDE), (-8.0, -5.0, -1.0, claims.SMALLER), (-0.5, -5.0, -1.0, claims.LARGER),
    (-3.0, 1.0, 5.0, claims.SMALLER), (3.0, 1.0, 2.0, claims.SMALLER),
])
def test_magnitude_places_the_papers_value_against_our_interval(paper, low, high, expected):
    c = {"paper_value": paper, "direction": 1 if paper > 0 else -1,
         "ours": {"mean": (low + high) / 2, "low": low, "high": high, "n": 5, "distinct": 5}}
    assert claims.magnitude(c) == expected


def test_a_deterministic_difference_equal_to_the_papers_up_to_its_rounding_holds_the_papers_value():
    c = {"paper_value": 370.95, "direction": 1, "ours": {"mean": 370.9416, "low": 370.9416, "high": 370.9416, "n": 3, "distinct": 1}}
    assert claims.magnitude(c) == claims.INSIDE
    assert claims.magnitude({**c, "paper_value": 248.9}) == claims.LARGER


def test_controls_are_labelled_and_counted_apart(claims_ctx, outdirs):
    claims.claim("ctl", "tsc", "§4.2 (our control)", "beats a heuristic", "q", "t",
                 ours=stats.difference([1.0, 2.0, 3.0]), direction=1)
    claims.claim("own", "tsc", "§4.2", "beats the base", "q", "t", ours=stats.difference([1.0, 2.0, 3.0]), paper_value=2.0)
    found = {c["id"]: c for c in claims.load()}
    assert found["ctl"]["control"] and not found["own"]["control"]
    card = (outdirs / "figures" / "SCORECARD.md").read_text()
    assert "| tsc (our controls) | 1 | Holm-adjusted |" in card and "| tsc | 1 | Holm-adjusted |" in card
    assert "| our control, no LLM | 1 |" in card and "· **our control**" in card
    assert "paper's value inside" in card


def test_a_real_backbone_claim_names_its_own_backbone_and_seeds():
    c = {"statement": "x (ours: SmolLM2-135M-Instruct)", "verdict": "inconclusive", "_profile": "quick",
         "_label": "profile quick · agent_seeds [0, 1, 2, 3, 4] · backbone surrogate-tiny",
         "_params": {"backbone": "surrogate-tiny", "real": {"agent_seeds": [0, 1, 2], "eval_seeds": [100, 101], "episode_s": 100}}}
    assert claims.source_label(c) == ("profile quick · backbone SmolLM2-135M-Instruct · agent_seeds [0, 1, 2] · "
                                      "eval_seeds [100, 101] · episode_s 100")
    assert claims.source_label({**c, "statement": "x (ours: surrogate-tiny)"}) == c["_label"]


# ---------------------------------------------------------------- re-deriving the stored claims


def test_rejudge_rederives_stored_claims_without_running_anything(tmp_path):
    figures = tmp_path / "figures"
    (figures / "nb").mkdir(parents=True)
    old = lambda i, runs, low, high: {  # noqa: E731 - a claim as stored before p-values
        "id": i, "paper": "tsc", "where": "§4", "statement": "s", "paper_value": -1.0, "direction": -1, "quantity": "q",
        "link": "nb/t", "verdict": "reproduced", "needs": "", "finding": "", "note": "", "notebook": "nb", "extra": {},
        "ours": {"mean": float(np.mean(runs)), "low": low, "high": high, "n": len(runs), "unit": "", "of": f"{len(runs)} eval seeds",
                 "runs": runs, "mde": 0.0, "method": stats.METHOD}}
    payload = {"kind": "claims", "notebook": "nb", "label": "profile quick", "params": {}, "git": {"commit": "abc"},
               "claims": [old("same", [-430.0] * 3, -430.0, -430.0), old("spread", [-3.0, -2.0, -2.5], -3.74, -1.26)]}
    (figures / "nb" / "claims.json").write_text(json.dumps(payload))
    diff = claims.rejudge(figures)
    assert [(c["id"], c["before"], c["after"]) for c in diff["changed"]] == [("same", "reproduced", claims.DETERMINISTIC)]
    stored = json.loads((figures / "nb" / "claims.json").read_text())
    assert stored["git"] == {"commit": "abc"} and stored["label"] == "profile quick"
    spread = stored["claims"][1]
    assert spread["ours"]["p"] == pytest.approx(sps.ttest_1samp([-3.0, -2.0, -2.5], 0).pvalue)
    assert spread["p_adjusted"] == pytest.approx(spread["ours"]["p"])  # the only claim with a p
    assert (figures / "SCORECARD.md").exists()


def test_readme_findings_use_adjusted_verdicts_and_say_so(claims_ctx, outdirs):
    _family(claims_ctx, [0.01, 0.04])
    text = findings.render(outdirs / "figures")
    assert "Holm-adjusted within each paper's family" in text
    assert "Unadjusted: 2 reproduced" in text
    assert "| tested with | claims | decided |" in text
