"""The LLM-direct controller (bus paper §5.1 baseline, prompt of Appendix A.5).

At every bus arrival at a control stop it sends the state to the LLM and reads two fields:
the holding decision (1 hold, 0 not) and the holding duration (0–90 s, or -1 without hold).
An answer it cannot read releases the bus and is counted in ``failures``: the paper reports
LLM controllers' unreliable outputs (§2.3), so the failure count is part of the result.
"""

from __future__ import annotations

import re

import numpy as np

from ...llm import LLM
from . import prompts

DECISION = re.compile(r"holding\s+decision\W*?(-?\d+(?:\.\d+)?)", re.I)
DURATION = re.compile(r"holding\s+duration\W*?(-?\d+(?:\.\d+)?)", re.I)


def parse_hold(text: str, max_hold_s: float = 90.0) -> float | None:
    """Seconds to hold from an answer in the A.5 format, or None when it cannot be read.

    The last occurrence of each field counts (a model that corrects itself puts the final
    answer last). Decision 0 releases whatever the duration says; decision 1 needs a
    duration from 0 to `max_hold_s` (a duration above it is clipped, as the simulator
    clips holding; -1 or a missing duration is unreadable)."""
    decisions, durations = DECISION.findall(text), DURATION.findall(text)
    if not decisions or decisions[-1] not in ("0", "1"):
        return None
    if decisions[-1] == "0":
        return 0.0
    if not durations or float(durations[-1]) < 0:
        return None
    return min(float(durations[-1]), max_hold_s)


class LLMDirect:
    """Bus `Controller` (``mode = "duration"``) that asks an LLM at every holding decision."""

    mode = "duration"

    def __init__(self, llm: LLM, setting: prompts.Setting, temperature: float = 0.0, max_tokens: int = 32,
                 name: str = "LLM-direct"):
        self.llm, self.setting, self.name = llm, setting, name
        self.temperature, self.max_tokens = temperature, max_tokens
        self.system = prompts.direct_controller(setting)
        self.decisions = 0
        """Decisions asked so far."""
        self.failures = 0
        """Answers that could not be read (the bus was released)."""

    def act(self, obs: np.ndarray, info: dict) -> float:
        messages = [{"role": "system", "content": self.system},
                    {"role": "user", "content": prompts.direct_query(obs)}]
        [answer] = self.llm.complete(messages, temperature=self.temperature, max_tokens=self.max_tokens)
        self.decisions += 1
        hold = parse_hold(answer, self.setting.max_hold_s)
        if hold is None:
            self.failures += 1
            return 0.0
        return hold
