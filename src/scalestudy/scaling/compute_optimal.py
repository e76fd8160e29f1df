"""Compute-optimal allocation of a FLOP budget between parameters N and tokens D for L(N, D) = E + A/N^alpha + B/D^beta.

Minimising L subject to C = k N D (k = 6: forward + backward of a decoder-only Transformer, Kaplan et al. 2020,
sec. 2.1) gives (Hoffmann et al. 2022, arXiv 2203.15556, eq. 4 and App. D.2):
    N_opt(C) = G (C/k)^a,  D_opt(C) = G^-1 (C/k)^b,  G = (alpha A / (beta B))^(1/(alpha+beta)),
    a = beta / (alpha + beta),  b = alpha / (alpha + beta).
For encoder-decoder models the study's FLOPs come from the cost model (encoder and decoder tokens with their own
lengths), so k is not 6; `effective_k` measures it from the runs (median of C / (N D)).
"""

from __future__ import annotations

import numpy as np

from scalestudy.errors import ScalestudyError

KAPLAN_K = 6.0


def allocation_constant(coef: dict) -> float:
    """G = (alpha A / (beta B))^(1/(alpha+beta))."""
    al, be = coef["alpha"], coef["beta"]
    if al <= 0 or be <= 0:
        raise ScalestudyError(f"compute-optimal allocation needs alpha, beta > 0 (got {al:g}, {be:g})")
    return (al * coef["A"] / (be * coef["B"])) ** (1.0 / (al + be))


def compute_optimal(coef: dict, budget_flops: float, k: float = KAPLAN_K) -> dict:
    """N_opt, D_opt and the predicted loss for a budget C = k N D."""
    if not budget_flops > 0:
        raise ScalestudyError(f"compute budget must be positive FLOPs, got {budget_flops:g}")
    al, be = coef["alpha"], coef["beta"]
    g = allocation_constant(coef)
    n = g * (budget_flops / k) ** (be / (al + be))
    d = (budget_flops / k) ** (al / (al + be)) / g
    loss = coef["E"] + coef["A"] / n**al + coef["B"] / d**be
    return {"params": float(n), "tokens": float(d), "loss": float(loss), "tokens_per_param": float(d / n)}


def effective_k(params: np.ndarray, tokens: np.ndarray, flops: np.ndarray) -> float:
    """The FLOPs-per-parameter-per-token factor the runs were counted with (median of C / (N D))."""
    return float(np.median(flops / (params * tokens)))
