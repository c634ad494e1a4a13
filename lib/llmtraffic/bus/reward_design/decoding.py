"""Beyond the paper: two ways to make a weak model's answer valid more often, as labelled variants.

* ``grammar`` — constrained decoding: a llama.cpp GBNF grammar lets the model write only one fenced
  ``def reward(current_state, action, next_state):`` whose body lines are indented, after optional
  ``import math`` / ``import numpy as np`` lines. Syntax inside a line stays the model's.
* ``structured`` — a structured design space: the answer is JSON (constrained by a JSON schema)
  choosing terms of the search designer's component library (``search.LIBRARY``) and their
  weights; :func:`compile_terms` renders it into reward code with ``search.render``, so every
  well-formed answer is a valid program. The prompt's output section lists the terms instead of
  asking for code.

* ``fenced`` — the answer ends with its code block: the text before the block and the code inside it
  are the model's, unconstrained; a stop sequence (:data:`FENCE_END`) ends the answer at the block's
  closing fence, so the prose that models add after the code (the prompts ask for the reasoning as
  comments in the code) costs no decoding time. The code is the one ``free`` would take, unless the
  model writes a second block after the first (``free`` takes the last).

``free`` is the paper's protocol: unconstrained text, the code taken from its fenced block.
"""

from __future__ import annotations

import json

from .search import BY_NAME, Program, allowed, render

DECODINGS = ("free", "grammar", "structured", "fenced")

GRAMMAR = r'''root ::= "```python\n" imports "def reward(current_state, action, next_state):\n" line+ "```"
imports ::= ("import math\n" | "import numpy as np\n")*
line ::= "    " [^\n`]+ "\n"
'''
"""GBNF of the ``grammar`` variant: one fenced reward function, body lines indented."""

FENCE_END = "\n```\n"
"""Stop sequence of the ``fenced`` variant: a fence on a line of its own. An opening fence names its
language (```python), so only a closing fence (or a bare opening one) matches; the extractor reads a
block left open as running to the end of the answer."""


def schema(multi_line: bool, state_dim: int) -> dict:
    """JSON schema of a ``structured`` answer: 1–4 terms of the components the task admits."""
    names = [c.name for c in allowed(multi_line, state_dim)]
    term = {"type": "object", "properties": {"term": {"type": "string", "enum": names}, "weight": {"type": "number"},
                                             "threshold_s": {"type": "number"}},
            "required": ["term", "weight"]}
    return {"type": "object", "properties": {"terms": {"type": "array", "items": term, "minItems": 1, "maxItems": 4},
                                             "explanation": {"type": "string"}},
            "required": ["terms"]}


def instructions(multi_line: bool, state_dim: int) -> str:
    """The output section of a ``structured`` prompt (it replaces the request for code)."""
    lines = [f"- `{c.name}`: {c.note}" + (" (give `threshold_s`, in s)" if c.threshold else "")
             for c in allowed(multi_line, state_dim)]
    return ("## Output instructions\nDesign the reward as a weighted sum of these terms (each term already carries "
            "its sign: a positive weight makes a penalty a penalty):\n" + "\n".join(lines) + "\n"
            'Answer with JSON only: {"terms": [{"term": <name>, "weight": <number>}, ...], "explanation": <text>}, '
            "with 1 to 4 terms and weights between 0.05 and 5.")


def with_structured_output(messages: list[dict], multi_line: bool, state_dim: int) -> list[dict]:
    """A designer request whose output section asks for terms instead of code."""
    content = messages[-1]["content"]
    head = content.split("## Output instructions")[0].rstrip()
    return [*messages[:-1], {"role": messages[-1]["role"], "content": f"{head}\n\n{instructions(multi_line, state_dim)}"}]


def compile_terms(text: str, state_dim: int, label: str) -> str:
    """Reward code of a ``structured`` answer; an answer that is no usable choice of terms gives a
    comment saying why (the validator finds no reward function, and both go back to the model)."""
    try:
        terms = json.loads(text)["terms"]
        weights = {t["term"]: float(t["weight"]) for t in terms if t["term"] in BY_NAME}
        thresholds = {t["term"]: float(t["threshold_s"]) for t in terms
                      if t["term"] in weights and BY_NAME[t["term"]].threshold and "threshold_s" in t}
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        return f"# the answer is not JSON of terms and weights ({type(error).__name__}: {error})\n"
    if not weights:
        return "# the answer names none of the terms listed\n"
    for name in weights:  # a threshold term without its threshold gets the middle of its range
        if BY_NAME[name].threshold and name not in thresholds:
            thresholds[name] = sum(BY_NAME[name].threshold) / 2
    return render(Program.of(weights, thresholds), state_dim, label=label)
