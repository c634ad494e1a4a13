"""Design runs of the LLM loop at the authors' length, on loopback chat servers (real HTTP): the
scripted server of ``conftest.py`` and the test double of ``llm_double.py``.

A loop configured for 4 iterations runs 4, K tries send each error back, design runs differ in
their requests' seeds, the claim's n counts design runs, and a design run whose designer wrote
nothing valid keeps its start and is counted with that start's result."""

from pathlib import Path

import pandas as pd
import pytest
import yaml

from llm_double import REWARD, LoopbackLLM

from llmtraffic.bus import scenarios
from llmtraffic.bus import tables as bus_tables
from llmtraffic.bus.reward_design import jobs, tables
from llmtraffic.bus.reward_design.candidates import expert_code
from llmtraffic.bus.reward_design.designer import LLMDesigner
from llmtraffic.bus.reward_design.loop import TRIVIAL_REWARD, Trial
from llmtraffic.bus.reward_design.prompts import Setting
from llmtraffic.llm import from_config

ROOT = Path(__file__).resolve().parents[2]
DQN = dict(hidden=[16], episodes=1, updates_per_episode=5, batch_size=16, learning_starts=16,
           eps_decay_episodes=1, obs_scale=[1000.0] * 4 + [10.0, 10.0])
RUN = dict(dqn=DQN, design_seeds=[0], eval_seeds=[500], slack=0.1, horizon_s=1800.0)
VALID = REWARD.format(balance=1.0, hold=0.02, onboard=2, extra="")
TRIAL = Trial({"travel_time_s": 900.0, "wait_time_s": 300.0, "headway_sd_s": 200.0, "hold_time_s": 5.0})


def _llm(url: str, **extra) -> dict:
    return {"backend": "openai", "base_url": url, "model": "scripted", "backoff_s": 0.01, "max_retries": 0,
            "cache": {"mode": "off"}, **extra}


def _user(request: dict) -> str:
    return request["body"]["messages"][-1]["content"]


def _quick(notebook: str) -> dict:
    return yaml.safe_load((ROOT / "params" / notebook / "quick.yaml").read_text())


def test_the_quick_case1_loop_rows_run_the_authors_length():
    """Case 1's loop rows at quick: 4 iterations as the authors' run_all.py, K >= 3, 5 warm-start design
    runs and at least 3 cold-start ones."""
    quick = _quick("bus_case1")
    assert quick["design_iterations"] == 4 and quick["tries"] >= 3
    seeds = jobs.llm_seeds_of(["paradigm", "cold"], quick["agent_seeds"], quick.get("llm_seeds"))
    assert seeds["paradigm"] == [0, 1, 2, 3, 4] and len(seeds["cold"]) >= 3


def test_tables_3_and_4_share_table_1s_design_runs_at_quick():
    """Same loop protocol, seeds, LLM, answer caps and decoding: the paradigm's (and the cold start's) design runs of
    Tables 3 and 4 are Table 1's cached runs, and their final agents the same validated agents."""
    case1 = _quick("bus_case1")
    mine = {"iterations": case1["design_iterations"], "tries": case1["tries"], "llm": case1["llm"],
            "llm_max_tokens": case1["llm_max_tokens"], "decoding": case1["decoding"], "eval_seeds": case1["eval_seeds"],
            "dqn_budget": case1["dqn_budget"]}
    for notebook, table in (("bus_llm_methods", 3), ("bus_ablation", 4)):
        quick = _quick(notebook)
        assert {k: quick[k] for k in mine} == mine, notebook
        assert (quick["design_seeds"], quick["val_seeds"], quick["horizon_h"], quick["train_horizon_h"]) == \
            ([100, 101, 102], [200, 201, 202], 4.0, 4.0)  # bus_case1's notebook defaults and design seeds
        seeds = quick["llm_seeds"]
        assert seeds["paradigm"] == case1["llm_seeds"]["paradigm"]
        rounds = jobs.llm_iterations_of(list(seeds), quick["iterations"], quick.get("llm_iterations"))
        assert {rounds[v] for v in jobs.SHARED if v in seeds} == {case1["design_iterations"]}, notebook  # fewer only off them
        if table == 4:
            assert seeds["cold"] == case1["llm_seeds"]["cold"] and len(seeds["no_refiner"]) >= 3


def test_a_loop_configured_for_4_iterations_runs_4_with_the_double(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMTRAFFIC_RUNS", str(tmp_path))
    with LoopbackLLM() as double:
        run = jobs.design_run(designer="llm", llm=_llm(double.url, max_retries=2),  # the double's first answer is a 429
                              variant="paradigm", seed=0, iterations=4, tries=3, **RUN)
    h = run.outcome.history()
    assert sorted({c["iteration"] for c in run.outcome.calls}) == [1, 2, 3, 4]  # every iteration asked the designer
    assert int(h["iteration"].max()) == 4 and run.counted and run.eval_rows
    assert {c["role"] for c in run.outcome.calls} >= {"analyzer", "modifier"}


def test_design_runs_in_parallel_workers_record_one_cassette_that_replays_them_serially(tmp_path, monkeypatch):
    """Two LLM loops in two worker processes ask at once and share the cassette; replayed one after
    the other with no server, they end with the same rewards."""
    from llmtraffic import study

    monkeypatch.setenv("LLMTRAFFIC_RUNS", str(tmp_path / "recorded"))
    record = {"path": "llm/shared.jsonl", "mode": "record"}
    with LoopbackLLM() as double:
        tasks = [dict(designer="llm", llm=_llm(double.url, max_retries=2, cache=record), variant="paradigm", seed=s,
                      iterations=2, tries=2, **RUN) for s in (0, 1)]
        parallel = study.run_grid(jobs.design_run, tasks, executor="processes", jobs=2)
    cassette = tmp_path / "recorded" / "llm" / "shared.jsonl"
    asked = sum(run.usage["calls"] for run in parallel)
    assert len(cassette.read_text().splitlines()) == asked >= 6  # every request of both runs, none lost
    replay_dir = tmp_path / "replayed" / "llm"
    replay_dir.mkdir(parents=True)
    (replay_dir / "shared.jsonl").write_text(cassette.read_text())
    monkeypatch.setenv("LLMTRAFFIC_RUNS", str(tmp_path / "replayed"))
    dead = _llm("http://127.0.0.1:9/v1", cache={"path": "llm/shared.jsonl", "mode": "replay"})
    serial = [jobs.design_run(**{**task, "llm": dead}) for task in tasks]
    assert [r.final_code for r in serial] == [r.final_code for r in parallel]
    assert repr([r.eval_rows for r in serial]) == repr([r.eval_rows for r in parallel])  # nan-safe


def test_k_tries_send_each_error_back_to_the_model(chat_server):
    """K = 3: a candidate's first two answers are rejected, each reason goes back, the third is valid."""
    answers = ["A reward should balance the headways.", "```python\nimport os\ndef reward(current_state, action, next_state):\n"
               "    return 0.0\n```", VALID]
    chat_server.script = [(200, chat_server.completion(a), 0.0) for a in ["the analysis", *answers]]
    from llmtraffic.bus.reward_design.candidates import DesignSetup, design_reward
    from llmtraffic.bus.reward_design.loop import LoopConfig
    from llmtraffic.rl.dqn import DQNConfig

    setup = DesignSetup(scenarios.case1(), DQNConfig(**DQN), design_seeds=[0], test_horizon_s=1800.0, train_horizon_s=1800.0)
    designer = LLMDesigner(from_config(_llm(chat_server.url)), Setting.of(setup.scenario), seed=0)
    outcome, final = design_reward(setup, designer, LoopConfig(iterations=1, tries=3), progress=False)
    asked = chat_server.requests
    assert len(asked) == 4  # analyzer, modifier, 2 repairs
    steps = outcome.steps[1:]
    assert [(s.role, s.attempt, s.ok) for s in steps] == [("modify", 1, False), ("repair", 2, False), ("repair", 3, True)]
    for step, request in zip(steps[:2], asked[2:]):  # each rejected answer and its reason go back
        assert "## Why it was rejected\n" + step.reason.strip() in _user(request)
        assert step.code.strip() in _user(request)
    assert "no function reward" in steps[0].reason or "no code" in steps[0].reason.lower() or steps[0].code == ""
    assert "not allowed" in steps[1].reason
    assert final is not None and final.code == steps[-1].code and "def reward" in final.code


def test_five_design_runs_ask_with_disjoint_seeds(chat_server):
    chat_server.script = [(200, chat_server.completion(VALID), 0.0)]
    setting = Setting.of(scenarios.case1())
    seeds = {}
    for run in range(5):
        before = len(chat_server.requests)
        designer = LLMDesigner(from_config(_llm(chat_server.url)), setting, seed=run)
        designer.initial()
        text = designer.analyze(VALID, TRIAL)
        designer.modify(VALID, TRIAL, text)
        designer.repair(VALID, "syntax error")
        seeds[run] = [r["body"]["seed"] for r in chat_server.requests[before:]]
    assert all(len(set(s)) == 4 for s in seeds.values())  # one seed per request
    every = [seed for s in seeds.values() for seed in s]
    assert len(set(every)) == len(every)  # no request of one run shares a seed with another run's


def test_answer_caps_per_role_reach_the_server(chat_server):
    from llmtraffic.bus.reward_design.designer import role_caps

    chat_server.script = [(200, chat_server.completion(VALID), 0.0)]
    caps = {"initializer": 600, "analyzer": 200, "modifier": 610, "refiner": 620, "repair": 630}
    designer = LLMDesigner(from_config(_llm(chat_server.url)), Setting.of(scenarios.case1()), max_tokens=caps)
    designer.initial(), designer.analyze(VALID, TRIAL), designer.modify(VALID, TRIAL, "x")
    designer.refine(VALID, TRIAL, VALID, TRIAL), designer.repair(VALID, "why")
    assert [r["body"]["max_tokens"] for r in chat_server.requests] == [600, 200, 610, 620, 630]
    assert role_caps(700) == dict.fromkeys(caps, 700)
    with pytest.raises(ValueError, match="missing \\['repair'\\]"):
        role_caps({k: v for k, v in caps.items() if k != "repair"})


def _rows(method: str, runs: dict[int, float], agents_per_run: int = 1) -> list[dict]:
    """Eval rows of ``method``: per design run (seed → its travel time), ``agents_per_run`` agents."""
    return [{"method": method, "agent_seed": 10 * d + a, "seed": s, "travel_time_s": tt + a + s,
             "wait_time_s": 100.0, "headway_sd_s": 50.0, "hold_time_s": 1.0}
            for d, tt in runs.items() for a in range(agents_per_run) for s in (0, 1)]


def test_the_claims_n_is_the_number_of_design_runs():
    """5 design runs of 2 agents each: the agents are averaged inside their run, n = 5 design runs."""
    ours = _rows("loop", {d: 880.0 + 3 * d for d in range(5)}, agents_per_run=2)
    reference = [{**r, "method": "RL-local", "agent_seed": d, "travel_time_s": 900.0 + r["seed"]}
                 for d in range(5) for r in _rows("x", {d: 0.0})]
    frame = pd.DataFrame(ours + reference)
    design_of = {("loop", 10 * d + a): d for d in range(5) for a in range(2)}
    by_run = tables.per_design_run(frame, design_of)
    mine = by_run[by_run["method"] == "loop"]
    assert sorted(mine["agent_seed"].unique()) == [0, 1, 2, 3, 4] and len(mine) == 5 * 2
    # the two agents of run d test 880 + 3d + a + s (a = 0, 1): their mean is 880.5 + 3d + s
    assert mine.set_index(["agent_seed", "seed"]).loc[(2, 1), "travel_time_s"] == pytest.approx(880.5 + 6 + 1)
    est = bus_tables.paired(by_run, "loop", "RL-local", "travel_time_s", noun="design run")
    assert est.n == 5 and est.of.startswith("5 design runs")
    assert est.mean == pytest.approx(880.5 + 6 - 900.0)  # paired by design run with RL-local's agent of that seed
    assert len(tables.per_design_run(frame, {})) == len(frame)  # nothing to average: the frame as it is


def test_a_design_run_that_finds_nothing_keeps_its_start_and_is_counted(chat_server, tmp_path, monkeypatch):
    monkeypatch.setenv("LLMTRAFFIC_RUNS", str(tmp_path))
    chat_server.script = [(200, chat_server.completion("I cannot write code today."), 0.0)]
    warm = jobs.design_run(designer="llm", llm=_llm(chat_server.url), variant="paradigm", seed=1, iterations=1, tries=2,
                           **RUN)
    assert warm.failure.startswith("no valid reward in 2 tries") and not warm.has_reward
    assert warm.counted and warm.kept == jobs.KEPT["warm"] and warm.final_code == expert_code(3)
    assert [r["seed"] for r in warm.eval_rows] == [500]
    cold = jobs.design_run(designer="llm", llm=_llm(chat_server.url), variant="cold", seed=1, iterations=1, tries=2, **RUN)
    assert cold.counted and cold.kept == jobs.KEPT["cold"] and cold.final_code == TRIVIAL_REWARD and cold.eval_rows
    runs = {"warm": [warm], "cold": [cold]}
    assert tables.reasons(runs) == {}  # both runs have their start's result
    assert set(tables.eval_frame(runs)["method"]) == {"warm", "cold"}
    assert jobs.design_of(runs, [1]) == {("warm", 1): 1, ("cold", 1): 1}
    assert tables.kept_notes(runs)["cold"].startswith("1 of 1 design runs found no valid reward and kept the trivial start")
    summary = tables.loop_summary(runs)
    assert summary.at["warm", "loops without a valid reward (kept their start)"] == "1 of 1"
    # a row whose every run kept the given warm start equals RL-local by construction: no claim on it
    assert tables.claim_reasons(runs).keys() == {"warm"}
