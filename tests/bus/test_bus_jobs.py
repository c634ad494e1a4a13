"""Cached bus jobs: validation seeds checked before any training, unavailable rows carry their reason."""

import pytest

from llmtraffic.bus.jobs import Agent, dqn_config, train_all
from llmtraffic.bus.scenarios import by_name


def test_overlapping_validation_seeds_are_refused_before_training():
    runs = {"RL-local": ("case1", {}, "rl_local", {"episodes": 1})}
    with pytest.raises(ValueError, match=r"val_seeds overlap eval_seeds at \[3\]"):
        train_all(runs, [0], [3, 200], {"eval_seeds": [0, 1, 2, 3], "design_seeds": [100]})


def test_an_unavailable_agent_says_why_when_asked_for_a_controller():
    agent = Agent("LLM-enhanced RL", "code", 0, None, unavailable="reward code failed validation")
    with pytest.raises(ValueError, match="has no agent: reward code failed validation"):
        agent.controller()


def test_names_and_settings_are_checked():
    with pytest.raises(ValueError, match="unknown case 'case9'"):
        by_name("case9")
    with pytest.raises(ValueError, match=r"unknown dqn setting\(s\) \['layers'\]"):
        dqn_config({"layers": 3}, 0)
    assert dqn_config({"episodes": 3}, 7).seed == 7
