"""The fitted constants of the cost model (calibration.yaml), as one frozen object `estimate` reads.

`validate` refits them with each published source left out (`replace_values`), so every constant that is fitted
is named here and nowhere else. None is per device: what differs between devices is data (specs/hardware/*.yaml).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

import yaml

from scalestudy.specs.hardware import SAFE_LOADER

# gemm.half_dim is not fitted: it is measured from a published GEMM sweep (calibration.yaml, and the sweep's table in
# tests/unit/test_gemm_half_dim_measured.py), like the other constants that are not in this tuple
FITTED = ("gemm.share", "kernel_overhead_s")


@dataclass(frozen=True)
class Calibration:
    gemm_share: float  # share of a device's measured maximum achievable matmul rate that training GEMMs reach
    half_dim: float  # GEMM dimension at which half of that is reached (costmodel/efficiency.py; measured, not fitted)
    kernel_overhead_s: float  # device time of one kernel a transformer block launches (costmodel/kernel_counts.py)
    overlap_interference: float
    # fraction of the datasheet HBM rate an element-wise kernel counted per kernel moves its bytes at (not fitted)
    elementwise_hbm_fraction: float = 1.0
    fitted_on: tuple[str, ...] = ()

    def values(self) -> dict[str, float]:
        """The fitted constants by name (FITTED order)."""
        return {"gemm.share": self.gemm_share, "kernel_overhead_s": self.kernel_overhead_s}

    def replace_values(self, values: dict[str, float], fitted_on: tuple[str, ...] = ()) -> Calibration:
        return Calibration(gemm_share=values["gemm.share"], half_dim=self.half_dim,
                           kernel_overhead_s=values["kernel_overhead_s"],
                           overlap_interference=self.overlap_interference,
                           elementwise_hbm_fraction=self.elementwise_hbm_fraction, fitted_on=fitted_on)


@lru_cache(maxsize=1)
def stored() -> Calibration:
    """The constants fitted on every published source (calibration.yaml)."""
    data = yaml.load((resources.files("scalestudy.costmodel") / "calibration.yaml").read_text(encoding="utf-8"),
                     Loader=SAFE_LOADER)
    return Calibration(gemm_share=float(data["gemm"]["share"]), half_dim=float(data["gemm"]["half_dim"]),
                       kernel_overhead_s=float(data["kernel_overhead_s"]),
                       overlap_interference=float(data["overlap_interference"]),
                       elementwise_hbm_fraction=float(data["elementwise_hbm_fraction"]),
                       fitted_on=tuple(data.get("fitted_on", ())))
