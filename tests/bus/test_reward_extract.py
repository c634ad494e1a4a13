"""Reward code out of LLM answers: fenced, several blocks, unterminated, bare, none."""

from llmtraffic.bus.reward_design.extract import extract_code

REWARD = "import numpy as np\n\ndef reward(current_state, action, next_state):\n    return -float(action)\n"


def test_the_python_fence_is_taken_without_the_prose():
    text = f"Here is the reward:\n\n```python\n{REWARD}```\n\nIt penalises holding."
    assert extract_code(text) == REWARD


def test_the_last_block_defining_reward_wins_over_helpers_and_earlier_drafts():
    draft = REWARD.replace("-float(action)", "0.0")
    helper = "def helper(x):\n    return x\n"
    text = f"Draft:\n```python\n{draft}```\nFinal:\n```py\n{REWARD}```\nA helper:\n```python\n{helper}```\n"
    assert extract_code(text) == REWARD


def test_non_python_fences_are_ignored_and_bare_fences_count():
    text = f"Output:\n```text\nreward = 3\n```\n```\n{REWARD}```\n```json\n{{\"def reward(\": 1}}\n```"
    assert extract_code(text) == REWARD


def test_an_unterminated_fence_runs_to_the_end():
    assert extract_code(f"```python\n{REWARD}") == REWARD


def test_windows_line_endings_are_normalised():
    assert extract_code(f"```python\r\n{REWARD.replace(chr(10), chr(13) + chr(10))}```") == REWARD


def test_bare_code_drops_leading_and_trailing_prose():
    text = f"Sure! The reward below balances headways.\n{REWARD}\nThis reward is generic for one or two lines."
    assert extract_code(text) == REWARD


def test_bare_code_that_never_parses_is_returned_for_validation_to_reject():
    broken = "def reward(current_state, action next_state):\n    return 0.0\n"
    assert extract_code(f"My answer:\n{broken}") == broken


def test_no_code_gives_an_empty_program():
    assert extract_code("I cannot help with that.") == ""


def test_an_example_run_after_the_function_is_dropped():
    example = ("\n# Example usage:\ncurrent_state = np.array([1, 2, 3, 4, 5, 0])\naction = 1\n"
               "next_state = np.array([0, 0, 0, 0, 5, 90])\nprint(reward(current_state, action, next_state))\n"
               "if __name__ == \"__main__\":\n    reward(current_state, action, next_state)\n")
    assert extract_code(f"```python\n{REWARD}{example}```") == REWARD + "\n# Example usage:\n"


def test_constants_helpers_and_a_docstring_stay():
    code = f'"""Headway reward."""\nSCALE = 2.0\n\ndef helper(x):\n    return x\n\n{REWARD}'
    assert extract_code(f"```python\n{code}```") == code
