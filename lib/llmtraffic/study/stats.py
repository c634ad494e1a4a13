"""The study's one statistics helper: means with 95 % confidence intervals, paired differences, verdicts.

Method (used by every table and claim):

- **Interval.** Student's t-interval over the independent units (agent seeds × eval seeds, or
  training seeds for fine-tuning): ``mean ± t_{n−1, 0.975} · s / √n`` with the sample standard
  deviation ``s`` (ddof = 1). With n = 1 there is no interval: the bounds are NaN and the verdict
  is "no detectable difference". The t-interval is exact for normal data and close for the
  skewed-but-bounded travel times and queues of this study at n ≥ 10; it is deterministic, so no
  bootstrap seed has to be recorded.
- **Paired difference.** Two methods evaluated on the same units (same eval seeds, same agent
  seeds): the t-interval of the per-unit differences ``a_i − b_i``. ``relative=True`` expresses it
  in percent of ``mean(b)`` (the interval is scaled by the same constant, so the verdict is the same).
- **Verdict.** ``better`` / ``worse`` when the interval excludes 0 (in the direction of
  ``lower_is_better``), else ``no detectable difference``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as _scipy_stats

LEVEL = 0.95
METHOD = "95 % t-interval (ddof = 1)"

BETTER, WORSE, NO_DIFFERENCE = "better", "worse", "no detectable difference"


@dataclass(frozen=True)
class Estimate:
    """A mean with its 95 % confidence interval over ``n`` independent units."""

    mean: float
    low: float
    high: float
    n: int
    unit: str = ""  # e.g. "%" for a relative difference

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2

    def excludes_zero(self) -> bool:
        return not (math.isnan(self.low) or math.isnan(self.high)) and (self.low > 0 or self.high < 0)

    def format(self, digits: int = 1) -> str:
        """``12.3 ± 0.4`` (the ± is the CI half-width), ``12.3 (n = 1, no CI)``, or ``12.3 (n = 3,
        all equal)`` when every unit gave the same value (a deterministic simulator run on several
        seeds, or a measure that is 0 by construction): a "± 0.0" would read as a precise estimate."""
        unit = f" {self.unit}" if self.unit else ""
        if math.isnan(self.mean):
            return "n/a"
        if math.isnan(self.low):
            return f"{self.mean:.{digits}f}{unit} (n = {self.n}, no CI)"
        if self.low == self.high:
            return f"{self.mean:.{digits}f}{unit} (n = {self.n}, all equal)"
        return f"{self.mean:.{digits}f} ± {self.half_width:.{digits}f}{unit}"

    def format_interval(self, digits: int = 1) -> str:
        """``12.3 [11.9, 12.7]``."""
        if math.isnan(self.low):
            return self.format(digits)
        unit = f" {self.unit}" if self.unit else ""
        return f"{self.mean:.{digits}f} [{self.low:.{digits}f}, {self.high:.{digits}f}]{unit}"

    def __str__(self) -> str:
        return self.format()

    def as_dict(self) -> dict:
        return {"mean": self.mean, "low": self.low, "high": self.high, "n": self.n, "unit": self.unit}


def _values(values: Sequence[float] | np.ndarray) -> np.ndarray:
    arr = np.asarray(values, dtype=float).ravel()
    if arr.size == 0:
        raise ValueError("a confidence interval needs at least one value")
    if not np.isfinite(arr).all():
        raise ValueError(f"non-finite values in a confidence interval: {arr[~np.isfinite(arr)][:3].tolist()}")
    return arr


def mean_ci(values: Sequence[float] | np.ndarray, unit: str = "") -> Estimate:
    """Mean and 95 % t-interval of independent values (n = 1: no interval, bounds NaN)."""
    arr = _values(values)
    n, mean = arr.size, float(arr.mean())
    if n == 1:
        return Estimate(mean, math.nan, math.nan, 1, unit)
    half = float(_scipy_stats.t.ppf(0.5 + LEVEL / 2, n - 1) * arr.std(ddof=1) / math.sqrt(n))
    return Estimate(mean, mean - half, mean + half, n, unit)


def paired_difference(a: Sequence[float], b: Sequence[float], relative: bool = False) -> Estimate:
    """Mean of ``a_i − b_i`` over paired units with its 95 % t-interval.

    ``relative=True``: in percent of ``mean(b)``. Raises when the two are not the same length
    (unpaired data must not be compared this way).
    """
    a_arr, b_arr = _values(a), _values(b)
    if a_arr.shape != b_arr.shape:
        raise ValueError(f"paired difference needs equally many units: {a_arr.size} vs {b_arr.size}")
    diff = a_arr - b_arr
    if not relative:
        return mean_ci(diff)
    base = float(b_arr.mean())
    if base == 0:
        raise ValueError("a relative difference needs a non-zero reference mean")
    return mean_ci(100.0 * diff / abs(base), unit="%")


def verdict(difference: Estimate, lower_is_better: bool = True) -> str:
    """``better`` / ``worse`` when the interval of (method − reference) excludes 0, else no difference."""
    if not difference.excludes_zero():
        return NO_DIFFERENCE
    improves = difference.mean < 0 if lower_is_better else difference.mean > 0
    return BETTER if improves else WORSE


def caption(n: int, units: str) -> str:
    """The sentence every table caption carries, e.g. ``mean ± 95 % CI half-width (t, n = 30 agent seeds × eval seeds)``."""
    return f"mean ± 95 % CI half-width (t-interval, n = {n} {units})"
