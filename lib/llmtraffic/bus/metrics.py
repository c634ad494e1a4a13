"""Evaluation metrics of the bus study (§5.1): headway SD, travel, waiting and holding times,
incomplete trips; overall, per line, at shared stops and per stop."""

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
    arrivals = trajectories.loc[~trajectories["initial"], ["line", "stop", "arrival_s"]]
    arrivals = arrivals.sort_values(["line", "stop", "arrival_s"], kind="stable")
    gaps = arrivals.groupby(["line", "stop"], sort=False)["arrival_s"].diff()
    out = arrivals.assign(headway_s=gaps)
    return out[out["headway_s"].notna()].reset_index(drop=True)


def pooled_sd(values: pd.Series, groups: list[pd.Series] | pd.Series) -> float:
    """Pooled standard deviation: sqrt(Σ_g Σ (x - mean_g)² / Σ_g (n_g - 1)) over groups with
    at least two values; NaN when there are none."""
    frame = pd.DataFrame({"x": values.to_numpy()})
    keys = [g.to_numpy() for g in (groups if isinstance(groups, list) else [groups])]
    grouped = frame.groupby(keys, sort=False)["x"]
    dev = frame["x"] - grouped.transform("mean")
    n = grouped.transform("size")
    ok = n >= 2
    dof = (grouped.size() - 1).clip(lower=0).sum()
    return math.sqrt(float((dev[ok] ** 2).sum()) / dof) if dof > 0 else math.nan


def _sd_by_stop(h: pd.DataFrame) -> pd.Series:
    return h.groupby(["line", "stop"])["headway_s"].std(ddof=1)


def _passenger_metrics(pax: pd.DataFrame) -> dict:
    boarded = pax["board_s"].notna()
    done = pax["alight_s"].notna()
    return {
        "travel_time_s": _mean(pax.loc[done, "alight_s"] - pax.loc[done, "arrival_s"]),
        "wait_time_s": _mean(pax.loc[boarded, "board_s"] - pax.loc[boarded, "arrival_s"]),
        "incomplete_share": float((~done).mean()) if len(pax) else 0.0,
        "passengers": int(len(pax)),
    }


def _hold(traj: pd.DataFrame) -> float:
    held = traj.loc[traj["hold_s"] > 0, "hold_s"]
    return float(held.mean()) if len(held) else 0.0


def _mean(x: pd.Series) -> float:
    return float(x.mean()) if len(x) else math.nan


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
    owner = passengers["rode"].where(passengers["rode"] != "", passengers["line"])
    by_line = {}
    by_stop = {}
    sd = _sd_by_stop(h)
    for ln in scenario.lines:
        hl = h[h["line"] == ln.name]
        by_line[ln.name] = {
            "headway_sd_s": pooled_sd(hl["headway_s"], hl["stop"]),
            "hold_time_s": _hold(trajectories[trajectories["line"] == ln.name]),
            **_passenger_metrics(passengers[owner == ln.name]),
        }
        by_stop[ln.name] = [float(sd.get((ln.name, i), math.nan)) for i in range(ln.n_stops)]
    shared = None
    if scenario.shared_nodes:
        nodes = set(scenario.shared_nodes)
        node_of = {(ln.name, i): v for ln in scenario.lines for i, v in enumerate(ln.nodes)}
        at_shared = np.array([node_of[(a, b)] in nodes for a, b in zip(h["line"], h["stop"])], dtype=bool)
        hs = h[at_shared]
        shared = {
            "headway_sd_s": pooled_sd(hs["headway_s"], [hs["line"], hs["stop"]]),
            "stops": len(nodes),
            **_passenger_metrics(passengers[passengers["origin"].isin(nodes)]),
        }
    return {
        "headway_sd_s": pooled_sd(h["headway_s"], [h["line"], h["stop"]]),
        "hold_time_s": _hold(trajectories),
        "hold_events": int((trajectories["hold_s"] > 0).sum()),
        "bus_arrivals": int(len(trajectories)),
        **_passenger_metrics(passengers),
        "by_line": by_line,
        "shared_stops": shared,
        "by_stop": by_stop,
    }


def headway_sd_by_hour(result: EpisodeResult) -> list[float]:
    """Pooled headway SD of the headways that end in each simulated hour (shows bunching grow)."""
    h = headways(result.trajectories)
    hour = (h["arrival_s"] // HOUR_S).astype(int)
    hours = math.ceil(result.horizon_s / HOUR_S)
    return [pooled_sd(h.loc[hour == k, "headway_s"], [h.loc[hour == k, "line"], h.loc[hour == k, "stop"]])
            for k in range(hours)]
