"""Holding controllers: the protocol every controller follows, no holding, and the
headway-based feedback controllers used as baselines (§5.1).

A controller is asked at a control stop once the dwell has ended (never at a line's last stop).
``mode = "step"``: asked every 5 s while the bus is held; 1 = hold 5 s more, 0 = release
(release is forced at 90 s). ``mode = "duration"``: asked once; returns the holding time in
seconds, clipped to [0, 90]. ``obs`` is the §3.2 state; ``info`` holds ``time_s, line, stop,
stop_index, bus, scheduled_headway_s, forward_time_headway_s`` (seconds since the previous
bus of the line left this stop; 0 while it is still there; NaN if there is none),
``backward_time_headway_s`` (nominal seconds until the next bus of the line gets here; NaN if
none), ``onboard, held_s``.
"""

from __future__ import annotations

import math
from typing import Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class Controller(Protocol):
    """What :func:`~llmtraffic.bus.simulate` and the notebooks call at a holding decision."""

    mode: str

    def act(self, obs: np.ndarray, info: dict) -> float: ...


class NoHolding:
    """Never holds (the "no holding" baseline)."""

    mode = "duration"

    def act(self, obs: np.ndarray, info: dict) -> float:
        return 0.0


class Feedback:
    """Daganzo's (2009) one-headway feedback holding:
    hold = min(max_hold, max(0, slack + alpha·(H − h_forward))), with H the scheduled headway
    and h_forward the time since the previous bus of the line left the stop (the departure
    headway the bus would have if it left now).

    Parameters: ``alpha = 0.6`` follows Daganzo's recommendation (0 < alpha < 1 keeps the
    control stable while damping deviations); ``slack_s`` is the planned mean hold that lets a
    late bus catch up by holding less. Default 30 s: the headway deviations that build up
    between control points in case 1 are of the order of a minute, and half of that keeps the
    hold mostly positive without adding much delay (our choice, not tuned to any reported
    figure). With no previous bus there is no headway to correct and the bus leaves."""

    mode = "duration"

    def __init__(self, alpha: float = 0.6, slack_s: float = 30.0, max_hold_s: float = 90.0,
                 headway_s: float | None = None):
        if not 0 < alpha <= 1:
            raise ValueError(f"Feedback: field 'alpha' must be in (0, 1], got {alpha}")
        if slack_s < 0 or max_hold_s < 0:
            raise ValueError("Feedback: fields 'slack_s' and 'max_hold_s' must be >= 0")
        self.alpha, self.slack_s, self.max_hold_s = alpha, slack_s, max_hold_s
        self.headway_s = headway_s
        """Target headway H; None uses the line's scheduled headway from ``info``."""

    def act(self, obs: np.ndarray, info: dict) -> float:
        h = info["forward_time_headway_s"]
        if math.isnan(h):
            return 0.0
        target = self.headway_s if self.headway_s is not None else info["scheduled_headway_s"]
        return min(self.max_hold_s, max(0.0, self.slack_s + self.alpha * (target - h)))


class TwoWayFeedback:
    """Two-headway holding: leave when the bus sits ``alpha`` of the way towards the midpoint
    between the previous bus (departed ``h_f`` s ago) and the next one (expected in ``h_b`` s):
    hold = clip(alpha·(h_b − h_f)/2, 0, max_hold); holding d seconds turns the headways into
    h_f + d and h_b − d, which are equal at d = (h_b − h_f)/2. Without a next bus it falls back
    to one-headway :class:`Feedback` with no slack."""

    mode = "duration"

    def __init__(self, alpha: float = 1.0, max_hold_s: float = 90.0):
        if not 0 < alpha <= 1:
            raise ValueError(f"TwoWayFeedback: field 'alpha' must be in (0, 1], got {alpha}")
        self.alpha, self.max_hold_s = alpha, max_hold_s
        self._one_way = Feedback(alpha=alpha, slack_s=0.0, max_hold_s=max_hold_s)

    def act(self, obs: np.ndarray, info: dict) -> float:
        h_f, h_b = info["forward_time_headway_s"], info["backward_time_headway_s"]
        if math.isnan(h_f):
            return 0.0
        if math.isnan(h_b):
            return self._one_way.act(obs, info)
        return min(self.max_hold_s, max(0.0, self.alpha * (h_b - h_f) / 2))


class FixedHold:
    """Holds one bus at one visit for a fixed time (the holding-shift check)."""

    mode = "duration"

    def __init__(self, bus: str, time_s: float, hold_s: float):
        self.bus, self.time_s, self.hold_s = bus, time_s, hold_s

    def act(self, obs: np.ndarray, info: dict) -> float:
        hit = info["bus"] == self.bus and abs(info["time_s"] - self.time_s) < 1e-9
        return self.hold_s if hit else 0.0
