"""One scaling analysis: load runs, fit a law, bootstrap it, extrapolate to a target or budget.

`analyze(...)` is what `scalestudy fit` and the report's scaling section call; `Analysis.to_dict()` is the
schema of `scalestudy fit --json`:
    {"law", "formula", "n_runs", "coef": {...}, "ci": {name: [lo, hi]}, "ci_level", "bootstrap": {...},
     "fit": {...}, "flops_per_param_token", "prediction": {...} | null}
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scalestudy.errors import ScalestudyError
from scalestudy.scaling.bootstrap import Bootstrap, bootstrap, percentile_ci, prediction_samples
from scalestudy.scaling.compute_optimal import KAPLAN_K, compute_optimal_or_nan, effective_k
from scalestudy.scaling.laws import HUBER_DELTA, Fit, fit_law, make_law
from scalestudy.scaling.runs import Runs, load_runs

POOR_FIT_SD = 0.05  # log-loss residual s.d. (~5% scatter) above which a fit is flagged as poor
FORMULAS = {
    "compute": "L(C) = a * C^(-b) + L_inf  (C in FLOPs, L in nats/token)",
    "chinchilla": "L(N, D) = E + A / N^alpha + B / D^beta  (N parameters, D tokens, L in nats/token)",
}


@dataclass
class Analysis:
    law: object
    runs: Runs
    fit: Fit
    boot: Bootstrap
    level: float
    k: float  # FLOPs per parameter per token used for budgets (C = k N D)
    prediction: dict | None

    def ci(self, name: str) -> tuple[float, float] | None:
        return percentile_ci(self.boot.samples(name), self.level) if self.boot.coefs else None

    def to_dict(self) -> dict:
        return _finite(self._dict())

    def _dict(self) -> dict:
        return {
            "law": self.fit.law,
            "formula": FORMULAS[self.fit.law],
            "n_runs": self.fit.n,
            "coef": self.fit.coef,
            "ci": {name: _pair(self.ci(name)) for name in self.fit.coef},
            "ci_level": self.level,
            "bootstrap": {"replicates": len(self.boot.coefs), "requested": self.boot.n_requested,
                          "skipped_degenerate": self.boot.skipped, "seed": self.boot.seed,
                          "method": "resample runs with replacement, refit, percentile interval"},
            "fit": {"method": "Huber loss on log-loss, L-BFGS from a grid of initialisations (Hoffmann et al. 2022)",
                    "huber_delta": HUBER_DELTA, "objective": self.fit.objective,
                    "residual_sd_log": self.fit.residual_sd},
            "flops_per_param_token": self.k,
            "prediction": self.prediction,
            "warnings": self.warnings(),
        }

    def warnings(self) -> list[str]:
        """What makes this fit untrustworthy: exponents at their bounds, a poor fit, unidentified coefficients."""
        out = []
        for name, (lo, hi) in zip(self.law.coef_names, self.law.bounds):
            v = self.fit.coef[name]
            if lo is not None and hi is not None and (v <= lo + 1e-6 or v >= hi - 1e-6):
                out.append(f"{name} = {v:g} sits at its bound [{lo:g}, {hi:g}]: these runs do not determine it")
        if self.fit.residual_sd > POOR_FIT_SD:
            out.append(f"the runs scatter {self.fit.residual_sd:.0%} (log-loss s.d.) around the fit: "
                       f"the {self.fit.law} law describes them poorly")
        for name in self.fit.coef:
            ci = self.ci(name)
            if ci is not None and ci[1] - ci[0] <= 1e-9 * max(abs(ci[0]), 1e-300):
                out.append(f"the bootstrap never moved {name}: it is not identified by these runs")
        return out


def _finite(value):
    """Non-finite floats become None: --json output stays valid JSON."""
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    if isinstance(value, float) and not np.isfinite(value):
        return None
    return value


def _pair(ci):
    return None if ci is None else [ci[0], ci[1]]


def _interval(point_fn, analysis_boot: Bootstrap, level: float, seed: int):
    """CI of the fitted curve and PI of a new run at one target, from the bootstrap replicates."""
    curve = np.array([point_fn(c) for c in analysis_boot.coefs])
    ci = percentile_ci(curve, level)
    pi = percentile_ci(prediction_samples(analysis_boot, curve, seed), level) if len(curve) else None
    return _pair(ci), _pair(pi)


def check_target(target_params=None, target_tokens=None, budget_flops=None) -> None:
    """Validate an extrapolation target before any fitting (one-line errors)."""
    if budget_flops is not None and (target_params is not None or target_tokens is not None):
        raise ScalestudyError("give either --target-params/--target-tokens or --budget-flops, not both")
    if budget_flops is None and (target_params is None) != (target_tokens is None):
        raise ScalestudyError("a target needs both --target-params N and --target-tokens D")
    for label, v in (("--target-params", target_params), ("--target-tokens", target_tokens),
                     ("--budget-flops", budget_flops)):
        if v is not None and not (np.isfinite(v) and v > 0):
            raise ScalestudyError(f"{label} must be a positive number, got {v:g}")


def _target_flops(k: float, target_params: float, target_tokens: float) -> float:
    """C = k N D of an extrapolation target; a one-line error where it leaves floating point."""
    flops = k * target_params * target_tokens
    if not np.isfinite(flops):
        raise ScalestudyError(f"target C = {k:g} x {target_params:g} params x {target_tokens:g} tokens overflows a "
                              "float: not a training run to extrapolate to")
    return flops


def _predict(law, fit: Fit, boot: Bootstrap, level: float, seed: int, k: float, *, target_params=None,
             target_tokens=None, budget_flops=None) -> dict | None:
    if budget_flops is None and target_params is None and target_tokens is None:
        return None
    by_nd = law.name == "chinchilla" or budget_flops is None
    out: dict = {"convention": f"C = {k:g} N D (FLOPs)" if by_nd else "C in FLOPs, as in the runs' flops column"}
    if budget_flops is None:
        flops = _target_flops(k, target_params, target_tokens)
        out.update(params=float(target_params), tokens=float(target_tokens), flops=float(flops))

        def point(c):
            return float(law.predict(c, params=target_params, tokens=target_tokens, flops=flops))
    elif law.name == "chinchilla":
        def optimal(c):
            return compute_optimal_or_nan(c, budget_flops, k)

        out.update(flops=float(budget_flops),
                   **{f"{key}_opt": v for key, v in optimal(fit.coef).items() if key != "loss"})
        replicates = [optimal(c) for c in boot.coefs]
        for key in ("params", "tokens", "tokens_per_param"):
            out[f"{key}_opt_ci"] = _pair(percentile_ci([r[key] for r in replicates], level))

        def point(c):
            return optimal(c)["loss"]
    else:
        out.update(flops=float(budget_flops))

        def point(c):
            return float(law.predict(c, flops=budget_flops))
    out["loss"] = point(fit.coef)
    out["loss_ci"], out["loss_pi"] = _interval(point, boot, level, seed)
    out["intervals"] = (f"loss_ci: {level:.0%} bootstrap interval of the fitted curve; loss_pi: {level:.0%} "
                        "prediction interval of one new run (adds the runs' scatter around the fit)")
    return out


MAX_BOOTSTRAP = 100_000


def analyze(source, law: str = "chinchilla", *, target_params: float | None = None,
            target_tokens: float | None = None, budget_flops: float | None = None, n_boot: int = 200,
            seed: int = 0, level: float = 0.95, flops_per_param_token: float | str = KAPLAN_K) -> Analysis:
    """Fit `law` to runs from `source` (CSV path, study dir, rows, Runs), bootstrap, and extrapolate.

    flops_per_param_token: k in C = k N D for budgets and targets (6 = decoder-only convention), or "auto" to
    measure it from the runs' flops column (use it for encoder-decoder studies whose FLOPs come from the
    cost model).
    """
    if not 0 < level < 1:
        raise ScalestudyError(f"--level (the intervals' confidence level) must be in (0, 1), got {level}")
    if n_boot > MAX_BOOTSTRAP:
        raise ScalestudyError(f"--bootstrap {n_boot}: at most {MAX_BOOTSTRAP:,} replicates (each is a full refit, "
                              "~10 ms: 10^5 take ~15 min, and 10^3-10^4 already pin the percentile intervals to ~1%)")
    if isinstance(flops_per_param_token, (int, float)) and not 0 < flops_per_param_token < float("inf"):
        raise ScalestudyError(f"--flops-per-param-token (k in C = k N D) must be a positive finite number, got "
                              f"{flops_per_param_token:g}")
    check_target(target_params, target_tokens, budget_flops)
    if target_params is not None and isinstance(flops_per_param_token, (int, float)):
        _target_flops(flops_per_param_token, target_params, target_tokens)  # before any fit: an overflow is input
    the_law = make_law(law)
    runs = load_runs(source)
    if flops_per_param_token == "auto":
        runs.require("params", "tokens", "flops")
        k = effective_k(runs.params, runs.tokens, runs.flops)
    else:
        k = float(flops_per_param_token)
        if not k > 0:
            raise ScalestudyError(f"FLOPs per parameter per token must be positive, got {k:g}")
    runs = runs.with_flops(k)
    fit = fit_law(the_law, runs)
    boot = bootstrap(the_law, runs, fit, n_boot=n_boot, seed=seed)
    prediction = _predict(the_law, fit, boot, level, seed, k, target_params=target_params,
                          target_tokens=target_tokens, budget_flops=budget_flops)
    return Analysis(law=the_law, runs=runs, fit=fit, boot=boot, level=level, k=k, prediction=prediction)
