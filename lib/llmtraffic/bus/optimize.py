"""Optimisation baselines of the bus study (§5.1, §5.2.2): static holding plans found by PSO.

A *static plan* is one holding time per control stop, applied to every bus at every visit
(not per bus: buses are interchangeable on the loop and a per-bus plan would multiply the
dimensions by the fleet size for no information the plan could use). It is chosen offline to
minimise the simulated average passenger waiting time over a set of sampled demand scenarios:

- **stochastic** optimisation minimises the mean over the scenario set,
- **robust** optimisation minimises the worst case over the same set.

A sampled demand scenario is one episode seed: the seed draws each stop's base arrival rate
and the Poisson arrivals (and, in the real-world cases, link times). The plan never sees the
state, which is why §5.2.2 expects it to lose to online control.

The optimiser is a small global-best particle swarm (constriction constants of Clerc & Kennedy
2002: inertia 0.7298, acceleration 1.49618 each), seeded, in numpy.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
from tqdm.auto import tqdm

from .scenarios import Scenario
from .sim import simulate


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


def pso(f: Callable[[np.ndarray], float], lower, upper, cfg: PSOConfig, start=None, desc: str = "PSO") -> PSOResult:
    """Minimise ``f`` over the box [lower, upper] with a global-best particle swarm.

    ``start``, if given, replaces the first random particle (e.g. the no-holding plan), so the
    result is never worse than it. A progress bar (``desc``) shows the iterations and the best value."""
    lo, hi = np.asarray(lower, float), np.asarray(upper, float)
    if lo.shape != hi.shape or lo.ndim != 1 or np.any(hi < lo):
        raise ValueError(f"pso needs 1-d bounds with lower <= upper, got {lo} and {hi}")
    rng = np.random.default_rng(cfg.seed)
    vmax = cfg.max_velocity * (hi - lo)
    x = rng.uniform(lo, hi, size=(cfg.particles, lo.size))
    if start is not None:
        x[0] = np.clip(np.asarray(start, float), lo, hi)
    v = rng.uniform(-vmax, vmax, size=x.shape)
    values = np.array([f(p) for p in x], float)
    best_x, best_val = x.copy(), values.copy()
    g = int(np.argmin(best_val))
    history = [float(best_val[g])]
    bar = tqdm(range(cfg.iterations), desc=desc, leave=False)
    for _ in bar:
        r1, r2 = rng.random(x.shape), rng.random(x.shape)
        v = (cfg.inertia * v + cfg.cognitive * r1 * (best_x - x) + cfg.social * r2 * (best_x[g] - x))
        v = np.clip(v, -vmax, vmax)
        x = np.clip(x + v, lo, hi)
        values = np.array([f(p) for p in x], float)
        improved = values < best_val
        best_x[improved], best_val[improved] = x[improved], values[improved]
        g = int(np.argmin(best_val))
        history.append(float(best_val[g]))
        bar.set_postfix(best=f"{history[-1]:.1f}")
    evaluations = cfg.particles * (cfg.iterations + 1)
    return PSOResult(best_x[g].copy(), float(best_val[g]), history, evaluations)


class StaticPlan:
    """Controller holding every bus ``hold_s[stop]`` seconds at each control stop (mode "duration")."""

    mode = "duration"

    def __init__(self, scenario: Scenario, hold_s, name: str = "static plan"):
        hold_s = np.asarray(hold_s, float)
        if hold_s.shape != (len(scenario.control_stops),):
            raise ValueError(f"{name}: field 'hold_s' needs one time per control stop "
                             f"({len(scenario.control_stops)}), got shape {hold_s.shape}")
        if np.any(hold_s < 0) or np.any(hold_s > scenario.max_hold_s):
            raise ValueError(f"{name}: field 'hold_s' must lie in [0, {scenario.max_hold_s}] s")
        self.name = name
        self.hold_s = dict(zip(scenario.control_stops, hold_s.tolist()))

    def act(self, obs: np.ndarray, info: dict) -> float:
        return self.hold_s[info["stop"]]


def plan_waits(scenario: Scenario, hold_s, seeds: Sequence[int], horizon_s: float | None = None) -> np.ndarray:
    """Average passenger waiting time (s) of a plan in each demand scenario (episode seed)."""
    plan = StaticPlan(scenario, hold_s)
    return np.array([simulate(scenario, plan, seed=s, horizon_s=horizon_s).metrics["wait_time_s"]
                     for s in seeds])


OBJECTIVES: dict[str, Callable[[np.ndarray], float]] = {
    "stochastic": lambda waits: float(np.mean(waits)),
    "robust": lambda waits: float(np.max(waits)),
}
"""How a plan's waits over the scenario set become one number: mean or worst case."""


@dataclass
class PlanConfig:
    """What the plan optimiser needs besides the scenario."""

    kind: str = "stochastic"
    """'stochastic' (mean waiting time over the scenarios) or 'robust' (worst case)."""
    scenario_seeds: tuple[int, ...] = tuple(range(10_000, 10_005))
    """Episode seeds of the sampled demand scenarios (keep them apart from test seeds)."""
    horizon_s: float | None = None
    """Episode length used while optimising (None: the scenario's)."""
    pso: PSOConfig = field(default_factory=PSOConfig)
    """The swarm."""

    def __post_init__(self) -> None:
        if self.kind not in OBJECTIVES:
            raise ValueError(f"PlanConfig.kind must be one of {sorted(OBJECTIVES)}, got {self.kind!r}")
        if not self.scenario_seeds:
            raise ValueError("PlanConfig.scenario_seeds is empty")
        if isinstance(self.pso, dict):
            self.pso = PSOConfig(**self.pso)
        self.scenario_seeds = tuple(int(s) for s in self.scenario_seeds)


def optimise_plan(scenario: Scenario, cfg: PlanConfig) -> tuple[StaticPlan, PSOResult]:
    """Static plan minimising the mean (stochastic) or worst (robust) waiting time, by PSO.

    The swarm starts with the no-holding plan among its particles, so the plan found is never
    worse than no holding on the scenario set."""
    objective = OBJECTIVES[cfg.kind]
    n = len(scenario.control_stops)

    def cost(hold_s: np.ndarray) -> float:
        return objective(plan_waits(scenario, hold_s, cfg.scenario_seeds, cfg.horizon_s))

    res = pso(cost, np.zeros(n), np.full(n, scenario.max_hold_s), cfg.pso, start=np.zeros(n), desc=f"PSO ({cfg.kind})")
    return StaticPlan(scenario, res.x, name=f"{cfg.kind} optimisation"), res
