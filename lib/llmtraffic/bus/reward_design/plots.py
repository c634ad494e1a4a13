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


def plot_trajectory(outcome: Outcome, ax=None, label: str = "loop"):
    """The loop's trajectory: the best accepted test travel time by iteration (a step line), every
    accepted candidate (dots), the candidates the refiner rejected or the best-of-k did not keep
    (crosses), and the answers that never trained (invalid code) as a count under each iteration.
    A loop without a valid starting reward is drawn as its outcome in words."""
    import matplotlib.pyplot as plt

    ax = ax or plt.gca()
    df = outcome.history()
    if not outcome.ok:
        ax.text(0.5, 0.5, f"{label}:\n{outcome.failure}", ha="center", va="center", transform=ax.transAxes, wrap=True,
                fontsize=8)
        return ax
    trained = df[df["valid"] & df["travel_time_s"].notna()]
    acc, rej = trained[trained["accepted"]], trained[~trained["accepted"]]
    iterations = range(int(df["iteration"].max()) + 1)
    best = acc.groupby("iteration")["travel_time_s"].min().reindex(iterations).cummin().ffill()
    line = ax.step(list(iterations), best.to_numpy(), where="post", label=f"{label}: best so far")[0]
    ax.plot(acc["iteration"], acc["travel_time_s"], "o", color=line.get_color(), label=f"{label}: accepted")
    ax.plot(rej["iteration"], rej["travel_time_s"], "x", color=line.get_color(), markersize=8, label=f"{label}: rejected")
    invalid = df[~df["valid"] & df["written"]].groupby("iteration").size() if "written" in df else df.iloc[0:0]
    for i, n in invalid.items():
        ax.annotate(f"{n} invalid", (i, 0), xycoords=("data", "axes fraction"), textcoords="offset points",
                    xytext=(0, 4), ha="center", fontsize=7, color=line.get_color())
    ax.set_xlabel("iteration")
    ax.set_ylabel("test average travel time on the design seeds (s)")
    ax.grid(alpha=0.3)
    return ax
