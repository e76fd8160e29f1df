"""Scaling laws and their robust fits.

- compute:    L(C) = a * C^(-b) + L_inf                 (Kaplan et al. 2020, arXiv 2001.08361, eq. 1.4 form with an
                                                          irreducible term, as in Henighan et al. 2020)
- chinchilla: L(N, D) = E + A / N^alpha + B / D^beta     (Hoffmann et al. 2022, arXiv 2203.15556, eq. 2)

Fitting follows Hoffmann et al. 2022, Appendix D.2: minimise the Huber loss (delta = 1e-3) between the predicted
and observed log-loss, with the prediction written as a log-sum-exp of the terms in log space
(log L = LSE(a - alpha log N, b - beta log D, e) with A = e^a, B = e^b, E = e^e), using L-BFGS started from a
grid of initialisations. Here the grid is scored first (vectorised) and L-BFGS runs from the best `starts`
grid points, which keeps a fit in the tens of milliseconds so that bootstrap refits are affordable.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize
from threadpoolctl import threadpool_limits

from scalestudy.errors import ScalestudyError
from scalestudy.scaling.runs import Runs

HUBER_DELTA = 1e-3  # Hoffmann et al. 2022, App. D.2


def lse(terms: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """log-sum-exp over axis 0 and the softmax weights (its gradient); scipy's version is ~30x slower here."""
    m = terms.max(axis=0)
    ex = np.exp(terms - m)
    s = ex.sum(axis=0)
    return m + np.log(s), ex / s


def huber(r: np.ndarray, delta: float = HUBER_DELTA) -> tuple[np.ndarray, np.ndarray]:
    """Huber loss of residuals and its derivative."""
    a = np.abs(r)
    value = np.where(a <= delta, 0.5 * r * r, delta * (a - 0.5 * delta))
    return value, np.clip(r, -delta, delta)


def _lbfgs(objective, x0: np.ndarray, bounds) -> tuple[np.ndarray, float]:
    res = minimize(objective, x0, jac=True, method="L-BFGS-B", bounds=bounds,
                   options={"maxiter": 2000, "ftol": 1e-15, "gtol": 1e-12})
    return res.x, float(res.fun)


@dataclass(frozen=True)
class Fit:
    """A fitted law: internal (log-space) parameters theta, named coefficients, fit quality."""

    law: str
    theta: tuple[float, ...]
    coef: dict[str, float]
    objective: float  # mean Huber loss / delta at the optimum
    residual_sd: float  # standard deviation of log-loss residuals (relative scatter of the runs)
    n: int


class ChinchillaLaw:
    """L(N, D) = E + A / N^alpha + B / D^beta; theta = (a, b, e, alpha, beta) with A = e^a, B = e^b, E = e^e."""

    name = "chinchilla"
    columns = ("params", "tokens", "loss")
    coef_names = ("E", "A", "B", "alpha", "beta")
    bounds = [(None, None), (None, None), (None, None), (0.0, 5.0), (0.0, 5.0)]

    def check(self, runs: Runs) -> None:
        runs.require(*self.columns)
        if len(runs) < len(self.coef_names):
            raise ScalestudyError(
                f"chinchilla law has 5 parameters but only {len(runs)} run(s): need at least 5 runs")
        if len(np.unique(runs.params)) < 2:
            raise ScalestudyError("chinchilla law needs runs at 2 or more model sizes (all runs have the same params)")
        if len(np.unique(runs.tokens)) < 2:
            raise ScalestudyError("chinchilla law needs runs at 2 or more token counts (all runs have the same tokens)")

    def grid(self) -> np.ndarray:
        # Hoffmann et al. 2022, App. D.2: alpha, beta in {0, 0.5, ..., 2}, e in {-1, -.5, ..., 1}, a, b in {0, 5, ..., 25}.
        a = b = np.arange(0.0, 25.1, 5.0)
        e = np.arange(-1.0, 1.01, 0.5)
        al = be = np.arange(0.0, 2.01, 0.5)
        return np.array(np.meshgrid(a, b, e, al, be, indexing="ij")).reshape(5, -1).T

    def log_predict(self, theta: np.ndarray, runs_or_x) -> np.ndarray:
        ln_n, ln_d = runs_or_x
        a, b, e, al, be = theta
        return lse(np.stack([a - al * ln_n, b - be * ln_d, np.full_like(ln_n, e)]))[0]

    def features(self, runs: Runs):
        return np.log(runs.params), np.log(runs.tokens)

    def objective(self, x, ln_loss):
        ln_n, ln_d = x
        n = len(ln_loss)

        def f(theta):
            a, b, e, al, be = theta
            terms = np.stack([a - al * ln_n, b - be * ln_d, np.full_like(ln_n, e)])
            pred, w = lse(terms)
            value, d = huber(pred - ln_loss)
            w = w * d  # d(objective)/d(term k) per run
            grad = np.array([w[0].sum(), w[1].sum(), w[2].sum(), -(w[0] * ln_n).sum(), -(w[1] * ln_d).sum()])
            return value.sum() / (n * HUBER_DELTA), grad / (n * HUBER_DELTA)

        return f

    def grid_scores(self, grid: np.ndarray, x, ln_loss) -> np.ndarray:
        ln_n, ln_d = x
        a, b, e, al, be = (grid[:, i : i + 1] for i in range(5))
        terms = np.stack([a - al * ln_n, b - be * ln_d, np.broadcast_to(e, (len(grid), len(ln_n)))])
        return huber(lse(terms)[0] - ln_loss)[0].sum(axis=1)

    def coef(self, theta) -> dict[str, float]:
        a, b, e, al, be = map(float, theta)
        return {"E": math.exp(e), "A": math.exp(a), "B": math.exp(b), "alpha": al, "beta": be}

    def theta_from_coef(self, coef: dict) -> np.ndarray:
        return np.array([math.log(coef["A"]), math.log(coef["B"]), math.log(coef["E"]), coef["alpha"], coef["beta"]])

    def predict(self, coef: dict, *, params=None, tokens=None, flops=None) -> np.ndarray:
        if params is None or tokens is None:
            raise ScalestudyError("chinchilla law predicts from a target params N and tokens D")
        n, d = np.asarray(params, float), np.asarray(tokens, float)
        return coef["E"] + coef["A"] / n ** coef["alpha"] + coef["B"] / d ** coef["beta"]


class ComputeLaw:
    """L(C) = a * C^(-b) + L_inf; fitted in x = log(C / C_ref) with C_ref the geometric mean of the runs' C
    (conditioning), theta = (log a', b, log L_inf) with a = a' * C_ref^b."""

    name = "compute"
    columns = ("flops", "loss")
    coef_names = ("a", "b", "L_inf")
    bounds = [(None, None), (0.0, 5.0), (None, None)]

    def __init__(self) -> None:
        self.ln_cref = 0.0

    def check(self, runs: Runs) -> None:
        runs.require(*self.columns)
        if len(runs) < len(self.coef_names):
            raise ScalestudyError(f"compute law has 3 parameters but only {len(runs)} run(s): need at least 3 runs")
        if len(np.unique(runs.flops)) < 3:
            raise ScalestudyError("compute law needs runs at 3 or more distinct compute budgets (flops)")

    def features(self, runs: Runs):
        return (np.log(runs.flops) - self.ln_cref,)

    def prepare(self, runs: Runs) -> None:
        self.ln_cref = float(np.mean(np.log(runs.flops)))

    def grid(self, ln_loss: np.ndarray) -> np.ndarray:
        lo = float(np.min(ln_loss))
        la = lo + np.log([0.02, 0.1, 0.3, 1.0, 3.0])
        b = np.array([0.02, 0.05, 0.1, 0.2, 0.35, 0.5, 0.75, 1.0])
        le = lo + np.log([0.05, 0.3, 0.6, 0.8, 0.9, 0.97])
        return np.array(np.meshgrid(la, b, le, indexing="ij")).reshape(3, -1).T

    def log_predict(self, theta, x) -> np.ndarray:
        (lc,) = x
        la, b, le = theta
        return np.logaddexp(la - b * lc, le)

    def objective(self, x, ln_loss):
        (lc,) = x
        n = len(ln_loss)

        def f(theta):
            la, b, le = theta
            terms = np.stack([la - b * lc, np.full_like(lc, le)])
            pred, w = lse(terms)
            value, d = huber(pred - ln_loss)
            w = w * d
            grad = np.array([w[0].sum(), -(w[0] * lc).sum(), w[1].sum()])
            return value.sum() / (n * HUBER_DELTA), grad / (n * HUBER_DELTA)

        return f

    def grid_scores(self, grid, x, ln_loss) -> np.ndarray:
        (lc,) = x
        la, b, le = (grid[:, i : i + 1] for i in range(3))
        pred = np.logaddexp(la - b * lc, le)
        return huber(pred - ln_loss)[0].sum(axis=1)

    def coef(self, theta) -> dict[str, float]:
        la, b, le = map(float, theta)
        return {"a": math.exp(la + b * self.ln_cref), "b": b, "L_inf": math.exp(le)}

    def theta_from_coef(self, coef: dict) -> np.ndarray:
        return np.array([math.log(coef["a"]) - coef["b"] * self.ln_cref, coef["b"], math.log(coef["L_inf"])])

    def predict(self, coef: dict, *, params=None, tokens=None, flops=None) -> np.ndarray:
        if flops is None:
            raise ScalestudyError("compute law predicts from a compute budget C (FLOPs)")
        c = np.asarray(flops, float)
        # a * C^-b evaluated in logs: a alone can overflow a float for large b.
        return np.exp(math.log(coef["a"]) - coef["b"] * np.log(c)) + coef["L_inf"]


LAWS = {"compute": ComputeLaw, "chinchilla": ChinchillaLaw}


def make_law(name: str):
    if name not in LAWS:
        raise ScalestudyError(f"unknown law {name!r} (choose from {', '.join(LAWS)})")
    return LAWS[name]()


def fit_law(law, runs: Runs, *, starts: int = 12, extra_inits: list[np.ndarray] | None = None,
            check: bool = True, prepare: bool = True) -> Fit:
    """Robust fit of `law` to `runs` (Huber on log-loss, L-BFGS from the best `starts` grid points)."""
    if check:
        law.check(runs)
    if isinstance(law, ComputeLaw) and prepare:
        law.prepare(runs)  # bootstrap refits keep the reference point of the original fit
    x = law.features(runs)
    ln_loss = np.log(runs.loss)
    grid = law.grid(ln_loss) if isinstance(law, ComputeLaw) else law.grid()
    inits = list(grid[np.argsort(law.grid_scores(grid, x, ln_loss), kind="stable")[:starts]])
    inits += list(extra_inits or [])
    f = law.objective(x, ln_loss)
    best_theta, best_val = None, math.inf
    # One BLAS thread: L-BFGS-B calls BLAS on 5-vectors, and OpenBLAS thread wake-ups on a busy machine made each
    # iteration ~50x slower (19 ms vs 0.4 ms measured on 2 shared cores).
    with np.errstate(over="ignore", invalid="ignore"), threadpool_limits(1):
        for x0 in inits:
            theta, val = _lbfgs(f, np.asarray(x0, float), law.bounds)
            if np.isfinite(val) and val < best_val:
                best_theta, best_val = theta, val
    if best_theta is None:
        raise ScalestudyError(f"{law.name} law: the fit did not converge from any initialisation")
    resid = law.log_predict(best_theta, x) - ln_loss
    dof = max(len(runs) - len(law.coef_names), 1)
    return Fit(law=law.name, theta=tuple(map(float, best_theta)), coef=law.coef(best_theta), objective=best_val,
               residual_sd=float(np.sqrt(np.sum(resid**2) / dof)), n=len(runs))
