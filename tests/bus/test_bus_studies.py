"""Case 2/3 and generic studies (§5.3–5.5 of the bus-holding paper): data checks, the case-2 → case-3
transfer, the case-2 agents' protocol, and the tables' arithmetic."""

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from llmtraffic.bus import evaluation, jobs, scenarios, simulate, tables
from llmtraffic.bus.controllers import NoHolding
from llmtraffic.bus.reward_design.jobs import NEEDS_LLM
from llmtraffic.bus.sim import draw_passengers
from llmtraffic.bus.training import DQNController

CASE2 = "busholding/pkl/data_case2"
TINY_DQN = dict(hidden=[16], episodes=2, eps_decay_episodes=1, updates_per_episode=5, batch_size=32,
                learning_starts=32, obs_scale=[1000.0] * 4 + [10.0, 10.0])


@pytest.mark.parametrize("line, total", [("3436", 9613), ("3986", 6949)])
def test_case2_data_holds_the_stated_four_hour_boardings(line, total):
    rates = np.asarray(scenarios.load_pickle(f"{CASE2}/board_bystop_per_hour_{line}.pkl"), float)[:, :4]
    assert rates.shape == (27, 4) and rates.sum() == total


def test_case2_boardings_match_the_data_within_poisson_noise():
    """Over 60 episodes the mean 4-h boardings per line equal the data's sums less the terminal
    stop's (nobody boards at a line's last stop: 9613 - 35 and 6949 - terminal), within 4 standard
    errors; a missing hour or a doubled stop would be off by hundreds."""
    sc = scenarios.case2()
    counts = np.array([np.bincount(draw_passengers(sc, np.random.default_rng(s), 4 * 3600.0).line, minlength=2)
                       for s in range(60)])
    for k, ln in enumerate(sc.lines):
        raw = np.asarray(scenarios.load_pickle(f"{CASE2}/board_bystop_per_hour_{ln.name}.pkl"), float)[:, :4]
        expected = raw.sum() - raw[-1].sum()
        assert np.sum(ln.rates_ph) == expected
        se = counts[:, k].std(ddof=1) / math.sqrt(len(counts))
        assert abs(counts[:, k].mean() - expected) < 4 * se
        assert se > math.sqrt(expected / len(counts)) * 0.9  # at least Poisson noise (plus the ±10 % jitter)


def test_case2_destination_rows_sum_to_one_where_there_is_demand():
    sc = scenarios.case2()
    for ln in sc.lines:
        raw = np.asarray(scenarios.load_pickle(f"{CASE2}/destination_percent_{ln.name}.pkl"), float)
        demand = np.asarray(ln.rates_ph).sum(axis=1) > 0
        assert np.allclose(raw[:26][demand[:26]].sum(axis=1), 1.0)
        assert np.allclose(np.asarray(ln.od)[demand].sum(axis=1), 1.0)
        assert np.all(np.asarray(ln.od)[~demand] == 0.0)


def test_case2_has_27_stops_per_line_and_8_shared_pairs():
    sc = scenarios.case2()
    assert [ln.n_stops for ln in sc.lines] == [27, 27]
    assert len(sc.shared_nodes) == 8 == len(scenarios.CASE2_SHARED)
    assert len(tables.shared_stop_sd(_rows_of(sc, "case2", {}), "case2", {})) == 16  # 8 stops × 2 lines


def _rows_of(sc, case, kwargs):
    return pd.DataFrame(evaluation.evaluate_lines(case, kwargs, "no holding", NoHolding(), 0, horizon_s=3600.0))


def test_case3_shared_stops_are_listed_by_name_with_their_lines():
    found = tables.shared_stops(scenarios.case3())
    assert set(found.index) == {"灯市西口", "美术馆", "沙滩路口西", "西安门", "北京三十九中学", "辟才胡同东口", "厂桥路口南"}
    assert found.at["西安门", "count"] == 4
    assert found.at["厂桥路口南", "lines"] == "line 55 (stop 2), line 68 (stop 0)"


def _case2_policy():
    return jobs.train_job("RL-local", "case2", {}, "rl_local", TINY_DQN, 0, [200], 1800.0, 1800.0).policy


def test_case2_agents_differ_only_by_their_reward():
    """Per agent seed: the loop runs, then RL-local, RL-global and the loop's final reward are
    trained with the same budget and validation seeds; ours is trained on the loop's code."""
    agents = jobs.case2_agents(None, TINY_DQN, {"iterations": 1, "slack": 0.01}, [0, 1], [100], [200], [0],
                               train_horizon_s=1800.0, test_horizon_s=1800.0)
    ours = agents.ours
    assert set(agents.agents) == {(m, a) for m in ("RL-local", "RL-global", ours) for a in (0, 1)}
    for a in (0, 1):
        assert agents.agents[(ours, a)].reward == agents.codes()[a] == agents.designs[a].outcome.final_code
        assert agents.agents[("RL-local", a)].reward == "rl_local"
        assert all(len(agents.agents[(m, a)].curve) == TINY_DQN["episodes"] for m in ("RL-local", ours))
    assert agents.designs[0].outcome.steps[0].code != agents.designs[0].outcome.steps[-1].code  # the loop edited


def test_evaluate_all_pairs_learned_rows_by_agent_seed():
    policy = _case2_policy()

    class Fake:
        def controller(self):
            return DQNController(policy)

    rows = jobs.evaluate_all("case2", {}, {"no holding": NoHolding()}, {("RL", 3): Fake(), ("RL", 4): Fake()}, [0],
                             horizon_s=1800.0)
    overall = rows[rows["line"] == "overall"]
    assert overall["method"].tolist() == ["no holding", "RL", "RL"]
    assert overall["agent_seed"].isna().tolist() == [True, False, False]
    assert overall["agent_seed"].iloc[1:].tolist() == [3, 4]
    assert {"implied_wait_s", "regular_wait_s", "service_failure_share"} <= set(overall.columns)


class _Counting:
    """Wraps a controller and records every observation it is asked about."""

    def __init__(self, inner):
        self.inner, self.mode, self.seen = inner, inner.mode, []

    def act(self, obs, info):
        self.seen.append(np.asarray(obs))
        return self.inner.act(obs, info)


def test_agents_trained_on_case2_run_on_case3_and_generated_systems():
    """The §5.4 transfer: same six-value state whatever the lines and stops, so a case-2 agent
    acts on case 3 (6 lines) and a generated system without any change."""
    policy = _case2_policy()
    for sc in (scenarios.case3(), scenarios.generic(0)):
        assert len(sc.lines) > 2
        ctrl = _Counting(DQNController(policy))
        m = simulate(sc, ctrl, seed=0, horizon_s=1800.0).metrics
        assert len(ctrl.seen) > 100 and all(o.shape == (6,) for o in ctrl.seen)
        assert any(o[2] > 0 for o in ctrl.seen)  # other-line headways seen at shared stops
        assert math.isfinite(m["travel_time_s"]) and set(m["by_line"]) == {ln.name for ln in sc.lines}


def test_evaluate_lines_gives_one_row_per_line_and_overall():
    rows = _rows_of(None, "case2", {})
    assert list(rows["line"]) == ["line 1", "line 52", "overall"]
    assert (rows["hold_time_s"] == 0).all() and rows["incomplete_share"].between(0, 100).all()
    assert math.isfinite(rows["shared_headway_sd_s"].iloc[-1]) and math.isnan(rows["shared_headway_sd_s"].iloc[0])


def _frame():
    rows = []
    for method, travel, hold in (("a", [100.0, 110.0], [0.0, 0.0]), ("b", [90.0, 94.0], [10.0, 14.0])):
        for seed, (t, h) in enumerate(zip(travel, hold)):
            for line in ("line 1", "overall"):
                rows.append({"method": method, "seed": seed, "line": line, "headway_sd_s": 1.0, "travel_time_s": t,
                             "wait_time_s": 2.0, "hold_time_s": h, "incomplete_share": 5.0})
    return pd.DataFrame(rows)


def test_line_table_and_reductions_are_exact():
    table = tables.line_table(_frame(), ["a", "b", "c"], {"c": NEEDS_LLM})
    assert list(table.index) == ["line 1 · a", "line 1 · b", "line 1 · c", "overall · a", "overall · b", "overall · c"]
    half = sps.t.ppf(0.975, 1) * np.std([90.0, 94.0], ddof=1) / np.sqrt(2)  # 95 % t-interval over 2 seeds
    assert table.at["overall · b", "Avg travel time (s)"] == f"92.00 ± {half:.2f}"
    assert table.at["overall · c", "Avg holding time (s)"] == NEEDS_LLM
    red = tables.reductions(_frame(), "b", ["a"])  # two fixed rows: paired by eval seed, a − b = 10, 16
    found = red.attrs["estimates"]
    assert found["vs a / reduction (s)"].runs == (10.0, 16.0) and found["vs a / reduction (s)"].mean == pytest.approx(13.0)
    assert found["vs a / change (%)"].mean == pytest.approx(-1300 / 105)
    assert red.at["vs a", "n"] == "2 eval seeds" and red.at["vs a", "reduction (s)"].startswith("13.0 ± ")
    with pytest.raises(ValueError, match="no rows for method 'z'"):
        tables.reductions(_frame(), "z", ["a"])


def test_generic_summary_is_exact():
    table = pd.DataFrame({"no holding": [100.0, 200.0, 300.0, 400.0], "feedback": [90.0, 210.0, 280.0, 400.0],
                          "ours": [95.0, 190.0, 285.0, 360.0]})
    s = tables.generic_summary(table, "ours")["value"]
    assert s["systems"] == 4
    assert s["beats feedback (% of systems)"] == 50.0
    assert s["mean change vs no holding (%)"] == pytest.approx(100 * np.mean([-0.05, -0.05, -0.05, -0.1]))
    assert s["mean reduction vs feedback (s)"] == pytest.approx(np.mean([-5, 20, -5, 40]))


@pytest.mark.parametrize("share", [0.0, 0.15, 0.25])
def test_corridor_share_reads_back_the_rebalanced_share(share):
    assert scenarios.corridor_share(scenarios.case2(shared_share=share)) == pytest.approx(share)
    assert 0.0 < scenarios.corridor_share(scenarios.case2()) < 0.25


def test_bad_settings_raise_clear_errors():
    with pytest.raises(ValueError, match=r"unknown loop setting\(s\) \['iters'\]"):
        jobs.case2_agents(None, TINY_DQN, {"iters": 1}, [0], [100], [200], [0])
    with pytest.raises(ValueError, match=r"val_seeds overlap eval_seeds at \[0\]"):
        jobs.case2_agents(None, TINY_DQN, {"iterations": 1}, [0], [100], [0], [0])
    with pytest.raises(ValueError, match="unknown case 'case9'"):
        scenarios.by_name("case9")
    with pytest.raises(ValueError, match=r"unknown dqn setting\(s\) \['layers'\]"):
        jobs.dqn_config({"layers": [3]}, 0)


def test_ours_is_labelled_by_its_designer():
    assert jobs.ours_label(None) == "search designer (no LLM) + RL"
    assert jobs.ours_label({"backend": "openai", "model": "gpt-4o"}) == "gpt-4o + RL"


def test_generic_job_compares_methods_on_the_same_episodes():
    policy = _case2_policy()
    row = jobs.generic_job(2, {"ours (case-2 agent transferred)": [policy, policy]}, None, 0.0, TINY_DQN, [0, 1], [200],
                           [0, 1], test_horizon_s=1800.0)
    sc = scenarios.generic(2)
    assert (row["system"], row["lines"], row["stops"]) == (2, len(sc.lines), sum(ln.n_stops for ln in sc.lines))
    expected = np.mean([simulate(sc, NoHolding(), seed=s, horizon_s=1800.0).metrics["travel_time_s"] for s in (0, 1)])
    assert row["no holding"] == pytest.approx(expected)
    assert set(row) >= {"feedback", "ours (case-2 agent transferred)"} and "ours (trained per system)" not in row


def test_authors_definitions_per_line_add_up_to_the_overall_ones():
    """Case 1 has one line: its per-line values under the authors' definitions equal the overall
    ones; on case 2 each line's censored travel time is its own passengers' (the overall mean is
    the passenger-weighted mean of the two lines)."""
    from llmtraffic.bus.controllers import Feedback

    one = simulate(scenarios.case1(), Feedback(), seed=3, horizon_s=3600.0).metrics
    (line,) = one["by_line"].values()
    for key in ("travel_time_censored_s", "wait_time_censored_s", "headway_sd_authors_s", "hold_time_per_decision_s"):
        assert line[key] == pytest.approx(one[key]), key
    assert one["hold_time_per_decision_s"] > 0
    result = simulate(scenarios.case2(), Feedback(), seed=3, horizon_s=3600.0)
    two, pax = result.metrics, result.passengers
    owner = np.where(pax["rode"] != "", pax["rode"], pax["line"])
    counts = [int((owner == ln.name).sum()) for ln in scenarios.case2().lines]
    weighted = sum(c * two["by_line"][ln.name]["travel_time_censored_s"] for c, ln in zip(counts, scenarios.case2().lines))
    assert weighted / sum(counts) == pytest.approx(two["travel_time_censored_s"])
    rows = pd.DataFrame(evaluation.evaluate_lines("case2", {}, "feedback", Feedback(), 3, horizon_s=3600.0))
    assert rows.set_index("line").at["line 1", "travel_time_censored_s"] == two["by_line"]["3436"]["travel_time_censored_s"]
