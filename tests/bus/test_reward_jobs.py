"""Experiment jobs and tables of the reward-design studies: variants, designers, cached runs, CIs."""

import dataclasses

import pandas as pd
import pytest

from llmtraffic.bus import scenarios
from llmtraffic.bus.evaluation import MEASURES
from llmtraffic.bus.tables import NEVER_HOLDS
from llmtraffic.bus.reward_design import jobs, tables, variants
from llmtraffic.bus.reward_design.designer import LLMDesigner
from llmtraffic.bus.reward_design.loop import LoopConfig, Outcome, Step, Trial
from llmtraffic.bus.reward_design.search import LABEL, SearchDesigner
from llmtraffic.llm import LLM, Cassette, Completion
from llmtraffic.rl.dqn import DQNConfig
from llmtraffic.study.cache import cache_dir

DQN = dict(hidden=[16], episodes=1, updates_per_episode=5, batch_size=16, learning_starts=16,
           eps_decay_episodes=1, obs_scale=[1000.0] * 4 + [10.0, 10.0])
RUN = dict(dqn=DQN, design_seeds=[0], eval_seeds=[500, 501], iterations=2, slack=0.1, horizon_s=1800.0)

LLM_REWARD = """Balance the headways, small holding cost.
```python
def reward(current_state, action, next_state):
    f, b = next_state[0], next_state[1]
    return -abs(f - b) / max(f + b, 1.0) - 0.01 * action
```"""


class FixedBackend:
    """A stand-in chat model that always gives the same answer (10 prompt + 4 completion tokens)."""

    name, model = "fake", "fixed-model"

    def generate(self, messages, n, temperature, max_tokens, seed):
        return Completion([LLM_REWARD] * n, prompt_tokens=10, completion_tokens=4 * n)


def _changed(a: LoopConfig, b: LoopConfig) -> dict:
    return {f.name: getattr(b, f.name) for f in dataclasses.fields(a) if getattr(a, f.name) != getattr(b, f.name)}


def test_each_ablation_changes_one_setting_and_methods_map_to_loop_settings():
    base = LoopConfig(iterations=4)
    assert variants.loop_settings("paradigm", base) == (base, False)
    assert {v: _changed(base, variants.loop_settings(v, base)[0]) for v in variants.ABLATIONS} == {
        "cold": {"start": "cold"}, "no_analyzer": {"analyzer": False},
        "no_refiner": {"refiner": False}, "no_initializer": {"start": "none"}}
    eureka, critic = variants.loop_settings("eureka", base, k=5)
    assert (eureka.candidates, eureka.analyzer, eureka.refiner, eureka.start, critic) == (5, False, False, "cold", False)
    assert variants.loop_settings("critic", base) == (LoopConfig(iterations=4, refiner=False, start="cold"), True)
    assert variants.loop_settings("one_shot", base)[0].iterations == 0
    with pytest.raises(ValueError, match="unknown variant 'no_llm'"):
        variants.loop_settings("no_llm", base)


def test_an_llm_config_alone_selects_the_llm_designer(tmp_path):
    scenario = scenarios.case1()
    search, model = jobs.make_designer(None, scenario, critic=True, seed=3)
    assert isinstance(search, SearchDesigner) and model is None and search.critic and search.headway_s == 320.0
    cassette = tmp_path / "c.jsonl"
    LLM(FixedBackend(), Cassette(cassette), "record").complete([{"role": "user", "content": "hi"}])
    critic, model = jobs.make_designer({"backend": "replay", "cassette": str(cassette), "model": "fixed-model"},
                                       scenario, critic=True)
    assert isinstance(critic, LLMDesigner) and critic.critic and critic.name == "fixed-model (critic)"
    assert jobs.designer_label(None) == LABEL and jobs.designer_label({"model": "gpt-4o"}) == "gpt-4o"


def test_an_llm_row_without_a_backend_says_why():
    run = jobs.design_run(designer="llm", llm=None, variant="eureka", seed=0, **RUN)
    assert run.unavailable == jobs.NEEDS_LLM and run.outcome is None and run.label == "Eureka-style · LLM designer"
    with pytest.raises(ValueError, match="designer must be 'search' or 'llm'"):
        jobs.design_run(designer="rules", llm=None, variant="paradigm", seed=0, **RUN)
    grouped = {run.label: [run]}
    assert tables.reasons(grouped) == {run.label: jobs.NEEDS_LLM}
    assert tables.ci_table(pd.DataFrame(columns=["method"]), [run.label], tables.reasons(grouped)).iloc[0, 0] == jobs.NEEDS_LLM


def _count(kind: str) -> int:
    folder = cache_dir(kind, {}).parent
    return len([p for p in folder.iterdir() if p.is_dir()]) if folder.exists() else 0  # entries, not build locks


def _measures(run: jobs.DesignRun) -> list[dict]:
    return [{k: row[k] for k in ("seed", *MEASURES)} for row in run.eval_rows]


@pytest.mark.slow
def test_search_runs_are_cached_and_ablations_propose_other_rewards():
    before = _count("bus_reward_candidate")
    run = jobs.design_run(designer="search", llm=None, variant="paradigm", seed=3, **RUN)
    h = run.outcome.history()
    assert len(h) == 3 and h["valid"].all() and run.usage is None and run.label == f"paradigm (ours) · {LABEL}"
    assert [r["seed"] for r in run.eval_rows] == [500, 501] and set(MEASURES) <= set(run.eval_rows[0])
    assert _count("bus_reward_candidate") - before <= len({s.code for s in run.outcome.steps})

    again = jobs.design_run(designer="search", llm=None, variant="paradigm", seed=3, **RUN)
    assert again.wall_s == run.wall_s and _measures(again) == _measures(run)  # from the cache

    blind = jobs.design_run(designer="search", llm=None, variant="no_analyzer", seed=3, **RUN)
    assert blind.outcome.steps[0].code == run.outcome.steps[0].code  # the same warm start
    assert [s.code for s in blind.outcome.steps[1:]] != [s.code for s in run.outcome.steps[1:]]
    cold = jobs.design_run(designer="search", llm=None, variant="cold", seed=3, **RUN)
    assert cold.outcome.steps[0].code != run.outcome.steps[0].code

    ref = jobs.reference_run(seed=3, **RUN)
    assert set(ref.design_travel_time_s) == set(jobs.REFERENCES)
    # the expert RL reference is the warm start's agent: same travel time on the design seed
    assert ref.design_travel_time_s["expert RL (RL-local)"] == pytest.approx(h.loc[0, "travel_time_s"])
    frame = tables.eval_frame({"a": [run], "b": [blind]}, [ref])
    assert len(frame) == 4 + 3 * 2 and set(frame["method"]) == {"a", "b", *jobs.REFERENCES}
    summary = tables.loop_summary({"a": [run]})
    assert summary.at["a", "candidates"] == 3
    assert summary.at["a", "final design travel time (s)"] == round(run.outcome.final.travel_time, 1)
    assert tables.cost_table({"a": [run]}).empty


def test_llm_run_reports_its_token_cost(monkeypatch):
    monkeypatch.setattr(jobs, "from_config", lambda cfg: LLM(FixedBackend()))
    run = jobs.design_run(designer="llm", llm={"backend": "fake", "model": "fixed-model"}, variant="paradigm", seed=0, **RUN)
    # warm start from the expert reward, then 2 iterations of analyzer + modifier: 4 requests
    assert run.usage["calls"] == 4 and run.usage["total_tokens"] == 4 * 14 and run.designer == "fixed-model"
    assert [s.role for s in run.outcome.steps] == ["initial", "modify", "modify"]
    one_shot = jobs.design_run(designer="llm", llm={"backend": "fake", "model": "fixed-model"}, variant="one_shot", seed=0, **RUN)
    cost = tables.cost_table({"paradigm": [run], "one-shot": [one_shot]})
    assert cost[list(tables.USAGE)].to_dict("index") == {
        "paradigm": {"calls": 4, "prompt_tokens": 40, "completion_tokens": 16, "total_tokens": 56},
        "one-shot": {"calls": 1, "prompt_tokens": 10, "completion_tokens": 4, "total_tokens": 14}}
    assert (cost["LLM time (s)"] >= 0).all()
    measured = tables.loop_measurements({"paradigm": [run]})
    # per role and iteration: the warm start is given (no request, no code answer); 2 × analyzer + modifier
    assert measured.loc[("paradigm", "analyzer"), "requests"].tolist() == [1, 1]
    assert measured.loc[("paradigm", "modifier"), ["requests", "prompt_tokens", "completion_tokens", "code answers"]].values.tolist() \
        == [[1, 10, 4, 1], [1, 10, 4, 1]]
    by_role = tables.valid_share_by_role(measured)
    assert by_role.loc[("paradigm", "modifier"), "code answers"] == 2 and ("paradigm", "initializer") not in by_role.index
    assert by_role["requests"].sum() == run.usage["calls"]
    measured.loc[("paradigm", "modifier"), "LLM time (s)"] = [0.1, 0.2]  # 0.1 + 0.2 is 0.30000000000000004 in floats
    assert tables.valid_share_by_role(measured).loc[("paradigm", "modifier"), "LLM time (s)"] == 0.3


def test_loop_notebooks_share_the_bus_budget_and_caption_it():
    from llmtraffic.bus.training import budget, describe

    dqn = budget("quick")
    assert DQNConfig(**dqn).obs_scale == (1000.0,) * 4 + (10.0, 10.0) and dqn["target_network"]
    assert describe(dqn) == "3×128 MLP, 30 episodes × 100 updates, validated every episode from episode 15"
    assert describe(budget("paper")) == "5×400 MLP, 70 episodes × 200 updates, validated every episode from episode 38"  # §5.1
    assert describe({"hidden": [64, 32], "episodes": 2}) == "64-32 MLP, 2 episodes × 200 updates, validated every episode"


def _run_with(history: list[tuple[int, bool, float]]) -> jobs.DesignRun:
    steps = [Step(i, "modify", f"code{n}", True, accepted=acc, trial=Trial({"travel_time_s": tt}))
             for n, (i, acc, tt) in enumerate(history)]
    return jobs.DesignRun("d", "paradigm", 0, Outcome(steps, "code", steps[0].trial))


def test_best_and_kept_per_iteration_through_rejected_iterations():
    run = _run_with([(0, True, 900.0), (1, False, 950.0), (2, True, 880.0), (3, True, 890.0), (4, False, 700.0)])
    assert tables.best_so_far(run) == [900.0, 900.0, 880.0, 880.0, 880.0]
    assert tables.kept_per_iteration(run) == [900.0, 900.0, 880.0, 890.0, 890.0]
    assert tables.accepted_iterations(run) == 2


def test_a_row_that_kept_its_warm_start_is_no_result_of_the_designer():
    def run(seed: int, second_accepted: bool) -> jobs.DesignRun:
        steps = [Step(0, "initial", "warm", True, accepted=True, written=False, trial=Trial({"travel_time_s": 900.0})),
                 Step(1, "modify", "llm", True, accepted=second_accepted, trial=Trial({"travel_time_s": 990.0})),
                 Step(2, "modify", "bad", False, reason="syntax error at line 1")]
        final = steps[1] if second_accepted else steps[0]
        return jobs.DesignRun("m", "paradigm", seed, Outcome(steps, final.code, final.trial), final_code=final.code)

    why = tables.kept_start([run(0, False), run(1, False)])
    assert why.startswith("every loop (2 of 2) kept its given start") and "2 valid candidate(s)" in why
    assert tables.kept_start([run(0, False), run(1, True)]) == ""  # one loop's reward is the designer's
    assert tables.kept_start([]) == ""
    assert tables.claim_reasons({"m": [run(0, False)], "n": [run(1, True)]}) == {"m": tables.kept_start([run(0, False)])}


def test_ci_and_paired_tables_on_constructed_rows():
    # ours is 10 s below the reference on every (agent seed, episode): a paired CI of zero width
    rows = [{"method": m, "agent_seed": a, "seed": s, "travel_time_s": base + s - (10.0 if m == "ours" else 0.0),
             "wait_time_s": 50.0 + s, "headway_sd_s": 100.0, "hold_time_s": 0.0}
            for m in ("ours", "ref") for a in (0, 1) for s in (0, 10) for base in (200.0,)]
    frame = pd.DataFrame(rows)
    ci = tables.ci_table(frame, ["ours", "ref"])
    # each agent's mean over its two episodes is its run: 205 for both agents, so no spread
    assert ci.at["ref", "n"] == "2 agents (× 2 episodes each)" and ci.at["ref", MEASURES["travel_time_s"]] == "205.0 (n = 2 agents, all equal)"
    d = tables.paired(frame, "ours", "ref")
    assert d.mean == pytest.approx(-100 * 10 / 205) and d.low == pytest.approx(d.high)
    table = tables.paired_table(frame, ["ref", "ours"], "ref")
    assert list(table.index) == ["ours"] and table.at["ours", "verdict (travel time)"] == "inconclusive (deterministic, n = 1)"  # no spread
    frame.loc[frame["method"] == "ours", "hold_time_s"] = [0.0, 0.0, 5.0, 0.0]
    assert tables.never_hold(frame, ["ours", "ref", "absent"]) == ["ref"]
    assert ci["same runs as"].to_dict() == {"ours": NEVER_HOLDS, "ref": NEVER_HOLDS}  # no holding at all in the rows
    ci = tables.ci_table(frame, ["ours", "ref"])
    assert ci["same runs as"].to_dict() == {"ours": "", "ref": NEVER_HOLDS}  # one hold of 5 s: it acts


def test_the_no_holding_row_itself_is_not_flagged_as_never_holding():
    rows = [{"method": m, "agent_seed": a, "seed": s, "travel_time_s": 100.0 + s, "wait_time_s": 50.0,
             "headway_sd_s": 90.0, "hold_time_s": 0.0} for m, a in (("no holding", float("nan")), ("loop", 0)) for s in (3, 4)]
    ci = tables.ci_table(pd.DataFrame(rows), ["loop", "no holding"])
    assert ci["same runs as"].to_dict() == {"loop": NEVER_HOLDS, "no holding": ""}


def test_a_row_with_the_same_runs_as_an_earlier_one_says_so():
    rows = [{"method": m, "agent_seed": a, "seed": s, "travel_time_s": 100.0 + a + s, "wait_time_s": 50.0,
             "headway_sd_s": 90.0, "hold_time_s": 1.0} for m in ("expert", "loop", "other") for a in (0, 1) for s in (3, 4)]
    frame = pd.DataFrame(rows[::-1])  # order of rows does not matter, (agent seed, episode) does
    frame.loc[(frame["method"] == "other") & (frame["seed"] == 4) & (frame["agent_seed"] == 1), "wait_time_s"] = 50.5
    ci = tables.ci_table(frame, ["expert", "loop", "other"])
    assert ci["same runs as"].to_dict() == {"expert": "", "loop": "expert", "other": ""}  # one episode apart: not the same


def test_llm_direct_rows_count_decisions_failures_and_cost(monkeypatch):
    from llmtraffic.bus.evaluation import evaluate

    class Answer(FixedBackend):
        def __init__(self, text):
            self.text = text

        def generate(self, messages, n, temperature, max_tokens, seed):
            return Completion([self.text] * n, prompt_tokens=10, completion_tokens=4 * n)

    monkeypatch.setattr(jobs, "from_config", lambda cfg: LLM(Answer("Holding decision: 1\nHolding duration: 30")))
    run = jobs.direct_run(llm={"backend": "fake", "model": "m"}, eval_seeds=[4], horizon_s=1800.0)
    [row] = run.rows
    assert row["method"] == run.label == "LLM-direct · m" and row["seed"] == 4 and row["failures"] == 0
    assert row["decisions"] > 0 and row["hold_time_s"] == pytest.approx(30.0)
    assert run.usage["calls"] == row["decisions"] and run.usage["total_tokens"] == 14 * row["decisions"]
    monkeypatch.setattr(jobs, "from_config", lambda cfg: LLM(Answer("I would rather not say.")))
    [garbled] = jobs.direct_run(llm={"backend": "fake", "model": "m"}, eval_seeds=[4], horizon_s=1800.0).rows
    assert garbled["failures"] == garbled["decisions"] > 0
    assert garbled["travel_time_s"] == evaluate(scenarios.case1(), None, 4, 1800.0)["travel_time_s"]
    assert jobs.direct_run(llm=None, eval_seeds=[4]).unavailable == jobs.NEEDS_LLM


def test_llm_seeds_choose_the_llm_loops_and_must_be_among_the_agent_seeds(monkeypatch):
    grids = []
    monkeypatch.setattr(jobs.study, "run_grid", lambda fn, tasks, **kw: grids.append((fn, list(tasks))) or [])
    jobs.variant_grid(["paradigm", "cold"], [0, 1, 2], {"backend": "local"}, RUN, llm_seeds=[2])
    search, llm, refs = grids
    assert [(t["variant"], t["seed"]) for t in search[1]] == [("paradigm", 0), ("paradigm", 1), ("paradigm", 2),
                                                             ("cold", 0), ("cold", 1), ("cold", 2)]
    assert [(t["designer"], t["variant"], t["seed"]) for t in llm[1]] == [("llm", "cold", 2), ("llm", "paradigm", 2)]
    assert [t["seed"] for t in refs[1]] == [0, 1, 2]
    for bad in ([3], []):
        with pytest.raises(ValueError, match="llm_seeds .* must be a non-empty subset of agent_seeds"):
            jobs.variant_grid(["paradigm"], [0, 1, 2], None, RUN, llm_seeds=bad)
    # a notebook's own LLM rows run first, the rows it shares with Table 1 last; the rows come back in variant order
    grids.clear()
    monkeypatch.setattr(jobs.study, "run_grid", lambda fn, tasks, **kw: grids.append(list(tasks)) or
                        [(t.get("designer"), t.get("variant")) for t in tasks])
    found, _ = jobs.variant_grid(["paradigm", "no_refiner"], [0], {"backend": "local"}, RUN)
    assert [t["variant"] for t in grids[1]] == ["no_refiner", "paradigm"]
    assert found == [("search", "paradigm"), ("search", "no_refiner"), ("llm", "paradigm"), ("llm", "no_refiner")]
    # the shared rows last seed first (Table 1 builds them first seed first), through the notebook's executor
    grids.clear()
    monkeypatch.setattr(jobs.study, "run_grid", lambda fn, tasks, **kw: grids.append((list(tasks), kw)) or
                        [(t.get("designer"), t.get("variant"), t.get("seed")) for t in tasks])
    found, _ = jobs.variant_grid(["paradigm", "no_refiner"], [0, 1], {"backend": "local"}, RUN, "processes", 2)
    tasks, kw = grids[1]
    assert [(t["variant"], t["seed"]) for t in tasks] == [("no_refiner", 0), ("no_refiner", 1), ("paradigm", 1), ("paradigm", 0)]
    assert (kw["executor"], kw["jobs"]) == ("processes", 2)
    assert found[4:] == [("llm", "paradigm", 0), ("llm", "paradigm", 1), ("llm", "no_refiner", 0), ("llm", "no_refiner", 1)]
    # per variant: the paradigm and its ablation without refiner at 3 design runs, the others at the first seed
    assert jobs.llm_seeds_of(["paradigm", "cold", "no_refiner"], [0, 1, 2], {"paradigm": [0, 1, 2], "no_refiner": [0, 1, 2]}) \
        == {"paradigm": [0, 1, 2], "cold": [0], "no_refiner": [0, 1, 2]}
    with pytest.raises(ValueError, match="names variant\\(s\\) \\['eureka'\\] that do not run here"):
        jobs.llm_seeds_of(["paradigm"], [0, 1, 2], {"eureka": [0]})


def test_llm_iterations_per_variant_reach_the_loops_and_the_caption(monkeypatch):
    assert jobs.llm_iterations_of(["paradigm", "eureka"], 4, None) == {"paradigm": 4, "eureka": 4}
    assert jobs.llm_iterations_of(["paradigm", "eureka"], 4, 1) == {"paradigm": 1, "eureka": 1}
    assert jobs.llm_iterations_of(["paradigm", "eureka"], 4, {"eureka": 2}) == {"paradigm": 4, "eureka": 2}
    with pytest.raises(ValueError, match="names variant\\(s\\) \\['critic'\\] that do not run here"):
        jobs.llm_iterations_of(["paradigm"], 4, {"critic": 2})
    with pytest.raises(ValueError, match="whole numbers >= 1; got \\{'eureka': 0\\}"):
        jobs.llm_iterations_of(["paradigm", "eureka"], 4, {"eureka": 0})
    grids = []
    monkeypatch.setattr(jobs.study, "run_grid", lambda fn, tasks, **kw: grids.append(list(tasks)) or [None] * len(tasks))
    jobs.variant_grid(["paradigm", "eureka"], [0], {"backend": "local"}, RUN, llm_iterations={"eureka": 1})
    assert [t["iterations"] for t in grids[0]] == [RUN["iterations"]] * 2  # the search designer keeps the notebook's
    assert {t["variant"]: t["iterations"] for t in grids[1]} == {"eureka": 1, "paradigm": RUN["iterations"]}
    note = jobs.iterations_note
    assert note(["paradigm", "eureka", "critic"], 4, {"eureka": 2, "critic": 2}, {"backend": "local"}) == \
        "4 iterations (2 for the LLM rows Eureka-style, critic)"
    assert note(["paradigm", "eureka"], 4, 1, {"backend": "local"}) == "4 iterations (1 for the LLM rows)"
    assert note(["paradigm", "eureka"], 4, {"eureka": 2}, None) == "4 iterations"
    assert note(["paradigm"], 4, {"paradigm": 4}, {"backend": "local"}) == "4 iterations"


def _designed(label: str, seed: int, code: str | None) -> jobs.DesignRun:
    failure = "" if code else "no valid reward in 2 tries"
    return jobs.DesignRun(label, "paradigm", seed, Outcome([], code, None, failure), final_code=code or "")


def test_each_agent_seed_trains_its_own_design_or_a_fewer_designs_row_in_turn():
    search = [_designed("search", s, f"s{s}") for s in (0, 1, 2)]
    search[1] = _designed("search", 1, None)  # no reward: that agent seed stays untrained
    runs = {"one": [_designed("llm", 0, "a")], "two": [_designed("llm", 0, "a"), _designed("llm", 2, "b")],
            "own": search, "none": [_designed("llm", 0, None)]}
    rewards = jobs.trained_rewards(runs, [0, 1, 2, 3])
    assert {k: v for k, v in rewards.items() if k[0] == "one"} == {("one", a): "a" for a in range(4)}
    # own runs first (seeds 0 and 2), the rest in turn
    assert [rewards[("two", a)] for a in range(4)] == ["a", "b", "b", "b"]
    assert jobs.trained_rewards({"own": search}, [0, 1, 2]) == {("own", 0): "s0", ("own", 2): "s2"}
    assert not any(k[0] == "none" for k in rewards)
    shared = jobs.shared_designs(runs, [0, 1, 2, 3])
    assert shared == {"one": "4 agents trained on the final reward of 1 design run (seed 0)",
                      "two": "4 agents trained on the final reward of 2 design runs (seeds 0, 2)",
                      "own": "4 agents trained on the final reward of 2 design runs (seeds 0, 2)"}
    assert jobs.shared_designs({"own": search}, [0, 1, 2]) == {}


def test_llm_direct_on_a_multi_line_case_runs_its_own_episodes_beside_the_fixed_controllers(monkeypatch):
    from llmtraffic.bus import jobs as bus_jobs
    from llmtraffic.bus import tables as bus_tables

    monkeypatch.setattr(jobs, "from_config", lambda cfg: LLM(FixedBackend()))  # answers reward code: never a hold
    fixed = bus_jobs.fixed_controllers(0.0)
    run, rows, note = bus_jobs.llm_direct("case2", {}, {"backend": "fake", "model": "m"}, fixed, [3], 900.0, [0, 1], 14400.0)
    assert note == "1 episode(s) of 0.25 h" and run.label == "LLM-direct · m (1 episode(s) of 0.25 h)"
    assert sorted(rows["method"].unique()) == sorted([run.label, *fixed]) and set(rows["seed"]) == {3}
    mine = rows[rows["method"] == run.label]
    assert list(mine["line"]) == ["line 1", "line 52", "overall"]
    assert mine["decisions"].isna().tolist() == [True, True, False]  # the episode's counts sit on its overall row
    cost = jobs.direct_cost(run)
    assert cost["episodes"] == 1 and cost["decisions"] == cost["unreadable answers"] == run.usage["calls"] > 0
    # an LLM that never names a hold releases every bus: the same episode as no holding
    same = rows.set_index(["method", "line"])["travel_time_s"]
    assert same[(run.label, "overall")] == same[("no holding", "overall")]
    assert set(bus_tables.measured(rows)) <= set(bus_tables.COLUMNS) and "travel_time_s" in bus_tables.measured(rows)
    # on the table's own episodes: no note, no references (the table has them)
    run, rows, note = bus_jobs.llm_direct("case2", {}, {"backend": "fake", "model": "m"}, fixed, [0], 900.0, [0], 900.0)
    assert note == "" and set(rows["method"]) == {run.label} == {"LLM-direct · m"}
    run, rows, note = bus_jobs.llm_direct("case2", {}, None, fixed, [0], 900.0, [0, 1], 14400.0)
    assert run.unavailable == jobs.NEEDS_LLM and rows.empty


def test_measured_columns_leave_out_a_measure_some_row_lacks():
    from llmtraffic.bus import tables as bus_tables

    rows = pd.DataFrame({"travel_time_s": [1.0, 2.0], "headway_sd_s": [3.0, float("nan")], "incomplete_share": [0.0, 1.0]})
    assert list(bus_tables.measured(rows)) == ["travel_time_s", "incomplete_share"]
