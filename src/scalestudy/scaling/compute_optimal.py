"""Compute-optimal allocation of a FLOP budget between parameters N and tokens D for L(N, D) = E + A/N^alpha + B/D^beta.

Minimising L subject to C = k N D (k = 6: forward + backward of a decoder-only Transformer, Kaplan et al. 2020,
sec. 2.1) gives (Hoffmann et al. 2022, arXiv 2203.15556, eq. 4 and App. D.2):
    N_opt(C) = G (C/k)^a,  D_opt(C) = G^-1 (C/k)^b,  G = (alpha A / (beta B))^(1/(alpha+beta)),
    a = beta / (alpha + beta),  b = alpha / (alpha + beta).
For encoder-decoder models the study's FLOPs come from the cost model (encoder and decoder tokens with their own
lengths), so k is not 6; `effective_k` measures it from the runs (median of C / (N D)).
"""

from __future__ import annotations

import math

import numpy as np

from scalestudy.errors import ScalestudyError

KAPLAN_K = 6.0


def log_allocation_constant(coef: dict) -> float:
    """log G, G = (alpha A / (beta B))^(1/(alpha+beta)); in logs because bootstrap refits can make G over/underflow."""
    al, be = coef["alpha"], coef["beta"]
    if al <= 0 or be <= 0:
        raise ScalestudyError(f"compute-optimal allocation needs alpha, beta > 0 (got {al:g}, {be:g})")
    if coef["A"] <= 0 or coef["B"] <= 0:
        raise ScalestudyError("compute-optimal allocation needs A, B > 0")
    return (math.log(al) + math.log(coef["A"]) - math.log(be) - math.log(coef["B"])) / (al + be)


def allocation_constant(coef: dict) -> float:
    """G = (alpha A / (beta B))^(1/(alpha+beta))."""
    return _exp(log_allocation_constant(coef))


def _exp(x: float) -> float:
    return math.exp(x) if x < 709.0 else math.inf


def compute_optimal(coef: dict, budget_flops: float, k: float = KAPLAN_K) -> dict:
    """N_opt, D_opt and the predicted loss for a budget C = k N D (inf where a wild fit overflows a float)."""
    if not budget_flops > 0:
        raise ScalestudyError(f"compute budget must be positive FLOPs, got {budget_flops:g}")
    al, be = coef["alpha"], coef["beta"]
    log_g = log_allocation_constant(coef)
    log_c = math.log(budget_flops) - math.log(k)  # not log(C / k): a tiny C over k underflows to 0
    log_n = log_g + log_c * be / (al + be)
    log_d = log_c * al / (al + be) - log_g
    loss = coef["E"] + _exp(math.log(coef["A"]) - al * log_n) + _exp(math.log(coef["B"]) - be * log_d)
    return {"params": _exp(log_n), "tokens": _exp(log_d), "loss": float(loss), "tokens_per_param": _exp(log_d - log_n)}


def compute_optimal_or_nan(coef: dict, budget_flops: float, k: float = KAPLAN_K) -> dict:
    """compute_optimal, or NaNs for a fit without an optimum (an exponent at 0, A or B underflowed): for bootstrap
    replicates and plots, where one wild refit must not stop the rest."""
    try:
        return compute_optimal(coef, budget_flops, k)
    except ScalestudyError:
        return {key: float("nan") for key in ("params", "tokens", "loss", "tokens_per_param")}


def effective_k(params: np.ndarray, tokens: np.ndarray, flops: np.ndarray) -> float:
    """The FLOPs-per-parameter-per-token factor the runs were counted with (median of C / (N D))."""
    return float(np.median(flops / (params * tokens)))
