"""Classic signal controllers of OracleTSC Table 1, configured as LibSignal configures them.

Every controller — these, the deep-RL ones in :mod:`llmtraffic.signal.rl` and the LLM policy —
implements one interface: ``act(state) -> int`` returns the index of the green phase for the
next decision slot; ``reset(seed)`` (optional) is called before each episode.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from .state import IntersectionState, Phase


@runtime_checkable
class Controller(Protocol):
    """What :func:`llmtraffic.signal.evaluate` drives."""

    def act(self, state: IntersectionState) -> int: ...


def lane_vehicles(state: IntersectionState, lane: str) -> int:
    """All vehicles on an incoming lane (queued and moving), from the §3.1 counts."""
    c = state.lanes[lane]
    return c.queue + c.near + c.mid + c.far


def phase_pressure(state: IntersectionState, phase: Phase) -> int:
    """Σ over the phase's movements of (vehicles on the in lane − vehicles on the out lane).

    Max pressure (Varaiya 2013) as LibSignal computes it; out-lane counts come from
    ``state.outgoing`` (:class:`llmtraffic.signal.env.SignalState`).
    """
    outgoing = getattr(state, "outgoing", None)
    if outgoing is None:
        raise TypeError("pressure needs a SignalState (with outgoing lane counts), got "
                        f"{type(state).__name__}")
    return sum(lane_vehicles(state, m.in_lane) - outgoing[m.out_lane] for m in phase.movements)


class FixedTime:
    """Cycle through the green phases, ``t_fixed`` seconds each (the clearance included)."""

    def __init__(self, t_fixed: int = 30):
        if t_fixed <= 0:
            raise ValueError(f"FixedTime.t_fixed must be positive, got {t_fixed}")
        self.t_fixed = t_fixed

    def act(self, state: IntersectionState) -> int:
        return int(state.time_s // self.t_fixed) % len(state.phases)

    def __repr__(self) -> str:
        return f"FixedTime(t_fixed={self.t_fixed})"


class MaxPressure:
    """The phase of largest pressure, once the current one has been green ``t_min`` seconds."""

    def __init__(self, t_min: int = 10):
        self.t_min = t_min

    def act(self, state: IntersectionState) -> int:
        if getattr(state, "phase_time_s", self.t_min) < self.t_min:
            return state.phase
        pressures = [phase_pressure(state, p) for p in state.phases]
        return max(range(len(pressures)), key=pressures.__getitem__)  # first of equal maxima

    def __repr__(self) -> str:
        return f"MaxPressure(t_min={self.t_min})"


class SOTL:
    """Self-organising traffic lights (Cools et al. 2013) in LibSignal's form.

    After ``t_min`` green seconds, move to the next phase in cycle order when at most
    ``min_green_vehicle`` vehicles wait on the green lanes and more than ``max_red_vehicle``
    wait on the others.
    """

    def __init__(self, t_min: int = 5, min_green_vehicle: int = 3, max_red_vehicle: int = 6):
        self.t_min, self.min_green_vehicle, self.max_red_vehicle = t_min, min_green_vehicle, max_red_vehicle

    def act(self, state: IntersectionState) -> int:
        if getattr(state, "phase_time_s", self.t_min) < self.t_min:
            return state.phase
        green_lanes = {m.in_lane for m in state.phases[state.phase].movements}
        green = sum(c.queue for lane, c in state.lanes.items() if lane in green_lanes)
        red = state.total_queue - green
        if green <= self.min_green_vehicle and red > self.max_red_vehicle:
            return (state.phase + 1) % len(state.phases)
        return state.phase

    def __repr__(self) -> str:
        return (f"SOTL(t_min={self.t_min}, min_green_vehicle={self.min_green_vehicle}, "
                f"max_red_vehicle={self.max_red_vehicle})")
