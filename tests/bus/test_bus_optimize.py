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
