"""Matmul throughput per precision on this CPU, one thread, one size: what `engine/cpu_precision.py` decides with.

    python -m scalestudy.engine.precision_probe  ->  {"fp32": 64.1, "bf16": 483.5, "fp16": 2.6}   (GFLOP/s)

One thread, as each training rank runs with OMP_NUM_THREADS=1. 512 x 512 is large enough for the native kernels
(oneDNN AVX-512 BF16 / AMX) to reach speed and small enough that emulated bf16 (~1.3 GFLOP/s) takes 0.2 s a product.
"""

from __future__ import annotations

import json
import time

import torch

SIZE = 512
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def matmul_gflops(dtype: torch.dtype, n: int = SIZE, min_s: float = 0.3, max_reps: int = 50) -> float:
    """Median-free simple rate: total FLOPs / total seconds over at least `min_s` (after one warm-up product)."""
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    torch.mm(a, b)
    reps, t0 = 0, time.perf_counter()
    while reps < max_reps and (reps < 2 or time.perf_counter() - t0 < min_s):
        torch.mm(a, b)
        reps += 1
    return 2.0 * n**3 * reps / (time.perf_counter() - t0) / 1e9


def measure(n: int = SIZE) -> dict[str, float]:
    torch.set_num_threads(1)
    return {name: round(matmul_gflops(dtype, n), 3) for name, dtype in DTYPES.items()}


if __name__ == "__main__":
    print(json.dumps(measure()))
