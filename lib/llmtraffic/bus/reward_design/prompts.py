"""Prompts of the LLM modules (bus paper Appendix A): reward initializer (A.1), modifier (A.2),
performance analyzer (A.3), refiner (A.4) and the LLM-direct controller (A.5), plus the repair
prompt that sends a rejected candidate's reason back (our addition; the paper does not show one).

Each builder returns chat messages (``[{"role": "system", ...}, {"role": "user", ...}]``) whose
user message carries the sections the paper lists (§4.2): task, agent, state, reward inputs,
environment, then the module's own inputs and output instructions. The text adapts to the
system: one line (no other-line headways; headways within the line only) or several lines
(shared stops, other-line headways zero where a stop is not shared), and to the 6-value §3.2
state or the 3-value state of case 1 (App. A.5). The environment paragraph is the scenario's
``describe()``.

The seed asks for Python 3.8.16; we state the version we run and the sandbox's rules (only
``math`` and ``numpy``, no I/O, |r| <= 1000), so that a rejection never surprises the model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from .sandbox import BOUND


@dataclass(frozen=True)
class Setting:
    """What the prompts say about the bus system."""

    scenario: str
    """The environment paragraph (``scenario.describe()``)."""
    multi_line: bool
    """True when several lines share stops (other-line headways in the state)."""
    state_dim: int = 6
    """6: the §3.2 state; 3: case 1's [forward, backward, onboard] (App. A.5)."""
    step_s: float = 5.0
    """Length of one holding action (§3.2)."""
    max_hold_s: float = 90.0
    """Holding cap (§5.1)."""

    def __post_init__(self):
        if self.state_dim not in (3, 6):
            raise ValueError(f"Setting: field 'state_dim' must be 3 or 6, got {self.state_dim}")
        if not self.scenario.strip():
            raise ValueError("Setting: field 'scenario' is empty (pass scenario.describe())")

    @classmethod
    def of(cls, scenario) -> "Setting":
        """The setting of a `bus.scenarios.Scenario`."""
        return cls(scenario.describe(), len(scenario.lines) > 1, scenario.state_dim,
                   scenario.hold_step_s, scenario.max_hold_s)


METRICS = {
    "headway_sd_s": "standard deviation of time headways (s)",
    "travel_time_s": "average passenger travel time, waiting + onboard (s)",
    "wait_time_s": "average passenger waiting time (s)",
    "hold_time_s": "average holding time per bus per control stop (s)",
}
"""The four test metrics (§5.1) with the names the prompts give them."""


# --------------------------------------------------------------------------- shared sections

def goal(s: Setting) -> str:
    lines = ("within each bus line and across the lines that share stops" if s.multi_line
             else "between the buses of the line")
    return (
        f"The goal is to balance time headways {lines} while keeping the average passenger "
        "travel time (waiting time + onboard time) low: holding evens out headways, but excessive "
        "holding delays the passengers on board. Time headways and space headways are strongly "
        "correlated, so balancing space headways serves as balancing time headways."
    )


def task(s: Setting) -> str:
    return "## Task\nDesign the reward of reinforcement-learning agents that hold buses at stops. " + goal(s)


def agent(s: Setting) -> str:
    where = ("Every control stop, whether one line or several lines serve it, is an agent, and all "
             "agents share one reward function" if s.multi_line
             else "Every control stop is an agent, and all agents share one reward function")
    return (
        "## Agent\n"
        f"{where}. When a bus has finished boarding and alighting, the agent decides every "
        f"{s.step_s:g} s whether to hold the bus for the next {s.step_s:g} s (action 1) or release "
        f"it (action 0). Holding ends by force after {s.max_hold_s:g} s."
    )


def state(s: Setting) -> str:
    if s.state_dim == 3:
        rows = ["s[0]: forward space headway, distance to the bus ahead (m)",
                "s[1]: backward space headway, distance to the bus behind (m)",
                "s[2]: passengers on board the current bus"]
    else:
        other = ("other-line headways are 0 at stops that no other line serves"
                 if s.multi_line else "there is only one line, so these are always 0")
        rows = ["s[0]: forward space headway to the bus ahead on the same line (m)",
                "s[1]: backward space headway to the bus behind on the same line (m)",
                f"s[2]: forward space headway to the bus ahead on another line (m); {other}",
                f"s[3]: backward space headway to the bus behind on another line (m); {other}",
                "s[4]: passengers on board the current bus",
                "s[5]: time the bus has been held at this stop so far (s)"]
    return (
        f"## State\nA list of {s.state_dim} numbers describing the bus the decision is about:\n"
        + "\n".join(f"- {r}" for r in rows)
        + "\nPassengers cannot board or alight while a bus is held, so the onboard count does not "
        "change during holding."
    )


def reward_inputs(s: Setting) -> str:
    return (
        "## Reward inputs\n"
        "`reward(current_state, action, next_state) -> float`: `current_state` is the state when "
        f"the agent decides, `action` is 1 (hold) or 0 (release), `next_state` is the state of the "
        f"same bus {s.step_s:g} s later (after a release the holding time is back to 0). States are "
        f"numpy arrays of {s.state_dim} floats."
    )


def environment(s: Setting) -> str:
    return "## Environment\n" + s.scenario.strip()


def code_rules(s: Setting, lead: str) -> str:
    """Output instructions for reward code, opened by the module's request `lead`."""
    scope = "at stops served by one line or by several lines" if s.multi_line else "at every stop"
    return (
        f"## Output instructions\n{lead}\n"
        f"- Write one generic reward usable {scope} as it is: no variables that need tuning and "
        "no constants specific to one stop.\n"
        "- Balance rewards and penalties; avoid extremely large or small values "
        f"(|reward| <= {BOUND:g} on every transition) and make it finite for every state, "
        "including zero headways.\n"
        "- Python 3 code defining `def reward(current_state, action, next_state):` that returns a "
        "float; you may define helper functions. Import only `math` and `numpy`; no file, "
        "network or system access, no global state.\n"
        "- Check that the code runs. Add concise comments explaining the reasoning behind each "
        "term.\n"
        "- Put the code in one ```python block."
    )


def _header(s: Setting) -> str:
    return "\n\n".join([task(s), agent(s), state(s), reward_inputs(s), environment(s)])


def _messages(system: str, user: str) -> list[dict]:
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


DESIGNER = ("You are an expert in public transport operations and reinforcement learning who "
            "designs reward functions for bus holding control.")


# --------------------------------------------------------------------------- formatting results

def format_metrics(metrics: Mapping[str, float]) -> str:
    """The four test metrics, one per line, in the order of §5.1."""
    missing = [k for k in METRICS if k not in metrics]
    if missing:
        raise ValueError(f"test metrics lack {missing} (have {sorted(metrics)})")
    return "\n".join(f"- {METRICS[k]}: {float(metrics[k]):.2f}" for k in METRICS)


def format_curve(returns: Sequence[float], points: int = 20) -> str:
    """Training return per episode, thinned to at most `points` evenly spaced episodes."""
    if not len(returns):
        return "(no training returns recorded)"
    picks = np.unique(np.linspace(0, len(returns) - 1, min(points, len(returns))).round().astype(int))
    return ", ".join(f"ep {i + 1}: {returns[i]:.4g}" for i in picks)


TRANSITIONS = 10
"""Test transitions the analyzer sees (App. A.3 names the test states, actions and rewards, not how
many). A line is about 75 prompt tokens for Qwen2.5-Coder, which tokenises digits one by one: 20
lines made 1,494 of a case-1 analyzer prompt's 2,868 tokens, and prefill is most of its time."""


def format_transitions(transitions: Sequence, last: int = TRANSITIONS) -> str:
    """The last `last` test transitions, one per line: state, action, reward, next state.

    Accepts dicts with keys state, action, reward, next_state or env ``Transition``s."""
    if not transitions:
        return "(no test transitions recorded)"

    def get(t, key):
        return t[key] if isinstance(t, Mapping) else getattr(t, key)

    def vector(x):
        return "[" + ", ".join(f"{v:.0f}" if abs(v) >= 10 else f"{v:.2f}" for v in np.asarray(x, float)) + "]"

    return "\n".join(
        f"{vector(get(t, 'state'))} a={int(get(t, 'action'))} r={float(get(t, 'reward')):.4g} -> {vector(get(t, 'next_state'))}"
        for t in transitions[-last:]
    )


def results(curve: Sequence[float], metrics: Mapping[str, float], transitions: Sequence = ()) -> str:
    """Training and test results as the analyzer (and, without analyzer, the modifier) sees them."""
    parts = [f"Training return per episode (sum over all agents): {format_curve(curve)}",
             f"Test metrics:\n{format_metrics(metrics)}"]
    if transitions:
        parts.append("Last test transitions (state, action, reward -> next state):\n"
                     + format_transitions(transitions))
    return "\n\n".join(parts)


# --------------------------------------------------------------------------- the modules

def initializer(s: Setting) -> list[dict]:
    """Reward initializer (App. A.1): a first reward from the task description alone."""
    return _messages(DESIGNER, _header(s) + "\n\n" + code_rules(s, "Write the initial reward function."))


ANALYST = ("You analyse the training and test performance of reinforcement-learning agents for bus "
           "holding and diagnose their reward function.")


def analyzer(s: Setting, code: str, curve: Sequence[float], metrics: Mapping[str, float],
             transitions: Sequence = ()) -> list[dict]:
    """Performance analyzer (App. A.3): causes of inefficiency and suggestions, no code.

    Without test metrics this is the `critic` prompt (the code alone is reviewed)."""
    if not metrics:
        return critic(s, code)
    user = "\n\n".join([
        _header(s),
        f"## Reward used\n```python\n{code.strip()}\n```",
        "## Results\n" + results(curve, metrics, transitions),
        "## Output instructions\n"
        "Analyse concisely (1) whether training converged, judging by the evolution of the "
        "training return, and (2) the test behaviour: the actions taken in the states shown, the "
        "rewards they earned, and the test metrics. Name possible causes of inefficiency and give "
        "concrete suggestions to improve the reward function. Do not write code.",
    ])
    return _messages(ANALYST, user)


def critic(s: Setting, code: str) -> list[dict]:
    """Critic variant of the analyzer (§5.2.4 compares with it): the reward is reviewed from its
    code alone, without training or test results."""
    user = "\n\n".join([
        _header(s),
        f"## Reward to review\n```python\n{code.strip()}\n```",
        "## Output instructions\n"
        "No training or test results are available: review the reward function from its code "
        "alone. Name terms that could make the agents hold too much or too little, unbalanced "
        "or extreme values and states where it misbehaves, and give concrete suggestions to "
        "improve it. Do not write code.",
    ])
    return _messages(ANALYST, user)


def modifier(s: Setting, code: str, feedback: str) -> list[dict]:
    """Reward modifier (App. A.2): revise the current reward given the analysis.

    `feedback` is the analyzer's text, or `results(...)` when the analyzer is ablated."""
    user = "\n\n".join([
        _header(s),
        f"## Current reward\n```python\n{code.strip()}\n```",
        f"## Performance analysis and suggestions\n{feedback.strip()}",
        code_rules(s, "Improve the reward function guided by the training and test results and the "
                      "suggestions: revise it, rebalance its rewards and penalties, or replace it "
                      "entirely if it cannot be fixed."),
    ])
    return _messages(DESIGNER, user)


def refiner(s: Setting, failed_code: str, failed_metrics: Mapping[str, float], kept_code: str,
            kept_metrics: Mapping[str, float], analysis: str = "") -> list[dict]:
    """Reward refiner (App. A.4): the last modification did worse than its predecessor (the last
    accepted reward) beyond the slack; ask for a different improvement of the predecessor."""
    parts = [
        _header(s),
        f"## Current reward (the last accepted one)\n```python\n{kept_code.strip()}\n```\nIts test metrics:\n"
        + format_metrics(kept_metrics),
        f"## Failed modification\nThis modification performed worse than its predecessor and was "
        f"rejected; treat it as a failure to avoid.\n```python\n{failed_code.strip()}\n```\n"
        f"Its test metrics:\n{format_metrics(failed_metrics)}",
    ]
    if analysis.strip():
        parts.append(f"## Earlier analysis of the current reward\n{analysis.strip()}")
    parts.append(code_rules(s, "Improve the current reward function in a different way than the failed "
                               "modification: modify it or replace it."))
    return _messages(DESIGNER, "\n\n".join(parts))


def repair(s: Setting, code: str, reason: str) -> list[dict]:
    """A rejected candidate goes back with the reason (validation error or traceback)."""
    user = "\n\n".join([
        _header(s),
        f"## Rejected reward\n```python\n{code.strip()}\n```",
        f"## Why it was rejected\n{reason.strip()}",
        code_rules(s, "Fix the problem and return the whole reward function."),
    ])
    return _messages(DESIGNER, user)


# --------------------------------------------------------------------------- LLM-direct controller

def direct_controller(s: Setting) -> str:
    """System prompt of the LLM-direct controller (App. A.5): hold or not, and for how long."""
    inputs = ("[s0, s1, s2]: s0 the forward space headway (m), s1 the backward space headway "
              "(m), s2 the passengers on board the current bus" if s.state_dim == 3 else
              "[s0, …, s5] as listed under State")
    return "\n\n".join([
        "You are a bus holding controller. Each time a bus has finished boarding at a stop, you "
        "decide whether to hold it there and for how long.",
        "## Task\n" + goal(s),
        state(s),
        "## Definitions\n- Time headway: the interval between the arrivals of successive buses at "
        "a stop.\n- Space headway: the distance between successive buses.\n- Passenger travel "
        "time: waiting time plus onboard time.",
        environment(s),
        "## Output instructions\n"
        f"Input: the state {inputs}.\n"
        "Step 1, holding decision: 1 to hold the bus, 0 not to hold.\n"
        f"Step 2, holding duration: if you hold, the holding time in seconds from 0 to "
        f"{s.max_hold_s:g}; if you do not hold, -1.\n"
        "Use the task description and the input state. Answer in exactly this format and "
        "nothing else, with no analysis:\n"
        "Holding decision: <0 or 1>\nHolding duration: <seconds or -1>",
    ])


def direct_query(obs: Sequence[float]) -> str:
    """User message of one decision: the state as the controller prompt defines it."""
    return "State: [" + ", ".join(f"{float(v):.1f}" for v in obs) + "]"
