"""Reward code out of an LLM's answer (bus paper §4.2: the initializer, modifier and refiner
answer with Python code and an explanation).

Fenced blocks (```python, ```py or a bare ```) come first: the last block that defines
``reward`` wins, since models that revise their answer put the final version last. An
unterminated fence (the answer ran out of tokens) counts up to the end of the text. Without
fences the answer is taken as bare code, with any prose before the first code line and after
the last parseable line dropped. The result is not checked here: `sandbox.validate_reward_code`
says what is wrong with it, and that reason goes back to the LLM.
"""

from __future__ import annotations

import ast
import re

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
        return with_reward[-1].strip("\n") + "\n"
    if blocks:
        return blocks[-1].strip("\n") + "\n"
    return bare_code(text)


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
