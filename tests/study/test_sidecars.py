"""Every committed table's sidecar stores the per-run values behind its intervals, and each interval
recomputes from them (issue 35).

Sidecars written before issue 35 have no ``stats`` record; they are skipped unless
``LLMTRAFFIC_STRICT_SIDECARS=1`` (after the study is regenerated, every table must have one):

    LLMTRAFFIC_STRICT_SIDECARS=1 .venv/bin/python -m pytest tests/study/test_sidecars.py -q
"""

import json
import math
import os

import pytest

from llmtraffic.study import claims, stats
from llmtraffic.study.outputs import STATS_FORMAT
from llmtraffic.study.paths import ROOT

SIDECARS = sorted(p for p in (ROOT / "figures").glob("*/*.json") if p.name != "claims.json")


def _tables() -> list[tuple[str, dict]]:
    out = []
    for path in SIDECARS:
        side = json.loads(path.read_text())
        if side.get("kind") == "table":
            out.append((str(path.relative_to(ROOT)), side))
    return out


def problems(name: str, side: dict, strict: bool) -> list[str]:
    """What is wrong with one table sidecar's statistics (empty: nothing)."""
    record = side.get("stats")
    if record is None:
        return [f"{name}: no stats record (written before issue 35)"] if strict else []
    if record.get("format") != STATS_FORMAT:
        return [f"{name}: stats format {record.get('format')}, not {STATS_FORMAT}"]
    if record["descriptive"]:
        return [] if stats.DESCRIPTIVE in side["caption"] else [f"{name}: descriptive without saying so in its caption"]
    found = []
    if not record["estimates"]:
        found.append(f"{name}: a comparative table without per-run values")
    for cell, est in record["estimates"].items():
        found += [f"{name} [{cell}]: {p}" for p in recompute(est)]
        if est.get("of") and est["of"] not in side["caption"]:
            found.append(f"{name} [{cell}]: the caption does not name the unit {est['of']!r}")
    return found


def recompute(est: dict) -> list[str]:
    """Differences between a stored estimate and the one its stored per-run values give under the
    rule that wrote it: a difference under the rules in force (:func:`claims.rederive`: distinct
    runs, clusters, the reference's eval-seed variance where its per-seed differences are stored);
    a level, or an estimate written before those rules (no ``distinct`` count), as the plain
    t-interval of its runs (:func:`stats.mean_ci`)."""
    if not est["runs"]:
        return [] if est["method"] == stats.WELCH else ["no per-run values"]
    again = claims.rederive(est) if "distinct" in est and not _level(est) else stats.mean_ci(est["runs"]).as_dict()
    found = []
    if again["n"] != est["n"]:
        found.append(f"n = {est['n']} but {again['n']} from the per-run values")
    for key in ("mean", "low", "high"):
        stored, new = est[key], again[key]
        if not (_missing(stored) and _missing(new)) and not (
                not _missing(stored) and not _missing(new) and math.isclose(stored, new, rel_tol=1e-9, abs_tol=1e-9)):
            found.append(f"{key} {stored} but {new} from the runs")
    return found


def _level(est: dict) -> bool:
    """A table's level cell (:func:`stats.mean_ci`: every run counts, and ``distinct`` only says
    whether they are one value), not a difference (:func:`stats.difference`: a run that duplicates
    another counts once, and a p-value, run identities, eval-seed spread or clusters are stored)."""
    return est.get("p") is None and not (est.get("groups") or est.get("seed_runs") or est.get("within")
                                         or est.get("clusters") is not None)


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def test_the_check_finds_a_tampered_interval_and_a_missing_unit():
    runs = [1.0, 2.0, 4.0]
    est = stats.mean_ci(runs, of="3 agents (× 10 episodes each)").as_dict()
    side = {"caption": f"x, {stats.caption(est['of'])}", "stats": {"format": STATS_FORMAT, "descriptive": False,
                                                                    "estimates": {"A / q": est}}}
    assert problems("t", side, strict=True) == []
    assert problems("t", {**side, "caption": "x"}, strict=True) == ["t [A / q]: the caption does not name the unit "
                                                                     "'3 agents (× 10 episodes each)'"]
    tampered = {**est, "high": est["high"] - 1}
    assert any("high" in p for p in problems("t", {**side, "stats": {**side["stats"], "estimates": {"A": tampered}}}, True))
    level = stats.mean_ci([1997.0, 1995.0, 1995.0]).as_dict()  # two eval seeds with equal counts: still 3 runs
    assert level["n"] == 3 and level["distinct"] == 2 and recompute(level) == []
    assert recompute({**level, "mean": 1996.0}) == ["mean 1996.0 but 1995.6666666666667 from the runs"]
    diff = stats.difference([1.0, 1.0, 4.0]).as_dict()  # a duplicated run counts once: mean 2.5 of 2 distinct
    assert diff["mean"] == 2.5 and recompute(diff) == []
    assert recompute({**diff, "mean": 2.0}) == ["mean 2.0 but 2.5 from the runs"]
    empty = {**side, "stats": {**side["stats"], "estimates": {}}}
    assert problems("t", empty, strict=True) == ["t: a comparative table without per-run values"]
    assert problems("t", {"caption": "x"}, strict=False) == [] and problems("t", {"caption": "x"}, strict=True)


@pytest.mark.parametrize(("name", "side"), _tables() or [pytest.param("", {}, marks=pytest.mark.skip("no tables"))],
                         ids=lambda v: v if isinstance(v, str) else "")
def test_every_committed_table_recomputes_its_intervals_from_its_runs(name, side):
    assert problems(name, side, strict=os.environ.get("LLMTRAFFIC_STRICT_SIDECARS") == "1") == []


def _claims() -> list[tuple[str, dict]]:
    out = []
    for path in sorted((ROOT / "figures").glob("*/claims.json")):
        out += [(c["id"], c["ours"]) for c in json.loads(path.read_text())["claims"] if c.get("ours")]
    return out


@pytest.mark.parametrize(("claim_id", "ours"), _claims() or [pytest.param("", {}, marks=pytest.mark.skip("no claims"))],
                         ids=lambda v: v if isinstance(v, str) else "")
def test_every_committed_claim_recomputes_its_interval_from_its_runs(claim_id, ours):
    if "runs" not in ours:  # recorded before issue 35
        assert os.environ.get("LLMTRAFFIC_STRICT_SIDECARS") != "1", f"{claim_id}: no per-run values"
        return
    assert recompute(ours) == []
    assert ours.get("of"), f"{claim_id}: n without its unit"
