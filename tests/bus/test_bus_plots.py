"""Bus figures draw what the results hold."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from llmtraffic.bus import controllers, plots, scenarios, simulate  # noqa: E402


@pytest.fixture(scope="module")
def case2_results():
    sc = scenarios.case2()
    return {
        "no holding": simulate(sc, seed=0, horizon_s=1800),
        "feedback": simulate(sc, controllers.Feedback(), seed=0, horizon_s=1800),
    }


def test_trajectories_draw_one_path_per_bus_in_one_colour_per_line(case2_results):
    result = case2_results["no holding"]
    ax = plots.trajectories(result)
    buses = result.trajectories.groupby("line")["bus"].nunique()
    assert len(ax.lines) == buses.sum()
    colours = {line: {tuple(np.round(ln.get_color(), 3)) for ln in ax.lines[a:b]}
               for line, a, b in [("3436", 0, buses["3436"]), ("3986", buses["3436"], buses.sum())]}
    assert all(len(c) == 1 for c in colours.values()) and colours["3436"] != colours["3986"]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["line 1", "line 52"]
    assert "time" in ax.get_xlabel() and "position" in ax.get_ylabel()
    only = plots.trajectories(result, ax=plt.subplots()[1], lines=["3986"])
    assert len(only.lines) == buses["3986"]
    with pytest.raises(ValueError, match="unknown line"):
        plots.trajectories(result, lines=["42"])
    plt.close("all")


def test_a_loop_trajectory_breaks_where_the_bus_wraps():
    result = simulate(scenarios.case1(demand_scale=0), seed=0)
    ax = plots.trajectories(result)
    y = ax.lines[0].get_ydata()
    assert np.isnan(y).sum() >= 6  # 4 h at 32 min per lap
    assert np.nanmax(y) == 9.99 and np.nanmin(y) == 0.666
    plt.close("all")


def test_headway_bars_are_the_per_stop_metrics(case2_results):
    ax = plots.headway_sd_by_stop(case2_results)
    heights = [p.get_height() for p in ax.patches]
    expected = [v for m in case2_results.values() for line in m.metrics["by_stop"].values() for v in line]
    np.testing.assert_array_equal(heights, expected)
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["no holding", "feedback"]
    plt.close("all")


def test_wait_distribution_labels_each_method_with_its_mean(case2_results):
    ax = plots.wait_distribution(case2_results)
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    for label, result in zip(labels, case2_results.values()):
        mean = result.metrics["wait_time_s"] / 60
        assert label.endswith(f"(mean {mean:.1f} min)")
    plt.close("all")


def test_validation_curves_draw_the_mean_over_agent_seeds_with_a_band():
    runs = [[{"episode": e, "val_travel_time_s": 1000.0 + s * 10 - e} for e in (1, 2, 3)] for s in range(3)]
    single = [[{"episode": e, "val_travel_time_s": 900.0} for e in (1, 2, 3)]]
    ax = plots.validation_curves({"RL-local": runs, "RL-global": single})
    means = ax.lines[0].get_ydata()
    assert list(means) == [1009.0, 1008.0, 1007.0]  # mean of seeds 0, 1, 2
    assert len(ax.collections) == 1  # one seed: no band
    band = ax.collections[0].get_paths()[0].vertices[:, 1]
    assert band.min() < 1007.0 - 5 and band.max() > 1009.0 + 5  # t-interval of (0, 10, 20) around the mean
    assert ax.lines[1].get_marker() != ax.lines[0].get_marker()
    plt.close("all")


def test_loop_history_has_integer_iteration_ticks():
    import matplotlib.pyplot as plt
    import pandas as pd

    from llmtraffic.bus.reward_design.plots import plot_history

    class History:  # the part of an Outcome that plot_history reads
        def history(self):
            return pd.DataFrame({"iteration": [0, 1, 2, 3], "valid": True, "accepted": [True, True, True, False],
                                 "travel_time_s": [1618.0, 1538.0, 1396.0, 1714.0]})

    fig, ax = plt.subplots()
    plot_history(History(), ax=ax, label="paradigm")
    fig.canvas.draw()
    ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
    plt.close(fig)
    assert ticks and all(float(t).is_integer() for t in ticks)


class _Loop:  # the part of an Outcome that the iteration plots read
    def __init__(self, times, accepted, failure=""):
        import pandas as pd

        self.failure = failure
        self._df = pd.DataFrame({"iteration": range(len(times)), "valid": [t is not None for t in times],
                                 "accepted": accepted, "travel_time_s": [np.nan if t is None else t for t in times]})

    def history(self):
        return self._df


def test_loops_that_tested_the_same_candidates_are_named_as_coinciding():
    from llmtraffic.bus.reward_design.plots import coincidence_note, coinciding

    full = _Loop([1618.0, 1538.0, 1396.0, 1714.0], [True, True, True, False])
    no_refiner = _Loop([1618.0, 1538.0, 1396.0, 1714.0], [True, True, True, True])
    cold = _Loop([1327.0, 1393.0, 1336.0, 1343.0], [True] * 4)
    pairs = coinciding({"paradigm": full, "without refiner": no_refiner, "cold start": cold})
    assert pairs == [("paradigm", "without refiner")]
    assert coincidence_note([]) == ""
    assert "paradigm and without refiner (search) tested the same candidates" in coincidence_note(
        ["paradigm and without refiner (search)"])


def test_a_panel_with_nothing_to_draw_states_why_without_axes():
    from llmtraffic.bus.reward_design.plots import iteration_panels

    fig, axes = plt.subplots(1, 3)
    failed = _Loop([None, None], [False, False], failure="no valid reward in 2 tries")
    overlaps = iteration_panels(axes, {"unavailable": "not run: needs an LLM backend",
                                       "LLM": {"paradigm": failed},
                                       "search": {"paradigm": _Loop([1500.0], [True])}}, {"no holding": 1320.0})
    texts = [[" ".join(t.get_text().split()) for t in ax.texts] for ax in axes]  # wrapped to each narrow panel
    shown = [ax.axison for ax in axes]
    plt.close(fig)
    assert texts[0] == ["not run: needs an LLM backend"] and "no valid reward in 2 tries" in texts[1][0]
    assert shown == [False, False, True] and overlaps == []


def test_a_panel_with_nothing_to_draw_keeps_its_reason_inside_its_own_panel():
    from llmtraffic.bus.reward_design.plots import no_panel

    reason = ("no valid reward from Qwen2.5-Coder-1.5B-Instruct (paper: GPT-4) in 2 tries, 1 of 1 loops, 2 answers "
              "(agent seed 0: 2 answers invalid: 2 × failed in training; the loop kept its warm start)")
    fig, (left, right) = plt.subplots(1, 2, figsize=(14, 4.5))
    no_panel(right, reason)
    fig.canvas.draw()
    text, box = right.texts[0], right.get_window_extent()
    drawn = text.get_window_extent()
    plt.close(fig)
    assert box.x0 <= drawn.x0 and drawn.x1 <= box.x1, (drawn, box)  # not into the left panel or off the figure
    assert text.get_text().replace("\n", " ") == reason  # wrapped, not cut


def test_a_designer_panel_draws_its_trained_rows_and_names_the_rows_that_never_trained():
    import pandas as pd

    from llmtraffic.bus.reward_design.plots import iteration_panels

    class Untrained:  # every answer invalid: the history has no travel-time column at all
        failure = "no valid reward in 2 tries"

        def history(self):
            return pd.DataFrame({"iteration": [0, 0], "valid": [False, False], "accepted": [False, False]})

    fig, axes = plt.subplots(1, 1, squeeze=False)
    iteration_panels(axes[0], {"LLM": {"paradigm": _Loop([1500.0, 1450.0], [True, True]), "critic": Untrained()}},
                     {"no holding": 1320.0})
    ax = axes[0][0]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    notes = [t.get_text() for t in ax.texts]
    plt.close(fig)
    assert "paradigm" in legend and not any(x.startswith("critic") for x in legend)
    assert notes == ["no candidate trained (its reason is in the table): critic"]
