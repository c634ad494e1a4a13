"""LLM-direct controller: parsing the two fields, failures, and a simulated episode replayed
from a cassette written in the test."""

import json

import numpy as np
import pytest

from llmtraffic import llm
from llmtraffic.bus import scenarios, simulate
from llmtraffic.bus.reward_design import prompts
from llmtraffic.bus.reward_design.direct import LLMDirect, parse_hold

SETTING = prompts.Setting("A loop of 8 stops and 6 buses.", multi_line=False, state_dim=3)


@pytest.mark.parametrize(
    ("text", "hold"),
    [
        ("Holding decision: 1\nHolding duration: 30", 30.0),
        ("Holding decision: 0\nHolding duration: -1", 0.0),
        ("**Holding decision:** 1\n**Holding duration:** 12.5 seconds", 12.5),
        ("holding decision = 1, holding duration = 150", 90.0),
        ("Holding decision: 1\nHolding duration: 20\nCorrection:\nHolding decision: 1\nHolding duration: 45", 45.0),
        ("Holding decision: 1\nHolding duration: -1", None),
        ("Holding decision: 1", None),
        ("Holding decision: 2\nHolding duration: 10", None),
        ("I would hold the bus for a while.", None),
        ("", None),
    ],
)
def test_parse_hold(text, hold):
    assert parse_hold(text) == hold


def write_cassette(path, answers_by_state):
    """A cassette as a recording of model 'gpt-test' on an OpenAI-compatible API would leave it."""
    system = prompts.direct_controller(SETTING)
    with open(path, "w") as file:
        for state, answer in answers_by_state:
            messages = [{"role": "system", "content": system}, {"role": "user", "content": prompts.direct_query(state)}]
            params = {"n": 1, "temperature": 0.0, "max_tokens": 32, "seed": None}
            key = llm.request_key("openai", "gpt-test", messages, params)
            entry = {"key": key, "occurrence": 0, "backend": "openai", "model": "gpt-test", "messages": messages,
                     "params": params, "texts": [answer], "prompt_tokens": 400, "completion_tokens": 12, "latency_s": 0.8}
            file.write(json.dumps(entry) + "\n")


def test_controller_answers_from_a_replayed_cassette_and_counts_failures(tmp_path):
    path = tmp_path / "direct.jsonl"
    write_cassette(path, [
        ([500.0, 2000.0, 10.0], "Holding decision: 0\nHolding duration: -1"),
        ([2000.0, 500.0, 10.0], "Holding decision: 1\nHolding duration: 40"),
        ([1332.0, 1332.0, 0.0], "I think the bus should wait."),
    ])
    controller = LLMDirect(llm.from_config({"backend": "replay", "cassette": str(path)}), SETTING)
    holds = [controller.act(np.array(s), {}) for s in ([500, 2000, 10], [2000, 500, 10], [1332, 1332, 0])]
    assert holds == [0.0, 40.0, 0.0]
    assert (controller.decisions, controller.failures) == (3, 1)
    assert controller.llm.usage().total_tokens == 3 * 412
    with pytest.raises(llm.CassetteMiss, match="prompt starts with 'You are a bus holding controller."):
        controller.act(np.array([1.0, 2.0, 3.0]), {})


class RuleModel:
    """Stand-in for a hosted LLM (none can run in tests): a fixed rule written as text answers,
    one unreadable answer in five. It goes through the real LLM front end and cassette."""

    name, model = "openai", "rule-model"

    def __init__(self):
        self.calls = 0

    def generate(self, messages, n, temperature, max_tokens, seed):
        self.calls += 1
        forward, backward, _ = json.loads(messages[1]["content"].removeprefix("State: "))
        if self.calls % 5 == 0:
            text = "Let me think about the headways first."
        elif forward < backward:
            text = "Holding decision: 0\nHolding duration: -1"
        else:
            text = f"Holding decision: 1\nHolding duration: {min(90, (forward - backward) / 20):.0f}"
        return llm.Completion([text], 300, 10)


def test_an_episode_recorded_then_replayed_gives_the_same_result(tmp_path):
    scenario = scenarios.case1(state_dim=3)  # the state of the A.5 prompt
    setting = prompts.Setting.of(scenario)
    cassette = llm.Cassette(tmp_path / "episode.jsonl")
    live = LLMDirect(llm.LLM(RuleModel(), cassette, "record"), setting)
    recorded = simulate(scenario, live, seed=3, horizon_s=3600)
    assert live.decisions > 20
    assert live.failures == live.decisions // 5
    replay = LLMDirect(llm.from_config({"backend": "replay", "cassette": str(tmp_path / "episode.jsonl")}), setting)
    replayed = simulate(scenario, replay, seed=3, horizon_s=3600)
    assert (replay.decisions, replay.failures) == (live.decisions, live.failures)
    for key in ("travel_time_s", "wait_time_s", "headway_sd_s", "hold_time_s"):
        assert replayed.metrics[key] == recorded.metrics[key]
    assert recorded.metrics["hold_time_s"] > 0
