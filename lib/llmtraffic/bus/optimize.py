"""Particle swarm optimisation (global-best, inertia weight), seeded, in numpy.

Used by the bus study's optimisation baselines (bus seed §5.1, §5.2.2). Constriction-type
constants of Clerc & Kennedy (2002): inertia 0.7298, acceleration 1.49618 each.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np


@dataclass
class PSOConfig:
    """Swarm size, iterations and the velocity update's constants."""

    particles: int = 20
    """Particles in the swarm."""
    iterations: int = 30
    """Velocity/position updates after the initial evaluation."""
    inertia: float = 0.7298
    """Weight of a particle's previous velocity."""
    cognitive: float = 1.49618
    """Pull towards the particle's own best position."""
    social: float = 1.49618
    """Pull towards the swarm's best position."""
    max_velocity: float = 0.5
    """Velocity cap as a fraction of each dimension's range (keeps particles inside the box)."""
    seed: int = 0
    """Seeds the initial positions and the random factors of every update."""

    def __post_init__(self) -> None:
        if self.particles < 1 or self.iterations < 0:
            raise ValueError(f"PSOConfig needs particles >= 1 and iterations >= 0, "
                             f"got {self.particles}, {self.iterations}")


@dataclass
class PSOResult:
    x: np.ndarray
    """Best position found."""
    value: float
    """Objective at ``x``."""
    history: list[float] = field(default_factory=list)
    """Best value after the initial evaluation and after each iteration."""
    evaluations: int = 0
    """Objective calls made."""


def pso(f: Callable[[np.ndarray], float], lower, upper, cfg: PSOConfig) -> PSOResult:
    """Minimise ``f`` over the box [lower, upper] with a global-best particle swarm."""
    lo, hi = np.asarray(lower, float), np.asarray(upper, float)
    if lo.shape != hi.shape or lo.ndim != 1 or np.any(hi < lo):
        raise ValueError(f"pso needs 1-d bounds with lower <= upper, got {lo} and {hi}")
    rng = np.random.default_rng(cfg.seed)
    vmax = cfg.max_velocity * (hi - lo)
    x = rng.uniform(lo, hi, size=(cfg.particles, lo.size))
    v = rng.uniform(-vmax, vmax, size=x.shape)
    values = np.array([f(p) for p in x], float)
    best_x, best_val = x.copy(), values.copy()
    g = int(np.argmin(best_val))
    history = [float(best_val[g])]
    for _ in range(cfg.iterations):
        r1, r2 = rng.random(x.shape), rng.random(x.shape)
        v = (cfg.inertia * v + cfg.cognitive * r1 * (best_x - x) + cfg.social * r2 * (best_x[g] - x))
        v = np.clip(v, -vmax, vmax)
        x = np.clip(x + v, lo, hi)
        values = np.array([f(p) for p in x], float)
        improved = values < best_val
        best_x[improved], best_val[improved] = x[improved], values[improved]
        g = int(np.argmin(best_val))
        history.append(float(best_val[g]))
    evaluations = cfg.particles * (cfg.iterations + 1)
    return PSOResult(best_x[g].copy(), float(best_val[g]), history, evaluations)
