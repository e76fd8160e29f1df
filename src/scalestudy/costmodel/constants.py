"""The fitted constants of the cost model (calibration.yaml), as one frozen object `estimate` reads.

`validate` refits them with each published source left out (`replace_values`), so every constant that is fitted
is named here and nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

import yaml

FITTED = ("gemm.a100.max_fraction", "gemm.hopper.max_fraction", "gemm.half_dim", "layer_overhead_s")


@dataclass(frozen=True)
class Calibration:
    gemm: tuple[tuple[str, float, float], ...]  # (family, max_fraction, half_dim)
    layer_overhead_s: float
    overlap_interference: float
    ce_bytes_per_logit: float
    fitted_on: tuple[str, ...] = ()

    def gemm_curve(self, family: str) -> tuple[float, float] | None:
        for name, top, half in self.gemm:
            if name == family:
                return top, half
        return None

    def values(self) -> dict[str, float]:
        """The fitted constants by name (FITTED order)."""
        curves = {name: (top, half) for name, top, half in self.gemm}
        return {"gemm.a100.max_fraction": curves["a100"][0], "gemm.hopper.max_fraction": curves["hopper"][0],
                "gemm.half_dim": curves["a100"][1], "layer_overhead_s": self.layer_overhead_s}

    def replace_values(self, values: dict[str, float], fitted_on: tuple[str, ...] = ()) -> Calibration:
        half = values["gemm.half_dim"]
        tops = {"a100": values["gemm.a100.max_fraction"], "hopper": values["gemm.hopper.max_fraction"]}
        # families without published rows follow the A100 curve (their prior, see calibration.yaml)
        gemm = tuple((name, tops.get(name, tops["a100"]), half) for name, _, _ in self.gemm)
        return Calibration(gemm=gemm, layer_overhead_s=values["layer_overhead_s"],
                           overlap_interference=self.overlap_interference,
                           ce_bytes_per_logit=self.ce_bytes_per_logit, fitted_on=fitted_on)


@lru_cache(maxsize=1)
def stored() -> Calibration:
    """The constants fitted on every published source (calibration.yaml)."""
    data = yaml.safe_load((resources.files("scalestudy.costmodel") / "calibration.yaml").read_text(encoding="utf-8"))
    gemm = tuple((name, float(c["max_fraction"]), float(c["half_dim"])) for name, c in data["gemm"].items())
    return Calibration(gemm=gemm, layer_overhead_s=float(data["layer_overhead_s"]),
                       overlap_interference=float(data["overlap_interference"]),
                       ce_bytes_per_logit=float(data["ce_bytes_per_logit"]),
                       fitted_on=tuple(data.get("fitted_on", ())))
