"""The search behind `published.fit`: a fixed grid, then Nelder-Mead from its best points -- a procedure whose result
depends on the rows it is given and on nothing else (never on calibration.yaml's stored values).

Why not a local search from the stored values (what `fit` was until 2026-12-04): the objective (mean |log error| over
a few dozen rows) has kinks wherever a row's critical path switches (max() of overlapped terms), and may have more
than one basin -- while gemm.half_dim was fitted it traded against gemm.share when every GEMM is large, and leaving
one source out moved the best half_dim from one end of its bounds to the other (without mosaicml2023: 1 at objective
0.0508, 600 at 0.0494); it is measured since (calibration.yaml). A local search from the stored values stops on a
kink near them: every leave-one-source-out fold then starts from values fitted WITH the source it predicts, and
`validate --refit` never reproduces the stored values.

Coordinates: each constant's log, scaled to [0, 1] over its bounds (a share of ~1 and a time of ~1e-5 s move the
objective on comparable steps there). The grid is a number of points per constant in those
coordinates (published.FIT_GRID), bounds included (a fold's minimum may sit on a bound). Its table of objective values
costs one evaluation per row and grid point, and rows are shared by all folds, so the caller caches per-row values
(published._grid_errors). Each start's simplex stops coarsely (COARSE_XTOL): only the lower end is refined to XTOL.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence

import numpy as np

COARSE_XTOL, COARSE_FTOL = 1e-2, 1e-4  # each start's simplex stops there (the basins are far apart) ...
XTOL = 1e-3  # ... the best one's at: simplex size in unit coordinates 0.1% of share, 0.3% of the time
FTOL = 1e-5  # objective spread at a run's stop (the objective is ~0.05: 2e-4 of it)
STARTS = 2  # the best grid points two steps apart that are refined (a second basin is not ruled out)
RESTART_GAIN = 1e-5  # a restart from a run's end that gains less than this ends the search
MAX_RESTARTS = 8  # bounds a pathological row set; 1-3 are used


def from_unit(x: Sequence[float], bounds: dict[str, tuple[float, float]]) -> dict[str, float]:
    return {n: lo * (hi / lo) ** min(max(float(u), 0.0), 1.0) for (n, (lo, hi)), u in zip(bounds.items(), x)}


def _unit_grid(points: Sequence[int]) -> list[np.ndarray]:
    return [np.array(p) for p in itertools.product(*(np.linspace(0.0, 1.0, n) for n in points))]


def grid(bounds: dict[str, tuple[float, float]], points: Sequence[int]) -> list[dict[str, float]]:
    """The fixed grid's points as constant values, `points` per constant, bounds included (itertools.product
    order: the order of `search`'s table)."""
    return [from_unit(p, bounds) for p in _unit_grid(points)]


def _refine(err: Callable[[np.ndarray], float], x: np.ndarray, size: float, xtol: float, ftol: float,
            restarts: int) -> tuple[np.ndarray, float]:
    """Nelder-Mead within the unit cube from `x` (first simplex `size` along each axis), restarted from its end while
    a run gains RESTART_GAIN or more (a collapsed simplex on a kink can stop short of the basin's minimum)."""
    from scipy.optimize import minimize  # only the fit needs scipy; estimate and validate's tables do not

    best = math.inf
    for _ in range(restarts):
        simplex = np.vstack([x] + [x + size * e * (1.0 if xi + size <= 1.0 else -1.0)
                                   for xi, e in zip(x, np.eye(len(x)))])
        res = minimize(err, x, method="Nelder-Mead", bounds=[(0.0, 1.0)] * len(x),
                       options={"xatol": xtol, "fatol": ftol, "initial_simplex": simplex})
        x, gain, best = res.x, best - res.fun, min(best, res.fun)
        if gain < RESTART_GAIN:
            break
    return x, best


def _starts(table: Sequence[float], points: Sequence[int]) -> list[np.ndarray]:
    """The STARTS lowest grid points (the first on a tie), each two or more grid steps from the ones before in some
    constant (a neighbour of the best point is the same basin)."""
    unit, step = _unit_grid(points), np.array([1.0 / (n - 1) for n in points])
    chosen: list[np.ndarray] = []
    for j in np.argsort(np.asarray(table), kind="stable"):
        if all((np.abs(unit[j] - q) > 1.5 * step).any() for q in chosen):
            chosen.append(unit[j])
        if len(chosen) == STARTS:
            break
    return chosen


def search(err: Callable[[dict[str, float]], float], table: Sequence[float],
           bounds: dict[str, tuple[float, float]], points: Sequence[int]) -> tuple[dict[str, float], float]:
    """The values within `bounds` minimising `err`, given `table` = err at each point of `grid(bounds, points)`: a
    coarse simplex from each of the STARTS best grid points, then the lowest end (the earlier start on a tie)
    refined to XTOL / FTOL. Deterministic: the same rows give the same values."""
    def unit_err(u: np.ndarray) -> float:
        return err(from_unit(u, bounds))

    size = 0.5 / (max(points) - 1)  # half the finest grid step
    ends = [_refine(unit_err, x, size, COARSE_XTOL, COARSE_FTOL, 1) for x in _starts(table, points)]
    x, _ = min(ends, key=lambda e: e[1])
    x, value = _refine(unit_err, x, 2 * COARSE_XTOL, XTOL, FTOL, MAX_RESTARTS)
    return from_unit(x, bounds), value
