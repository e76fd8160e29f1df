"""Scaling-law fits recover known laws: exact data, noisy data (truth inside the bootstrap CIs), and the published
Chinchilla coefficients (Hoffmann et al. 2022: E=1.69, A=406.4, B=410.7, alpha=0.34, beta=0.28)."""

import numpy as np
import pytest

from scalestudy.errors import ScalestudyError
from scalestudy.scaling.analysis import analyze
from scalestudy.scaling.laws import ChinchillaLaw, ComputeLaw, fit_law
from scalestudy.scaling.runs import runs_from_rows

CHINCHILLA = {"E": 1.69, "A": 406.4, "B": 410.7, "alpha": 0.34, "beta": 0.28}


def chinchilla_rows(coef, noise=0.0, seed=0, sizes=6, token_counts=6):
    rng = np.random.default_rng(seed)
    rows = []
    for n in np.logspace(7.5, 10, sizes):
        for d in np.logspace(9, 11.5, token_counts):
            loss = coef["E"] + coef["A"] / n ** coef["alpha"] + coef["B"] / d ** coef["beta"]
            rows.append({"params": n, "tokens": d, "flops": 6 * n * d, "loss": loss * np.exp(noise * rng.normal())})
    return rows


def test_recovers_published_chinchilla_coefficients_from_exact_data():
    fit = fit_law(ChinchillaLaw(), runs_from_rows(chinchilla_rows(CHINCHILLA)))
    for name, true in CHINCHILLA.items():
        assert fit.coef[name] == pytest.approx(true, rel=1e-4), name


def test_chinchilla_noisy_truth_inside_bootstrap_cis():
    truth = {"E": 2.1, "A": 250.0, "B": 900.0, "alpha": 0.3, "beta": 0.33}
    result = analyze(chinchilla_rows(truth, noise=0.01, seed=3, sizes=5, token_counts=5), "chinchilla",
                     n_boot=50, seed=0, target_params=7e10, target_tokens=1.4e12)
    data = result.to_dict()
    assert data["bootstrap"]["replicates"] >= 45
    for name, true in truth.items():
        lo, hi = data["ci"][name]
        assert lo <= true <= hi, (name, true, lo, hi)
        assert lo <= data["coef"][name] <= hi
    # Extrapolation 7x beyond the largest model: the true loss lies in the prediction interval.
    true_loss = truth["E"] + truth["A"] / 7e10 ** truth["alpha"] + truth["B"] / 1.4e12 ** truth["beta"]
    lo, hi = data["prediction"]["loss_pi"]
    assert lo <= true_loss <= hi
    assert data["prediction"]["loss_ci"][0] >= lo and data["prediction"]["loss_ci"][1] <= hi


def compute_rows(a, b, l_inf, noise=0.0, seed=0, n=12):
    rng = np.random.default_rng(seed)
    return [{"flops": c, "loss": (a * c ** -b + l_inf) * np.exp(noise * rng.normal())}
            for c in np.logspace(15, 21, n)]


def test_compute_law_exact_and_noisy():
    exact = fit_law(ComputeLaw(), runs_from_rows(compute_rows(2.0e3, 0.18, 1.8)))
    assert exact.coef["a"] == pytest.approx(2.0e3, rel=1e-4)
    assert exact.coef["b"] == pytest.approx(0.18, rel=1e-5)
    assert exact.coef["L_inf"] == pytest.approx(1.8, rel=1e-5)
    data = analyze(compute_rows(2.0e3, 0.18, 1.8, noise=0.01, seed=5, n=16), "compute", n_boot=100,
                   budget_flops=1e22).to_dict()
    for name, true in {"a": 2.0e3, "b": 0.18, "L_inf": 1.8}.items():
        lo, hi = data["ci"][name]
        assert lo <= true <= hi, (name, true, lo, hi)
    lo, hi = data["prediction"]["loss_pi"]
    assert lo <= 2.0e3 * 1e22 ** -0.18 + 1.8 <= hi


def test_fit_is_deterministic_and_seeded():
    rows = compute_rows(500.0, 0.1, 2.0, noise=0.02, seed=1, n=8)
    one = analyze(rows, "compute", n_boot=12, seed=7).to_dict()
    two = analyze(rows, "compute", n_boot=12, seed=7).to_dict()
    other = analyze(rows, "compute", n_boot=12, seed=8).to_dict()
    assert one["ci"] == two["ci"] and one["coef"] == two["coef"]
    assert one["ci"] != other["ci"]


@pytest.mark.parametrize("rows, law, message", [
    ([{"params": 1e8, "tokens": 1e9, "flops": 6e17, "loss": 3.0}] * 4, "chinchilla", "need at least 5 runs"),
    ([{"flops": 1e18, "loss": 3.0}, {"flops": 1e19, "loss": 2.5}], "compute", "need at least 3 runs"),
    ([{"params": 1e8, "tokens": 10.0 ** (9 + i / 4), "loss": 3 - i / 10} for i in range(8)], "chinchilla",
     "2 or more model sizes"),
    ([{"params": 10.0 ** (7 + i / 4), "tokens": 1e9, "loss": 3 - i / 10} for i in range(8)], "chinchilla",
     "2 or more token counts"),
    ([{"flops": 10.0 ** (17 + i), "loss": 3.0 - i} for i in range(5)], "compute", "'loss' must be positive"),
    ([{"flops": 10.0 ** (17 + i), "loss": float("nan") if i == 2 else 3.0 - i / 4} for i in range(5)], "compute",
     "NaN"),
    ([{"flops": 10.0 ** (17 + i), "loss": 3.0 - i / 4} for i in range(5)], "chinchilla", "missing column 'params'"),
    ([{"params": 1e8, "flops": 1e18}] * 5, "compute", "missing column 'loss'"),
    ([{"flops": 1e18, "loss": 3.0}] * 5, "compute", "3 or more distinct compute budgets"),
])
def test_degenerate_input_is_a_clear_error(rows, law, message):
    with pytest.raises(ScalestudyError, match=message):
        analyze(rows, law, n_boot=0)


def test_bad_targets_are_clear_errors():
    rows = compute_rows(500.0, 0.1, 2.0, n=6)
    with pytest.raises(ScalestudyError, match="not both"):
        analyze(rows, "compute", n_boot=0, budget_flops=1e22, target_params=1e9, target_tokens=1e10)
    with pytest.raises(ScalestudyError, match="both --target-params"):
        analyze(rows, "compute", n_boot=0, target_params=1e9)
    with pytest.raises(ScalestudyError, match="positive"):
        analyze(rows, "compute", n_boot=0, budget_flops=-1.0)


def test_fits_that_say_nothing_carry_warnings():
    rising = [{"flops": c, "loss": 3.0 + 0.1 * i + 0.3 * (i % 2)} for i, c in enumerate(np.logspace(15, 20, 8))]
    warnings = analyze(rising, "compute", n_boot=10).to_dict()["warnings"]
    assert any("b = 0 sits at its bound" in w for w in warnings)
    assert any("describes them poorly" in w for w in warnings)
    assert analyze(compute_rows(2.0e3, 0.18, 1.8, noise=0.01, n=10), "compute", n_boot=10).to_dict()["warnings"] == []
