"""Scaling plots (matplotlib, Agg backend, imported lazily): loss vs compute with the fit and its bootstrap band,
and the iso-FLOP view (loss vs parameters at fixed compute, with the compute-optimal N marked)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np

from scalestudy.scaling.compute_optimal import compute_optimal_or_nan


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _band(curves: np.ndarray, level: float):
    tail = 100 * (1 - level) / 2
    return np.nanpercentile(curves, tail, axis=0), np.nanpercentile(curves, 100 - tail, axis=0)


def _frontier(analysis, c_grid: np.ndarray, coef: dict) -> np.ndarray:
    """Loss the law predicts at each compute: L(C) for the compute law, L(N_opt, D_opt) for chinchilla."""
    if analysis.fit.law == "compute":
        return analysis.law.predict(coef, flops=c_grid)
    return np.array([compute_optimal_or_nan(coef, c, analysis.k)["loss"] for c in c_grid])


def _compute_panel(ax, analysis) -> None:
    runs, pred = analysis.runs, analysis.prediction
    hi = max(runs.flops.max(), (pred or {}).get("flops", 0.0))
    c_grid = np.logspace(np.log10(runs.flops.min() / 2), np.log10(hi * 2), 80)
    # coloured by size where every run has one: a compute-law CSV's params of 0 printed numpy's log10 warning
    color = np.log10(runs.params) if runs.params is not None and (runs.params > 0).all() else None
    sc = ax.scatter(runs.flops, runs.loss, c=color, s=18, cmap="viridis", label="runs", zorder=3)
    if color is not None:
        ax.figure.colorbar(sc, ax=ax, label="log10 parameters N")
    label = "fit L(C)" if analysis.fit.law == "compute" else "fit, compute-optimal L(N_opt, D_opt)"
    ax.plot(c_grid, _frontier(analysis, c_grid, analysis.fit.coef), color="C3", label=label)
    if len(analysis.boot.coefs) >= 10:
        lo, hi_b = _band(np.array([_frontier(analysis, c_grid, c) for c in analysis.boot.coefs]), analysis.level)
        ax.fill_between(c_grid, lo, hi_b, color="C3", alpha=0.2, label=f"{analysis.level:.0%} bootstrap band")
    if pred and pred.get("loss_pi"):
        lo_p, hi_p = pred["loss_pi"]
        ax.errorbar([pred["flops"]], [pred["loss"]], yerr=[[pred["loss"] - lo_p], [hi_p - pred["loss"]]], fmt="*",
                    color="k", ms=10, capsize=4, label="extrapolation (prediction interval)", zorder=4)
    ax.set_xscale("log")
    ax.set_xlabel(f"training compute C (FLOPs; {'as given' if analysis.fit.law == 'compute' else f'C = {analysis.k:g}ND for the fit curve'})")
    ax.set_ylabel("final loss (nats/token)")
    ax.set_title("Loss vs compute")
    ax.legend(fontsize=7)


def _isoflop_panel(ax, analysis) -> None:
    runs, coef, k = analysis.runs, analysis.fit.coef, analysis.k
    budgets = np.logspace(np.log10(runs.flops.min()), np.log10(runs.flops.max()), 4)
    n_lo, n_hi = runs.params.min() / 4, runs.params.max() * 4
    for i, c in enumerate(budgets):
        n = np.logspace(np.log10(n_lo), np.log10(n_hi), 100)
        loss = analysis.law.predict(coef, params=n, tokens=c / (k * n))
        ax.plot(n, loss, color=f"C{i}", label=f"C = {c:.2g} FLOPs")
        near = np.abs(np.log(runs.flops / c)) < np.log(1.5)
        ax.scatter(runs.params[near], runs.loss[near], color=f"C{i}", s=14)
        opt = compute_optimal_or_nan(coef, c, k)
        if np.isfinite(opt["params"]) and np.isfinite(opt["loss"]):
            ax.scatter([opt["params"]], [opt["loss"]], color=f"C{i}", marker="D", edgecolor="k", zorder=4)
    # The law's curves explode far from the optimum; keep the view on the runs and the minima.
    ax.set_ylim(0.97 * min(runs.loss.min(), coef["E"]), 1.1 * runs.loss.max())
    ax.set_xscale("log")
    ax.set_xlabel(f"parameters N (tokens D = C / ({k:g} N))")
    ax.set_ylabel("loss (nats/token)")
    ax.set_title("Iso-FLOP view (diamond: compute-optimal N)")
    ax.legend(fontsize=7)


def plot_fit(analysis, out: str | Path) -> Path:
    """Write the scaling figure for an `Analysis` to `out` (PNG), atomically; return the path."""
    plt = _pyplot()
    out = Path(out)
    iso = analysis.fit.law == "chinchilla"
    fig, axes = plt.subplots(1, 2 if iso else 1, figsize=(12 if iso else 6.5, 4.5), squeeze=False)
    _compute_panel(axes[0][0], analysis)
    if iso:
        _isoflop_panel(axes[0][1], analysis)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out.parent, suffix=".png")
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=220)  # 2x the 110-dpi layout: sharp on high-DPI screens (the report shows it at 1x)
        os.replace(tmp, out)
    finally:
        plt.close(fig)
        if os.path.exists(tmp):
            os.unlink(tmp)
    return out
