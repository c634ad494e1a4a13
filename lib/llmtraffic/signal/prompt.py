"""The OracleTSC prompt and answer parsing (OracleTSC §3.1, Appendix A.4–A.5, Algorithm 2).

The prompt is built from :class:`~llmtraffic.signal.state.IntersectionState` alone, so it works
for any intersection the environment discovers: phase mnemonics and descriptions come from the
state's :class:`~llmtraffic.signal.state.Phase` list (Tables 9–10 for the paper's intersections,
derived from the network for others).
"""

from __future__ import annotations

import functools

import re
from collections.abc import Sequence

from .state import IntersectionState, LaneCounts, Phase

APPROACH_NAMES = {"N": "Northern", "E": "Eastern", "S": "Southern", "W": "Western"}
TURN_NAMES = {"through": "through", "left": "left-turn", "right": "right-turn", "uturn": "U-turn"}
# Reading order used in the prompt (A.4 lists northern, southern, eastern, western).
APPROACH_ORDER = ("N", "S", "E", "W")
TURN_ORDER = ("uturn", "through", "right", "left")

Exchange = tuple[IntersectionState, int]
"""A past decision: the state the controller saw and the phase index it chose."""


def _phase_by_index(phases: Sequence[Phase], index: int) -> Phase:
    for phase in phases:
        if phase.index == index:
            return phase
    raise ValueError(f"phase index {index} is not among the phases {[p.index for p in phases]}")


def lane_groups(phase: Phase) -> dict[str, tuple[str, ...]]:
    """Label → incoming lanes a phase serves, one label per approach and turn set (A.5).

    A lane that serves several turns in this phase (e.g. through and right) appears once, under
    a label naming all its turns, so no vehicle is counted twice.
    """
    return dict(_lane_groups(phase))


@functools.cache
def _lane_groups(phase: Phase) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """:func:`lane_groups` as items, computed once per phase (every prompt asks for every phase)."""
    turns: dict[str, set[str]] = {}
    approach: dict[str, str] = {}
    for m in phase.movements:
        turns.setdefault(m.in_lane, set()).add(m.turn)
        approach[m.in_lane] = m.approach
    groups: dict[tuple[int, tuple[int, ...]], tuple[str, list[str]]] = {}
    for lane in sorted(turns):
        a = approach[lane]
        ordered = sorted(turns[lane], key=lambda t: TURN_ORDER.index(t) if t in TURN_ORDER else 99)
        key = (APPROACH_ORDER.index(a) if a in APPROACH_ORDER else 99,
               tuple(TURN_ORDER.index(t) if t in TURN_ORDER else 99 for t in ordered))
        label = f"{APPROACH_NAMES.get(a, a)} {'/'.join(TURN_NAMES.get(t, t) for t in ordered)}"
        groups.setdefault(key, (label, []))[1].append(lane)
    return tuple((label, tuple(lanes)) for _, (label, lanes) in sorted(groups.items()))


def _sum_counts(state: IntersectionState, lanes: Sequence[str]) -> LaneCounts:
    seen = [state.lanes[lane] for lane in lanes if lane in state.lanes]
    return LaneCounts(
        queue=sum(c.queue for c in seen),
        near=sum(c.near for c in seen),
        mid=sum(c.mid for c in seen),
        far=sum(c.far for c in seen),
    )


def phase_text(phase: Phase, state: IntersectionState) -> str:
    """The textual representation of one phase and its traffic (A.5, Listing 4)."""
    counts = {label: _sum_counts(state, lanes) for label, lanes in lane_groups(phase).items()}
    if not counts:
        return f"Phase: {phase.mnemonic} ({phase.description})\n(no lane information)"

    def segment(field: str) -> str:
        return ", ".join(f"{label}: {getattr(c, field)}" for label, c in counts.items())

    return "\n".join(
        [
            f"Phase: {phase.mnemonic} ({phase.description})",
            "**Early Queued Vehicles**:",
            *(f"- {label}: {c.queue}" for label, c in counts.items()),
            "**Approaching Vehicles**:",
            f"- Segment 1: {segment('near')}",
            f"- Segment 2: {segment('mid')}",
            f"- Segment 3: {segment('far')}",
        ]
    )


def _listing(words: Sequence[str]) -> str:
    """"a", "a and b", "a, b, and c"."""
    if len(words) < 3:
        return " and ".join(words)
    return ", ".join(words[:-1]) + ", and " + words[-1]


def _intersection_sentence(phases: Sequence[Phase]) -> str:
    """A.4's geometry sentence, derived from the phases' movements."""
    # One pseudo-phase with every movement: each lane is labelled once, with all its turns.
    everything = Phase(-1, "", "", tuple(m for p in phases for m in p.movements))
    lane_turns: dict[str, list[str]] = {}
    for label in lane_groups(everything):  # labels come sorted by approach, then turn
        a, turn = label.split(" ", 1)
        lane_turns.setdefault(a, []).append(turn)
    if not lane_turns:
        return f"A traffic light regulates an intersection with {len(phases)} signal phases."
    names = [name.lower() for name in lane_turns]
    words = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six"}
    kinds = {tuple(t) for t in lane_turns.values()}
    if len(kinds) == 1:
        turns = next(iter(kinds))
        lanes = _listing([f"one for {t} traffic" for t in turns])
        per = f"each containing {words.get(len(turns), len(turns))} lane groups: {lanes}"
    else:
        per = "; ".join(f"the {name} one with {_listing(turns)} lanes" for name, turns in zip(names, lane_turns.values()))
    return (
        f"A traffic light regulates a {words.get(len(names), len(names))}-section intersection with "
        f"{_listing(names)} sections, {per}. Each lane is further divided into three segments."
    )


def system_prompt(phases: Sequence[Phase], decision_s: int = 10) -> str:
    """The system prompt of A.4 (Listing 3) for this intersection's phases."""
    if not phases:
        raise ValueError("system_prompt: phases is empty")
    return f"""You are an expert in traffic management. You can use your knowledge of traffic commonsense to solve traffic signal control tasks.

{_intersection_sentence(phases)}

Segment 1 is the closest to the intersection. Segment 2 is in the middle. Segment 3 is the farthest. In a lane, there may be early queued vehicles and approaching vehicles traveling in different segments. Early queued vehicles have arrived at the intersection and await passage permission. Approaching vehicles will arrive at the intersection in the future.

The traffic light has {len(phases)} signal phases. Each signal relieves vehicles' flow in specific lanes. The state of the intersection is listed below. It describes:
- The group of lanes relieving vehicles' flow under each signal phase.
- The number of early queued vehicles of the allowed lanes of each signal.
- The number of approaching vehicles in different segments of the allowed lanes of each signal. The signal phase you choose will persist for {decision_s} seconds.

Please answer: Which is the most effective traffic signal that will most significantly improve the current traffic condition?

Requirements:
- Let's think step by step.
- You can only choose one of the signals listed by the user.
- You must follow the following steps to provide your analysis:
Step 1: Provide your analysis for identifying the optimal traffic signal.
Step 2: Answer your chosen signal.
- Your choice can only be given after finishing the analysis.
- Your choice must be identified by the tag: <signal>YOUR_CHOICE</signal>."""


def state_text(state: IntersectionState) -> str:
    """Every phase of one state (A.5), preceded by the current phase."""
    if not state.phases:
        raise ValueError("state_text: the state has no phases")
    current = _phase_by_index(state.phases, state.phase)
    blocks = [phase_text(p, state) for p in state.phases]
    return f"Current phase: {current.mnemonic}\n\n" + "\n\n".join(blocks)


def user_prompt(state: IntersectionState, history: Sequence[Exchange] = ()) -> str:
    """The user turn: the two most recent states and actions, then the current state (§3.1)."""
    parts = []
    recent = list(history)[-2:]
    for age, (past, action) in zip(range(len(recent), 0, -1), recent):
        chosen = _phase_by_index(past.phases, action).mnemonic
        parts.append(f"## State {age} decision(s) ago (t = {past.time_s:g} s)\n{state_text(past)}\n"
                     f"Chosen signal: <signal>{chosen}</signal>")
    parts.append(f"## Current state (t = {state.time_s:g} s)\n{state_text(state)}")
    return "\n\n".join(parts)


STYLES = ("paper", "brief")
"""Prompt styles: ``paper`` is A.4 + A.5 (step-by-step analysis, then the tag). ``brief`` keeps
A.4's task and intersection, lists the phases once in the system prompt, gives each phase's
traffic in one line and opens the answer with the tag (:data:`BRIEF_OPENING`), so the model
writes the phase and closes the tag: a Cologne1 state in the paper's style is ~850 SmolLM2
tokens and an analysis hundreds more, which this CPU cannot prefill and decode G times per
decision at quick's budget (~100 prompt tokens/s and ~0.3 s per decoding step of 8 rows here)."""

BRIEF_OPENING = "<signal>"
"""How a ``brief`` prompt opens the assistant's answer (after the chat template's generation prompt)."""


CLOSING = "</signal>"
"""What ends an answer after :data:`BRIEF_OPENING`."""


def answer_choices(state: IntersectionState) -> tuple[str, ...]:
    """The texts a constrained answer may be after :data:`BRIEF_OPENING`: each phase's mnemonic
    and the closing tag, in phase order (``PPOConfig.answer = "constrained"``)."""
    return tuple(p.mnemonic + CLOSING for p in state.phases)


def brief_system_prompt(phases: Sequence[Phase], decision_s: int = 10) -> str:
    """A.4's task and intersection, the phases, and an answer-only instruction (``brief`` style)."""
    if not phases:
        raise ValueError("brief_system_prompt: phases is empty")
    listing = "\n".join(f"- {p.mnemonic}: {p.description}" for p in phases)
    return f"""You are an expert in traffic management. You can use your knowledge of traffic commonsense to solve traffic signal control tasks.

{_intersection_sentence(phases)}

The traffic light has {len(phases)} signal phases:
{listing}
For each phase the user lists the early queued vehicles of its lanes (they await passage permission) and the approaching vehicles in segments 1 (closest), 2 and 3 (farthest). The signal phase you choose will persist for {decision_s} seconds.

Which is the most effective traffic signal that will most significantly improve the current traffic condition? Answer with the name of one phase listed above, between <signal> and </signal>, and nothing else."""


def brief_state_text(state: IntersectionState) -> str:
    """One line per phase: its mnemonic, queued and approaching counts (summed over its lanes)."""
    if not state.phases:
        raise ValueError("brief_state_text: the state has no phases")
    lines = [f"Current phase: {_phase_by_index(state.phases, state.phase).mnemonic}"]
    for p in state.phases:
        c = _sum_counts(state, [lane for lanes in lane_groups(p).values() for lane in lanes])
        lines.append(f"{p.mnemonic}: {c.queue} queued; approaching {c.near}, {c.mid}, {c.far}")
    return "\n".join(lines)


def messages(state: IntersectionState, history: Sequence[Exchange] = (), decision_s: int = 10,
             style: str = "paper") -> list[dict]:
    """Chat messages (system + user) for a chat template, in one of :data:`STYLES`."""
    if style == "paper":
        return [{"role": "system", "content": system_prompt(state.phases, decision_s)},
                {"role": "user", "content": user_prompt(state, history)}]
    if style != "brief":
        raise ValueError(f"prompt style {style!r}: expected one of {STYLES}")
    parts = [f"{age} decision(s) ago: {brief_state_text(past)}\nChosen signal: "
             f"<signal>{_phase_by_index(past.phases, action).mnemonic}</signal>"
             for age, (past, action) in zip(range(len(history), 0, -1), history)]
    # the constant line first: with the system prompt it is the kept prefix of every decision's prompt
    return [{"role": "system", "content": brief_system_prompt(state.phases, decision_s)},
            {"role": "user", "content": "\n\n".join([f"Choose one of: {', '.join(p.mnemonic for p in state.phases)}.",
                                                     *parts, f"Now: {brief_state_text(state)}"])}]


_TAG = re.compile(r"<\s*signal\s*>(.*?)<\s*/\s*signal\s*>", re.IGNORECASE | re.DOTALL)


def parse_phase(text: object, phases: Sequence[Phase]) -> int | None:
    """Steps 1–2 of Algorithm 2: the phase index ``text`` selects, or None if it names none.

    1. the last ``<signal>…</signal>`` tag whose content is a valid mnemonic (case and
       surrounding whitespace ignored);
    2. else the mnemonic or description mentioned last in the text (case-insensitive;
       at equal positions the longer match wins, so a description beats a mnemonic it starts with).
    """
    if not isinstance(text, str) or not text:
        return None
    by_mnemonic = {p.mnemonic.strip().upper(): p.index for p in phases}
    for content in reversed(_TAG.findall(text)):
        index = by_mnemonic.get(content.strip().upper())
        if index is not None:
            return index
    low = text.lower()
    best, best_at = None, (-1, 0)
    for p in phases:
        for needle in (p.mnemonic.lower(), p.description.lower()):
            at = (low.rfind(needle), len(needle)) if needle else (-1, 0)
            if at[0] >= 0 and at > best_at:
                best, best_at = p.index, at
    return best


def extract_phase(text: object, phases: Sequence[Phase], default: int = 0) -> int:
    """Algorithm 2: :func:`parse_phase`, else ``default``; never raises on any ``text``.

    ``phases`` and ``default`` are the caller's configuration: an empty list or a default that
    is not a phase index raise ``ValueError``.
    """
    if not phases:
        raise ValueError("extract_phase: phases is empty")
    if default not in {p.index for p in phases}:
        raise ValueError(f"extract_phase: default {default!r} is not a phase index {[p.index for p in phases]}")
    found = parse_phase(text, phases)
    return default if found is None else found
