"""The peak FLOP/s that MFU divides by: the device entry on GPU, a measured fp32 matmul rate on CPU.

CPUs have no datasheet peak we can trust here (turbo, shared cores), so `measure_matmul_flops` times a square
fp32 GEMM on this rank's threads; that is the best this rank can do, which is what MFU should compare against.
"""

from __future__ import annotations

import time

import torch

# Substrings of torch.cuda.get_device_name() -> hardware/*.yaml entry.
GPU_NAMES = (("H200", "h200"), ("H100", "h100-80gb"), ("A100-SXM4-40GB", "a100-40gb"), ("A100-PCIE-40GB", "a100-40gb"),
             ("A100", "a100-80gb"), ("V100", "v100-32gb"))


def measure_matmul_flops(n: int = 1024, seconds: float = 0.3, dtype: torch.dtype = torch.float32) -> float:
    """Best observed FLOP/s of an n x n x n matmul on this process's threads (2 n^3 FLOPs per product)."""
    gen = torch.Generator().manual_seed(0)  # a private generator: the training RNG stream stays untouched
    a = torch.randn(n, n, dtype=dtype, generator=gen)
    b = torch.randn(n, n, dtype=dtype, generator=gen)
    torch.mm(a, b)  # warm-up (allocation, thread pool)
    best = float("inf")
    deadline = time.perf_counter() + seconds
    while True:
        t0 = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - t0)
        if time.perf_counter() > deadline:
            break
    return 2.0 * n**3 / best


def peak_flops(device: torch.device, precision: str) -> tuple[float, str]:
    """(peak FLOP/s per rank, where it came from) for MFU."""
    if device.type == "cuda":
        from scalestudy.specs.hardware import get_device

        gpu = torch.cuda.get_device_name(device)
        for needle, entry in GPU_NAMES:
            if needle in gpu:
                spec = get_device(entry)
                key = "tf32" if precision == "fp32" and "tf32" in spec.peak_flops else precision
                return spec.peak(key), f"device entry {entry} ({key} dense peak)"
        return float("nan"), f"unknown GPU {gpu!r}: no peak, MFU not computed"
    flops = measure_matmul_flops()
    return flops, f"measured fp32 matmul on this CPU rank ({flops / 1e9:.1f} GFLOP/s, {torch.get_num_threads()} thread(s))"
