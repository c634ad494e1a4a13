"""Plots of the reward-design notebooks: test travel time per iteration with reference lines."""

from __future__ import annotations

import textwrap

from .loop import Outcome

REFERENCE_STYLES = {"no holding": ":", "feedback control": "--", "expert RL (RL-local)": "-."}


def trained(outcome: Outcome):
    """The candidates of ``outcome`` that trained and were tested (what :func:`plot_history` draws)."""
    df = outcome.history()
    if "travel_time_s" not in df:  # no candidate of the loop ever trained
        df = df.assign(travel_time_s=float("nan"))
    return df[df["valid"] & df["travel_time_s"].notna()]


def coinciding(outcomes: dict[str, Outcome]) -> list[tuple[str, str]]:
    """Pairs of labels whose loops tested the same travel times at the same iterations, so that in
    :func:`plot_history` one line hides the other (only what each kept can differ)."""
    tested = {label: trained(o) for label, o in outcomes.items()}
    points = {label: sorted(zip(df["iteration"], df["travel_time_s"].round(6))) for label, df in tested.items()}
    labels = [label for label, p in points.items() if p]
    return [(a, b) for i, a in enumerate(labels) for b in labels[i + 1:] if points[a] == points[b]]


def no_panel(ax, reason: str, fontsize: float = 8):
    """A panel with nothing to draw: its reason in words, without empty axes, wrapped to the panel's
    width (matplotlib's ``wrap=True`` wraps to the figure's, so the text ran into the next panel)."""
    width_pt = ax.get_position().width * ax.figure.get_figwidth() * 72
    chars = max(16, int(width_pt / (0.62 * fontsize)))  # an average glyph is ~0.6 em wide in DejaVu Sans
    text = "\n".join(textwrap.fill(line, chars) for line in reason.splitlines())
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, fontsize=fontsize)
    ax.set_axis_off()
    return ax


def plot_history(outcome: Outcome, ax=None, label: str | None = None):
    """Test travel time per iteration: accepted candidates as dots joined by a line, rejected or
    not-kept ones as crosses."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    ax = ax or plt.gca()
    df = trained(outcome)
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


def plot_trajectory(outcome: Outcome, ax=None, label: str = "loop", row: int = 0):
    """The loop's trajectory: the best accepted test travel time by iteration (a step line), every
    accepted candidate (dots), the candidates the refiner rejected or the best-of-k did not keep
    (crosses), and the answers that never trained (invalid code) as a count under each iteration
    (``row``: which line of counts, when several loops share the axes). A loop without a valid
    starting reward is drawn as its outcome in words; one that kept its given start draws that start."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    ax = ax or plt.gca()
    df = outcome.history()
    if outcome.final is None:
        return no_panel(ax, f"{label}:\n{outcome.failure}")
    tested = trained(outcome)
    acc, rej = tested[tested["accepted"]], tested[~tested["accepted"]]
    iterations = range(int(df["iteration"].max()) + 1)
    best = acc.groupby("iteration")["travel_time_s"].min().reindex(iterations).cummin().ffill()
    line = ax.step(list(iterations), best.to_numpy(), where="post", label=f"{label}: best so far")[0]
    ax.plot(acc["iteration"], acc["travel_time_s"], "o", color=line.get_color(), label=f"{label}: accepted")
    ax.plot(rej["iteration"], rej["travel_time_s"], "x", color=line.get_color(), markersize=8, label=f"{label}: rejected")
    invalid = df[~df["valid"] & df["written"]].groupby("iteration").size() if "written" in df else df.iloc[0:0]
    for i, n in invalid.items():
        ax.annotate(f"{n} invalid", (i, 0), xycoords=("data", "axes fraction"), textcoords="offset points",
                    xytext=(0, 4 + 9 * row), ha="center", fontsize=7, color=line.get_color())
    ax.set_xlabel("iteration")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # iterations are counts
    ax.set_ylabel("test average travel time on the design seeds (s)")
    ax.grid(alpha=0.3)
    return ax


def plot_runs(outcomes: dict[str, Outcome], ax=None, kept: dict[str, str] | None = None):
    """Every design run of a row on one axes (:func:`plot_trajectory`, one colour per run, ``outcomes``
    by label); a run without any trained reward (a cold start that kept the trivial start) is named
    in words under the lines, with its start (``kept``: label → what the run kept)."""
    import matplotlib.pyplot as plt

    ax = ax or plt.gca()
    drawn = {label: o for label, o in outcomes.items() if o.final is not None}
    if not drawn:
        return no_panel(ax, "\n".join(f"{label}: {o.failure}" for label, o in outcomes.items()))
    for row, (label, outcome) in enumerate(drawn.items()):
        plot_trajectory(outcome, ax=ax, label=label, row=row)
    words = [f"{label}: no valid reward, kept {(kept or {}).get(label, 'its start')}"
             for label in outcomes if label not in drawn]
    if words:
        ax.text(0.01, 0.99, "\n".join(words), transform=ax.transAxes, fontsize=6, va="top")
    return ax


def iteration_panels(axes, panels: dict[str, str | dict[str, Outcome]], references: dict[str, float]) -> list[str]:
    """One panel per designer (``panels``: its reason for nothing to draw, or its rows' outcomes by
    name) with :func:`plot_history` of every row and the references; returns the rows that
    coincide, as ``"a and b (designer)"``, for the caption (:func:`coincidence_note`)."""
    overlaps = []
    for ax, (designer, rows) in zip(axes, panels.items(), strict=True):
        ax.set_title(designer)
        if isinstance(rows, str) or not any(len(trained(o)) for o in rows.values()):
            no_panel(ax, rows if isinstance(rows, str) else "no row trained a reward:\n" + "\n".join(
                f"{name}: {o.failure or 'no valid candidate'}" for name, o in rows.items()))
            continue
        idle = [name for name, outcome in rows.items() if not len(trained(outcome))]
        for name, outcome in rows.items():
            if name not in idle:
                plot_history(outcome, ax=ax, label=name)
        reference_lines(ax, references)
        ax.legend(fontsize="small", ncol=2)
        if idle:  # rows with nothing to draw are named, not given an empty legend entry
            ax.text(0.01, 0.01, "no candidate trained (its reason is in the table): " + ", ".join(idle),
                    transform=ax.transAxes, fontsize=7, va="bottom")
        overlaps += [f"{a} and {b} ({designer})" for a, b in coinciding(rows)]
    return overlaps


def coincidence_note(overlaps: list[str]) -> str:
    """Caption text for rows drawn on top of each other ('' when none are)."""
    if not overlaps:
        return ""
    return (f"; {', '.join(overlaps)} tested the same candidates at every iteration (one designer seed proposes the "
            "same rewards while the loops keep the same ones), so one line hides the other; crosses mark what a "
            "loop did not keep")
