"""Scaling laws (fits with bootstrap CIs, extrapolation, compute-optimal N/D), jump detection, the report's scaling
section. (Hyperparameter search on small proxies: scalestudy.search.)

Public API: `analyze` (scalestudy fit), `report_section`, `detect_jumps`, `compute_optimal`, `load_runs`.
"""

from scalestudy.scaling.analysis import Analysis, analyze
from scalestudy.scaling.compute_optimal import compute_optimal
from scalestudy.scaling.jumps import detect_jumps
from scalestudy.scaling.runs import Runs, load_runs
from scalestudy.scaling.section import ScalingSection, report_section

__all__ = ["Analysis", "Runs", "ScalingSection", "analyze", "compute_optimal", "detect_jumps", "load_runs",
           "report_section"]
