"""Scaling laws (fits with bootstrap CIs, extrapolation, compute-optimal N/D) and jump detection: data, which the
report renders (scalestudy.report.scaling_section). (Hyperparameter search on small proxies: scalestudy.search.)

Public API: `analyze` (scalestudy fit), `detect_jumps`, `compute_optimal`, `load_runs`.
"""

from scalestudy.scaling.analysis import Analysis, analyze
from scalestudy.scaling.compute_optimal import compute_optimal
from scalestudy.scaling.jumps import detect_jumps
from scalestudy.scaling.runs import Runs, load_runs

__all__ = ["Analysis", "Runs", "analyze", "compute_optimal", "detect_jumps", "load_runs"]
