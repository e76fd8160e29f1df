"""Power-law trend of a best hyperparameter against model size: y = c * N^m, OLS in log-log, extrapolated to a
target size with a Student-t prediction interval (few proxy sizes -> wide, honest intervals)."""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from scalestudy.errors import ScalestudyError


def power_trend(sizes, values, *, target: float | None = None, level: float = 0.95) -> dict:
    """Fit y = c N^m; return c, m (with its CI when dof > 0) and the prediction at `target` (with its PI)."""
    n = np.asarray(sizes, float)
    y = np.asarray(values, float)
    if len(n) != len(y) or len(n) < 2:
        raise ScalestudyError(f"a trend needs at least 2 model sizes, got {len(n)}")
    if np.any(n <= 0) or np.any(y <= 0) or not (np.all(np.isfinite(n)) and np.all(np.isfinite(y))):
        raise ScalestudyError("a power-law trend needs positive, finite sizes and values")
    if len(np.unique(n)) < 2:
        raise ScalestudyError("a trend needs at least 2 distinct model sizes")
    lx, ly = np.log(n), np.log(y)
    note = None
    if np.ptp(ly) == 0:
        note = ("every size has the same best value: the search did not resolve a size dependence "
                "(a zero-width interval here means no spread, not certainty)")
    X = np.column_stack([np.ones_like(lx), lx])
    coef, *_ = np.linalg.lstsq(X, ly, rcond=None)
    dof = len(n) - 2
    out = {"coef": float(math.exp(coef[0])), "exponent": float(coef[1]), "points": len(n), "level": level,
           "form": "value = coef * N^exponent (OLS in log-log)", "note": note}
    cov = None
    if dof > 0:
        resid = ly - X @ coef
        s2 = float(resid @ resid) / dof
        cov = s2 * np.linalg.inv(X.T @ X)
        t = float(stats.t.isf((1 - level) / 2, dof))
        half = t * math.sqrt(cov[1, 1])
        out["exponent_ci"] = [float(coef[1] - half), float(coef[1] + half)]
    else:
        out["exponent_ci"] = None  # two sizes: the line is exact, no residual to estimate its error from
    if target is not None:
        if not target > 0:
            raise ScalestudyError(f"trend target must be a positive size, got {target}")
        v = np.array([1.0, math.log(target)])
        pred = float(v @ coef)
        out["target_params"] = float(target)
        out["target_value"] = float(math.exp(pred))
        if cov is not None:
            s2 = float((ly - X @ coef) @ (ly - X @ coef)) / dof
            se = math.sqrt(s2 + float(v @ cov @ v))
            t = float(stats.t.isf((1 - level) / 2, dof))
            out["target_pi"] = [float(math.exp(pred - t * se)), float(math.exp(pred + t * se))]
        else:
            out["target_pi"] = None
    return out
