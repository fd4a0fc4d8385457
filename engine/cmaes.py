"""CMA-ES: a derivative-free global search over a few unknowns (host numpy), seeded and reproducible.

The inverse render's start can lie outside the basin of any gradient method (a joint 20 degrees
off moves the arm off its own silhouette). The covariance matrix adaptation evolution strategy
(Hansen, "The CMA Evolution Strategy: A Tutorial", 2016; the defaults below are its Table 1)
samples a population around a mean, moves the mean to the better half and learns the step size
and the correlations (a shoulder that an elbow compensates) from the steps that paid. It needs
only objective values, so the objective can be a cheap low-resolution image loss.

    search = CMAES(x0=np.zeros(2), sigma=0.5, seed=1)
    while not search.done(evaluations=400):
        xs = search.ask()                        # (popsize, n) candidates
        search.tell(xs, [f(x) for x in xs])      # their objective values (inf for an unusable candidate)
    search.best_x, search.best_f

`x` is in the caller's units; scale the unknowns so that one unit is a comparable move in each
(the inverse render uses its default perturbation).
"""
from __future__ import annotations

import math

import numpy as np


def default_popsize(n: int) -> int:
    """The tutorial's population size for n unknowns: 4 + floor(3 ln n)."""
    return 4 + int(3 * math.log(n))


class CMAES:
    """The (mu/mu_w, lambda)-CMA-ES with rank-one and rank-mu updates and cumulative step-size adaptation."""

    def __init__(self, x0: np.ndarray, sigma: float, seed: int, popsize: int | None = None):
        x0 = np.asarray(x0, np.float64)
        if x0.ndim != 1 or not len(x0) or not np.all(np.isfinite(x0)):
            raise ValueError(f"CMAES: x0 must be a non-empty finite vector, got shape {x0.shape}")
        if not (sigma > 0.0 and math.isfinite(sigma)):
            raise ValueError(f"CMAES: sigma must be a positive number, got {sigma}")
        n = len(x0)
        self.n, self.mean, self.sigma = n, x0.copy(), float(sigma)
        self.popsize = popsize or default_popsize(n)
        self.mu = self.popsize // 2
        w = math.log(self.mu + 0.5) - np.log(np.arange(1, self.mu + 1))
        self.weights = w / w.sum()
        self.mueff = 1.0 / float(np.sum(self.weights ** 2))
        self.cc = (4 + self.mueff / n) / (n + 4 + 2 * self.mueff / n)
        self.cs = (self.mueff + 2) / (n + self.mueff + 5)
        self.c1 = 2 / ((n + 1.3) ** 2 + self.mueff)
        self.cmu = min(1 - self.c1, 2 * (self.mueff - 2 + 1 / self.mueff) / ((n + 2) ** 2 + self.mueff))
        self.damps = 1 + 2 * max(0.0, math.sqrt((self.mueff - 1) / (n + 1)) - 1) + self.cs
        self.chi_n = math.sqrt(n) * (1 - 1 / (4 * n) + 1 / (21 * n * n))  # E|N(0, I)|
        self.cov, self.pc, self.ps = np.eye(n), np.zeros(n), np.zeros(n)
        self.rng = np.random.default_rng(seed)
        self.generation = self.evaluations = 0
        self.best_x, self.best_f = x0.copy(), math.inf
        self._basis, self._scales = np.eye(n), np.ones(n)

    def ask(self) -> np.ndarray:
        """(popsize, n) candidates: mean + sigma * N(0, C)."""
        d2, self._basis = np.linalg.eigh(self.cov)
        self._scales = np.sqrt(np.maximum(d2, 1e-20))
        z = self.rng.standard_normal((self.popsize, self.n))
        return self.mean + self.sigma * (z * self._scales) @ self._basis.T

    def tell(self, xs: np.ndarray, values) -> None:
        """Update from the candidates `ask` returned and their objective values (lower is better)."""
        xs, values = np.asarray(xs, np.float64), np.asarray(values, np.float64)
        values = np.where(np.isfinite(values), values, np.inf)
        order = np.argsort(values, kind="stable")
        self.evaluations += len(values)
        self.generation += 1
        if values[order[0]] < self.best_f:
            self.best_x, self.best_f = xs[order[0]].copy(), float(values[order[0]])
        y = (xs[order[:self.mu]] - self.mean) / self.sigma
        yw = self.weights @ y
        self.mean = self.mean + self.sigma * yw
        inv_sqrt = self._basis @ np.diag(1.0 / self._scales) @ self._basis.T
        self.ps = (1 - self.cs) * self.ps + math.sqrt(self.cs * (2 - self.cs) * self.mueff) * inv_sqrt @ yw
        stalled = np.linalg.norm(self.ps) / math.sqrt(1 - (1 - self.cs) ** (2 * self.generation)) / self.chi_n
        hsig = float(stalled < 1.4 + 2 / (self.n + 1))
        self.pc = (1 - self.cc) * self.pc + hsig * math.sqrt(self.cc * (2 - self.cc) * self.mueff) * yw
        self.cov = ((1 - self.c1 - self.cmu) * self.cov
                    + self.c1 * (np.outer(self.pc, self.pc) + (1 - hsig) * self.cc * (2 - self.cc) * self.cov)
                    + self.cmu * (y.T * self.weights) @ y)
        self.cov = 0.5 * (self.cov + self.cov.T)
        self.sigma *= math.exp((self.cs / self.damps) * (np.linalg.norm(self.ps) / self.chi_n - 1))

    def done(self, evaluations: int, sigma_tol: float = 1e-3) -> bool:
        """The budget would be exceeded by another generation, or the search has contracted below sigma_tol
        (in x's units, along its widest axis)."""
        spread = self.sigma * float(self._scales.max()) if self.generation else self.sigma
        return self.evaluations + self.popsize > evaluations or spread < sigma_tol
