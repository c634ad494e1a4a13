"""Bus tables: CIs over agent seeds × eval seeds, pairing against fixed and learned references."""

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from llmtraffic.bus import tables
from llmtraffic.bus.tables import NEVER_HOLDS, best_of, ci_table, comparisons, paired


def frame() -> pd.DataFrame:
    rows = [("no holding", np.nan, 0, 100.0, 0.0), ("no holding", np.nan, 1, 200.0, 0.0),
            ("RL", 0, 0, 90.0, 10.0), ("RL", 0, 1, 170.0, 20.0), ("RL", 1, 0, 80.0, 30.0), ("RL", 1, 1, 190.0, 0.0),
            ("RL2", 0, 0, 95.0, 0.0), ("RL2", 0, 1, 175.0, 0.0), ("RL2", 1, 0, 90.0, 0.0), ("RL2", 1, 1, 190.0, 0.0)]
    return pd.DataFrame(rows, columns=["method", "agent_seed", "seed", "headway_sd_s", "hold_time_s"])


def test_a_learned_row_pairs_each_agent_seed_with_the_fixed_reference_on_the_same_eval_seed():
    diff = paired(frame(), "RL", "no holding", "headway_sd_s")
    d = np.array([-10.0, -30.0, -20.0, -10.0])
    half = sps.t.ppf(0.975, 3) * d.std(ddof=1) / 2
    assert (diff.mean, diff.n) == (-17.5, 4)
    assert (diff.low, diff.high) == pytest.approx((-17.5 - half, -17.5 + half))
    assert diff.excludes_zero()


def test_two_learned_rows_pair_on_agent_seed_and_eval_seed():
    diff = paired(frame(), "RL", "RL2", "headway_sd_s")  # -5, -5, -10, 0
    assert diff.mean == -5.0 and diff.n == 4
    # a fixed method against a learned reference: repeated for every agent seed, sign kept
    assert paired(frame(), "no holding", "RL", "headway_sd_s").mean == 17.5
    with pytest.raises(ValueError, match="no rows for method 'RL3'"):
        paired(frame(), "RL3", "RL", "headway_sd_s")


def test_ci_table_states_n_and_says_when_agents_never_hold():
    table = ci_table(frame(), ["no holding", "RL", "RL2", "LLM"], {"headway_sd_s": "Headway SD (s)"},
                     missing={"LLM": "needs an LLM backend"})
    assert table.loc["RL", "n"] == "4" and table.loc["no holding", "n"] == "2"
    assert table.loc["RL2", "holding"] == NEVER_HOLDS
    assert table.loc["RL", "holding"] == "holds 15.0 s per hold"
    assert table.loc["LLM", "Headway SD (s)"] == "needs an LLM backend"
    half = sps.t.ppf(0.975, 3) * np.std([90, 170, 80, 190], ddof=1) / 2
    assert table.loc["RL", "Headway SD (s)"] == f"132.5 ± {half:.1f}"


def test_comparisons_give_a_verdict_per_method_reference_and_measure():
    table = comparisons(frame(), ["RL", "RL2"], ["no holding", "RL2"], {"headway_sd_s": "Headway SD (s)"})
    assert table.loc[("RL", "no holding", "Headway SD (s)"), "verdict"] == "better"
    assert ("RL2", "RL2", "Headway SD (s)") not in table.index
    assert table.loc[("RL", "RL2", "Headway SD (s)"), "n"] == 4
    assert best_of(frame(), ["RL", "RL2"], "headway_sd_s") == "RL"
    assert not math.isnan(float(table.loc[("RL", "no holding", "Headway SD (s)"), "change (%)"].split()[0]))


def test_room_for_holding_is_the_implied_minus_the_regular_wait_per_group():
    rows = pd.DataFrame({"dwell": ["a", "a", "b"], "implied_wait_s": [150.0, 170.0, 300.0],
                         "regular_wait_s": [100.0, 100.0, 120.0], "wait_time_s": [140.0, 160.0, 280.0],
                         "travel_time_s": [1000.0, 1000.0, 1200.0]})
    room = tables.room_for_holding(rows, by="dwell")
    assert room.loc["a", "room (s)"] == 60.0 and room.loc["a", "room (% of travel time)"] == 6.0  # (160 - 100) / 1000
    assert room.loc["b", "room (s)"] == 180.0 and room.loc["b", "room (% of travel time)"] == 15.0
    overall = tables.room_for_holding(rows).loc["no holding"]
    assert overall["room (s)"] == pytest.approx(206.7 - 106.7, abs=0.11)
    assert tables.room_reading(room.loc["a"], "paper's dwell") == (
        "- Room for holding (paper's dwell): regular headways would cut the headway-implied wait from 160 s to 100 s, "
        "6.0 % of the mean trip.")
    with pytest.raises(ValueError, match="lack \\['regular_wait_s'\\]"):
        tables.room_for_holding(rows.drop(columns="regular_wait_s"))
