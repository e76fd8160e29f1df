"""Compute-optimal allocation matches the closed form of Hoffmann et al. 2022 (eq. 4) and a numeric minimisation."""

import math

import numpy as np
import pytest
from scipy.optimize import minimize_scalar

from scalestudy.errors import ScalestudyError
from scalestudy.scaling.compute_optimal import (allocation_constant, compute_optimal, compute_optimal_or_nan,
                                               effective_k)

COEF = {"E": 1.69, "A": 406.4, "B": 410.7, "alpha": 0.34, "beta": 0.28}


def test_closed_form_relations():
    al, be = COEF["alpha"], COEF["beta"]
    g = allocation_constant(COEF)
    assert g == pytest.approx((al * COEF["A"] / (be * COEF["B"])) ** (1 / (al + be)))
    for c in (1e20, 5.76e23, 1e26):
        opt = compute_optimal(COEF, c)
        assert 6 * opt["params"] * opt["tokens"] == pytest.approx(c, rel=1e-12)
        assert opt["params"] == pytest.approx(g * (c / 6) ** (be / (al + be)), rel=1e-12)
        assert opt["tokens"] == pytest.approx((c / 6) ** (al / (al + be)) / g, rel=1e-12)
        # At the optimum the marginal returns balance: alpha A / N^alpha = beta B / D^beta.
        assert al * COEF["A"] / opt["params"] ** al == pytest.approx(be * COEF["B"] / opt["tokens"] ** be, rel=1e-9)


def test_optimum_minimises_loss_on_the_iso_flop_curve():
    c = 5.76e23  # Chinchilla's budget
    def loss_at(log_n):
        n = np.exp(log_n)
        return COEF["E"] + COEF["A"] / n ** COEF["alpha"] + COEF["B"] / (c / (6 * n)) ** COEF["beta"]
    numeric = np.exp(minimize_scalar(loss_at, bounds=(np.log(1e8), np.log(1e13)), method="bounded",
                                     options={"xatol": 1e-10}).x)
    opt = compute_optimal(COEF, c)
    assert opt["params"] == pytest.approx(numeric, rel=1e-4)
    assert opt["loss"] == pytest.approx(loss_at(np.log(numeric)), rel=1e-9)
    # Hoffmann et al.'s parametric fit puts the 5.76e23 FLOP optimum at ~3e10-4e10 parameters (their Table 3 gives
    # 40B for approach 3 with their exact coefficients rounding); with these rounded coefficients N ~ 3.3e10.
    assert 2.5e10 < opt["params"] < 4.5e10


def test_encoder_decoder_k_and_errors():
    n, d = np.array([1e8, 2e8]), np.array([1e9, 4e9])
    assert effective_k(n, d, 8.0 * n * d) == pytest.approx(8.0)
    assert compute_optimal(COEF, 1e22, k=8.0)["params"] < compute_optimal(COEF, 1e22, k=6.0)["params"]
    with pytest.raises(ScalestudyError, match="alpha, beta > 0"):
        compute_optimal({**COEF, "alpha": 0.0}, 1e22)
    with pytest.raises(ScalestudyError, match="positive"):
        compute_optimal(COEF, 0.0)
    # the smallest positive budget: C / k underflowed to 0 and math.log(0) raised (fit --budget-flops 4.9e-324)
    tiny = compute_optimal(COEF, 5e-324)
    assert 0 < tiny["params"] < 1 and 0 < tiny["tokens"] < 1  # N D = C / k, in logs (the product underflows)
    assert math.log(tiny["params"]) + math.log(tiny["tokens"]) == pytest.approx(math.log(5e-324) - math.log(6.0))


def test_wild_bootstrap_coefficients_give_exact_or_saturated_values():
    """Bootstrap refits can be wild: the allocation stays exact where a float can hold it and saturates to 0 / inf
    (never NaN, never an OverflowError) where it cannot."""
    budget, k = 3e12, 2.3
    # Finite but wild: the closed form must still hold. N D = C / k, and the first-order condition of the optimum,
    # alpha A N^-alpha = beta B D^-beta (in logs: these numbers are far outside a float's exponent range).
    wild = {"E": 1e-11, "A": 1e-300, "B": 1e300, "alpha": 5.0, "beta": 1e-3}
    opt = compute_optimal(wild, budget, k=k)
    log_n, log_d = math.log(opt["params"]), math.log(opt["tokens"])
    assert log_n + log_d == pytest.approx(math.log(budget / k), rel=1e-12)
    assert (math.log(5.0 * 1e-300) - 5.0 * log_n) == pytest.approx(math.log(1e-3 * 1e300) - 1e-3 * log_d, abs=1e-6)
    assert opt["tokens_per_param"] == pytest.approx(math.exp(log_d - log_n), rel=1e-9)
    # Beyond a float: G = (A / B)^(1 / (2e-3)) underflows, so N_opt = 0 and D_opt = inf; the loss is still exact:
    # with alpha = beta the optimum splits the reducible loss equally, A N^-a = B D^-a = sqrt(A B (C/k)^-a).
    extreme = {"E": 1.5, "A": 1e-300, "B": 1e300, "alpha": 1e-3, "beta": 1e-3}
    opt = compute_optimal(extreme, budget, k=k)
    assert opt["params"] == 0.0 and opt["tokens"] == math.inf and opt["tokens_per_param"] == math.inf
    assert opt["loss"] == pytest.approx(1.5 + 2 * math.sqrt(1e-300 * 1e300 * (budget / k) ** -1e-3), rel=1e-9)
    # No optimum at all (an exponent at 0): NaNs for a bootstrap replicate, a clear error otherwise.
    assert all(math.isnan(v) for v in compute_optimal_or_nan({**wild, "alpha": 0.0}, budget).values())
