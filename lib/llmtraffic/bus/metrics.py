"""Evaluation metrics of the bus study (§5.1): headway SD, travel, waiting and holding times,
incomplete trips and service failures; overall, per line, at shared stops and per stop. Plain
numpy on the columns of the trajectory and passenger tables (metrics run after every episode).

Two definitions of four measures sit side by side, selectable by name (:data:`DEFINITIONS`,
:func:`measure_key`): **ours** (the keys without suffix) and **authors** (the ones the bus
authors' code computes; the ``bus_crosscheck`` notebook runs their code beside ours):

==================  =============================================  ==============================================
measure             ours                                           authors
==================  =============================================  ==============================================
travel time         mean over completed trips                      every generated trip; unfinished = horizon − arrival
waiting time        mean over passengers who boarded               every generated trip; not boarded = horizon − arrival
headway SD          pooled over stops (deviation from each         ``np.std`` of all headways around the global mean;
                    stop's mean), arrivals sorted in time          open lines: per stop in bus order (overtaking gives
                                                                   negative headways), stop 0 left out; loops: sorted
holding time        mean over visits that held                     total hold / visits where a decision was taken
==================  =============================================  ==============================================
"""

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


def authors_headways(trajectories: pd.DataFrame, loop_lines: set[str] = frozenset()) -> np.ndarray:
    """Headways as the authors' analysis scripts take them (``*/trajectories_for_LLM_generation.py``):
    per line and stop, arrival times in bus order (dispatch index, then time) for open lines with
    stop 0 left out (case 2), sorted in time at every stop for the lines in ``loop_lines`` (case 1);
    consecutive differences, all concatenated. Initial positions start no headway."""
    t = trajectories[~trajectories["initial"].to_numpy(bool)]
    bus_index = t["bus"].str.rsplit("#", n=1).str[-1].astype(int)
    out = []
    for (line, stop), g in t.assign(bus_index=bus_index).groupby(["line", "stop"], sort=True):
        if line in loop_lines:
            times = np.sort(g["arrival_s"].to_numpy(float))
        elif stop == 0:
            continue
        else:
            times = g.sort_values(["bus_index", "arrival_s"], kind="stable")["arrival_s"].to_numpy(float)
        out.append(np.diff(times))
    return np.concatenate(out) if out else np.zeros(0)


def authors_headway_sd(trajectories: pd.DataFrame, loop_lines: set[str] = frozenset()) -> float:
    """``np.std`` (ddof = 0, around the global mean) of :func:`authors_headways`; NaN without any."""
    h = authors_headways(trajectories, loop_lines)
    return float(np.std(h)) if h.size else math.nan


def censored_times(passengers: pd.DataFrame, horizon_s: float) -> dict:
    """The authors' travel and waiting times: every generated passenger counts, an unfinished trip
    (or a passenger never picked up) as ``horizon − arrival``."""
    arrival = passengers["arrival_s"].to_numpy(float)
    board, alight = passengers["board_s"].to_numpy(float), passengers["alight_s"].to_numpy(float)
    return {
        "travel_time_censored_s": _mean(np.where(np.isnan(alight), horizon_s, alight) - arrival),
        "wait_time_censored_s": _mean(np.where(np.isnan(board), horizon_s, board) - arrival),
    }


def hold_per_decision_visit(trajectories: pd.DataFrame, scenario: Scenario) -> float:
    """The authors' holding time: seconds held in total / stop visits where the agent was asked
    (control stops, not a line's last stop, bus already gone so the decision is complete)."""
    decided = np.zeros(len(trajectories), bool)
    stop, line = trajectories["stop"].to_numpy(), trajectories["line"].to_numpy()
    control = set(scenario.control_stops)
    for ln in scenario.lines:
        asked = [i for i, v in enumerate(ln.nodes) if v in control and (ln.is_loop or i < ln.n_stops - 1)]
        decided |= (line == ln.name) & np.isin(stop, asked)
    decided &= ~np.isnan(trajectories["departure_s"].to_numpy(float))
    n = int(decided.sum())
    return float(trajectories["hold_s"].to_numpy(float)[decided].sum() / n) if n else 0.0


def nominal_ride_s(scenario: Scenario, passengers: pd.DataFrame) -> np.ndarray:
    """Scheduled in-vehicle time of each passenger's trip on the line whose demand made it: median
    link times from origin to destination, no dwell (the forward way round on a loop)."""
    out = np.zeros(len(passengers))
    made, o, d = (passengers[c].to_numpy() for c in ("line", "origin", "destination"))
    for ln in scenario.lines:
        cum = np.concatenate([[0.0], np.cumsum(ln.link_s)])
        lap = cum[-1] if ln.is_loop else 0.0
        where = {v: i for i, v in enumerate(ln.nodes)}
        mine = np.flatnonzero(made == ln.name)
        if mine.size:
            i = np.array([where[v] for v in o[mine]])
            j = np.array([where[v] for v in d[mine]])
            ride = cum[j] - cum[i]
            out[mine] = np.where(ride < 0, ride + lap, ride)
    return out


def service_failure(scenario: Scenario, trajectories: pd.DataFrame, passengers: pd.DataFrame,
                    horizon_s: float) -> dict:
    """Service failures, free of the horizon cut-off that dominates ``incomplete_share``:

    - ``finishable``: passengers who arrived early enough to finish on a regular service, i.e.
      ``arrival + 2 · scheduled headway + nominal ride time ≤ horizon`` (two headways: the bus
      they just missed and one more);
    - ``service_failure_share``: share of those not at their destination at the horizon;
    - ``passed_up``: ready passengers a full bus left behind, summed over stop visits (a
      passenger passed up twice counts twice); ``full_visits``: visits that left someone behind.
    """
    headway = {ln.name: ln.headway_s for ln in scenario.lines}
    made = passengers["line"].to_numpy()
    slack = 2.0 * np.array([headway[m] for m in made], dtype=float)
    ok = passengers["arrival_s"].to_numpy(float) + slack + nominal_ride_s(scenario, passengers) <= horizon_s
    done = ~np.isnan(passengers["alight_s"].to_numpy(float))
    left = trajectories["left_behind"].to_numpy()
    return {
        "finishable": int(ok.sum()),
        "service_failure_share": float(1.0 - done[ok].mean()) if ok.any() else 0.0,
        "passed_up": int(left.sum()),
        "full_visits": int((left > 0).sum()),
    }


def headway_implied_wait(headways_s: np.ndarray) -> dict:
    """Waiting time implied by headways for passengers arriving at random: ``E[H²] / (2 E[H])``
    (``implied_wait_s``), and the same with perfectly regular headways of the same mean,
    ``E[H] / 2`` (``regular_wait_s``). Their difference is the most any holding can save on waits
    at that service level: the room for holding."""
    h = np.asarray(headways_s, dtype=float)
    if h.size == 0 or h.sum() <= 0:
        return {"implied_wait_s": math.nan, "regular_wait_s": math.nan}
    return {"implied_wait_s": float((h ** 2).sum() / (2 * h.sum())), "regular_wait_s": float(h.mean() / 2)}


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


def episode_metrics(scenario: Scenario, trajectories: pd.DataFrame, passengers: pd.DataFrame,
                    horizon_s: float) -> dict:
    """The §5.1 metrics of one episode.

    - ``headway_sd_s``: SD of the time headways between successive buses of a line at a stop,
      pooled over stops (each stop's headways deviate from that stop's mean).
    - ``travel_time_s``: mean waiting + in-vehicle time over completed trips.
    - ``wait_time_s``: mean waiting time over passengers who boarded.
    - ``hold_time_s``: mean holding time per holding event (a stop visit with holding), 0 if none.
    - ``hold_events``, ``bus_arrivals``, ``passengers``: counts.
    - ``incomplete_share``: share of generated passengers not at their destination at the end.
    - authors' definitions (see the module docstring): ``travel_time_censored_s``,
      ``wait_time_censored_s``, ``headway_sd_authors_s``, ``hold_time_per_decision_s``;
    - :func:`service_failure` (``finishable``, ``service_failure_share``, ``passed_up``,
      ``full_visits``) and :func:`headway_implied_wait` (``implied_wait_s``, ``regular_wait_s``);
      ``idle_s``: mean time a visit stood at an empty stop (authors' case-1 dwell only);
    - ``by_line``: the same per line, ours and the authors' definitions (a passenger belongs to
      the line it rode, else to the line whose demand generated it); ``shared_stops``: headway SD at shared stops and the
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
        on_line = trajectories[t_line == ln.name]
        by_line[ln.name] = {
            "headway_sd_s": pooled_sd(hw[mine], h_stop[mine]),
            "hold_time_s": _hold(hold[t_line == ln.name]),
            **_passenger_metrics(arrival[who], board[who], alight[who]),
            **censored_times(passengers[who], horizon_s),
            "headway_sd_authors_s": authors_headway_sd(on_line, {ln.name} if ln.is_loop else set()),
            "hold_time_per_decision_s": hold_per_decision_visit(on_line, scenario),
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
    loops = {ln.name for ln in scenario.lines if ln.is_loop}
    return {
        "headway_sd_s": pooled_sd(hw, key),
        "hold_time_s": _hold(hold),
        "hold_events": int((hold > 0).sum()),
        "bus_arrivals": int(len(trajectories)),
        **_passenger_metrics(arrival, board, alight),
        **censored_times(passengers, horizon_s),
        "headway_sd_authors_s": authors_headway_sd(trajectories, loops),
        "hold_time_per_decision_s": hold_per_decision_visit(trajectories, scenario),
        **service_failure(scenario, trajectories, passengers, horizon_s),
        **headway_implied_wait(hw),
        "idle_s": _mean(trajectories["idle_s"].to_numpy(float)),
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


DEFINITIONS = {
    "travel_time_s": {"ours": "travel_time_s", "authors": "travel_time_censored_s"},
    "wait_time_s": {"ours": "wait_time_s", "authors": "wait_time_censored_s"},
    "headway_sd_s": {"ours": "headway_sd_s", "authors": "headway_sd_authors_s"},
    "hold_time_s": {"ours": "hold_time_s", "authors": "hold_time_per_decision_s"},
}
"""Measure → definition name → key of :func:`episode_metrics` (see the module docstring)."""


def measure_key(measure: str, definition: str = "ours") -> str:
    """The metrics key of ``measure`` under ``definition`` ("ours" or "authors")."""
    if measure not in DEFINITIONS:
        raise ValueError(f"unknown measure {measure!r}; known: {sorted(DEFINITIONS)}")
    if definition not in DEFINITIONS[measure]:
        raise ValueError(f"unknown definition {definition!r} of {measure!r}; known: {sorted(DEFINITIONS[measure])}")
    return DEFINITIONS[measure][definition]
