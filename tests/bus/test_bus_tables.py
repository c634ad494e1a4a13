"""Bus tables: CIs over independent runs (agents, each averaged over its eval seeds), pairing against fixed and learned references."""

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from llmtraffic.bus import tables
from llmtraffic.study import stats
from llmtraffic.study import tables as study_tables
from llmtraffic.bus.tables import NEVER_HOLDS, best_of, ci_table, comparisons, paired


def frame() -> pd.DataFrame:
    rows = [("no holding", np.nan, 0, 100.0, 0.0), ("no holding", np.nan, 1, 200.0, 0.0),
            ("RL", 0, 0, 90.0, 10.0), ("RL", 0, 1, 170.0, 20.0), ("RL", 1, 0, 80.0, 30.0), ("RL", 1, 1, 190.0, 0.0),
            ("RL2", 0, 0, 95.0, 0.0), ("RL2", 0, 1, 175.0, 0.0), ("RL2", 1, 0, 90.0, 0.0), ("RL2", 1, 1, 190.0, 0.0)]
    return pd.DataFrame(rows, columns=["method", "agent_seed", "seed", "headway_sd_s", "hold_time_s"])


def test_a_learned_row_pairs_each_agent_with_the_fixed_reference_over_the_same_eval_seeds():
    # agent means 130 (agent 0) and 135 (agent 1); no holding's mean over eval seeds 0, 1 is 150
    diff = paired(frame(), "RL", "no holding", "headway_sd_s")
    d = np.array([-20.0, -15.0])
    per_seed = np.array([-15.0, -20.0])  # per eval seed, averaged over agents: (−10 − 20) / 2, (−30 − 10) / 2
    # no holding's eval-seed variance propagated (its level is shared by both agents); df capped at n − 1
    half = sps.t.ppf(0.975, 1) * math.sqrt(d.var(ddof=1) / 2 + per_seed.var(ddof=1) / 2)
    assert (diff.mean, diff.n, diff.runs) == (-17.5, 2, (-20.0, -15.0))
    assert diff.of == "2 agents (× 2 episodes each)"
    assert (diff.low, diff.high) == pytest.approx((-17.5 - half, -17.5 + half))
    assert not diff.excludes_zero()  # 4 pooled episodes would have excluded 0: (-10, -30, -20, -10)
    assert stats.mean_ci([-10.0, -30.0, -20.0, -10.0]).excludes_zero()


def test_two_learned_rows_pair_on_agent_seed():
    diff = paired(frame(), "RL", "RL2", "headway_sd_s")  # agent means 130 − 135, 135 − 140
    assert diff.mean == -5.0 and diff.n == 2 and diff.runs == (-5.0, -5.0)
    # a fixed method against a learned reference: the learned side's agents, sign kept
    assert paired(frame(), "no holding", "RL", "headway_sd_s").mean == 17.5
    with pytest.raises(ValueError, match="no rows for method 'RL3'"):
        paired(frame(), "RL3", "RL", "headway_sd_s")


def test_ci_table_states_n_with_its_unit_and_says_when_agents_never_hold():
    table = ci_table(frame(), ["no holding", "RL", "RL2", "LLM"], {"headway_sd_s": "Headway SD (s)"},
                     missing={"LLM": "needs an LLM backend"})
    assert table.loc["RL", "n"] == "2 agents (× 2 episodes each)" and table.loc["no holding", "n"] == "2 eval seeds"
    assert table.loc["RL2", "holding"] == NEVER_HOLDS
    assert table.loc["RL", "holding"] == "holds 15.0 s per hold"
    assert table.loc["LLM", "Headway SD (s)"] == "needs an LLM backend"
    half = sps.t.ppf(0.975, 1) * np.std([130, 135], ddof=1) / math.sqrt(2)
    assert table.loc["RL", "Headway SD (s)"] == f"132.5 ± {half:.1f}"
    assert table.attrs["estimates"]["RL / Headway SD (s)"].runs == (130.0, 135.0)
    caption = study_tables.caption_of(table)
    stats.check_caption(caption, table.attrs["estimates"].values())
    assert "2 agents (× 2 episodes each)" in caption and "2 eval seeds" in caption


def test_comparisons_give_a_verdict_per_method_reference_and_measure():
    table = comparisons(frame(), ["RL", "RL2"], ["no holding", "RL2"], {"headway_sd_s": "Headway SD (s)"})
    assert table.loc[("RL", "no holding", "Headway SD (s)"), "verdict"] == "no detectable difference"
    assert ("RL2", "RL2", "Headway SD (s)") not in table.index
    assert table.loc[("RL", "RL2", "Headway SD (s)"), "n"] == "2 agents (× 2 episodes each)"
    assert table.loc[("RL", "no holding", "Headway SD (s)"), "MDE"].startswith("MDE ")
    assert best_of(frame(), ["RL", "RL2"], "headway_sd_s") == "RL"
    assert not math.isnan(float(table.loc[("RL", "no holding", "Headway SD (s)"), "change (%)"].split()[0]))


def test_reductions_are_paired_over_the_trained_runs():
    rows = frame().assign(line="overall")
    table = tables.reductions(rows, "RL", ["no holding"], "headway_sd_s")
    assert table.loc["vs no holding", "reduction (s)"].startswith("17.5 ± ")
    assert table.attrs["estimates"]["vs no holding / change (%)"].runs == pytest.approx((-20 / 1.5, -15 / 1.5))


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
