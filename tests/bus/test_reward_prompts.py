"""Prompts of Appendix A carry the required pieces and adapt to one line vs several lines."""

import pytest

from llmtraffic.bus import scenarios
from llmtraffic.bus.reward_design import prompts

LOOP = "A loop of 8 stops and 6 buses, 10,656 m long."
CORRIDOR = "Two lines of 27 stops sharing 8 stops."
SINGLE = prompts.Setting(LOOP, multi_line=False)
MULTI = prompts.Setting(CORRIDOR, multi_line=True)
CODE = "def reward(current_state, action, next_state):\n    return -float(action)\n"
METRICS = {"headway_sd_s": 101.234, "travel_time_s": 1200.5, "wait_time_s": 300.25, "hold_time_s": 12.0}
SECTIONS = ["## Task", "## Agent", "## State", "## Reward inputs", "## Environment", "## Output instructions"]


def all_prompts(s):
    transitions = [{"state": [1776.0, 1776.0, 0, 0, 20, 0], "action": 1, "reward": -0.5,
                    "next_state": [1804.0, 1748.0, 0, 0, 20, 5]}]
    return {
        "initializer": prompts.initializer(s),
        "analyzer": prompts.analyzer(s, CODE, [1.0, 2.0], METRICS, transitions),
        "modifier": prompts.modifier(s, CODE, "Holding is too long."),
        "refiner": prompts.refiner(s, CODE, METRICS, CODE.replace("-float", "float"), METRICS),
        "repair": prompts.repair(s, CODE, "reward returned nan for transition 0"),
    }


@pytest.mark.parametrize("setting", [SINGLE, MULTI], ids=["single line", "multi line"])
def test_every_module_prompt_has_the_sections_and_the_environment(setting):
    for name, messages in all_prompts(setting).items():
        assert [m["role"] for m in messages] == ["system", "user"], name
        user = messages[1]["content"]
        for section in SECTIONS:
            assert section in user, (name, section)
        assert setting.scenario in user, name
        assert "hold the bus for the next 5 s (action 1) or release it (action 0)" in user, name
        assert "Holding ends by force after 90 s" in user, name
        assert "`reward(current_state, action, next_state) -> float`" in user, name


def test_single_and_multi_line_texts_differ_where_the_system_does():
    single = prompts.initializer(SINGLE)[1]["content"]
    multi = prompts.initializer(MULTI)[1]["content"]
    assert "between the buses of the line" in single and "share stops" not in single
    assert "there is only one line, so these are always 0" in single
    assert "across the lines that share stops" in multi
    assert "other-line headways are 0 at stops that no other line serves" in multi
    assert "usable at stops served by one line or by several lines" in multi
    assert "usable at every stop" in single


def test_three_value_state_of_case_1():
    text = prompts.initializer(prompts.Setting(LOOP, False, state_dim=3))[1]["content"]
    assert "A list of 3 numbers" in text
    assert "s[2]: passengers on board the current bus" in text
    assert "s[5]" not in text


def test_code_modules_state_the_sandbox_rules():
    for name in ("initializer", "modifier", "refiner", "repair"):
        user = all_prompts(MULTI)[name][1]["content"]
        assert "Import only `math` and `numpy`" in user, name
        assert "|reward| <= 1000" in user, name
        assert "no variables that need tuning" in user, name
        assert "```python block" in user, name


def test_analyzer_sees_thinned_curve_metrics_and_the_last_transitions():
    curve = [float(i) for i in range(70)]
    transitions = [{"state": [i, 100.0, 0, 0, 5, 0], "action": i % 2, "reward": -i / 10,
                    "next_state": [i, 100.0, 0, 0, 5, 5]} for i in range(30)]
    user = prompts.analyzer(MULTI, CODE, curve, METRICS, transitions)[1]["content"]
    assert "ep 1: 0, " in user and "ep 70: 69" in user
    assert user.count("ep ") == 20
    assert "- standard deviation of time headways (s): 101.23" in user
    assert "- average passenger travel time, waiting + onboard (s): 1200.50" in user
    assert "[29, 100, 0.00, 0.00, 5.00, 0.00] a=1 r=-2.9 -> [29, 100, 0.00, 0.00, 5.00, 5.00]" in user
    assert "[20, 100," in user and "[19, 100," not in user  # only the last 10 of 30
    assert CODE.strip() in user
    assert "Do not write code" in user


def test_analyzer_without_results_is_the_critic():
    user = prompts.analyzer(MULTI, CODE, [], {})[1]["content"]
    assert user == prompts.critic(MULTI, CODE)[1]["content"]
    assert "review the reward function from its code alone" in user
    assert CODE.strip() in user and "## Results" not in user and "Test metrics" not in user


def test_modifier_refiner_and_repair_carry_their_inputs():
    p = all_prompts(SINGLE)
    assert "Holding is too long." in p["modifier"][1]["content"]
    assert "replace it entirely" in p["modifier"][1]["content"]
    refine = p["refiner"][1]["content"]
    assert "treat it as a failure to avoid" in refine
    assert refine.index("## Current reward (the last accepted one)") < refine.index("return float(action)") < refine.index(
        "## Failed modification") < refine.index("return -float(action)")
    assert "## Why it was rejected\nreward returned nan for transition 0" in p["repair"][1]["content"]


def test_direct_controller_prompt_asks_for_the_two_fields():
    text = prompts.direct_controller(prompts.Setting(LOOP, False, state_dim=3))
    assert "[s0, s1, s2]: s0 the forward space headway (m), s1 the backward space headway (m)" in text
    assert "Step 1, holding decision: 1 to hold the bus, 0 not to hold." in text
    assert "holding time in seconds from 0 to 90; if you do not hold, -1" in text
    assert text.endswith("Holding decision: <0 or 1>\nHolding duration: <seconds or -1>")
    assert "Passenger travel time: waiting time plus onboard time" in text
    assert LOOP in text
    assert prompts.direct_query([1332.0, 999.5, 12]) == "State: [1332.0, 999.5, 12.0]"


def test_bad_inputs_name_the_field():
    with pytest.raises(ValueError, match=r"test metrics lack \['hold_time_s'\]"):
        prompts.format_metrics({k: v for k, v in METRICS.items() if k != "hold_time_s"})
    with pytest.raises(ValueError, match="field 'state_dim' must be 3 or 6"):
        prompts.Setting(LOOP, False, state_dim=4)
    with pytest.raises(ValueError, match="field 'scenario' is empty"):
        prompts.Setting("  ", False)


def test_setting_of_a_scenario():
    one, two = prompts.Setting.of(scenarios.case1()), prompts.Setting.of(scenarios.case2())
    assert (one.multi_line, two.multi_line) == (False, True)
    assert one.scenario == scenarios.case1().describe()
    assert (two.step_s, two.max_hold_s) == (5.0, 90.0)
