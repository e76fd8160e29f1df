"""Jump detection: flag points of a metric-vs-scale series that break from a smooth power-law trend.

Loss falls smoothly with scale while specific capabilities can appear abruptly (Ganguli et al. 2022,
"Predictability and Surprise in Large Generative Models"). The trend is a power law, log y = c + m log x (OLS in
log-log; for metrics that reach zero or below, y = c + m log x), with a quadratic term in log x once there are
enough points (a drifting exponent, e.g. a loss bending toward its irreducible floor, is still smooth). Two tests, each at a k-sigma-equivalent level
(two-sided p = 2(1 - Phi(k)), Student-t with the fit's degrees of freedom):
- leave-one-out: the externally studentised residual of each point (the trend refitted without it);
- forecast: each point against the prediction interval of the trend fitted to the smaller scales only (the question a
  study asks before the next, larger run: does it land where the smaller ones said?).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats

from scalestudy.errors import ScalestudyError

MIN_POINTS = 4  # a 2-parameter trend, a left-out point, and at least one residual degree of freedom
MIN_DOF = 2  # residual degrees of freedom a fit keeps before its trend may take the quadratic term


@dataclass(frozen=True)
class JumpFlag:
    index: int  # position in the series sorted by scale
    scale: float
    value: float
    expected: float  # the trend's prediction without this point
    score: float  # |residual| / its standard error (t statistic)
    threshold: float
    test: str  # "leave-one-out" or "forecast"

    def to_dict(self) -> dict:
        return asdict(self)


def _design(x: np.ndarray, degree: int) -> np.ndarray:
    return np.column_stack([x**p for p in range(degree + 1)])


def _predict_interval(xf: np.ndarray, yf: np.ndarray, x0: float) -> tuple[float, float, int]:
    """OLS prediction at x0 and the standard error of a new observation there; residual dof."""
    degree = 2 if len(xf) - 3 >= MIN_DOF else 1
    center, width = xf.mean(), max(np.ptp(xf), 1e-12)  # conditioning of the polynomial design
    xf, x0 = (xf - center) / width, (x0 - center) / width
    X = _design(xf, degree)
    coef, *_ = np.linalg.lstsq(X, yf, rcond=None)
    dof = len(xf) - degree - 1
    resid = yf - X @ coef
    s2 = float(resid @ resid) / dof
    xtx_inv = np.linalg.pinv(X.T @ X)
    v = _design(np.array([x0]), degree)[0]
    return float(v @ coef), float(np.sqrt(s2 * (1.0 + v @ xtx_inv @ v))), dof


def detect_jumps(scale, values, *, k: float = 3.0, rel_floor: float = 1e-3) -> list[JumpFlag]:
    """Points of `values` vs `scale` that deviate from a smooth power-law trend by more than k sigma.

    rel_floor: smallest residual scale considered (relative, i.e. in log units for a power law), so that
    noise-free series do not flag rounding error.
    """
    x = np.asarray(scale, float)
    y = np.asarray(values, float)
    if x.shape != y.shape or x.ndim != 1:
        raise ScalestudyError("jump detection needs two 1-D series of equal length (scale, values)")
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))) or np.any(x <= 0):
        raise ScalestudyError("jump detection needs finite values and positive scales")
    if len(x) < MIN_POINTS:
        raise ScalestudyError(f"jump detection needs at least {MIN_POINTS} points, got {len(x)}")
    order = np.argsort(x, kind="stable")
    x, y = x[order], y[order]
    log_y = bool(np.all(y > 0))
    lx, ty = np.log(x), (np.log(y) if log_y else y)
    floor = rel_floor if log_y else rel_floor * max(float(np.max(np.abs(y))), 1e-12)
    p_two_sided = 2 * stats.norm.sf(k)

    def back(t):
        return float(np.exp(t)) if log_y else float(t)

    flags: dict[int, JumpFlag] = {}
    for i in range(len(x)):
        keep = np.arange(len(x)) != i
        pred, se, dof = _predict_interval(lx[keep], ty[keep], lx[i])
        thr = float(stats.t.isf(p_two_sided / 2, dof))
        score = abs(ty[i] - pred) / max(se, floor)
        if score > thr:
            flags[i] = JumpFlag(i, float(x[i]), float(y[i]), back(pred), float(score), thr, "leave-one-out")
    for i in range(3, len(x)):
        pred, se, dof = _predict_interval(lx[:i], ty[:i], lx[i])
        thr = float(stats.t.isf(p_two_sided / 2, dof))
        score = abs(ty[i] - pred) / max(se, floor)
        if score > thr and i not in flags:
            flags[i] = JumpFlag(i, float(x[i]), float(y[i]), back(pred), float(score), thr, "forecast")
    return [flags[i] for i in sorted(flags)]
