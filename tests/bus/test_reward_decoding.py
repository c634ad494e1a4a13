"""The decoding variants of the LLM designer: a grammar for the free-code answer, and the structured
design space (terms and weights as JSON, compiled to reward code)."""

import json

import pytest

from llmtraffic.bus import scenarios
from llmtraffic.bus.reward_design import decoding as dec, prompts
from llmtraffic.bus.reward_design.designer import LLMDesigner
from llmtraffic.bus.reward_design.sandbox import example_transitions, validate_reward_code
from llmtraffic.bus.reward_design.search import BY_NAME, EXPERT, render
from llmtraffic.llm import LLM
from llmtraffic.llm.core import Completion


class Recording:
    """A backend that answers from a list and keeps each request's constraint."""

    name, model = "fake", "fake-model"

    def __init__(self, answers):
        self.answers, self.constraints = list(answers), []

    def generate(self, messages, n, temperature, max_tokens, seed, **constraint):
        self.constraints.append(constraint)
        self.messages = messages
        return Completion([self.answers.pop(0)], 10, 5)


SETTING = prompts.Setting.of(scenarios.case1())  # one line, 6-value state


def test_structured_answers_compile_to_the_programs_they_name():
    answer = json.dumps({"terms": [{"term": "balance", "weight": 1.0}, {"term": "hold", "weight": 0.5}]})
    assert dec.compile_terms(answer, 6, label="m") == render(EXPERT, 6, label="m")  # RL-local, term by term
    code = dec.compile_terms(json.dumps({"terms": [{"term": "long_hold", "weight": 2}]}), 6, label="m")
    assert "next_state[5] > 50.0" in code  # a threshold term without its threshold: the middle of 20–80 s
    assert validate_reward_code(code, transitions=example_transitions(6)).ok


@pytest.mark.parametrize("text, why", [("not json", "not JSON"), ('{"terms": 3}', "not JSON of terms"),
                                       ('{"terms": [{"term": "speed", "weight": 1}]}', "none of the terms")])
def test_a_structured_answer_that_names_no_usable_terms_says_why_and_fails_validation(text, why):
    code = dec.compile_terms(text, 6, label="m")
    assert code.startswith("#") and why in code
    assert "no function reward" in validate_reward_code(code).reason


def test_the_schema_admits_only_the_terms_the_task_allows():
    names = dec.schema(multi_line=False, state_dim=3)["properties"]["terms"]["items"]["properties"]["term"]["enum"]
    assert "line_wide" not in names and "long_hold" not in names and set(names) < set(BY_NAME)
    assert "line_wide" in dec.schema(multi_line=True, state_dim=6)["properties"]["terms"]["items"]["properties"]["term"]["enum"]


def test_each_decoding_sends_its_constraint_and_the_free_one_none():
    code = "```python\ndef reward(current_state, action, next_state):\n    return 0.0\n```"
    terms = json.dumps({"terms": [{"term": "hold", "weight": 1.0}]})
    ended = "Here it is.\n```python\ndef reward(current_state, action, next_state):\n    return 0.0"  # cut at the fence
    backend = Recording([code, code, terms, ended])
    llm = LLM(backend)
    free, grammar, structured, fenced = (LLMDesigner(llm, SETTING, decoding=d) for d in dec.DECODINGS)
    assert free.initial().code.startswith("def reward") and backend.constraints[-1] == {}
    assert grammar.initial().code.startswith("def reward") and backend.constraints[-1] == {"grammar": dec.GRAMMAR}
    reply = structured.initial()
    assert set(backend.constraints[-1]) == {"json_schema"} and "r -= 1.0 * hold" in reply.code
    assert "Answer with JSON only" in backend.messages[-1]["content"] and "```python block" not in backend.messages[-1]["content"]
    assert fenced.initial().code == "def reward(current_state, action, next_state):\n    return 0.0\n"
    assert backend.constraints[-1] == {"stop": ["\n```\n"]}
    assert "```python block" in backend.messages[-1]["content"]  # the paper's prompt: only the answer's end is fixed
    with pytest.raises(ValueError, match="decoding must be one of"):
        LLMDesigner(llm, SETTING, decoding="beam")
