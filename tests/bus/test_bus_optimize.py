"""PSO on functions with known minima; robust vs stochastic objectives of static holding plans."""

import numpy as np
import pytest

from llmtraffic.bus.optimize import PSOConfig, pso


def test_pso_finds_shifted_sphere_minimum():
    centre = np.array([12.0, 47.0, 80.0, 5.0])
    res = pso(lambda x: float(np.sum((x - centre) ** 2)), [0] * 4, [90] * 4,
              PSOConfig(particles=20, iterations=60, seed=1))
    np.testing.assert_allclose(res.x, centre, atol=0.1)
    assert res.value < 1e-2 and res.evaluations == 20 * 61
    assert all(a >= b for a, b in zip(res.history, res.history[1:]))  # best never gets worse


def test_pso_finds_rastrigin_global_minimum_in_2d():
    def rastrigin(x):
        return float(10 * x.size + np.sum(x**2 - 10 * np.cos(2 * np.pi * x)))
    res = pso(rastrigin, [-5.12] * 2, [5.12] * 2, PSOConfig(particles=40, iterations=100, seed=0))
    np.testing.assert_allclose(res.x, [0, 0], atol=0.05)


def test_pso_respects_bounds_and_is_seeded():
    f = lambda x: float(np.sum(x))  # minimum at the lower corner  # noqa: E731
    a = pso(f, [3, 4], [10, 10], PSOConfig(seed=7))
    b = pso(f, [3, 4], [10, 10], PSOConfig(seed=7))
    np.testing.assert_allclose(a.x, [3, 4], atol=1e-9)
    assert a.history == b.history
    with pytest.raises(ValueError, match="lower <= upper"):
        pso(f, [5], [1], PSOConfig())


# ---------------------------------------------------------------- static plans on case 1

from llmtraffic.bus import scenarios, simulate  # noqa: E402
from llmtraffic.bus.optimize import OBJECTIVES, PlanConfig, StaticPlan, optimise_plan, plan_waits  # noqa: E402

SEEDS = (101, 102, 103)
SWARM = dict(particles=6, iterations=4, seed=0)


@pytest.fixture(scope="module")
def case1():
    return scenarios.case1()


@pytest.fixture(scope="module")
def plans(case1):
    return {kind: optimise_plan(case1, PlanConfig(kind=kind, scenario_seeds=SEEDS, horizon_s=3600, pso=SWARM))
            for kind in ("stochastic", "robust")}


def test_static_plan_holds_each_stop_its_time(case1):
    hold = np.array([0, 10, 0, 0, 0, 0, 0, 0], float)
    res = simulate(case1, StaticPlan(case1, hold), seed=1, horizon_s=3600)
    held = res.trajectories.groupby("stop")["hold_s"].max()
    assert held[1] == pytest.approx(10.0) and held.drop(1).max() == 0.0
    with pytest.raises(ValueError, match="one time per control stop"):
        StaticPlan(case1, [1.0, 2.0])
    with pytest.raises(ValueError, match=r"\[0, 90"):
        StaticPlan(case1, np.full(8, 120.0))


def test_robust_objective_is_never_below_stochastic(case1, plans):
    for plan, res in plans.values():
        waits = plan_waits(case1, list(plan.hold_s.values()), SEEDS, 3600)
        assert OBJECTIVES["robust"](waits) >= OBJECTIVES["stochastic"](waits)
    assert plans["robust"][1].value >= plans["stochastic"][1].value


def test_optimised_plans_are_no_worse_than_no_holding(case1, plans):
    zero = plan_waits(case1, np.zeros(8), SEEDS, 3600)
    assert plans["stochastic"][1].value <= zero.mean()
    assert plans["robust"][1].value <= zero.max()
    with pytest.raises(ValueError, match="kind must be one of"):
        PlanConfig(kind="average")


def test_pso_shows_its_progress_with_the_best_value(capsys):
    from llmtraffic.bus.optimize import PSOConfig, pso

    res = pso(lambda x: float(((x - 1.0) ** 2).sum()), [0.0, 0.0], [2.0, 2.0], PSOConfig(particles=4, iterations=3, seed=0),
              desc="PSO (test)")
    err = capsys.readouterr().err
    assert "PSO (test)" in err and f"best={res.history[-1]:.1f}" in err
