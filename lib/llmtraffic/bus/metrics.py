"""Evaluation metrics of the bus study (§5.1): headway SD, travel, waiting and holding times,
incomplete trips; overall, per line, at shared stops and per stop. Plain numpy on the
columns of the trajectory and passenger tables (metrics run after every episode)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from .scenarios import HOUR_S, Scenario

if TYPE_CHECKING:
    from .sim import EpisodeResult


def headways(trajectories: pd.DataFrame) -> pd.DataFrame:
    """Time headways between successive buses of the same line at each stop: columns line,
    stop, arrival_s (of the later bus), headway_s. Buses standing at a stop at t = 0 are
    initial conditions, not arrivals, and start no headway."""
    keep = ~trajectories["initial"].to_numpy(bool)
    line = trajectories["line"].to_numpy()[keep]
    stop = trajectories["stop"].to_numpy()[keep]
    t = trajectories["arrival_s"].to_numpy(float)[keep]
    names, code = np.unique(line.astype(str), return_inverse=True)
    order = np.lexsort((t, stop, code))
    code, stop, t = code[order], stop[order], t[order]
    same = (code[1:] == code[:-1]) & (stop[1:] == stop[:-1])
    return pd.DataFrame({
        "line": names[code[1:][same]], "stop": stop[1:][same],
        "arrival_s": t[1:][same], "headway_s": np.diff(t)[same],
    })


def pooled_sd(values: np.ndarray, groups: np.ndarray) -> float:
    """Pooled standard deviation sqrt(Σ_g Σ (x − mean_g)² / Σ_g (n_g − 1)); NaN without any
    group of two or more values."""
    values = np.asarray(values, dtype=float)
    if values.size == 0:
        return math.nan
    _, inverse = np.unique(np.asarray(groups), return_inverse=True)
    n = np.bincount(inverse)
    dof = values.size - n.size
    if dof <= 0:
        return math.nan
    mean = np.bincount(inverse, weights=values) / n
    return math.sqrt(float(np.sum((values - mean[inverse]) ** 2)) / dof)


def _stop_key(h: pd.DataFrame) -> np.ndarray:
    return np.char.add(np.char.add(h["line"].to_numpy().astype(str), "/"), h["stop"].to_numpy().astype(str))


def _passenger_metrics(arrival: np.ndarray, board: np.ndarray, alight: np.ndarray) -> dict:
    boarded, done = ~np.isnan(board), ~np.isnan(alight)
    return {
        "travel_time_s": _mean(alight[done] - arrival[done]),
        "wait_time_s": _mean(board[boarded] - arrival[boarded]),
        "incomplete_share": float(1.0 - done.mean()) if arrival.size else 0.0,
        "passengers": int(arrival.size),
    }


def _hold(hold: np.ndarray) -> float:
    held = hold[hold > 0]
    return float(held.mean()) if held.size else 0.0


def _mean(x: np.ndarray) -> float:
    return float(x.mean()) if x.size else math.nan


def episode_metrics(scenario: Scenario, trajectories: pd.DataFrame, passengers: pd.DataFrame) -> dict:
    """The §5.1 metrics of one episode.

    - ``headway_sd_s``: SD of the time headways between successive buses of a line at a stop,
      pooled over stops (each stop's headways deviate from that stop's mean).
    - ``travel_time_s``: mean waiting + in-vehicle time over completed trips.
    - ``wait_time_s``: mean waiting time over passengers who boarded.
    - ``hold_time_s``: mean holding time per holding event (a stop visit with holding), 0 if none.
    - ``hold_events``, ``bus_arrivals``, ``passengers``: counts.
    - ``incomplete_share``: share of generated passengers not at their destination at the end.
    - ``by_line``: the same per line (a passenger belongs to the line it rode, else to the
      line whose demand generated it); ``shared_stops``: headway SD at shared stops and the
      passenger metrics of trips starting there (None without shared stops); ``by_stop``:
      per line, the headway SD at each stop (NaN with fewer than two headways).
    """
    h = headways(trajectories)
    key = _stop_key(h)
    hw, h_line, h_stop = h["headway_s"].to_numpy(), h["line"].to_numpy(), h["stop"].to_numpy()
    hold, t_line = trajectories["hold_s"].to_numpy(float), trajectories["line"].to_numpy()
    arrival, board, alight = (passengers[c].to_numpy(float) for c in ("arrival_s", "board_s", "alight_s"))
    rode, made = passengers["rode"].to_numpy(), passengers["line"].to_numpy()
    owner = np.where(rode != "", rode, made)
    by_line, by_stop = {}, {}
    for ln in scenario.lines:
        mine, who = h_line == ln.name, owner == ln.name
        by_line[ln.name] = {
            "headway_sd_s": pooled_sd(hw[mine], h_stop[mine]),
            "hold_time_s": _hold(hold[t_line == ln.name]),
            **_passenger_metrics(arrival[who], board[who], alight[who]),
        }
        by_stop[ln.name] = [pooled_sd(hw[mine & (h_stop == i)], h_stop[mine & (h_stop == i)]) for i in range(ln.n_stops)]
    shared = None
    if scenario.shared_nodes:
        nodes = set(scenario.shared_nodes)
        shared_keys = [f"{ln.name}/{i}" for ln in scenario.lines for i, v in enumerate(ln.nodes) if v in nodes]
        at = np.isin(key, shared_keys)
        starts = np.isin(passengers["origin"].to_numpy(), list(nodes))
        shared = {
            "headway_sd_s": pooled_sd(hw[at], key[at]),
            "stops": len(nodes),
            **_passenger_metrics(arrival[starts], board[starts], alight[starts]),
        }
    return {
        "headway_sd_s": pooled_sd(hw, key),
        "hold_time_s": _hold(hold),
        "hold_events": int((hold > 0).sum()),
        "bus_arrivals": int(len(trajectories)),
        **_passenger_metrics(arrival, board, alight),
        "by_line": by_line,
        "shared_stops": shared,
        "by_stop": by_stop,
    }


def headway_sd_by_hour(result: EpisodeResult) -> list[float]:
    """Pooled headway SD of the headways that end in each simulated hour (shows bunching grow)."""
    h = headways(result.trajectories)
    hour = (h["arrival_s"].to_numpy() // HOUR_S).astype(int)
    key = _stop_key(h)
    hw = h["headway_s"].to_numpy()
    return [pooled_sd(hw[hour == k], key[hour == k]) for k in range(math.ceil(result.horizon_s / HOUR_S))]
