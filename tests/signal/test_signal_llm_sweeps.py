"""One-setting sweeps of the OracleTSC fine-tune job (App. A notebooks)."""

import pandas as pd
import pytest

from llmtraffic.signal import llm_jobs
from llmtraffic.signal.backbones import NEEDS_GPU, SURROGATE
from llmtraffic.signal.llm_sweeps import plot_sweep, run_unique, spread_row, summary_frame, sweep, training_table, with_setting

TINY = {"collect_seeds": [1000], "episode_s": 300, "steps": 0, "hidden": 32}

pytestmark = pytest.mark.usefixtures("torch_one_thread")


def _result(scenario, queue, travel, delay=0.5, throughput=1000):
    run = {"seed": 0, "queue": queue, "travel_time_s": travel, "travel_time_all_s": travel, "delay": delay,
           "throughput": throughput, "invalid_rate": 0.0, "deadlock": False, "r_env": []}
    return {"params": {"oracle": {"scenario": scenario}}, "after": {scenario: {"runs": [run], "agreement": []}},
            "training": [{"episode": 0, "travel_time_s": 90.123, "queue": 20.0, "mean_reward": -1.23456,
                          "invalid_rate": 0.025, "kl": 0.012345},
                         {"episode": 1, "travel_time_s": 80.0, "queue": 15.555, "mean_reward": 0.5,
                          "invalid_rate": 0.0, "kl": 0.02}]}


def test_with_setting_changes_one_field_and_leaves_the_base_alone():
    base = {"backbone": SURROGATE, "oracle": {"episodes": 1, "reward": {"hurdle": 2.7}}, "ppo": None}
    job = with_setting(base, "oracle.reward.tau", 2.0)
    assert job["oracle"]["reward"] == {"hurdle": 2.7, "tau": 2.0} and "tau" not in base["oracle"]["reward"]
    assert with_setting(base, "ppo.clip_high", 0.5)["ppo"] == {"clip_high": 0.5} and base["ppo"] is None
    assert with_setting(base, "oracle.episodes", 3)["oracle"]["episodes"] == 3
    levels = sweep(base, "ppo.group_size", [2, 4, 8])
    assert [j["ppo"]["group_size"] for j in levels] == [2, 4, 8]
    assert all(j["oracle"] == base["oracle"] for j in levels)
    with pytest.raises(ValueError, match="PPOConfig has no field 'clip_upper'"):
        with_setting(base, "ppo.clip_upper", 0.5)
    with pytest.raises(ValueError, match="RewardConfig has no field 'hurdel'"):
        with_setting(base, "oracle.reward.hurdel", 1)
    with pytest.raises(ValueError, match="must start with one of"):
        with_setting(base, "surrogate.steps", 10)


def test_summary_spread_and_training_tables():
    results = [_result("cologne1", 10.0, 100.0, throughput=1000), _result("cologne1", 20.0, 140.0, throughput=1100),
               {"params": {}, "unavailable": NEEDS_GPU}]
    frame = summary_frame(results, [0, 11, 6446], name="seed")
    assert list(frame.index) == [0, 11, 6446] and frame.loc[11, "queue"] == 20.0
    assert pd.isna(frame.loc[6446, "queue"])
    spread = spread_row(frame.loc[[0, 11]])
    assert spread == {"Travel Time": "120.00 ± 20.00", "Queue": "15.00 ± 5.00", "Delay": "0.50 ± 0.00",
                      "Throughput": "1050 ± 50"}
    table = training_table(results[0])
    assert list(table.index) == ["Episode 1", "Episode 2"]
    assert table.loc["Episode 1"].to_dict() == {"Travel Time": 90.12, "Queue": 20.0, "Mean reward": -1.235,
                                                "Invalid answers": "2.5%", "KL": 0.0123}
    assert training_table(results[2]).iloc[0, 0] == NEEDS_GPU
    fig = plot_sweep(frame, "seed", before=results[0]["after"]["cologne1"])
    assert [ax.get_title() for ax in fig.axes] == ["Travel Time", "Queue", "Delay", "Throughput"]
    assert list(fig.axes[1].lines[0].get_ydata()[:2]) == [10.0, 20.0]


def test_a_sweep_runs_one_cached_fine_tune_per_level(monkeypatch):
    base = dict(backbone=SURROGATE, scenario="synthetic", eval_seeds=[7], surrogate=TINY,
                oracle={"episodes": 1, "episode_s": 180, "update_every_s": 180, "checkpoint_every_s": 180},
                ppo={"group_size": 2})
    jobs = sweep(base, "ppo.clip_high", [0.2, 0.5]) + sweep(base, "ppo.clip_high", [0.5])
    calls = []
    together = llm_jobs.finetune_together

    def counted(jobs):
        calls.append(jobs)
        return together(jobs)

    monkeypatch.setattr(llm_jobs, "finetune_together", counted)
    results = run_unique(jobs)
    assert [len(c) for c in calls] == [2], "the repeated level ran twice, or the levels did not train together"
    assert results[2] is results[1]
    assert [r["params"]["ppo"]["clip_high"] for r in results] == [0.2, 0.5, 0.5]
    assert all(r["params"]["ppo"]["clip_low"] == 0.2 and r["params"]["ppo"]["group_size"] == 2 for r in results)
    assert all(len(r["after"]["synthetic"]["runs"][0]["queue_series"]) == 18 for r in results)

    def must_not_train(*args, **kw):
        raise AssertionError("a cached level was trained again")

    monkeypatch.setattr(llm_jobs, "train_together", must_not_train)
    monkeypatch.setattr(llm_jobs, "finetune_together", together)
    assert run_unique(jobs)[1]["after"] == results[1]["after"]
