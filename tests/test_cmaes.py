"""engine.cmaes against problems with known minima: a rotated ill-conditioned ellipsoid (the covariance
must learn the rotation and the scales), Rosenbrock's valley, reproducibility and bad input."""
import math

import numpy as np
import pytest

from engine.cmaes import CMAES


def _run(f, x0, sigma, seed, evaluations, popsize=None):
    search = CMAES(x0, sigma, seed, popsize)
    while not search.done(evaluations, sigma_tol=1e-10):
        xs = search.ask()
        search.tell(xs, [f(x) for x in xs])
    return search


def _rotated_ellipsoid(n: int):
    q, _ = np.linalg.qr(np.random.default_rng(0).standard_normal((n, n)))
    scales = 10.0 ** np.linspace(0, 3, n)  # condition number 1e6 in f
    centre = np.linspace(-1.0, 1.0, n)
    return lambda x: float(np.sum((scales * (q @ (x - centre))) ** 2)), centre


def test_it_finds_the_minimum_of_a_rotated_ill_conditioned_ellipsoid():
    f, centre = _rotated_ellipsoid(6)
    search = _run(f, np.zeros(6), 1.0, seed=3, evaluations=6000)
    assert search.best_f < 1e-10
    np.testing.assert_allclose(search.best_x, centre, atol=1e-4)


def test_it_follows_rosenbrocks_curved_valley_to_one():
    def rosenbrock(x):
        return float(np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2))
    search = _run(rosenbrock, np.full(4, -1.0), 0.5, seed=1, evaluations=8000)
    np.testing.assert_allclose(search.best_x, np.ones(4), atol=1e-3)


def test_a_seed_reproduces_the_run_and_non_finite_values_rank_last():
    f, _ = _rotated_ellipsoid(3)
    a = _run(lambda x: f(x) if x[0] < 2.0 else math.nan, np.zeros(3), 1.0, seed=5, evaluations=300)
    b = _run(lambda x: f(x) if x[0] < 2.0 else math.nan, np.zeros(3), 1.0, seed=5, evaluations=300)
    assert a.best_f == b.best_f and np.array_equal(a.best_x, b.best_x) and a.best_x[0] < 2.0
    assert a.evaluations == b.evaluations <= 300


def test_the_budget_is_never_exceeded_and_the_best_is_the_lowest_value_told():
    seen = []

    def f(x):
        seen.append(float(np.sum(x ** 2)))
        return seen[-1]
    search = _run(f, np.ones(5), 0.3, seed=2, evaluations=100)
    assert search.evaluations == len(seen) <= 100 and search.best_f == min(seen)


@pytest.mark.parametrize("x0, sigma", [(np.zeros(0), 1.0), (np.array([np.nan]), 1.0), (np.zeros(2), 0.0)])
def test_bad_start_or_step_is_a_value_error(x0, sigma):
    with pytest.raises(ValueError, match="CMAES"):
        CMAES(x0, sigma, seed=1)
