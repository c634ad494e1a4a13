"""Table 1 helpers on hand-made result rows."""

import pandas as pd
import pytest

from llmtraffic.bus.evaluation import mean_std_table, per_stop_sd, relative_change


def rows():
    base = dict(travel_time_s=1000.0, wait_time_s=200.0, hold_time_s=0.0)
    return pd.DataFrame([
        dict(method="none", seed=0, headway_sd_s=300.0, by_stop={"loop": [1.0, 3.0]}, **base),
        dict(method="none", seed=1, headway_sd_s=500.0, by_stop={"loop": [3.0, 5.0]}, **base),
        dict(method="fb", seed=0, headway_sd_s=100.0, by_stop={"loop": [0.0, 1.0]}, **base),
        dict(method="fb", seed=1, headway_sd_s=100.0, by_stop={"loop": [2.0, 1.0]}, **base),
    ])


def test_mean_std_table_orders_methods_and_formats_cells():
    t = mean_std_table(rows(), ["fb", "llm", "none"])
    assert list(t.index) == ["fb", "none"]  # no rows for 'llm'
    # std over seeds is the sample std: values 300, 500 → mean 400, std 141.4
    assert t.at["none", "Headway SD (s)"] == "400.0 ± 141.4"
    assert t.at["fb", "Headway SD (s)"] == "100.0 ± 0.0"
    with pytest.raises(ValueError, match="hold_time_s"):
        mean_std_table(rows().drop(columns="hold_time_s"), ["fb"])


def test_relative_change_and_per_stop_sd():
    assert relative_change(rows(), "fb", "none", "headway_sd_s") == pytest.approx(-75.0)
    with pytest.raises(ValueError, match="no rows for method 'rl'"):
        relative_change(rows(), "rl", "none", "headway_sd_s")
    sd = per_stop_sd(rows())
    assert sd["none"].tolist() == [2.0, 4.0] and sd["fb"].tolist() == [1.0, 1.0]


def test_evaluate_reports_the_authors_definitions_and_service_failures_of_the_episode():
    from llmtraffic.bus import scenarios, simulate
    from llmtraffic.bus.evaluation import EXTRA, evaluate

    sc = scenarios.case1()
    got, m = evaluate(sc, None, 4, 3600), simulate(sc, None, seed=4, horizon_s=3600).metrics
    assert {"travel_time_censored_s", "headway_sd_authors_s", "service_failure_share", "implied_wait_s"} <= set(EXTRA)
    assert all(got[k] == m[k] for k in EXTRA)
