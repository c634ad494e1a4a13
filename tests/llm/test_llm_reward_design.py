"""The reward-design loop with an LLM designer: recorded from an OpenAI-compatible server on
loopback (a scripted stand-in for a hosted LLM, which cannot exist here), then replayed offline."""

import pytest

from llmtraffic.bus import scenarios
from llmtraffic.bus.reward_design import prompts
from llmtraffic.bus.reward_design.designer import LLMDesigner
from llmtraffic.bus.reward_design.candidates import DesignSetup, design_reward
from llmtraffic.bus.reward_design.loop import LoopConfig
from llmtraffic.llm import CassetteMiss, from_config
from llmtraffic.rl.dqn import DQNConfig

REWARD_A = """Here is a first reward.
```python
def reward(current_state, action, next_state):
    # balance the two headways, small holding cost
    f, b = next_state[0], next_state[1]
    return -abs(f - b) / max(f + b, 1.0) - 0.01 * action
```"""
HOSTILE = """```python
import os
def reward(current_state, action, next_state):
    os.system("echo hi")
    return 0.0
```"""
REWARD_B = """Fixed: no imports.
```python
def reward(current_state, action, next_state):
    f, b = next_state[0], next_state[1]
    return -2.0 * abs(f - b) / max(f + b, 1.0) - 0.02 * action
```"""
REWARD_C = """```python
import math
def reward(current_state, action, next_state):
    f, b = next_state[0], next_state[1]
    return -math.fabs(f - b) / max(f + b, 1.0) - 0.005 * action * next_state[2] / 50.0
```"""


def _setup():
    return DesignSetup(
        scenario=scenarios.case1(),
        dqn=DQNConfig(hidden=(16,), episodes=1, updates_per_episode=5, batch_size=16,
                      learning_starts=16, eps_decay_episodes=1, obs_scale=(1776, 1776, 1, 1, 50, 90)),
        design_seeds=[0], train_horizon_s=1800, test_horizon_s=1800,
    )


def _setting(scenario):
    return prompts.Setting(scenario.describe(), multi_line=False)


def test_llm_loop_records_then_replays_bit_for_bit(chat_server, openai_cfg, tmp_path):
    answers = [REWARD_A, "Training converged; holding is too rare.", HOSTILE, REWARD_B,
               "Headways improved; try a passenger-weighted holding cost.", REWARD_C]
    chat_server.script = [(200, chat_server.completion(a), 0.0) for a in answers]
    cassette = tmp_path / "designer.jsonl"
    setup = _setup()
    loop = LoopConfig(iterations=2, start="cold", slack=10.0, tries=2)

    recorded_llm = from_config({**openai_cfg, "cache": {"path": str(cassette), "mode": "record"}})
    recorded, _ = design_reward(setup, LLMDesigner(recorded_llm, _setting(setup.scenario)), loop, progress=False)
    h = recorded.history()
    assert list(h["role"]) == ["initial", "modify", "repair", "modify"]
    assert list(h["valid"]) == [True, False, True, True]
    assert "os" in h.loc[1, "reason"]  # the sandbox's reason went back in the repair prompt
    assert "os.system" in chat_server.requests[3]["body"]["messages"][-1]["content"]
    assert len(chat_server.requests) == 6 and recorded_llm.usage().calls == 6

    replay_llm = from_config({"backend": "replay", "cassette": str(cassette)})
    replayed, best = design_reward(setup, LLMDesigner(replay_llm, _setting(setup.scenario)), loop, progress=False)
    assert len(chat_server.requests) == 6  # nothing asked of the server
    assert [s.code for s in replayed.steps] == [s.code for s in recorded.steps]
    assert replayed.history().equals(recorded.history())
    assert best.code == recorded.final_code and replay_llm.usage().total_tokens == recorded_llm.usage().total_tokens


def test_replay_miss_names_the_request(chat_server, openai_cfg, tmp_path):
    chat_server.script = [(200, chat_server.completion(REWARD_A), 0.0)]
    cassette = tmp_path / "c.jsonl"
    llm = from_config({**openai_cfg, "cache": {"path": str(cassette), "mode": "record"}})
    LLMDesigner(llm, prompts.Setting("A loop of 8 stops.", multi_line=False)).initial()
    replay = LLMDesigner(from_config({"backend": "replay", "cassette": str(cassette)}),
                         prompts.Setting("Two lines sharing 8 stops.", multi_line=True))
    with pytest.raises(CassetteMiss) as err:
        replay.initial()
    assert "You are an expert in public transport" in str(err.value)
