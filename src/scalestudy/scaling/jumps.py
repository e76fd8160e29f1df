"""Jump detection: flag runs whose metric breaks from a smooth power-law trend in scale.

Loss falls smoothly with scale while specific capabilities can appear abruptly (Ganguli et al. 2022,
"Predictability and Surprise in Large Generative Models"). Scale is one quantity per run (e.g. compute C) or several
(e.g. parameters N and tokens D of a grid study). The trend is a power law: log y = c + sum_j m_j log x_j (OLS; for
metrics that reach zero or below, y = c + sum_j m_j log x_j), with squared terms (log x_j)^2 once there are enough
runs (a drifting exponent, e.g. a loss bending toward its irreducible floor, is still smooth). Two tests, each at a
k-sigma-equivalent level (two-sided p = 2(1 - Phi(k)), Student-t with the fit's residual degrees of freedom):
- leave-one-out: the externally studentised residual of each run (the trend refitted without it);
- forecast: each run against the prediction interval of the trend fitted to the smaller-scale runs only (ordered by
  the product of the scales, i.e. by compute for (N, D)): does the next, larger run land where the smaller said?
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats

from scalestudy.errors import ScalestudyError

MIN_DOF = 1  # residual degrees of freedom a trend fit must keep
QUAD_DOF = 2  # ... and before it may take the squared terms


@dataclass(frozen=True)
class JumpFlag:
    index: int  # position in the series sorted by scale
    scale: float | tuple[float, ...]
    value: float
    expected: float  # the trend's prediction without this run
    score: float  # |residual| / standard error of a new observation (t statistic)
    threshold: float
    test: str  # "leave-one-out" or "forecast"

    def to_dict(self) -> dict:
        return asdict(self)


def _design(lx: np.ndarray, quadratic: bool) -> np.ndarray:
    cols = [np.ones(len(lx)), *lx.T]
    if quadratic:
        cols += [c**2 for c in lx.T]
    return np.column_stack(cols)


def _predict_interval(lx: np.ndarray, y: np.ndarray, x0: np.ndarray) -> tuple[float, float, int] | None:
    """OLS prediction at x0, standard error of a new observation there, residual dof; None if too few runs."""
    d = lx.shape[1]
    quadratic = len(lx) - (1 + 2 * d) >= QUAD_DOF
    if len(lx) - (1 + d) < MIN_DOF:
        return None
    center, width = lx.mean(axis=0), np.maximum(np.ptp(lx, axis=0), 1e-12)  # conditioning
    X = _design((lx - center) / width, quadratic)
    v = _design(((x0 - center) / width)[None, :], quadratic)[0]
    coef, *_ = np.linalg.lstsq(X, y, rcond=None)
    rank = np.linalg.matrix_rank(X)
    dof = len(lx) - rank
    if dof < MIN_DOF:
        return None
    resid = y - X @ coef
    s2 = float(resid @ resid) / dof
    return float(v @ coef), float(np.sqrt(s2 * (1.0 + v @ np.linalg.pinv(X.T @ X) @ v))), dof


def detect_jumps(scale, values, *, k: float = 3.0, rel_floor: float = 1e-3) -> list[JumpFlag]:
    """Runs of `values` vs `scale` ((n,) or (n, d), positive) that deviate from a smooth power-law trend by more
    than k sigma. rel_floor: smallest residual scale considered (relative, i.e. in log units for a power law), so
    that noise-free series do not flag rounding error."""
    x = np.asarray(scale, float)
    y = np.asarray(values, float)
    x2 = x[:, None] if x.ndim == 1 else x
    if x2.ndim != 2 or y.ndim != 1 or len(x2) != len(y):
        raise ScalestudyError("jump detection needs a scale series and a metric series of equal length")
    if not (np.all(np.isfinite(x2)) and np.all(np.isfinite(y))) or np.any(x2 <= 0):
        raise ScalestudyError("jump detection needs finite values and positive scales")
    min_points = x2.shape[1] + 3  # a linear trend, the left-out run, one residual degree of freedom
    if len(y) < min_points:
        raise ScalestudyError(f"jump detection needs at least {min_points} runs, got {len(y)}")
    order = np.argsort(np.log(x2).sum(axis=1), kind="stable")
    x2, y = x2[order], y[order]
    log_y = bool(np.all(y > 0))
    lx, ty = np.log(x2), (np.log(y) if log_y else y)
    floor = rel_floor if log_y else rel_floor * max(float(np.max(np.abs(y))), 1e-12)
    p_two_sided = 2 * stats.norm.sf(k)

    def flag(i, fit, test):
        pred, se, dof = fit
        thr = float(stats.t.isf(p_two_sided / 2, dof))
        score = abs(ty[i] - pred) / max(se, floor)
        if score <= thr:
            return None
        sc = float(x2[i, 0]) if x2.shape[1] == 1 else tuple(map(float, x2[i]))
        return JumpFlag(i, sc, float(y[i]), float(np.exp(pred)) if log_y else pred, float(score), thr, test)

    flags: dict[int, JumpFlag] = {}
    everyone = np.arange(len(y))
    for i in everyone:
        fit = _predict_interval(lx[everyone != i], ty[everyone != i], lx[i])
        if fit and (f := flag(i, fit, "leave-one-out")):
            flags[i] = f
    ordering = lx.sum(axis=1)
    for i in everyone:
        smaller = ordering < ordering[i] - 1e-9
        fit = _predict_interval(lx[smaller], ty[smaller], lx[i]) if smaller.sum() >= min_points - 1 else None
        if fit and i not in flags and (f := flag(i, fit, "forecast")):
            flags[i] = f
    return [flags[i] for i in sorted(flags)]
