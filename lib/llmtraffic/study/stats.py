"""The study's one statistics helper: means with 95 % confidence intervals over independent runs,
paired differences, minimum detectable effects, verdicts.

Method (used by every table and claim):

- **The unit is the independent run.** A trained method's run is one trained agent (one training
  seed): its evaluation episodes are averaged into one value first (:func:`per_run`), then the
  interval is taken over agents. The episodes of one agent are not replicates of training, and
  pooling them would narrow the interval by up to √(episodes per agent) (Agarwal et al., *Deep
  Reinforcement Learning at the Edge of the Statistical Precipice*, 2021; Henderson et al., *Deep
  RL that Matters*, 2018). A method without training (no holding, feedback control, FixedTime,
  MaxPressure, SOTL) varies only with the evaluation seed, which is then its unit. A designer or
  loop comparison takes the design run as its unit (the caller names it: ``noun="design run"``).
- **Interval.** Student's t-interval over the n runs: ``mean ± t_{n−1, 0.975} · s / √n`` with the
  sample standard deviation ``s`` (ddof = 1). With n = 1 there is no interval (bounds NaN) and the
  verdict is "inconclusive (n = 1)".
- **Distinct runs** (:func:`distinct`). Runs that are one run are counted once: a deterministic
  simulator on several seeds, an agent whose every episode equals another agent's, and every unit
  that is its own reference (a loop that kept its warm start is the expert-reward agent; a
  fine-tune equal to its base), whose difference is 0 by construction. :func:`compare` knows each
  unit's episodes on both sides and compares those (:func:`identity`); from per-run differences
  alone (a stored claim) runs whose differences agree within float rounding (relative tolerance
  :data:`RTOL`, absolute :data:`ATOL`) are taken as one. A difference over fewer than 2 distinct
  runs, or whose distinct runs have no spread, is "inconclusive (deterministic, n = 1)": its single
  value is shown, its interval has no width, its MDE and p-value are undefined.
- **p-value.** Every difference carries the two-sided p-value of the t-test behind its interval
  (the same t and df), so a multiplicity correction can adjust it (:mod:`llmtraffic.study.claims`).
- **Paired difference** (:func:`compare`). Two trained methods that share training seeds pair by
  training seed (per-run means over the same evaluation episodes), on the seeds both have (a run
  without its partner, such as a design loop that gave no agent, is left out and named in n); two fixed methods pair by
  evaluation seed; a trained method against a fixed one (or an untrained, sampled baseline) takes
  the trained method's runs as units: each run's mean of its paired per-eval-seed differences.
  The fixed side's level is shared by every run, so its evaluation-seed (or sampling) variance is
  not averaged away by more runs: it is propagated (:func:`crossed`), ``SE² = s²_run / n +
  s²_seed / m`` with ``s_seed`` the SD over the m eval seeds of the per-seed differences averaged
  over runs, and Satterthwaite's df capped at n − 1 (so a varying reference only ever widens the
  interval). Trained
  methods without shared seeds are compared unpaired (Welch's interval). ``relative=True``
  expresses the difference in percent of the reference's mean (the interval scales with it).
- **Minimum detectable effect** (:func:`mde`): the smallest true mean difference a two-sided
  paired t-test over the same n runs detects with power 0.8 at α = 0.05, from the observed SD of
  the per-run differences, computed exactly with the noncentral t distribution (Welch's unpaired
  case: the normal approximation). An "inconclusive" thus says how large a difference could have
  been seen.
- **n names its unit** (:func:`count`): "3 agents (× 10 episodes each)", never a bare product.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import optimize as _optimize
from scipy import stats as _scipy_stats

LEVEL = 0.95
ALPHA = 1 - LEVEL
POWER = 0.8
METHOD = "95 % t-interval over independent runs (n − 1 df)"
WELCH = "95 % Welch t-interval over independent runs"
CROSSED = ("95 % t-interval over independent runs, the eval-seed variance of the paired per-seed differences "
           "propagated (Satterthwaite df)")
RTOL, ATOL = 1e-9, 1e-9
"""Runs whose values agree within this relative (or absolute) tolerance are one run: float
rounding (a sum taken in another order) is not a difference between runs."""

BETTER, WORSE, NO_DIFFERENCE = "better", "worse", "no detectable difference"
INCONCLUSIVE_N1 = "inconclusive (n = 1)"
DETERMINISTIC = "inconclusive (deterministic, n = 1)"
DESCRIPTIVE = "descriptive: no comparison"

NOUNS = ("agent", "eval seed", "design run", "system", "training seed")
"""What an independent run can be; a comparative caption names one of them with its count."""


# ---------------------------------------------------------------- what n counts


def count(n: int, noun: str, episodes: int | Sequence[int] = 1, inner: str = "episode") -> str:
    """n with its unit: ``"3 agents (× 10 episodes each)"``, ``"10 eval seeds"``, ``"1 agent (× 3 episodes)"``.

    ``episodes``: what each run averages (one count, or one per run when they differ).
    """
    if noun not in NOUNS:
        raise ValueError(f"unknown unit {noun!r}; one of {NOUNS}")
    sizes = sorted({int(e) for e in np.atleast_1d(episodes)})
    text = f"{n} {noun}{'s' * (n != 1)}"
    if sizes == [1]:
        return text
    many = f"{sizes[0]}" if len(sizes) == 1 else f"{sizes[0]}–{sizes[-1]}"
    plural = "s" * (sizes[-1] != 1)
    return text + f" (× {many} {inner}{plural}{' each' * (n > 1)})"


_COUNT = re.compile(r"\b\d+ (?:" + "|".join(NOUNS) + r")s?\b")
_BARE = re.compile(r"n = \d+ [^;()]*×")


def check_caption(caption: str, estimates: Iterable[Estimate] = ()) -> None:
    """Refuse a comparative table's caption that does not state the interval method and n with
    its unit (``"3 agents (× 10 episodes each)"``, see :func:`count`), that gives n as a bare
    product (``"n = 30 agent seeds × eval seeds"``), or that omits the unit of a stored estimate."""
    problems = []
    if "interval" not in caption:
        problems.append("it names no interval method (e.g. stats.caption(...))")
    if not _COUNT.search(caption):
        problems.append(f"it gives no n with its unit (one of {', '.join(NOUNS)}; stats.count(3, 'agent', 10))")
    if _BARE.search(caption):
        problems.append("it gives n as a bare product of seeds: count the independent runs (stats.count)")
    missing = sorted({e.of for e in estimates if e.of and e.of not in caption})
    if missing:
        problems.append(f"it omits the unit(s) of its estimates: {missing}")
    if problems:
        raise ValueError(f"caption {caption!r} refused: " + "; ".join(problems)
                         + f" (a table without a comparison says descriptive=True: {DESCRIPTIVE!r})")


# ---------------------------------------------------------------- estimates


@dataclass(frozen=True)
class Estimate:
    """A mean with its 95 % confidence interval over ``n`` independent runs.

    ``runs`` keeps the per-run values it was computed from (for a difference: the per-run
    differences, in the estimate's unit), so a sidecar can store them and a reader recompute the
    interval; ``of`` is what n counts (:func:`count`); ``mde`` the minimum detectable effect of a
    difference (:func:`mde`), in the estimate's unit; ``p`` the two-sided p-value of the test
    behind the interval (None where there is none); ``distinct`` how many of the runs differ
    (:func:`distinct`; None where not counted); ``seed_runs`` the per-eval-seed differences
    averaged over runs whose variance the interval propagates (:func:`crossed`); ``groups``, where
    the runs' identities were known (:func:`identity`), per run the index of its first copy.
    """

    mean: float
    low: float
    high: float
    n: int
    unit: str = ""  # of the measure, e.g. "%" for a relative difference
    of: str = ""  # what n counts, e.g. "3 agents (× 10 episodes each)"
    runs: tuple[float, ...] = ()
    mde: float | None = None
    method: str = METHOD
    p: float | None = None
    distinct: int | None = None
    seed_runs: tuple[float, ...] = ()
    groups: tuple[int, ...] = ()

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2

    @property
    def deterministic(self) -> bool:
        """Several runs, all one value (within float rounding): one distinct run."""
        return self.n > 1 and self.distinct == 1

    def excludes_zero(self) -> bool:
        return (not self.deterministic and not (math.isnan(self.low) or math.isnan(self.high))
                and (self.low > 0 or self.high < 0))

    def format(self, digits: int = 1) -> str:
        """``12.3 ± 0.4`` (the ± is the CI half-width), ``12.3 (n = 1 agent, no CI)``, or ``12.3
        (n = 3, all equal)`` when every run gave the same value (a deterministic simulator run on
        several seeds, or a measure that is 0 by construction): a "± 0.0" would read as precise."""
        unit = f" {self.unit}" if self.unit else ""
        n = self.of.split(" (")[0] if self.of else str(self.n)
        if math.isnan(self.mean):
            return "n/a"
        if math.isnan(self.low):
            return f"{self.mean:.{digits}f}{unit} (n = {n}, no CI)"
        if self.deterministic or self.low == self.high:
            return f"{self.mean:.{digits}f}{unit} (n = {n}, all equal)"
        return f"{self.mean:.{digits}f} ± {self.half_width:.{digits}f}{unit}"

    def format_interval(self, digits: int = 1) -> str:
        """``12.3 [11.9, 12.7]``."""
        if math.isnan(self.low) or self.deterministic:
            return self.format(digits)
        unit = f" {self.unit}" if self.unit else ""
        return f"{self.mean:.{digits}f} [{self.low:.{digits}f}, {self.high:.{digits}f}]{unit}"

    def __str__(self) -> str:
        return self.format()

    def as_dict(self) -> dict:
        return {"mean": self.mean, "low": self.low, "high": self.high, "n": self.n, "unit": self.unit,
                "of": self.of, "runs": list(self.runs), "mde": self.mde, "method": self.method, "p": self.p,
                "distinct": self.distinct, "seed_runs": list(self.seed_runs), "groups": list(self.groups)}


def _values(values: Sequence[float] | np.ndarray) -> np.ndarray:
    arr = np.asarray(values, dtype=float).ravel()
    if arr.size == 0:
        raise ValueError("a confidence interval needs at least one value")
    if not np.isfinite(arr).all():
        raise ValueError(f"non-finite values in a confidence interval: {arr[~np.isfinite(arr)][:3].tolist()}")
    return arr


def same(a: float, b: float) -> bool:
    """Whether two runs' values are one value up to float rounding (:data:`RTOL`, :data:`ATOL`)."""
    return math.isclose(a, b, rel_tol=RTOL, abs_tol=ATOL)


def distinct(values: Sequence[float] | np.ndarray, keys: Sequence | None = None) -> np.ndarray:
    """The values of the distinct runs: runs with the same ``keys`` entry (:func:`identity`) are
    one run; without keys, runs whose values agree within float rounding (:func:`same`, chained).
    Each distinct run is represented by the mean of its copies, ascending by value."""
    arr = _values(values)
    if keys is not None:
        if len(keys) != arr.size:
            raise ValueError(f"distinct: {len(keys)} keys for {arr.size} runs")
        groups: dict = {}
        for key, v in zip(keys, arr):
            groups.setdefault(key, []).append(float(v))
        return np.sort([float(np.mean(g)) for g in groups.values()])
    arr = np.sort(arr)
    runs = [[float(arr[0])]]
    for v in arr[1:]:
        if same(float(v), runs[-1][-1]):
            runs[-1].append(float(v))
        else:
            runs.append([float(v)])
    return np.array([float(np.mean(g)) for g in runs])


SAME_AS_REFERENCE = "same as its reference"
"""The :func:`identity` of every unit that is its own reference: all of them are one run."""


def identity(mine: Sequence[float], reference: Sequence[float]) -> tuple | str:
    """What makes a unit of a comparison the run it is: its episodes' values on both sides
    (rounded to 9 significant digits, so float rounding does not split one run in two), or
    :data:`SAME_AS_REFERENCE` when its own episodes equal its reference's."""
    a, b = (tuple(float(f"{v:.9g}") for v in np.asarray(x, float).ravel()) for x in (mine, reference))
    return SAME_AS_REFERENCE if a == b else (a, b)


def mean_ci(values: Sequence[float] | np.ndarray, unit: str = "", of: str = "") -> Estimate:
    """Mean and 95 % t-interval of independent per-run values (n = 1: no interval, bounds NaN;
    runs that are one value up to rounding: no width, :func:`distinct`)."""
    arr = _values(values)
    n, mean, k = arr.size, float(arr.mean()), distinct(arr).size
    if n == 1:
        return Estimate(mean, math.nan, math.nan, 1, unit, of, tuple(arr.tolist()), distinct=1)
    if k == 1:
        return Estimate(mean, mean, mean, n, unit, of, tuple(arr.tolist()), distinct=1)
    half = float(_scipy_stats.t.ppf(0.5 + LEVEL / 2, n - 1) * arr.std(ddof=1) / math.sqrt(n))
    return Estimate(mean, mean - half, mean + half, n, unit, of, tuple(arr.tolist()), distinct=k)


def _mde(se: float, df: float, alpha: float = ALPHA, power: float = POWER) -> float:
    """The δ at which a two-sided t-test with standard error ``se`` and ``df`` degrees of freedom
    rejects with probability ``power``: P(|T| > t_{df, 1−α/2}) = power, T ~ noncentral t (df, δ / se)."""
    if not (math.isfinite(se) and se > 0 and df > 0):
        return math.nan
    crit = float(_scipy_stats.t.ppf(1 - alpha / 2, df))

    def shortfall(nc: float) -> float:
        nct = _scipy_stats.nct
        lower = float(nct.cdf(-crit, df, nc))  # the wrong-sign rejections; scipy returns NaN where it underflows
        return float(nct.sf(crit, df, nc)) + (0.0 if math.isnan(lower) else lower) - power

    high = crit + 1.0
    while shortfall(high) < 0:  # power grows with the noncentrality: widen until it reaches ``power``
        high *= 2
    return float(_optimize.brentq(shortfall, 0.0, high) * se)


def mde(sd: float, n: int, alpha: float = ALPHA, power: float = POWER) -> float:
    """Minimum detectable effect of a two-sided one-sample (paired) t-test over ``n`` runs with
    per-run SD ``sd``: the δ at which P(|T| > t_{n−1, 1−α/2}) = ``power`` for T ~ noncentral t
    (n − 1 df, noncentrality δ√n / sd). NaN for n < 2 and for sd = 0 (runs that are all one value
    detect nothing: the effect is undefined, not 0)."""
    if n < 2 or not math.isfinite(sd) or sd == 0:
        return math.nan
    return _mde(sd / math.sqrt(n), n - 1, alpha, power)


def crossed(runs: np.ndarray, seed_runs: np.ndarray) -> tuple[float, float]:
    """Standard error and df of the mean of per-run differences to a shared reference level, the
    level's eval-seed variance propagated: ``SE² = s²_run / n + s²_seed / m`` (``seed_runs``: the
    per-eval-seed differences averaged over runs, m of them), Satterthwaite's df capped at n − 1
    (the df never grows by adding a variance). Without seed values (or one seed) it is the plain
    ``s / √n`` with n − 1 df."""
    n, m = runs.size, seed_runs.size
    a = float(runs.var(ddof=1)) / n if n > 1 else 0.0
    b = float(seed_runs.var(ddof=1)) / m if m > 1 and distinct(seed_runs).size > 1 else 0.0
    if b == 0.0:
        return math.sqrt(a), float(n - 1)
    parts = (a**2 / (n - 1) if n > 1 else 0.0) + b**2 / (m - 1)
    return math.sqrt(a + b), min((a + b) ** 2 / parts, float(n - 1))


def difference(diff: Sequence[float] | np.ndarray, unit: str = "", of: str = "",
               seed_runs: Sequence[float] | np.ndarray = (), keys: Sequence | None = None) -> Estimate:
    """The mean of per-run differences with its 95 % t-interval, p-value and minimum detectable
    effect (:func:`mde`). A run that is another run counts once (:func:`distinct`, by ``keys``
    where the caller knows each run's episodes, :func:`identity`); fewer than 2 distinct runs, or
    distinct runs without spread, give no interval width, no p and no MDE (deterministic).
    ``seed_runs``: the per-eval-seed differences whose variance the interval propagates (:func:`crossed`)."""
    arr = _values(diff)
    seeds = np.asarray(seed_runs, dtype=float).ravel()
    unique = distinct(arr, keys)
    k, n = unique.size, arr.size
    if n == 1:
        return Estimate(float(arr[0]), math.nan, math.nan, 1, unit, of, tuple(arr.tolist()), math.nan,
                        distinct=1, seed_runs=tuple(seeds.tolist()))
    groups = () if keys is None else tuple(list(keys).index(key) for key in keys)  # each run's first copy
    if k == 1 or distinct(unique).size == 1:  # one run, or runs that differ but not in their difference
        mean = float(unique.mean())
        return Estimate(mean, mean, mean, n, unit, of, tuple(arr.tolist()), math.nan,
                        distinct=1, seed_runs=tuple(seeds.tolist()), groups=groups)
    values = unique if k < n else arr  # a run that is another's duplicate counts once
    mean = float(values.mean())
    se, df = crossed(values, seeds)
    half = float(_scipy_stats.t.ppf(0.5 + LEVEL / 2, df)) * se
    p = float(2 * _scipy_stats.t.sf(abs(mean) / se, df))
    method = CROSSED if seeds.size > 1 and distinct(seeds).size > 1 else METHOD
    return Estimate(mean, mean - half, mean + half, n, unit, of, tuple(arr.tolist()), _mde(se, df), method, p, k,
                    tuple(seeds.tolist()), groups)


def paired_difference(a: Sequence[float], b: Sequence[float], relative: bool = False, of: str = "") -> Estimate:
    """Mean of ``a_i − b_i`` over paired runs with its 95 % t-interval and minimum detectable effect.

    ``relative=True``: in percent of ``mean(b)``. Raises when the two are not the same length
    (unpaired data must not be compared this way).
    """
    a_arr, b_arr = _values(a), _values(b)
    if a_arr.shape != b_arr.shape:
        raise ValueError(f"paired difference needs equally many units: {a_arr.size} vs {b_arr.size}")
    diff = a_arr - b_arr
    if not relative:
        return difference(diff, "", of)
    base = float(b_arr.mean())
    if base == 0:
        raise ValueError("a relative difference needs a non-zero reference mean")
    return difference(100.0 * diff / abs(base), "%", of)


def unpaired_difference(a: Sequence[float], b: Sequence[float], relative: bool = False, of: str = "") -> Estimate:
    """``mean(a) − mean(b)`` of two sets of independent runs (no shared seeds) with Welch's
    95 % interval and p-value; its MDE by the normal approximation, (z_{1−α/2} + z_{power}) · SE.
    The stored ``runs`` are a's then b's values, the interval is not recomputable from them by
    :func:`mean_ci`. Fewer than 2 distinct runs on either side: no interval width (deterministic)."""
    a_arr, b_arr = _values(a), _values(b)
    scale = 100.0 / abs(float(b_arr.mean())) if relative else 1.0
    mean = float(a_arr.mean() - b_arr.mean()) * scale
    unit = "%" if relative else ""
    if a_arr.size < 2 or b_arr.size < 2:
        return Estimate(mean, math.nan, math.nan, min(a_arr.size, b_arr.size), unit, of, (), None, WELCH)
    k = min(distinct(a_arr).size, distinct(b_arr).size)
    if k == 1:
        return Estimate(mean, mean, mean, min(a_arr.size, b_arr.size), unit, of, (), math.nan, WELCH, distinct=1)
    va, vb = a_arr.var(ddof=1) / a_arr.size, b_arr.var(ddof=1) / b_arr.size
    se = math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va**2 / (a_arr.size - 1) + vb**2 / (b_arr.size - 1))
    half = float(_scipy_stats.t.ppf(0.5 + LEVEL / 2, df)) * se * scale
    p = float(2 * _scipy_stats.t.sf(abs(mean) / (se * scale), df))
    effect = (_scipy_stats.norm.ppf(1 - ALPHA / 2) + _scipy_stats.norm.ppf(POWER)) * se * scale
    return Estimate(mean, mean - half, mean + half, min(a_arr.size, b_arr.size), unit, of,
                    (), float(effect), WELCH, p, k)


# ---------------------------------------------------------------- per-run aggregation of long results


def trained(frame: pd.DataFrame, run: str = "agent_seed") -> bool:
    """Whether ``frame``'s rows come from trained runs (a non-missing ``run`` column)."""
    return run in frame and frame[run].notna().any()


def per_run(frame: pd.DataFrame, measure: str, run: str = "agent_seed", episode: str = "seed") -> pd.Series:
    """``measure`` per independent run: the mean over each trained run's episodes (index: the run
    key), or per evaluation episode for a method without training (index: the episode key)."""
    if trained(frame, run):
        if frame[run].isna().any():
            raise ValueError(f"per_run: some rows have no {run} and some do; one method's rows are all trained or none")
        return frame.groupby(run, sort=True)[measure].mean()
    if frame[episode].duplicated().any():
        raise ValueError(f"per_run: a method without {run} has several rows per {episode}")
    return frame.set_index(episode)[measure].sort_index()


def unit_of(frame: pd.DataFrame, run: str = "agent_seed", episode: str = "seed", noun: str = "agent",
            inner: str = "episode") -> str:
    """What n counts for ``frame`` (:func:`count`): trained runs with their episodes each, else eval seeds."""
    if trained(frame, run):
        sizes = frame.groupby(run)[episode].size().to_numpy()
        return count(len(sizes), noun, sizes, inner)
    return count(frame[episode].nunique(), "eval seed")


def estimate(frame: pd.DataFrame, measure: str, run: str = "agent_seed", episode: str = "seed",
             noun: str = "agent", unit: str = "") -> Estimate:
    """Mean and 95 % t-interval of ``measure`` over ``frame``'s independent runs (:func:`per_run`)."""
    return mean_ci(per_run(frame, measure, run, episode).to_numpy(), unit, unit_of(frame, run, episode, noun))


def compare(a: pd.DataFrame, b: pd.DataFrame, measure: str, relative: bool = False, run: str = "agent_seed",
            episode: str = "seed", noun: str = "agent") -> Estimate:
    """Difference ``a − b`` of ``measure`` over independent runs, paired as the module docstring
    says: by training seed (both trained, shared seeds), by evaluation seed (neither trained), or
    on the trained side's runs (one trained); Welch's interval for trained runs without shared
    seeds. Long frames: one row per (run, episode)."""
    ta, tb = trained(a, run), trained(b, run)
    if ta and tb:
        seeds_a, seeds_b = set(a[run]), set(b[run])
        if seeds_a.isdisjoint(seeds_b):
            of = f"{unit_of(a, run, episode, noun)} vs {unit_of(b, run, episode, noun)}, unpaired"
            return unpaired_difference(per_run(a, measure, run), per_run(b, measure, run), relative, of)
        shared = seeds_a & seeds_b  # a run without its partner (a loop that gave no agent) is left out, and said
        of = unit_of(a[a[run].isin(shared)], run, episode, noun)
        if shared != seeds_a or shared != seeds_b:
            of += f" (paired on the shared training seeds; unpaired left out: {_seed_list(seeds_a ^ seeds_b)})"
        a, b = a[a[run].isin(shared)], b[b[run].isin(shared)]
        joined = _joined(a, b, measure, [run, episode]).sort_values([run, episode])
        diff = (joined[f"{measure}_a"] - joined[f"{measure}_b"]).groupby(joined[run]).mean()
        keys = [identity(g[f"{measure}_a"], g[f"{measure}_b"]) for _, g in joined.groupby(run, sort=True)]
        return _relative(diff.to_numpy(), per_run(b, measure, run).mean(), relative, of, keys=keys)
    if not ta and not tb:
        joined = _joined(a, b, measure, [episode])
        keys = [identity([x], [y]) for x, y in zip(joined[f"{measure}_a"], joined[f"{measure}_b"])]
        diff = (joined[f"{measure}_a"] - joined[f"{measure}_b"]).to_numpy()
        return _relative(diff, float(joined[f"{measure}_b"].mean()), relative, unit_of(a, run, episode), keys=keys)
    learned, fixed = (a, b) if ta else (b, a)
    episodes = set(learned[episode])
    if not episodes <= set(fixed[episode]):
        raise ValueError(f"compare: {measure}: the fixed method lacks eval seed(s) {sorted(episodes - set(fixed[episode]))}")
    level = fixed[fixed[episode].isin(episodes)].groupby(episode)[measure].mean()
    # paired per eval seed: each run's episode minus the fixed side on the same seed
    d = (learned[measure] - learned[episode].map(level)) * (1.0 if ta else -1.0)
    diff = d.groupby(learned[run]).mean().sort_index().to_numpy()
    seeds = d.groupby(learned[episode]).mean().sort_index().to_numpy()  # the shared level's variance, per seed
    reference = float(level.mean()) if ta else float(per_run(learned, measure, run).mean())
    ordered = learned.sort_values([run, episode])
    keys = [identity(g[measure], level[g[episode]]) for _, g in ordered.groupby(run, sort=True)]
    return _relative(diff, reference, relative, unit_of(learned, run, episode, noun), seeds, keys)


def _joined(a: pd.DataFrame, b: pd.DataFrame, measure: str, keys: list[str]) -> pd.DataFrame:
    for name, frame in (("first", a), ("second", b)):
        if frame.duplicated(keys).any():
            raise ValueError(f"compare: the {name} method has several rows per {', '.join(keys)}")
    joined = a[keys + [measure]].merge(b[keys + [measure]], on=keys, how="outer", suffixes=("_a", "_b"), indicator=True)
    lost = joined[joined["_merge"] != "both"]
    if len(lost):
        raise ValueError(f"compare: {measure}: the two methods were not run on the same {', '.join(keys)}; "
                         f"unpaired: {lost[keys].head(5).to_dict('records')}")
    return joined


def _seed_list(seeds: set) -> str:
    return ", ".join(str(int(s)) if float(s).is_integer() else str(s) for s in sorted(seeds))


def _relative(diff: np.ndarray, reference: float, relative: bool, of: str, seeds: np.ndarray = (),
              keys: list | None = None) -> Estimate:
    if not relative:
        return difference(_values(diff), "", of, seeds, keys)
    if reference == 0:
        raise ValueError("a relative difference needs a non-zero reference mean")
    scale = 100.0 / abs(reference)
    return difference(_values(scale * np.asarray(diff, float)), "%", of, scale * np.asarray(seeds, float), keys)


# ---------------------------------------------------------------- verdicts and captions


def verdict(difference: Estimate, lower_is_better: bool = True) -> str:
    """``better`` / ``worse`` when the interval of (method − reference) excludes 0, "inconclusive
    (n = 1)" with a single run, "inconclusive (deterministic, n = 1)" with several runs that are
    one value (:func:`distinct`), else no detectable difference."""
    if difference.n == 1:
        return INCONCLUSIVE_N1
    if difference.deterministic:
        return DETERMINISTIC
    if not difference.excludes_zero():
        return NO_DIFFERENCE
    improves = difference.mean < 0 if lower_is_better else difference.mean > 0
    return BETTER if improves else WORSE


def caption(*counts: str | int, paired: bool = False) -> str:
    """The sentence every comparative caption carries, e.g. ``mean ± 95 % CI half-width (t-interval
    over independent runs, n − 1 df; n = 3 agents (× 10 episodes each))``. ``counts``: the
    :func:`count` of each kind of row. ``caption(30, "agent seeds × eval seeds")`` (the old form)
    gives a caption the table writer refuses: count the runs with :func:`count`."""
    if len(counts) == 2 and isinstance(counts[0], int):
        counts = (f"n = {counts[0]} {counts[1]}",)
    text = "; ".join(str(c) if str(c).startswith("n = ") else f"n = {c}" for c in counts)
    extra = "; Δ: the same interval over the per-run paired differences" if paired else ""
    return f"mean ± 95 % CI half-width (t-interval over independent runs, n − 1 df; {text}{extra})"


def minimum_effect(estimate: Estimate) -> str:
    """``"MDE 2.3 %"``: what a difference estimate could have detected (:func:`mde`), or ``""``."""
    if estimate.deterministic:
        return "MDE —"
    if estimate.mde is None or math.isnan(estimate.mde):
        return ""
    unit = f" {estimate.unit}" if estimate.unit else ""
    return f"MDE {estimate.mde:.3g}{unit}"


def holm(p: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment of a family of p-values (family-wise error rate), by statsmodels'
    ``multipletests(method="holm")``: the k-th smallest p becomes max over j ≤ k of
    min(1, (m − j + 1) · p_(j))."""
    if not len(p):
        return []
    from statsmodels.stats.multitest import multipletests

    return [float(x) for x in multipletests(np.asarray(p, float), alpha=ALPHA, method="holm")[1]]
