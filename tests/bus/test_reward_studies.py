"""Notebook glue of the reward-design studies: variants, designers from parameters, cached runs."""

import dataclasses
from pathlib import Path

import pandas as pd
import pytest

from llmtraffic.bus import scenarios
from llmtraffic.bus.evaluation import MEASURES
from llmtraffic.bus.reward_design import studies
from llmtraffic.bus.reward_design.designer import LLMDesigner
from llmtraffic.bus.reward_design.loop import LoopConfig, Outcome, Step, Trial
from llmtraffic.bus.reward_design.rules import LABEL, RulesDesigner
from llmtraffic.llm import LLM, Cassette, Completion
from llmtraffic.rl.dqn import DQNConfig
from llmtraffic.study.cache import cache_dir

DQN = dict(hidden=[16], episodes=1, updates_per_episode=5, batch_size=16, learning_starts=16,
           eps_decay_episodes=1, obs_scale=[1000.0] * 4 + [10.0, 10.0])
RUN = dict(dqn=DQN, test_seeds=[0], eval_seeds=[500, 501], iterations=2, slack=0.1, horizon_s=1800.0)

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


def test_each_ablation_changes_one_setting_of_the_paradigm():
    base = LoopConfig(iterations=4)
    paradigm, critic = studies.variant_config("paradigm", base)
    assert paradigm == base and not critic
    assert {v: _changed(base, studies.variant_config(v, base)[0]) for v in studies.ABLATIONS} == {
        "cold": {"start": "cold"}, "no_analyzer": {"analyzer": False},
        "no_refiner": {"refiner": False}, "no_initializer": {"start": "none"}}
    assert studies.variant_config("eureka", base, k=5)[0].candidates == 5
    assert studies.variant_config("critic", base)[1] is True
    with pytest.raises(ValueError, match="unknown variant 'no_llm'"):
        studies.variant_config("no_llm", base)


def test_designers_from_parameters(tmp_path):
    scenario = scenarios.case1()
    rules, model = studies.make_designer("rules", None, scenario)
    assert isinstance(rules, RulesDesigner) and model is None and rules.scheduled_headway_s == 320.0
    with pytest.raises(ValueError, match="designer 'gpt-4o' needs an llm config"):
        studies.make_designer("gpt-4o", None, scenario)
    cassette = tmp_path / "c.jsonl"
    LLM(FixedBackend(), Cassette(cassette), "record").complete(
        [{"role": "user", "content": "hi"}])
    critic, model = studies.make_designer("fixed-model", {"backend": "replay", "cassette": str(cassette)},
                                          scenario, critic=True)
    assert isinstance(critic, LLMDesigner) and critic.critic and critic.name == "fixed-model (critic)"
    assert studies.designer_label("rules") == LABEL and studies.designer_label("gpt-4o") == "gpt-4o"


def test_runnable_skips_llm_designers_without_a_backend():
    run, skipped = studies.runnable([{"name": "rules"}, {"name": "gpt-4o", "llm": None},
                                     {"name": "local", "llm": {"backend": "replay", "cassette": "x"}}])
    assert [e["name"] for e in run] == ["rules", "local"] and skipped == ["gpt-4o"]
    with pytest.raises(ValueError, match="needs 'name'"):
        studies.runnable([{"model": "gpt-4o"}])


def _count(kind: str) -> int:
    folder = cache_dir(kind, {}).parent
    return len(list(folder.iterdir())) if folder.exists() else 0


def _measures(run: studies.DesignRun) -> list[dict]:
    return [{k: row[k] for k in ("seed", *MEASURES)} for row in run.eval_rows]


def test_rules_runs_are_cached_and_candidates_shared_between_variants():
    before = _count("bus_reward_candidate")
    run = studies.design_run(designer="rules", llm=None, variant="paradigm", seed=3, **RUN)
    h = run.outcome.history()
    assert len(h) == 3 and h["valid"].all() and run.usage is None
    assert [r["seed"] for r in run.eval_rows] == [500, 501] and set(MEASURES) <= set(run.eval_rows[0])
    trained = _count("bus_reward_candidate") - before
    assert trained == len({s.code for s in run.outcome.steps})  # one training per distinct reward

    again = studies.design_run(designer="rules", llm=None, variant="paradigm", seed=3, **RUN)
    assert again.wall_s == run.wall_s and _measures(again) == _measures(run)  # from the cache

    # the rule-based designer edits from test metrics whether or not an analyzer speaks, so the
    # ablation without analyzer proposes the same rewards: same results, no candidate retrained
    count = _count("bus_reward_candidate")
    blind = studies.design_run(designer="rules", llm=None, variant="no_analyzer", seed=3, **RUN)
    assert _count("bus_reward_candidate") == count
    assert [s.code for s in blind.outcome.steps] == [s.code for s in run.outcome.steps]
    assert _measures(blind) == _measures(run)

    frame = studies.eval_frame({"a": [run], "b": [blind]})
    assert list(frame.columns[:3]) == ["method", "agent_seed", "seed"] and len(frame) == 4
    summary = studies.loop_summary({"a": [run]})
    assert summary.at["a", "candidates"] == 3
    assert summary.at["a", "best loop travel time (s)"] == round(run.outcome.best.travel_time, 1)
    assert studies.cost_table({"a": [run]}).empty


def test_llm_run_reports_its_token_cost(monkeypatch):
    monkeypatch.setattr(studies, "from_config", lambda cfg: LLM(FixedBackend()))
    run = studies.design_run(designer="fixed-model", llm={"backend": "fake"}, variant="paradigm", seed=0, **RUN)
    # warm start from the expert reward, then 2 iterations of analyzer + modifier: 4 requests
    assert run.usage["calls"] == 4 and run.usage["total_tokens"] == 4 * 14
    assert [s.role for s in run.outcome.steps] == ["initial", "modify", "modify"]
    one_shot = studies.design_run(designer="fixed-model", llm={"backend": "fake"}, variant="one_shot", seed=0, **RUN)
    cost = studies.cost_table({"paradigm": [run], "one-shot": [one_shot]})
    assert cost.to_dict("index") == {
        "paradigm": {"calls": 4, "live_calls": 4, "prompt_tokens": 40, "completion_tokens": 16, "total_tokens": 56},
        "one-shot": {"calls": 1, "live_calls": 1, "prompt_tokens": 10, "completion_tokens": 4, "total_tokens": 14}}


def test_labels_and_dqn_parameters():
    assert studies.row_label("no_refiner", "rules") == f"without refiner · {LABEL}"
    assert studies.row_label("eureka", "gpt-4o") == "Eureka-style · gpt-4o"
    assert studies.row_label("paradigm", None) == "paradigm (ours) · LLM designer"
    dqn = studies.dqn_params([8, 8], 3, 2, 10, True, 10)
    assert DQNConfig(**dqn).obs_scale == (1000.0,) * 4 + (10.0, 10.0) and dqn["target_network"]


def _run_with(history: list[tuple[int, bool, float]]) -> studies.DesignRun:
    steps = [Step(i, "modify", "code", True, accepted=acc, trial=Trial({"travel_time_s": tt})) for i, acc, tt in history]
    return studies.DesignRun("rules", "paradigm", 0, Outcome(steps, "code", steps[0].trial), [], None, 0.0)


def test_best_so_far_keeps_the_best_through_rejected_iterations():
    run = _run_with([(0, True, 900.0), (1, False, 950.0), (2, True, 880.0), (3, True, 890.0), (4, False, 700.0)])
    assert studies.best_so_far(run) == [900.0, 900.0, 880.0, 880.0, 880.0]


def test_versus_best_other_picks_the_lowest_travel_time():
    frame = pd.DataFrame({"method": ["ours", "ours", "a", "a", "b", "b"],
                          "travel_time_s": [90, 100, 100, 120, 110, 90],
                          "wait_time_s": [40, 40, 50, 50, 60, 40]})
    assert studies.versus_best_other(frame, "ours", ["a", "b"]) == {
        "compared with": "b", "travel time (%)": pytest.approx(-5.0), "waiting time (%)": -20.0}


class AnswerBackend(FixedBackend):
    def __init__(self, answer: str):
        self.answer = answer

    def generate(self, messages, n, temperature, max_tokens, seed):
        return Completion([self.answer] * n, prompt_tokens=10, completion_tokens=4 * n)


def test_llm_direct_rows_count_decisions_failures_and_cost(monkeypatch):
    from llmtraffic.bus.evaluation import evaluate

    monkeypatch.setattr(studies, "from_config", lambda cfg: LLM(AnswerBackend("Holding decision: 1\nHolding duration: 30")))
    rows, usage = studies.direct_run(llm={"backend": "fake"}, seeds=[4], horizon_s=1800.0)
    [row] = rows
    assert row["method"] == "LLM-direct control" and row["seed"] == 4 and row["failures"] == 0
    assert row["decisions"] > 0 and row["hold_time_s"] == pytest.approx(30.0)
    assert usage["calls"] == row["decisions"] and usage["total_tokens"] == 14 * row["decisions"]

    # unreadable answers release the bus: the episode is the no-holding one, every answer a failure
    monkeypatch.setattr(studies, "from_config", lambda cfg: LLM(AnswerBackend("I would rather not say.")))
    [garbled], _ = studies.direct_run(llm={"backend": "fake"}, seeds=[4], horizon_s=1800.0)
    assert garbled["failures"] == garbled["decisions"] > 0
    assert garbled["travel_time_s"] == evaluate(scenarios.case1(), None, 4, 1800.0)["travel_time_s"]


def test_loop_source_digest_follows_the_loop_modules(tmp_path, monkeypatch):
    digest = studies.loop_source_digest()
    assert digest == studies.loop_source_digest() and len(digest) == 16
    for name in studies.LOOP_SOURCES:
        (tmp_path / name).write_bytes((Path(studies.__file__).parent / name).read_bytes())
    monkeypatch.setattr(studies, "__file__", str(tmp_path / "studies.py"))
    assert studies.loop_source_digest() == digest
    (tmp_path / "rules.py").write_text((tmp_path / "rules.py").read_text() + "\n# edited\n")
    assert studies.loop_source_digest() != digest


class SeedRecorder(FixedBackend):
    def __init__(self):
        self.seeds = []

    def generate(self, messages, n, temperature, max_tokens, seed):
        self.seeds.append(seed)
        return super().generate(messages, n, temperature, max_tokens, seed)


def test_llm_designer_samples_repeated_prompts_with_new_seeds():
    backend = SeedRecorder()
    designer = LLMDesigner(LLM(backend), studies.Setting.of(scenarios.case1()), seed=7)
    for _ in range(3):  # the k samples of one Eureka-style iteration: the same prompt each time
        designer.initial()
    assert backend.seeds == [7, 8, 9]
    unseeded = SeedRecorder()
    LLMDesigner(LLM(unseeded), studies.Setting.of(scenarios.case1()), seed=None).initial()
    assert unseeded.seeds == [None]
