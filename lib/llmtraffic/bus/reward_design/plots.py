"""Plots of the reward-design notebooks: test travel time per iteration with reference lines."""

from __future__ import annotations

from .loop import Outcome

REFERENCE_STYLES = {"no holding": ":", "feedback control": "--", "expert RL (RL-local)": "-."}


def plot_history(outcome: Outcome, ax=None, label: str | None = None):
    """Test travel time per iteration: accepted candidates as dots joined by a line, rejected or
    not-kept ones as crosses."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    ax = ax or plt.gca()
    df = outcome.history()
    df = df[df["valid"] & df["travel_time_s"].notna()] if "travel_time_s" in df else df.iloc[0:0]
    acc, rej = df[df["accepted"]], df[~df["accepted"]]
    line = ax.plot(acc["iteration"], acc["travel_time_s"], "o-", label=label or "accepted")[0]
    ax.plot(rej["iteration"], rej["travel_time_s"], "x", color=line.get_color(), markersize=8,
            label=f"{label} not kept" if label else "not kept")
    ax.set_xlabel("iteration")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # iterations are counts
    ax.set_ylabel("test average travel time on the design seeds (s)")
    ax.grid(alpha=0.3)
    return ax


def reference_lines(ax, travel_time_s: dict[str, float]):
    """Horizontal lines at the references' travel time on the same design seeds."""
    for name, value in travel_time_s.items():
        ax.axhline(value, color="grey", linestyle=REFERENCE_STYLES.get(name, ":"), linewidth=1.2, label=name)
    return ax
