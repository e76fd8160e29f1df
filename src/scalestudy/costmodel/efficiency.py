"""Achieved fraction of peak for a matrix multiply.

GPU families with a fitted curve (costmodel/calibration.yaml): max_fraction * d / (d + half_dim), a saturating
curve in the characteristic dimension d. Devices without one (measured CPU profiles, custom devices) list
[[dimension, fraction], ...] in their YAML, interpolated linearly in log2(dimension) and clamped at both ends.

For C[M,N] = A[M,K] @ B[K,N] the characteristic dimension is min(M, sqrt(N*K)): the weight shape (N, K) sets the
tile and wave efficiency, the token count M only limits it when it is the smaller one (small micro-batches); an
attention product with K = head dimension is correspondingly less efficient.
"""

from __future__ import annotations

import math

from scalestudy.costmodel.constants import Calibration, stored
from scalestudy.specs.hardware import DeviceSpec

_TABLES: dict[int, tuple[DeviceSpec, tuple[float, ...], tuple[float, ...]]] = {}


def _table(device: DeviceSpec) -> tuple[tuple[float, ...], tuple[float, ...]]:
    hit = _TABLES.get(id(device))
    if hit is None or hit[0] is not device:
        rows = sorted(device.matmul_efficiency)
        hit = (device, tuple(math.log2(r[0]) for r in rows), tuple(float(r[1]) for r in rows))
        _TABLES[id(device)] = hit
    return hit[1], hit[2]


def matmul_efficiency(device: DeviceSpec, dim: float, cal: Calibration | None = None) -> float:
    """Fraction of peak for a GEMM of characteristic dimension `dim` (see `gemm_dim`)."""
    if device.family:
        curve = (cal or stored()).gemm_curve(device.family)
        if curve is not None:
            top, half = curve
            d = max(dim, 1.0)
            return top * d / (d + half)
    xs, ys = _table(device)
    if not xs:
        return 0.5  # a device with neither a family nor a table: say half of peak (only custom files)
    x = math.log2(max(dim, 1.0))
    if x <= xs[0]:
        return ys[0]
    if x >= xs[-1]:
        return ys[-1]
    for j in range(1, len(xs)):
        if x <= xs[j]:
            w = (x - xs[j - 1]) / (xs[j] - xs[j - 1])
            return ys[j - 1] + w * (ys[j] - ys[j - 1])
    return ys[-1]


def gemm_dim(m: float, n: float, k: float) -> float:
    return min(max(m, 1.0), (max(n, 1.0) * max(k, 1.0)) ** 0.5)
