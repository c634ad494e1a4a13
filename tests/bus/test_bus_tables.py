"""Bus tables: CIs over agent seeds × eval seeds, pairing against fixed and learned references."""

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

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
