"""Control rows and CI tables of the OracleTSC notebooks, on hand-computed cases."""

import math

import pytest
from scipy import stats

from llmtraffic.signal.controls import (MaxQueueController, classic_evaluation, greedy, heuristic_evaluation,
                                       random_reward_oracle)
from llmtraffic.signal.llm_tables import ci_table, comparison, difference_cell, incomparable, judged, paired, shaping_claim
from llmtraffic.signal.state import IntersectionState, LaneCounts, Movement, Phase
from llmtraffic.signal.llm_jobs import pool


def _runs(queues, seeds=(100, 101), jam=(), invalid=0.0):
    return {"scenario": "x", "episode_s": 10, "agreement": [], "traces": [],
            "runs": [{"seed": s, "queue": q, "travel_time_s": 10 * q, "delay": 0.5, "throughput": 100,
                      "deadlock": i in jam, "invalid_rate": invalid} for i, (s, q) in enumerate(zip(seeds, queues))]}


def test_paired_difference_pairs_agents_by_seed_after_averaging_their_episodes():
    plain = pool([_runs([10, 12]), _runs([14, 16])], agent_seeds=[0, 1])  # agent means 11, 15
    shaped = pool([_runs([13, 9]), _runs([10, 12])][::-1], agent_seeds=[1, 0])  # listed in another order: 11, 11
    d = paired(shaped, plain, "queue")
    diffs = [11 - 11, 11 - 15]  # agent 0, agent 1
    assert d.runs == pytest.approx(tuple(100 * x / 13 for x in diffs))  # in % of plain's mean, 13
    assert d.n == 2 and d.of == "2 agents (× 2 episodes each)"
    assert d.half_width == pytest.approx(100 * stats.t.ppf(0.975, 1) * math.sqrt(8) / math.sqrt(2) / 13)
    before = _runs([20, 30])  # untrained: its mean over the same eval seeds (25) against each agent
    assert paired(plain, before, "queue", relative=False).runs == pytest.approx((-14.0, -10.0))
    assert paired(before, plain, "queue", relative=False).mean == pytest.approx(12.0)
    assert paired(before, plain, "queue").n == 2


def test_table_cells_never_show_jammed_improvements_and_all_invalid_is_na():
    plain = pool([_runs([10, 12]), _runs([14, 16])], agent_seeds=[0, 1])  # agent means 11, 15
    shaped = pool([_runs([9, 10]), _runs([12, 13])], agent_seeds=[0, 1])  # agent means 9.5, 12.5: diffs -1.5, -2.5
    half = 100 * stats.t.ppf(0.975, 1) * math.sqrt(0.5) / math.sqrt(2) / 13
    assert difference_cell(shaped, plain) == f"−15.4 ± {half:.1f} % (no detectable difference)".replace("−", "-")
    stuck = pool([_runs([9, 10], jam=(1,)), _runs([12, 13])], agent_seeds=[0, 1])
    assert difference_cell(stuck, plain) == "not compared: 1 jammed run(s)"
    assert comparison(stuck, plain) is None
    broken = pool([_runs([9, 10], invalid=1.0), _runs([12, 13], invalid=1.0)], agent_seeds=[0, 1])
    table = ci_table({"R_env": plain, "shaped": shaped, "broken": broken, "8B": {"unavailable": "needs a GPU"}},
                     reference="R_env", shared={"shaped": "Fig. 9, H_R = 0"})
    assert table.loc["broken", "Queue"] == "n/a (100 % invalid answers)"
    assert table.loc["shaped", "Queue"] == f"11.00 ± {stats.t.ppf(0.975, 1) * math.sqrt(4.5) / math.sqrt(2):.2f}"
    assert table.loc["shaped", "Jammed"] == "0/4" and table.loc["shaped", "n"] == "2 agents (× 2 episodes each)"
    assert table.loc["R_env", "Δ queue vs R_env"] == "—" and table.loc["8B", "Queue"] == "needs a GPU"
    assert table.loc["shaped", "Same run as"] == "Fig. 9, H_R = 0"
    assert table.attrs["estimates"]["shaped / Δ queue vs R_env"].runs == pytest.approx((-150 / 13, -250 / 13))
    assert "broken / Queue" not in table.attrs["estimates"]


def test_a_claim_on_rows_that_ran_but_jammed_or_never_answered_is_no_result_not_not_run(tmp_path, monkeypatch):
    from pathlib import Path

    from llmtraffic import study
    from llmtraffic.study import claims

    monkeypatch.setenv("LLMTRAFFIC_FIGURES", str(tmp_path / "figures"))
    monkeypatch.setenv("LLMTRAFFIC_RUNS", str(tmp_path / "runs"))
    monkeypatch.setenv("LLMTRAFFIC_NOTEBOOK", str(Path(__file__).parents[1] / "study" / "fixtures" / "notebooks" / "fx_plot.ipynb"))
    monkeypatch.setenv("LLMTRAFFIC_PROFILE", "smoke")
    claims._recorded.clear()
    study.begin("fx_plot", {"n": 7, "scale": 0.5, "label": "x", "seeds": [4, 5], "extra": None})
    plain = pool([_runs([10, 12]), _runs([14, 16])], agent_seeds=[0, 1])
    shaped = pool([_runs([9, 10]), _runs([12, 13])], agent_seeds=[0, 1])
    stuck = pool([_runs([9, 10], jam=(1,)), _runs([12, 13], jam=(0, 1))], agent_seeds=[0, 1])
    silent = pool([_runs([9, 10], invalid=1.0), _runs([12, 13], invalid=1.0)], agent_seeds=[0, 1])
    assert judged(shaped, plain)["ours"].runs == pytest.approx((-150 / 13, -250 / 13))
    assert judged(stuck, plain) == {"finding": "deadlocked runs are not compared (ours 3 of 4 runs, the reference 0 of 4 runs)"}
    assert judged(plain, silent) == {"finding": "every answer named no phase (the reference): nothing to compare"}
    assert judged(shaped, {"unavailable": "needs a GPU"}) == {"needs": "needs a GPU"}
    verdicts = {name: claims.claim(name, "tsc", "§4.2", "s", "queue (%)", "t", direction=-1, **judged(ev, plain)).verdict
                for name, ev in {"jam": stuck, "silent": silent, "gpu": {"unavailable": "needs a GPU"}}.items()}
    assert verdicts == {"jam": claims.NO_RESULT, "silent": claims.NO_RESULT, "gpu": claims.NOT_RUN}
    c = shaping_claim("shaped", "§4.3.1", "s", stuck, plain, {"random": plain}, link="t")
    assert c.verdict == claims.NO_RESULT and c.finding.startswith("deadlocked runs")


def _learned(per_agent):
    """A deep-RL row: agent seed -> its queues on eval seeds 100, 101 (units: agent seeds)."""
    return {**pool([_runs(q) for q in per_agent.values()], agent_seeds=list(per_agent)), "units": "agent seeds"}


def test_a_deep_rl_row_counts_agent_seeds_not_eval_runs():
    idqn = _learned({0: [10, 10], 1: [20, 20], 2: [30, 30]})  # one run per agent whatever the seed (CityFlow)
    before = _runs([40, 50])
    table = ci_table({"before": before, "IDQN": idqn}, reference="before")
    assert table.loc["IDQN", "Queue"] == f"20.00 ± {stats.t.ppf(0.975, 2) * 10 / math.sqrt(3):.2f}"  # 3 units, sd 10
    assert table.loc["IDQN", "n"] == "3 agents (× 2 episodes each)" and table.loc["before", "n"] == "2 eval seeds"
    d = paired(idqn, before, "queue", relative=False)  # each agent against before's mean over seeds 100-101 (45)
    assert (d.n, d.mean) == (3, pytest.approx(-25.0))
    assert paired(before, idqn, "queue", relative=False).mean == pytest.approx(25.0)
    presslight = _learned({0: [12, 14], 1: [18, 18], 2: [36, 30]})  # agent means 13, 18, 33
    both = paired(presslight, idqn, "queue", relative=False)
    assert (both.n, both.mean) == (3, pytest.approx((3 - 2 + 3) / 3))
    assert ci_table({"IDQN": _learned({4: [1, 2]})}).loc["IDQN", "n"] == "1 agent (× 2 episodes)"
    with pytest.raises(ValueError, match="lacks eval seed"):
        paired(idqn, _runs([40], seeds=(100,)), "queue")
    partial = paired(idqn, _learned({0: [1, 1], 5: [1, 1], 2: [1, 1]}), "queue", relative=False)
    assert (partial.n, partial.mean) == (2, pytest.approx(((10 - 1) + (30 - 1)) / 2))  # seeds 0 and 2 only
    assert "unpaired left out: 1, 5" in partial.of


def test_learned_evaluation_runs_every_agent_on_every_eval_seed():
    from llmtraffic.signal.baselines import MaxPressure
    from llmtraffic.signal.controls import learned_evaluation
    e = learned_evaluation("MaxPressure", "synthetic", {3: MaxPressure(), 7: MaxPressure()}, [1, 2], episode_s=120)
    assert e["units"] == "agent seeds"
    assert [(r["agent_seed"], r["seed"]) for r in e["runs"]] == [(3, 1), (3, 2), (7, 1), (7, 2)]
    assert [r["queue"] for r in e["runs"][:2]] == [r["queue"] for r in e["runs"][2:]]  # same controller, same seeds
    with pytest.raises(ValueError, match="no trained"):
        learned_evaluation("IDQN", "synthetic", {}, [1])


PHASES = (Phase(0, "NS", "north-south", (Movement("n", "s", "N", "through"),)),
          Phase(1, "EW", "east-west", (Movement("e", "w", "E", "through"), Movement("w", "e", "W", "through"))))


def test_control_rows():
    state = IntersectionState(0.0, 0, {"n": LaneCounts(5, 0, 0, 0), "e": LaneCounts(3, 0, 0, 0), "w": LaneCounts(3, 0, 0, 0)}, PHASES)
    assert MaxQueueController().act(state) == 1  # 6 queued east-west against 5 north-south
    assert random_reward_oracle({"episodes": 3, "reward": {"hurdle": 2.7}}) == {
        "episodes": 3, "random_reward_std": 3.0, "reward": {}}
    assert greedy({"group_size": 4}) == {"group_size": 4, "temperature": 0.0}
    evaluation = heuristic_evaluation("synthetic", [3], episode_s=120)
    [run] = evaluation["runs"]
    assert run["invalid_rate"] == 0 and len(run["queue_series"]) == 12 and len(run["r_env"]) == 11
    with pytest.raises(ValueError, match="not one of"):
        classic_evaluation("Webster", "synthetic", [3])


def test_a_delta_against_the_paper_needs_the_same_backbone_intersection_and_episode_length():
    assert incomparable("LLaMA3-8B", "LLaMA3-8B", "hangzhou1x1") == ""
    assert incomparable("surrogate-tiny", "LLaMA3-8B", "cologne1", episode_s=1440) == (
        "backbone surrogate-tiny, not LLaMA3-8B; intersection cologne1, not hangzhou1x1; 1440-s episodes, not 3600-s")


def test_evaluation_episodes_are_cached_and_shared_between_notebooks(monkeypatch):
    """tsc_baselines and tsc_main play the same classic and trained controllers on the same
    seeds: each episode is one cached job, so the second notebook replays nothing."""
    from llmtraffic.signal import baseline_jobs
    from llmtraffic.signal.controls import learned_evaluation

    settings = dict(episode_s=120, hidden=[8], episodes=2, ppo_episodes=1, eps_decay_episodes=1, updates_per_episode=2,
                    learning_starts=64)
    [training] = baseline_jobs.trainings(["IDQN"], ["synthetic"], [0], **settings).values()
    controller, _ = baseline_jobs.train_baseline(**training)
    by_object = learned_evaluation("IDQN", "synthetic", {0: controller}, [1, 2], episode_s=120)
    by_training = learned_evaluation("IDQN", "synthetic", {0: training}, [1, 2], episode_s=120)
    assert by_training["runs"] == by_object["runs"]
    classic = classic_evaluation("MaxPressure", "synthetic", [1], episode_s=120)

    def replay(*args, **kwargs):
        raise AssertionError("an episode was played again")

    monkeypatch.setattr(baseline_jobs, "evaluate_method", replay)
    again = baseline_jobs.evaluate_episode("MaxPressure", "synthetic", 1, 120)
    assert again["queue"] == classic["runs"][0]["queue"]
    assert learned_evaluation("IDQN", "synthetic", {0: training}, [1, 2], episode_s=120)["runs"] == by_training["runs"]
    with pytest.raises(ValueError, match="a PressLight episode of a IDQN training"):
        baseline_jobs.evaluate_episode("PressLight", "synthetic", 1, 120, training=training)
