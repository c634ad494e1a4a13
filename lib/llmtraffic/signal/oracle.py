"""OracleTSC decision rewards: queue reward, hurdle, semantic-entropy bonus (OracleTSC §3.3–3.4).

One decision's reward ``R`` (eq. 14) is what :mod:`llmtraffic.rl.llm_ppo` places on the last
token of the chosen answer (eq. 1).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .env import negative_queue, queue_difference
from .state import IntersectionState


def phase_counts(phases: Sequence[int], n_phases: int) -> np.ndarray:
    """Algorithm 3: histogram of the phases extracted from the G answers."""
    bad = [p for p in phases if not 0 <= p < n_phases]
    if bad:
        raise ValueError(f"phase_counts: phases {bad} are outside 0..{n_phases - 1}")
    return np.bincount(np.asarray(phases, dtype=int), minlength=n_phases)


def _check(counts: Sequence[float], chosen: int) -> np.ndarray:
    c = np.asarray(counts, dtype=float)
    if c.ndim != 1 or c.size == 0:
        raise ValueError(f"counts must be a non-empty 1-D sequence, got shape {c.shape}")
    if np.any(c < 0):
        raise ValueError(f"counts must be non-negative, got {c.tolist()}")
    if not 0 <= chosen < c.size:
        raise ValueError(f"chosen phase {chosen} is outside 0..{c.size - 1}")
    return c


def softmax_dse(counts: Sequence[float], chosen: int, tau: float) -> float:
    """Eqs. 11–12 (before gating): softmax(counts / tau)[chosen].

    ``tau = 0`` is the limit: the argmax indicator, ties split evenly (1/k for each of k tied
    maxima); ``tau = inf`` is the uniform distribution.
    """
    c = _check(counts, chosen)
    if not tau >= 0:  # also rejects NaN
        raise ValueError(f"tau must be >= 0, got {tau}")
    if tau == 0:
        top = c == c.max()
        return float(top[chosen] / top.sum())
    if math.isinf(tau):
        return 1.0 / c.size
    z = np.exp((c - c.max()) / tau)  # shifting by the max keeps exp finite for tiny tau
    return float(z[chosen] / z.sum())


def exact_dse(probs: Sequence[float], chosen: int, tau: float, g: int) -> float:
    """"Exact DSE" (ours): eq. 11 from the policy's exact phase distribution ``probs`` (constrained
    answers), the expected counts G·p in place of the G sampled answers' counts: the limit of the
    estimate from G' answers, ``softmax_dse(counts' · G / G', chosen, tau)``, as G' grows."""
    p = np.asarray(probs, dtype=float)
    if p.ndim != 1 or np.any(p < 0) or not np.isclose(p.sum(), 1.0, atol=1e-4):
        raise ValueError(f"exact_dse: probs must be a probability vector, got {p.tolist()}")
    return softmax_dse(g * p, chosen, tau)


def naive_dse(counts: Sequence[float], chosen: int) -> float:
    """Eq. 13: the empirical frequency of the chosen phase among the G answers."""
    c = _check(counts, chosen)
    if c.sum() == 0:
        raise ValueError("naive_dse: counts are all zero")
    return float(c[chosen] / c.sum())


ENV_REWARDS = {"queue_diff": queue_difference, "queue": negative_queue}
"""R_env: eq. 7 (queue difference) or eq. 15 (Appendix A.1, the absolute queue)."""


def oracle_reward(r_env: float, hurdle: float, w_e: float, r_e: float) -> float:
    """Eq. 14 with eq. 12's gating: R = R_env − H_R + w_E · (r_E if R_env > H_R else 0)."""
    return float(r_env - hurdle + (w_e * r_e if r_env > hurdle else 0.0))


HURDLE_QUANTILE = 0.7
"""§3.3: on CityFlow1x1 ~70 % of pretrained Qwen3-0.6B's decisions cut the queue by less than 2.5
vehicles, the paper's starting H_R; its "70 % statistic" is the guide :func:`calibrate_hurdle` follows."""


def calibrate_hurdle(r_env: Sequence[float], quantile: float = HURDLE_QUANTILE) -> float:
    """H_R (eq. 8) for a backbone and intersection the way §3.3 derives it: the queue reduction
    R_env (eq. 7) that ``quantile`` of a zero-shot episode's decisions stay below, so that only
    the top 30 % of its actions clear the hurdle."""
    values = np.asarray(r_env, dtype=float)
    if values.size == 0:
        raise ValueError("calibrate_hurdle: no R_env values (a zero-shot episode of at least two decisions)")
    if not 0 < quantile < 1:
        raise ValueError(f"calibrate_hurdle: quantile must be in (0, 1), got {quantile}")
    return float(np.quantile(values, quantile))


@dataclass(frozen=True)
class RewardConfig:
    """Which decision reward to use (the rows of OracleTSC Table 2 and Fig. 8)."""

    env: str = "queue_diff"
    """``"queue_diff"`` (eq. 7) or ``"queue"`` (eq. 15)."""
    hurdle: float = 0.0
    """H_R of eq. 8 (Table 8 lists 2.7–3.7 for the paper's backbones)."""
    entropy: str = "none"
    """``"none"``, ``"softmax"`` (eq. 11) or ``"naive"`` (eq. 13)."""
    tau: float = 0.0
    """Softmax temperature of eq. 11 (0 = argmax indicator, as in Table 2)."""
    w_e: float = 1.0
    """Weight w_E of the entropy term in eq. 14."""
    exact: bool = False
    """"Exact DSE" (ours): the entropy term reads the policy's exact phase distribution p
    (constrained answers), eq. 11 with the expected counts G·p in place of the G sampled
    answers' counts: the limit of the paper's estimate as the sample grows with τ/G fixed."""

    def __post_init__(self) -> None:
        if self.env not in ENV_REWARDS:
            raise ValueError(f"RewardConfig.env must be one of {sorted(ENV_REWARDS)}, got {self.env!r}")
        if self.entropy not in ("none", "softmax", "naive"):
            raise ValueError(f"RewardConfig.entropy must be 'none', 'softmax' or 'naive', got {self.entropy!r}")
        if not self.tau >= 0:
            raise ValueError(f"RewardConfig.tau must be >= 0, got {self.tau}")
        if self.exact and self.entropy == "none":
            raise ValueError("RewardConfig.exact: there is no entropy term to compute exactly (entropy='none')")

    @property
    def reads_answers(self) -> bool:
        """Whether R depends on the G answers (an entropy term), not only on the chosen one."""
        return self.entropy != "none"

    def __call__(self, prev: IntersectionState, chosen: int, state: IntersectionState,
                 counts: Sequence[float]) -> float:
        """R for one decision: states before and after it, the chosen phase, the G answers' counts."""
        return self.from_r_env(ENV_REWARDS[self.env](prev, chosen, state), counts, chosen)

    def from_r_env(self, r_env: float, counts: Sequence[float], chosen: int) -> float:
        """R (eq. 14) from a given R_env (the random-reward control replaces R_env only)."""
        if self.entropy == "none":
            r_e = 0.0
        elif self.entropy == "softmax":
            r_e = softmax_dse(counts, chosen, self.tau)
        else:
            r_e = naive_dse(counts, chosen)
        return oracle_reward(r_env, self.hurdle, self.w_e, r_e)
