"""study.tables.summarize on hand-computed data."""

import math

import pandas as pd
import pytest

from llmtraffic.study import stats, tables

T2 = 4.302652729911275  # t(0.975, df = 2)


def _rows(values: dict[str, list[tuple[int, float]]]) -> pd.DataFrame:
    return pd.DataFrame([{"method": m, "eval_seed": s, "travel": v} for m, pairs in values.items() for s, v in pairs])


RESULTS = _rows({
    "RL": [(0, 1.0), (1, 2.0), (2, 3.0)],
    "LLM": [(0, 2.0), (1, 4.0), (2, 6.0)],  # LLM − RL = 1, 2, 3
    "worse": [(0, 3.0), (1, 4.0), (2, 5.0)],  # − RL = 2, 2, 2: no spread, so no verdict (issue 51)
    "shuffled": [(2, 30.0), (0, 10.0), (1, 20.0)],  # rows out of order: pairs by seed, − RL = 9, 18, 27
})


def test_cells_n_and_caption():
    s = tables.summarize(RESULTS, "travel", episode="eval_seed", reference="RL")
    assert list(s.frame.index) == ["RL", "LLM", "worse", "shuffled"] and s.frame.index.name == "method"
    half = T2 * 1.0 / math.sqrt(3)  # s = 1 for (1, 2, 3)
    assert s.frame.loc["RL", "travel"] == f"2.0 ± {half:.1f}" == "2.0 ± 2.5"
    assert s.frame.loc["LLM", "travel"] == f"4.0 ± {2 * half:.1f}"
    assert list(s.frame["n"]) == ["3 eval seeds"] * 4
    assert s.caption.startswith(stats.caption("3 eval seeds"))
    assert "paired difference method − RL over the runs" in s.caption
    stats.check_caption(s.caption, s.frame.attrs["estimates"].values())


def test_paired_differences_and_verdicts():
    s = tables.summarize(RESULTS, "travel", episode="eval_seed", reference="RL")
    col = "Δ travel vs RL"
    assert s.frame.loc["RL", col] == "reference" and ("RL", "travel") not in s.differences
    assert s.frame.loc["LLM", col] == "2.0 ± 2.5 (no detectable difference)"
    assert s.frame.loc["worse", col] == f"2.0 (n = 3 eval seeds, all equal) ({stats.DETERMINISTIC})"
    shuffled = s.differences["shuffled", "travel"]
    assert shuffled.mean == pytest.approx(18.0) and shuffled.half_width == pytest.approx(T2 * 9.0 / math.sqrt(3))
    higher = tables.summarize(RESULTS, ["travel"], episode="eval_seed", reference="RL", lower_is_better={"travel": False})
    assert higher.frame.loc["worse", col] == f"2.0 (n = 3 eval seeds, all equal) ({stats.DETERMINISTIC})"


def test_relative_differences_in_percent_of_the_reference():
    s = tables.summarize(RESULTS, "travel", episode="eval_seed", reference="RL", relative=True, digits=0)
    assert s.frame.loc["worse", "Δ travel vs RL (%)"] == f"100 % (n = 3 eval seeds, all equal) ({stats.DETERMINISTIC})"  # 2 / 2
    assert "in % of RL's mean" in s.caption


def test_trained_rows_are_averaged_per_agent_and_n_names_the_unit():
    rows = pd.DataFrame({
        "method": ["a"] * 4 + ["b"] * 2,
        "agent_seed": [0, 0, 1, 1, 0, 1],
        "eval_seed": [0, 1, 0, 1, 0, 0],
        "q": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
    })
    s = tables.summarize(rows, "q", episode="eval_seed")
    assert list(s.frame["n"]) == ["2 agents (× 2 episodes each)", "2 agents"]
    assert s.estimates["a", "q"] == stats.mean_ci([1.5, 3.5], of="2 agents (× 2 episodes each)")
    assert "2 agents (× 2 episodes each); n = 2 agents" in s.caption
    assert s.frame.attrs["estimates"]["a / q"].runs == (1.5, 3.5)
    with pytest.raises(ValueError, match=r"not run on the same agent_seed, eval_seed"):
        tables.summarize(rows, "q", episode="eval_seed", reference="a")


def test_bad_input_is_a_clear_error():
    with pytest.raises(ValueError, match=r"lack the column\(s\) \['queue'\]"):
        tables.summarize(RESULTS, "queue", episode="eval_seed")
    with pytest.raises(ValueError, match="units must appear once per method"):
        tables.summarize(pd.concat([RESULTS, RESULTS.head(1)]), "travel", episode="eval_seed")
    with pytest.raises(ValueError, match="reference 'PPO' is not among"):
        tables.summarize(RESULTS, "travel", episode="eval_seed", reference="PPO")
