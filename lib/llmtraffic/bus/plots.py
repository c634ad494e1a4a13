"""Figures of the bus study: time–space trajectories (bunching at a glance), per-stop headway
SD by method, passenger waiting-time distributions. Each function draws on ``ax`` (or a new
one) and returns it; colours are fixed per line or per method."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.lines import Line2D

from ..study import stats
from .sim import EpisodeResult


def _axes(ax: Axes | None, size: tuple[float, float]) -> Axes:
    return ax if ax is not None else plt.subplots(figsize=size)[1]


def _colours(n: int) -> list:
    return list(plt.get_cmap("tab10").colors) * (n // 10 + 1)


def trajectories(result: EpisodeResult, ax: Axes | None = None, lines: list[str] | None = None) -> Axes:
    """Time–space diagram: each bus's position along its line over time, one colour per line.
    Dwell and holding show as flat segments; a loop's position wraps at its length."""
    ax = _axes(ax, (10, 5))
    scenario = result.scenario
    known = [ln.name for ln in scenario.lines]
    lines = known if lines is None else list(lines)
    unknown = [x for x in lines if x not in known]
    if unknown:
        raise ValueError(f"unknown line(s) {unknown} in 'lines'; scenario {scenario.name!r} has {known}")
    traj = result.trajectories
    handles = []
    for colour, name in zip(_colours(len(lines)), lines):
        ln = scenario.line(name)
        for _, bus in traj[traj["line"] == name].groupby("bus", sort=False):
            t = np.column_stack([bus["arrival_s"], bus["departure_s"]]).ravel()
            x = np.repeat(bus["position_m"].to_numpy(), 2)
            if ln.is_loop:  # break the line where the bus wraps around the loop
                wrap = np.flatnonzero(np.diff(x) < 0) + 1
                t, x = np.insert(t, wrap, np.nan), np.insert(x, wrap, np.nan)
            ax.plot(t / 60, x / 1000, color=colour, lw=0.8)
        handles.append(Line2D([], [], color=colour, label=ln.label))
    ax.set_xlabel("time (min)")
    ax.set_ylabel("position along the line (km)")
    ax.set_title(f"Bus trajectories, {scenario.name}, seed {result.seed}")
    ax.legend(handles=handles, loc="upper left", fontsize="small")
    return ax


def headway_sd_by_stop(results: dict[str, EpisodeResult], ax: Axes | None = None) -> Axes:
    """Grouped bars: headway SD at each stop (x: line/stop) for each method."""
    ax = _axes(ax, (11, 4))
    if not results:
        raise ValueError("headway_sd_by_stop: 'results' is empty")
    methods = list(results)
    first = results[methods[0]].metrics["by_stop"]
    labels = [f"{line}/{i}" if len(first) > 1 else str(i) for line, sds in first.items() for i in range(len(sds))]
    x = np.arange(len(labels))
    width = 0.8 / len(methods)
    for k, (colour, method) in enumerate(zip(_colours(len(methods)), methods)):
        sds = [v for values in results[method].metrics["by_stop"].values() for v in values]
        if len(sds) != len(labels):
            raise ValueError(f"headway_sd_by_stop: result {method!r} comes from another scenario")
        ax.bar(x - 0.4 + width * (k + 0.5), sds, width, color=colour, label=method)
    ax.set_xticks(x, labels, rotation=90 if len(labels) > 20 else 0, fontsize="small")
    ax.set_xlabel("stop" if len(first) == 1 else "line/stop")
    ax.set_ylabel("headway SD (s)")
    ax.set_title("Standard deviation of time headways at each stop")
    ax.legend(fontsize="small")
    return ax


def wait_distribution(results: dict[str, EpisodeResult], ax: Axes | None = None) -> Axes:
    """Histogram (as step lines) of passenger waiting times for each method, in minutes."""
    ax = _axes(ax, (7, 4))
    waits = {m: (r.passengers["board_s"] - r.passengers["arrival_s"]).dropna().to_numpy() / 60 for m, r in results.items()}
    top = max((w.max() for w in waits.values() if w.size), default=1.0)
    bins = np.linspace(0, top, 41)
    for colour, (method, w) in zip(_colours(len(waits)), waits.items()):
        ax.hist(w, bins=bins, histtype="step", color=colour, lw=1.5, density=True,
                label=f"{method} (mean {w.mean():.1f} min)" if w.size else method)
    ax.set_xlabel("waiting time (min)")
    ax.set_ylabel("share of passengers per minute")
    ax.set_title("Passenger waiting times")
    ax.legend(fontsize="small")
    return ax


def validation_curves(curves: dict[str, list[list[dict]]], measure: str = "val_travel_time_s",
                      ax: Axes | None = None) -> Axes:
    """Greedy validation ``measure`` per validated checkpoint, one line per method: the mean over its
    agent seeds with a band of the 95 % t-interval over them (``curves``: method → one
    :attr:`~llmtraffic.bus.training.TrainedAgent.curve` per agent seed). Markers keep a series
    hidden under another visible."""
    ax = _axes(ax, (7, 4))
    for (method, runs), colour, marker in zip(curves.items(), _colours(len(curves)), "osD^v<>ph*"):
        frame = pd.concat([pd.DataFrame(run)[["episode", measure]] for run in runs])
        est = {e: stats.mean_ci(g[measure]) for e, g in frame.groupby("episode")}
        episodes = sorted(est)
        ax.plot(episodes, [est[e].mean for e in episodes], marker=marker, ms=3, color=colour,
                label=f"{method} ({len(runs)} agent seed{'s' if len(runs) > 1 else ''})")
        low, high = [est[e].low for e in episodes], [est[e].high for e in episodes]
        if not np.isnan(low).all():
            ax.fill_between(episodes, low, high, color=colour, alpha=0.2, lw=0)
    ax.set_xlabel("training episodes")
    ax.set_ylabel(measure.removeprefix("val_").replace("_s", " (s)").replace("_", " "))
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    return ax


def plot_sensitivity(frame: pd.DataFrame, status_quo_share: float):
    """Two panels of average travel time per method: against the shared share and against demand,
    each point the mean with its 95 % t-interval over the method's runs at that level (trained
    agents, each the mean of its eval episodes; eval seeds for a fixed controller)."""
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2), sharey=False)
    for ax, factor, xlabel in zip(axes, ("shared share", "demand"),
                                  ("passengers travelling within the shared corridor (%)", "demand (% of status quo)")):
        part = frame[frame["factor"] == factor]
        for method in dict.fromkeys(part["method"]):
            ci = [stats.estimate(g, "travel_time_s") for _, g in part[part["method"] == method].groupby("level")]
            levels = sorted(part.loc[part["method"] == method, "level"].unique())
            ax.errorbar(100 * np.asarray(levels), [c.mean for c in ci], yerr=[0 if c.n == 1 else c.half_width for c in ci],
                        fmt="o-", capsize=3, label=method)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("average travel time (s)")
        ax.grid(alpha=0.3)
    axes[0].axvline(100 * status_quo_share, color="0.5", ls=":", label="status quo")
    axes[1].axvline(100, color="0.5", ls=":")
    axes[0].legend(fontsize="small")
    return fig


def corridor_trajectories(result, ax=None, margin: int = 2):
    """Time–space diagram of every line on the shared corridor, in one frame of reference:
    distance from the first shared stop, from ``margin`` stops before it to ``margin`` after
    the last shared stop of each line (case 2: both lines' buses interleave on the corridor)."""
    ax = ax if ax is not None else plt.subplots(figsize=(10, 5))[1]
    scenario, traj = result.scenario, result.trajectories
    shared = set(scenario.shared_nodes)
    handles = []
    for colour, ln in zip(plt.get_cmap("tab10").colors, scenario.lines):
        idx = [i for i, v in enumerate(ln.nodes) if v in shared]
        if not idx:
            continue
        lo, hi = max(idx[0] - margin, 0), min(idx[-1] + margin, ln.n_stops - 1)
        origin = ln.positions_m[idx[0]]
        mine = traj[(traj["line"] == ln.name) & traj["stop"].between(lo, hi)]
        for _, bus in mine.groupby("bus", sort=False):
            t = np.column_stack([bus["arrival_s"], bus["departure_s"]]).ravel()
            x = np.repeat(bus["position_m"].to_numpy() - origin, 2)
            ax.plot(t / 60, x / 1000, color=colour, lw=0.7)
        handles.append(Line2D([], [], color=colour, label=ln.label))
    for node in shared:
        ln = next(ln for ln in scenario.lines if node in ln.nodes)
        first = next(i for i, v in enumerate(ln.nodes) if v in shared)
        ax.axhline((ln.positions_m[ln.nodes.index(node)] - ln.positions_m[first]) / 1000, color="0.85", lw=0.5, zorder=0)
    ax.set_xlabel("time (min)")
    ax.set_ylabel("distance from the first shared stop (km)")
    ax.legend(handles=handles, loc="upper left", fontsize="small")
    return ax
