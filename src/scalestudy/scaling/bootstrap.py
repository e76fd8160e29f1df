"""Bootstrap uncertainty for a fitted law: resample runs with replacement, refit, take percentiles.

Each refit starts L-BFGS from the point estimate and from the best grid point of the resample (the wider grid
search is done once, for the point fit).
A resample that is degenerate for the law (e.g. a single model size left) is skipped and counted.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scalestudy.errors import ScalestudyError
from scalestudy.scaling.laws import Fit, fit_law
from scalestudy.scaling.runs import Runs


@dataclass
class Bootstrap:
    """Coefficients of each successful refit (one dict per replicate) and the fit's log-residuals."""

    coefs: list[dict[str, float]]
    residuals: np.ndarray  # log-loss residuals of the point fit, for prediction intervals
    n_requested: int
    seed: int
    skipped: int

    def samples(self, name: str) -> np.ndarray:
        return np.array([c[name] for c in self.coefs])


def bootstrap(law, runs: Runs, fit: Fit, *, n_boot: int = 200, seed: int = 0) -> Bootstrap:
    """Refit `law` on `n_boot` resamples of `runs` (seeded)."""
    if n_boot < 0:
        raise ScalestudyError(f"bootstrap replicates must be >= 0, got {n_boot}")
    rng = np.random.default_rng(seed)
    theta0 = np.array(fit.theta)
    coefs, skipped = [], 0
    for _ in range(n_boot):
        sample = runs.take(rng.integers(0, len(runs), len(runs)))
        try:
            law.check(sample)
        except ScalestudyError:
            skipped += 1
            continue
        # From the point estimate and from the best grid point of this resample: a refit that could only start
        # from the point estimate can stay stuck where a coefficient has no gradient, hiding uncertainty.
        coefs.append(fit_law(law, sample, starts=1, extra_inits=[theta0], check=False, prepare=False).coef)
    resid = np.log(runs.loss) - law.log_predict(theta0, law.features(runs))
    return Bootstrap(coefs=coefs, residuals=resid, n_requested=n_boot, seed=seed, skipped=skipped)


def percentile_ci(samples: np.ndarray, level: float = 0.95) -> tuple[float, float] | None:
    """Percentile interval of bootstrap samples; None when there are too few replicates to say anything."""
    samples = np.asarray(samples, float)
    samples = samples[np.isfinite(samples)]
    if len(samples) < 10:
        return None
    tail = 100 * (1 - level) / 2
    lo, hi = np.percentile(samples, [tail, 100 - tail])
    return float(lo), float(hi)


def prediction_samples(boot: Bootstrap, point_predictions: np.ndarray, seed: int) -> np.ndarray:
    """Bootstrap curve predictions times a resampled run-to-run scatter factor exp(residual):
    the spread of a new run's loss, not just of the fitted curve."""
    rng = np.random.default_rng(seed + 1)
    return point_predictions * np.exp(rng.choice(boot.residuals, size=len(point_predictions)))
