"""Achieved fraction of peak for a matrix multiply.

GPUs with a measured ceiling (`DeviceSpec.matmul_peak_fraction`: the maximum achievable matmul FLOP/s of large
bf16 GEMMs over the datasheet peak, a published microbenchmark per device, see each YAML's source):

    fraction(d) = share x matmul_peak_fraction x clock(power limit) / clock_mhz x d / (d + half_dim)

`share` and `half_dim` are constants of costmodel/calibration.yaml, one pair for every device: the share of the
device's achievable matmul rate that training GEMMs reach (fitted on the published rows), and a saturating curve in
the characteristic dimension d (tile/wave quantisation loses a fixed amount of work per GEMM edge; half_dim measured
on a published GEMM sweep, tests/unit/test_gemm_half_dim_measured.py). What differs
between devices is data: the measured ceiling, and the tensor clock the board's power limit sustains
(`sustained_clock_ratio`). Devices without a ceiling (measured CPU profiles, custom devices) list
[[dimension, fraction], ...] in their YAML, interpolated linearly in log2(dimension) and clamped at both ends.

For C[M,N] = A[M,K] @ B[K,N] the characteristic dimension is min(M, sqrt(N*K)): the weight shape (N, K) sets the
tile and wave efficiency, the token count M only limits it when it is the smaller one (small micro-batches); an
attention product with K = head dimension is correspondingly less efficient.
"""

from __future__ import annotations

import math

from scalestudy.costmodel.constants import Calibration, stored
from scalestudy.errors import ScalestudyError
from scalestudy.specs.hardware import DeviceSpec

# Kernels built for one architecture only: FlashAttention-3 is written for Hopper (sm90: WGMMA, TMA; Shah et al. 2024,
# arXiv 2407.08608), so a device YAML that states no rate for it cannot run it (and the causal tiles it skips,
# step.executed_attention_share, priced at another device's GEMM curve would put MFU above 1)
RATE_REQUIRED_KERNELS = ("fa3",)

_TABLES: dict[int, tuple[DeviceSpec, tuple[float, ...], tuple[float, ...]]] = {}


def _table(device: DeviceSpec) -> tuple[tuple[float, ...], tuple[float, ...]]:
    hit = _TABLES.get(id(device))
    if hit is None or hit[0] is not device:
        rows = sorted(device.matmul_efficiency)
        hit = (device, tuple(math.log2(r[0]) for r in rows), tuple(float(r[1]) for r in rows))
        _TABLES[id(device)] = hit
    return hit[1], hit[2]


def piecewise_linear(xs, ys, x: float) -> float:
    """Piecewise linear through (xs, ys) ascending, clamped at both ends."""
    if x <= xs[0]:
        return ys[0]
    if x >= xs[-1]:
        return ys[-1]
    for j in range(1, len(xs)):
        if x <= xs[j]:
            w = (x - xs[j - 1]) / (xs[j] - xs[j - 1])
            return ys[j - 1] + w * (ys[j] - ys[j - 1])
    return ys[-1]


def sustained_clock_ratio(device: DeviceSpec) -> float:
    """Tensor clock the device sustains at its board power limit over the clock of its datasheet peak (1 at the
    vendor default). A power cap lowers the clock of compute-bound kernels (the firmware throttles to keep the board
    under the limit); between the listed [watts, MHz] points the clock is interpolated linearly in watts, beyond them
    clamped (a limit above the top point does not raise the clock past the datasheet's)."""
    if not (device.power_limit_w and device.power_clock_mhz and device.clock_mhz):
        return 1.0
    watts = [w for w, _ in device.power_clock_mhz]
    mhz = [f for _, f in device.power_clock_mhz]
    return min(1.0, piecewise_linear(watts, mhz, device.power_limit_w) / device.clock_mhz)


def gemm_ceiling(device: DeviceSpec, cal: Calibration | None = None) -> float:
    """Fraction of `device`'s dense peak a large training GEMM reaches (the curve's asymptote)."""
    return (cal or stored()).gemm_share * device.matmul_peak_fraction * sustained_clock_ratio(device)


def matmul_efficiency(device: DeviceSpec, dim: float, cal: Calibration | None = None) -> float:
    """Fraction of peak for a GEMM of characteristic dimension `dim` (see `gemm_dim`)."""
    if device.matmul_peak_fraction > 0:
        c = cal or stored()
        d = max(dim, 1.0)
        return gemm_ceiling(device, c) * d / (d + c.half_dim)
    xs, ys = _table(device)
    if not xs:
        return 0.5  # a device with neither a measured ceiling nor a table: say half of peak (only custom files)
    return piecewise_linear(xs, ys, math.log2(max(dim, 1.0)))


def attention_efficiency(device: DeviceSpec, dim: float, kernel: str, cal: Calibration | None = None) -> float:
    """Fraction of peak for the attention core (scores and attention-over-values) run by a fused flash `kernel`
    ("fa2": FlashAttention-2, PyTorch SDPA's flash backend; "cudnn": cuDNN fused attention, Transformer Engine's
    choice on Hopper): the GEMM curve, capped by the fraction of peak the kernel is published to reach on this
    device at its default power limit (`DeviceSpec.flash_attention_fraction`), scaled like the GEMMs by the clock
    its power limit sustains. A kernel not listed for the device runs at the GEMM curve."""
    cap = device.flash_attention_fraction.get(kernel)
    if cap is None and kernel in RATE_REQUIRED_KERNELS:
        raise ScalestudyError(f"attention kernel {kernel} (FlashAttention-3) runs on Hopper GPUs: device {device.name} "
                              f"states no {kernel} rate (flash_attention_fraction in its YAML); use --attention-kernel "
                              f"fa2, cudnn or engine")
    curve = matmul_efficiency(device, dim, cal)
    return curve if cap is None else min(curve, cap * sustained_clock_ratio(device))


def gemm_dim(m: float, n: float, k: float) -> float:
    return min(max(m, 1.0), (max(n, 1.0) * max(k, 1.0)) ** 0.5)
