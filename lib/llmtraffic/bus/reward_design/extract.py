"""Reward code out of an LLM's answer (bus paper §4.2: the initializer, modifier and refiner
answer with Python code and an explanation).

Fenced blocks (```python, ```py or a bare ```) come first: the last block that defines
``reward`` wins, since models that revise their answer put the final version last. An
unterminated fence (the answer ran out of tokens) counts up to the end of the text. Without
fences the answer is taken as bare code, with any prose before the first code line and after
the last parseable line dropped. An example run after the function (models often add one:
top-level calls such as ``print(reward(...))``, an ``if __name__ == "__main__":`` block, and
example inputs assigned to the argument names) is dropped, since only the function is asked
for and the sandbox admits no top-level statement that runs. The result is not checked here: `sandbox.validate_reward_code`
says what is wrong with it, and that reason goes back to the LLM.
"""

from __future__ import annotations

import ast
import re

from .sandbox import REWARD_ARGS

FENCE = re.compile(r"^[ \t]*```[ \t]*([\w+-]*)[ \t]*\n(.*?)(?:^[ \t]*```[ \t]*$|\Z)", re.M | re.S)
DEFINES_REWARD = re.compile(r"^\s*def\s+reward\s*\(", re.M)
CODE_START = re.compile(r"^(import |from \w|def |@|[A-Za-z_]\w*\s*=)")
PYTHON_TAGS = {"", "python", "python3", "py"}


def extract_code(text: str) -> str:
    """The reward program in `text` (see the module docstring); '' when there is no code."""
    text = text.replace("\r\n", "\n")
    blocks = [body for tag, body in FENCE.findall(text) if tag.lower() in PYTHON_TAGS]
    with_reward = [b for b in blocks if DEFINES_REWARD.search(b)]
    if with_reward:
        return without_examples(with_reward[-1].strip("\n") + "\n")
    if blocks:
        return without_examples(blocks[-1].strip("\n") + "\n")
    return without_examples(bare_code(text))


def without_examples(code: str) -> str:
    """``code`` without the top-level statements of an example run (see the module docstring);
    unchanged when it does not parse (validation then says why)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return code
    drop = [s for s in tree.body if _is_example(s)]
    if not drop:
        return code
    lines = code.split("\n")
    for s in reversed(drop):
        del lines[s.lineno - 1:s.end_lineno]
    return "\n".join(lines).strip("\n") + "\n"


def _is_example(statement: ast.stmt) -> bool:
    if isinstance(statement, ast.Expr):
        return not isinstance(statement.value, ast.Constant)  # a docstring stays
    if isinstance(statement, ast.If):
        return "__name__" in ast.unparse(statement.test)
    if isinstance(statement, ast.Assign):
        return all(isinstance(t, ast.Name) and t.id in REWARD_ARGS for t in statement.targets)
    return False


def bare_code(text: str) -> str:
    """Code in an unfenced answer: from the first code-looking line to the last line that
    still parses (trailing prose dropped); everything from the first code line if none does."""
    lines = text.split("\n")
    start = next((i for i, line in enumerate(lines) if CODE_START.match(line)), None)
    if start is None:
        return ""
    for end in range(len(lines), start, -1):
        candidate = "\n".join(lines[start:end]).strip("\n") + "\n"
        try:
            ast.parse(candidate)
        except SyntaxError:
            continue
        if DEFINES_REWARD.search(candidate) or end == len(lines):
            return candidate
    return "\n".join(lines[start:]).strip("\n") + "\n"
