"""IQM and probability of improvement with stratified-bootstrap intervals (issue 35), on hand-computed cases."""

import json
import math

import numpy as np
import pytest

from llmtraffic import study
from llmtraffic.study import summaries


def test_improvement_is_relative_to_the_baseline_mean_and_points_to_better():
    scores = {"base": {"t": [10.0, 10.0]}, "A": {"t": [8.0, 9.0]}}
    runs = summaries.improvement(scores, "base")  # lower is better: 8 is 20 % better than 10
    assert runs["A"]["t"].tolist() == [20.0, 10.0] and runs["base"]["t"].tolist() == [0.0, 0.0]
    assert summaries.improvement(scores, "base", lower_is_better=False)["A"]["t"].tolist() == [-20.0, -10.0]
    with pytest.raises(ValueError, match="not among the methods"):
        summaries.improvement(scores, "B")
    with pytest.raises(ValueError, match="has tasks"):
        summaries.improvement({**scores, "C": {"u": [1.0]}}, "base")


def test_iqm_and_probability_of_improvement_by_hand():
    # IQM of 1..8: the middle half 3, 4, 5, 6 -> 4.5 (rliable trims 25 % each side)
    est = summaries.iqm({"t": np.arange(1.0, 9.0)}, seed=0, reps=200)
    assert est.value == pytest.approx(4.5) and est.low <= 4.5 <= est.high
    # A beats B in 3 of 4 pairs on task t (2>1, 2>1... ): A = [2, 3], B = [1, 3] -> pairs (2,1) win, (2,3) loss,
    # (3,1) win, (3,3) tie (half): (1 + 0 + 1 + 0.5) / 4 = 0.625; on task u A always wins: 1.0; mean 0.8125
    poi = summaries.probability_of_improvement({"t": np.array([2.0, 3.0]), "u": np.array([5.0, 6.0])},
                                               {"t": np.array([1.0, 3.0]), "u": np.array([1.0, 2.0])}, seed=0, reps=200)
    assert poi.value == pytest.approx(0.8125)
    one = summaries.iqm({"t": np.array([1.0])}, seed=0)
    assert one.value == 1.0 and math.isnan(one.low)


def test_the_bootstrap_is_seeded_and_the_seed_changes_it():
    runs = {"t": np.array([1.0, 4.0, 2.0, 8.0, 3.0]), "u": np.array([0.5, 2.5, 1.0])}
    a, b = summaries.iqm(runs, seed=3, reps=300), summaries.iqm(runs, seed=3, reps=300)
    assert a == b
    assert summaries.iqm(runs, seed=4, reps=300) != a


def test_summary_figure_records_the_bootstrap_seed_and_runs_in_its_sidecar(claims_ctx, outdirs):
    scores = {"before": {"x": [10.0, 11.0, 9.0]}, "tuned": {"x": [7.0, 8.0, 9.5, 6.0]}}
    summary = summaries.summarize(scores, "before", seed=7, reps=200)
    assert "probability of improvement" not in summary["before"]
    assert summary["tuned"]["runs per task"] == {"x": 4}
    fig = summaries.plot(summary, "before", "queue")
    study.save_figure(fig, "rl_summary", caption="IQM and probability of improvement",
                      stats={"bootstrap_seed": 7, "method": summaries.METHOD, "summary": summary})
    side = json.loads((outdirs / "figures" / "fx_plot" / "rl_summary.json").read_text())
    assert side["stats"]["bootstrap_seed"] == 7
    assert side["stats"]["summary"]["tuned"]["improvement (%)"]["x"] == pytest.approx([30.0, 20.0, 5.0, 40.0])


def test_summary_figure_says_why_a_row_has_no_point_or_interval_and_its_axis_labels_do_not_collide():
    import matplotlib.pyplot as plt

    summary = summaries.summarize({"before": {"x": [10.0, 11.0, 9.0]}, "tuned": {"x": [7.0, 8.0]},
                                   "once": {"x": [8.0]}}, "before", seed=0, reps=100)
    summary["never"] = {"runs per task": {"x": 0}, "iqm": {"value": math.nan, "low": math.nan, "high": math.nan}}
    fig = summaries.plot(summary, "a baseline with a long name before fine-tuning", "queue")
    ax_iqm, ax_poi = fig.axes
    labels = [t.get_text() for t in ax_iqm.get_yticklabels()]
    assert labels == ["before (3 runs)", "tuned (2 runs)", "once (1 run: no interval)", "never (0 runs: nothing to draw)"]
    fig.canvas.draw()
    left, right = ax_iqm.xaxis.label.get_window_extent(), ax_poi.xaxis.label.get_window_extent()
    plt.close(fig)
    assert left.x1 < right.x0  # the two axis titles side by side, not over each other
