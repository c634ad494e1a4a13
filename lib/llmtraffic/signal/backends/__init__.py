"""Simulator backends of :class:`~llmtraffic.signal.env.SignalEnv`: libsumo or CityFlow, one interface.

The environment owns everything the paper defines once — the action slot with its clearance,
the phase timer, the observation, the reward and LibSignal's metrics — and asks a backend only
for what each simulator knows:

``start(source, seed)``
    a fresh simulation of the file ``source`` (``.sumocfg`` or CityFlow config) with ``seed``.
``discover() -> (phases, incoming, outgoing)``
    green phases (named as in OracleTSC Tables 9–10), incoming and outgoing lanes.
``begin_s``
    simulation time at the start of the episode.
``set_green(phase)``, ``set_clearance(current, next)``
    signal the green phase ``phase``, or the clearance between two green phases.
``advance(seconds) -> [(time_s, departed, arrived), ...]``
    one entry per simulated second: the time (seconds since ``begin_s``) the simulator counts
    arrivals at, the vehicles inserted (id, insertion time, seconds they waited to enter),
    the ids that left the network.
``observe() -> Observation``
    §3.1 counts per incoming lane, vehicles per outgoing lane, and per lane the queue, the
    pressure counts and the delay under the backend's rule set (:mod:`llmtraffic.signal.rules`).
``waiting_delays() -> list[float]``
    seconds each vehicle not yet inserted has waited.
``served() -> int | None``
    the throughput the rule set counts where it is not the arrivals (LibSignal on CityFlow),
    else ``None``.
``version() -> str``, ``close()``.

A backend is built for one rule set (``rules``, :data:`llmtraffic.signal.rules.RULES`): the
clearance it shows and what it tracks every second depend on it.

Both backends count a vehicle as queued below :data:`QUEUE_SPEED` and split moving ones at
:data:`NEAR` and :data:`MID` of the lane length from the stop line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ..rules import HALT_SPEED
from ..state import LaneCounts, Movement, Phase

QUEUE_SPEED = HALT_SPEED
"""Vehicles slower than this (m/s) count as queued/halting (§3.1, LibSignal)."""
NEAR, MID = 0.10, 0.33
"""Segment limits as fractions of the lane length from the stop line (§3.1)."""

Step = tuple[float, list[tuple[str, float, float]], list[str]]
"""One simulated second: (time_s, departed as (id, insertion s, waited s), arrived ids)."""


@dataclass
class Observation:
    """What a backend reports at a decision point."""

    lanes: dict[str, LaneCounts]
    """§3.1 counts per incoming lane."""
    outgoing: dict[str, int]
    """Vehicles per outgoing lane."""
    queued: dict[str, int]
    """The rule set's queue per incoming lane."""
    detected: dict[str, int]
    """Vehicles the rule set's pressure counts, per incoming and outgoing lane."""
    lane_delay: dict[str, float]
    """The rule set's delay per incoming lane."""
    moving: bool
    """Some vehicle in the network moves."""


class Backend(Protocol):
    """What :class:`~llmtraffic.signal.env.SignalEnv` needs from a simulator (see the module docstring)."""

    simulator: str
    begin_s: float

    def start(self, source: str, seed: int) -> None: ...
    def discover(self) -> tuple[tuple[Phase, ...], tuple[str, ...], tuple[str, ...]]: ...
    def set_green(self, phase: int) -> None: ...
    def set_clearance(self, current: int, nxt: int) -> None: ...
    def advance(self, seconds: int) -> list[Step]: ...
    def observe(self) -> Observation: ...
    def waiting_delays(self) -> list[float]: ...
    def served(self) -> int | None: ...
    def version(self) -> str: ...
    def close(self) -> None: ...


def segment_counts(length: float, vehicles: list[tuple[float, float]]) -> LaneCounts:
    """§3.1 counts of one lane from (speed, distance from the lane start) of its vehicles."""
    q = near = mid = far = 0
    for speed, pos in vehicles:
        if speed < QUEUE_SPEED:
            q += 1
            continue
        dist = (length - pos) / length
        if dist < NEAR:
            near += 1
        elif dist < MID:
            mid += 1
        else:
            far += 1
    return LaneCounts(q, near, mid, far)


# Phase names (shared by both simulators) ------------------------------------------------

_TURN_LETTER = {"uturn": "U", "through": "T", "right": "R", "left": "L"}
_APPROACH_NAME = {"N": "northern", "S": "southern", "E": "eastern", "W": "western"}


def approach_of(shape: list[tuple[float, float]]) -> str:
    """Compass side a lane comes from, by the heading of its last segment (east-bound → ``"W"``)."""
    (x0, y0), (x1, y1) = shape[-2], shape[-1]
    dx, dy = x1 - x0, y1 - y0
    if abs(dx) >= abs(dy):
        return "W" if dx > 0 else "E"
    return "S" if dy > 0 else "N"


def _join(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def name_phase(movements: tuple[Movement, ...]) -> tuple[str, str]:
    """Mnemonic and description in the style of OracleTSC Tables 9–10.

    Approaches in N, S, E, W order, turns in U, T, R, L order. Several approaches: each
    approach letter followed by its turns ("NTST", "NUTRLSUTRL"); one approach: a letter pair
    per turn ("NTNL"), as Table 9 writes them.
    """
    served: dict[str, list[str]] = {}
    for a in "NSEW":
        turns = {m.turn for m in movements if m.approach == a}
        if turns:
            served[a] = [t for t in ("uturn", "through", "right", "left") if t in turns]
    if not served:
        return "NONE", "no movement"
    if len(served) == 1:
        (a, turns), = served.items()
        mnemonic = "".join(a + _TURN_LETTER[t] for t in turns)
    else:
        mnemonic = "".join(a + "".join(_TURN_LETTER[t] for t in turns) for a, turns in served.items())

    def lanes(turns: list[str]) -> str:
        return _join([t.replace("uturn", "U-turn").replace("left", "left-turn")
                      .replace("right", "right-turn") for t in turns]) + " lanes"

    groups = list(served.values())
    if all(g == groups[0] for g in groups):
        text = _join([_APPROACH_NAME[a] for a in served]) + " " + lanes(groups[0])
    else:
        text = _join([f"{_APPROACH_NAME[a]} {lanes(t)}" for a, t in served.items()])
    return mnemonic, text[0].upper() + text[1:]


def make_phases(greens: list[tuple[Movement, ...]], signals: list[str] | None = None,
                majors: list[tuple[Movement, ...]] | None = None) -> tuple[Phase, ...]:
    """Phases from the movements each green serves, named by :func:`name_phase`.

    Movements green in every phase (e.g. permissive right turns) tell no phase apart, so names
    skip them; a repeated name gets a number, as actions are chosen by name in prompts.
    ``signals``: each phase's SUMO state string (empty for other simulators); ``majors``: each
    phase's priority-green movements (default: all of them, see :attr:`Phase.major`).
    """
    always = set.intersection(*(set(g) for g in greens)) if len(greens) > 1 else set()
    phases, seen = [], {}
    for k, moves in enumerate(greens):
        mnemonic, text = name_phase(tuple(m for m in moves if m not in always))
        seen[mnemonic] = seen.get(mnemonic, 0) + 1
        if seen[mnemonic] > 1:
            mnemonic = f"{mnemonic}{seen[mnemonic]}"
        phases.append(Phase(k, mnemonic, text, moves, signals[k] if signals else "",
                            majors[k] if majors else tuple(moves)))
    return tuple(phases)
