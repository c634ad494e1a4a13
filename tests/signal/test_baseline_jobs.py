"""Runs of Table 1's non-LLM rows: a learned row's runs are its agent seeds, not its eval episodes."""

import math

import numpy as np
import pandas as pd
import pytest

from llmtraffic.signal import baseline_jobs


def _rows():
    rows = []
    for seed, tt in zip((0, 1, 2), (100.0, 100.0, 100.0)):  # a fixed controller, identical runs (as on CityFlow)
        rows.append(dict(method="MP", scenario="hz", seed=seed, agent_seed=math.nan, travel_time_s=tt, deadlock=False,
                         deadlock_time_s=math.nan, simulator="cityflow"))
    for seed, tt in zip((0, 1, 2), (90.0, 96.0, 99.0)):
        rows.append(dict(method="FT", scenario="hz", seed=seed, agent_seed=math.nan, travel_time_s=tt, deadlock=False,
                         deadlock_time_s=math.nan, simulator="cityflow"))
    for agent, tt in ((0, 80.0), (1, 120.0)):  # two trained agents, each identical on its three eval seeds
        for seed in (0, 1, 2):
            stuck = agent == 1 and seed == 2
            rows.append(dict(method="IDQN", scenario="hz", seed=seed, agent_seed=agent, travel_time_s=tt, deadlock=stuck,
                             deadlock_time_s=900.0 if stuck else math.nan, simulator="cityflow"))
    return pd.DataFrame(rows)


def test_compare_pairs_on_the_right_runs():
    rows = _rows()
    d = baseline_jobs.compare(rows, "IDQN", "FT", "hz", "travel_time_s")  # learned vs fixed: n = agent seeds
    assert d.runs == pytest.approx((80.0 - 95.0, 120.0 - 95.0)) and d.of == "2 agents (× 3 episodes each)"
    assert d.n == 2 and d.mean == pytest.approx(5.0) and d.half_width > 100  # two agents far apart: wide interval
    assert baseline_jobs.compare(rows, "IDQN", "FT", "hz", "travel_time_s", relative=True).mean == pytest.approx(500 / 95)
    d = baseline_jobs.compare(rows, "FT", "MP", "hz", "travel_time_s")  # fixed vs fixed: by eval seed
    assert d.runs == (-10.0, -4.0, -1.0) and d.of == "3 eval seeds"
    assert baseline_jobs.compare(rows, "MP", "IDQN", "hz", "travel_time_s").runs == pytest.approx((20.0, -20.0))
    with pytest.raises(ValueError, match="no rows for 'SOTL'"):
        baseline_jobs.compare(rows, "SOTL", "MP", "hz", "travel_time_s")


def test_unknown_learned_baseline_is_refused():
    with pytest.raises(ValueError, match="unknown learned baseline 'FRAP'"):
        baseline_jobs.train_baseline("FRAP", "synthetic", 0, 600, [8], 1, 1, 1, 10, 10)


def test_training_trend_compares_the_last_episodes_with_the_ones_before():
    history = [{"episode": e, "queue": q} for e, q in enumerate([50.0, 40.0, 10.0, 10.0, 10.0, 8.0, 8.0, 8.0])]
    assert baseline_jobs.training_trend(history) == pytest.approx(-20.0)  # (8 - 10) / 10, window 3
    assert baseline_jobs.training_trend(history, window=1) == pytest.approx(0.0)
    assert baseline_jobs.training_trend(history, window=4) == pytest.approx(100 * (8.5 - 27.5) / 27.5)  # [10, 8, 8, 8] vs [50, 40, 10, 10]
    with pytest.raises(ValueError, match="need at least 10"):
        baseline_jobs.training_trend(history, window=5)
    with pytest.raises(ValueError, match="is 0"):
        baseline_jobs.training_trend([{"queue": 0.0}, {"queue": 1.0}], window=1)


def _history(*queues):
    return [{"episode": e, "queue": q} for e, q in enumerate(queues)]


def test_convergence_states_whether_a_row_still_improves():
    falling = _history(10.0, 10.0, 10.0, 8.0, 8.0, 8.0)  # -20 %
    assert baseline_jobs.convergence([falling] * 3).startswith("still improving: -20.0 % (n = 3, all equal)")
    flat = [_history(10, 10, 10, 10, 10, q) for q in (9.7, 10.3, 10.0)]  # -1 %, +1 %, 0 %: CI ±2.5 %
    assert baseline_jobs.convergence(flat).startswith("plateaued (within ±5 %): 0.0 ± 2.5 %")
    noisy = [_history(10, 10, 10, 10, 10, q) for q in (8.8, 10.3, 10.0)]  # -4 %, +1 %, 0 %: CI ±6.6 %
    assert baseline_jobs.convergence(noisy).startswith("not settled")
    assert baseline_jobs.convergence([_history(10, 10, 10, 11, 11, 11)] * 2).startswith("getting worse")
    assert baseline_jobs.convergence([falling]).endswith("(queue, last 3 vs previous 3 training episodes)")
    assert "last 1 vs previous 1" in baseline_jobs.convergence([_history(10.0, 5.0, 7.0), falling])  # shortest: 3
    assert baseline_jobs.convergence([_history(10.0)]) == "too few training episodes to tell"
    with pytest.raises(ValueError):
        baseline_jobs.convergence([])


def test_paper_cells_within_one_percent():
    from llmtraffic.study.stats import mean_ci

    table = pd.DataFrame(index=["MaxPressure", "SOTL"])
    table.attrs["estimates"] = {"MaxPressure / Travel Time": mean_ci([303.807]), "SOTL / Travel Time": mean_ci([218.06]),
                                "MaxPressure / Queue": mean_ci([100.9444])}
    paper = pd.DataFrame({"Travel Time": [303.81, 212.22], "Queue": [100.94, 69.11]}, index=["MaxPressure", "SOTL"])
    assert baseline_jobs.paper_cells_within(table, paper, pct=1.0) == ["MaxPressure / Travel Time", "MaxPressure / Queue"]
