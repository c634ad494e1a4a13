"""The RL summaries of Agarwal et al., *Deep Reinforcement Learning at the Edge of the Statistical
Precipice* (NeurIPS 2021): the interquartile mean (IQM) of each method's runs and the probability
of improvement over a baseline, with 95 % stratified-bootstrap intervals.

Scores are per run (a trained agent's mean over its evaluation episodes; a method without
training has its evaluation seeds as runs) and per task (an intersection, a case), normalised per
task as the improvement over the baseline's mean in percent (positive: better, whichever way the
measure points), so tasks of different scales can be pooled.

The statistics are ``rliable``'s own (``rliable.metrics.aggregate_iqm`` and
``probability_of_improvement``). The resampling is ``scipy.stats.bootstrap`` with one sample per
(method, task), each resampled on its own: a bootstrap stratified by task, as ``rliable``'s
``StratifiedBootstrap`` does. ``rliable.library`` (its bootstrap) cannot be imported with these
pins: it imports ``arch`` 7.2, which fails under pandas 3 (``deprecate_kwarg`` changed its
signature). The bootstrap seed is a parameter and goes into the figure's sidecar.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from rliable import metrics as _rliable
from scipy import stats as _scipy_stats

Scores = Mapping[str, Mapping[str, Sequence[float]]]
"""method → task → per-run values of the measure."""

METHOD = "95 % stratified bootstrap (percentile; scipy.stats.bootstrap, each (method, task) resampled on its own)"


@dataclass(frozen=True)
class Interval:
    value: float
    low: float
    high: float

    def as_dict(self) -> dict:
        return {"value": self.value, "low": self.low, "high": self.high}


def improvement(scores: Scores, baseline: str, lower_is_better: bool = True) -> dict[str, dict[str, np.ndarray]]:
    """Every run's improvement over the baseline's mean on its task, in % (positive: better)."""
    if baseline not in scores:
        raise ValueError(f"baseline {baseline!r} is not among the methods {sorted(scores)}")
    sign = -1.0 if lower_is_better else 1.0
    out: dict[str, dict[str, np.ndarray]] = {}
    for method, tasks in scores.items():
        if set(tasks) != set(scores[baseline]):
            raise ValueError(f"{method!r} has tasks {sorted(tasks)}, the baseline {sorted(scores[baseline])}")
        out[method] = {}
        for task, values in tasks.items():
            base = float(np.mean(scores[baseline][task]))
            if base == 0:
                raise ValueError(f"the baseline's mean on {task!r} is 0: no relative improvement")
            out[method][task] = sign * 100.0 * (np.asarray(values, float) - base) / abs(base)
    return out


def _bootstrap(samples: list[np.ndarray], statistic, seed: int, reps: int) -> Interval:
    value = float(statistic(*samples))
    if min(len(s) for s in samples) < 2:
        return Interval(value, math.nan, math.nan)
    res = _scipy_stats.bootstrap(tuple(samples), statistic, n_resamples=reps, method="percentile",
                                 vectorized=False, rng=np.random.default_rng(seed))
    return Interval(value, float(res.confidence_interval.low), float(res.confidence_interval.high))


def iqm(runs: Mapping[str, np.ndarray], seed: int, reps: int = 2000) -> Interval:
    """IQM over every run of every task, with its stratified-bootstrap 95 % interval."""
    return _bootstrap(list(runs.values()), lambda *s: _rliable.aggregate_iqm(np.concatenate(s)), seed, reps)


def probability_of_improvement(mine: Mapping[str, np.ndarray], theirs: Mapping[str, np.ndarray], seed: int,
                               reps: int = 2000) -> Interval:
    """P(a run of ``mine`` beats a run of ``theirs``), averaged over tasks (rliable's definition:
    the Mann–Whitney U over all pairs of runs of a task, ties counting half)."""
    tasks = list(mine)
    k = len(tasks)

    def statistic(*samples):
        return float(np.mean([_rliable.probability_of_improvement(samples[i][:, None], samples[k + i][:, None])
                              for i in range(k)]))

    return _bootstrap([mine[t] for t in tasks] + [theirs[t] for t in tasks], statistic, seed, reps)


def summarize(scores: Scores, baseline: str, lower_is_better: bool = True, seed: int = 0,
              reps: int = 2000) -> dict[str, dict]:
    """Per method: IQM of its improvement (%) and, for every method but the baseline, its
    probability of improvement over the baseline, each with a 95 % stratified-bootstrap interval,
    the runs per task and the per-run improvements (for the sidecar)."""
    runs = improvement(scores, baseline, lower_is_better)
    out = {}
    for method, mine in runs.items():
        record = {"runs per task": {t: len(v) for t, v in mine.items()}, "iqm": iqm(mine, seed, reps).as_dict(),
                  "improvement (%)": {t: v.tolist() for t, v in mine.items()}}
        if method != baseline:
            record["probability of improvement"] = probability_of_improvement(mine, runs[baseline], seed, reps).as_dict()
        out[method] = record
    return out


def _runs(counts: list[int]) -> str:
    """A method's runs per task for its axis label, saying why it has no point or no interval."""
    text = f"{'/'.join(map(str, counts))} run{'s' * (max(counts) != 1)}"
    if min(counts) == 0:
        return text + ": nothing to draw"
    return text + (": no interval" if min(counts) == 1 else "")


def plot(summary: dict[str, dict], baseline: str, measure: str):
    """Two panels: the IQM of each method's improvement over the baseline and its probability of
    improvement, points with 95 % bootstrap intervals. Returns the figure."""
    import matplotlib.pyplot as plt

    methods = list(summary)
    fig, (ax_iqm, ax_poi) = plt.subplots(1, 2, figsize=(11, 0.5 * len(methods) + 1.6), sharey=True)
    y = np.arange(len(methods))[::-1]
    for ax, key in ((ax_iqm, "iqm"), (ax_poi, "probability of improvement")):
        for yi, m in zip(y, methods):
            if key not in summary[m]:
                continue
            iv = summary[m][key]
            ax.plot(iv["value"], yi, "o", color="C0")
            if not math.isnan(iv["low"]):
                ax.hlines(yi, iv["low"], iv["high"], color="C0", lw=2)
        ax.grid(alpha=0.3, axis="x")
    ax_iqm.axvline(0, color="0.4", lw=0.8)
    ax_poi.axvline(0.5, color="0.4", lw=0.8)
    counts = {m: list(summary[m]["runs per task"].values()) for m in methods}
    ax_iqm.set_yticks(y, [f"{m} ({_runs(counts[m])})" for m in methods], fontsize="small")
    ax_poi.set_xlim(-0.03, 1.03)  # a point at 0 or 1 stays whole
    ax_iqm.set_xlabel(textwrap.fill(f"IQM of the {measure} improvement over {baseline} (%)", 48))
    ax_poi.set_xlabel(textwrap.fill(f"P(a run beats a run of {baseline})", 48))
    fig.tight_layout()
    return fig
