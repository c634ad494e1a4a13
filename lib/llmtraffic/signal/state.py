"""Plain data shared by the signal environment, the baselines and the LLM prompt.

The environment (``signal/env.py``, from either simulator backend) fills these; controllers and ``signal/prompt.py``
read them, so a prompt can be built for any intersection the environment discovers.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Movement:
    """One lane-to-lane connection that a green phase serves."""

    in_lane: str
    out_lane: str
    approach: str
    """Compass side the vehicle comes from: ``"N"``, ``"E"``, ``"S"`` or ``"W"``."""
    turn: str
    """``"through"``, ``"left"``, ``"right"`` or ``"uturn"``."""


@dataclass(frozen=True)
class Phase:
    """A distinct green phase of the traffic light's program."""

    index: int
    """Position among the green phases (the action that selects it)."""
    mnemonic: str
    """Short name, e.g. ``"ETWT"`` (east and west through), as in OracleTSC Tables 9–10."""
    description: str
    """Plain-language description used in prompts."""
    movements: tuple[Movement, ...] = ()
    sumo_state: str = ""
    """SUMO signal-state string of this green phase (empty on CityFlow, whose backend maps phases to light phases)."""
    major: tuple[Movement, ...] = ()
    """The movements LibSignal's pressure and SOTL count: SUMO links with priority green (``G``,
    not ``g``); on CityFlow every movement of the phase (:mod:`llmtraffic.signal.rules`)."""


@dataclass(frozen=True)
class LaneCounts:
    """Observation of one incoming lane (OracleTSC §3.1)."""

    queue: int
    """Halting vehicles (speed < 0.1 m/s)."""
    near: int
    """Moving vehicles within 10 % of the lane length from the stop line."""
    mid: int
    """Moving vehicles 10–33 % of the lane length from the stop line."""
    far: int
    """Moving vehicles beyond 33 % of the lane length from the stop line."""


@dataclass(frozen=True)
class IntersectionState:
    """What a controller sees at one decision point."""

    time_s: float
    phase: int
    """Index of the current green phase (into ``phases``)."""
    lanes: dict[str, LaneCounts] = field(default_factory=dict)
    """Per incoming lane id."""
    phases: tuple[Phase, ...] = ()

    @property
    def total_queue(self) -> int:
        return sum(c.queue for c in self.lanes.values())
