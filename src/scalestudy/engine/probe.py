"""The peak FLOP/s that MFU divides by: the device entry on GPU, a measured matmul rate on CPU.

CPUs have no datasheet peak we can trust here (turbo, shared cores), so the peak is a measured square GEMM rate in
the run's precision on one rank's threads: this machine's cached CPU profile's (costmodel/cpu_profile.py), which the
cost model's predicted MFU divides by too, else `measure_matmul_flops` timed at the run's start. A timing at each
run's start saw whatever load the machine had then: the demo's ten trials at load 5-7 on 2 cores divided by 21-47
GFLOP/s, so a 0.48 s step showed MFU 15.8% beside 20.6% for a 0.164 s step of the same model and batch.
"""

from __future__ import annotations

import time

import torch

from scalestudy.costmodel.mfu import peak_precision

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


DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def peak_flops(device: torch.device, precision: str) -> tuple[float, str]:
    """(peak FLOP/s per rank, where it came from) for MFU (`scalestudy.costmodel.mfu`): the peak of the precision
    the matmuls run in (fp32 counts as TF32 only when TF32 matmuls are switched on)."""
    if device.type == "cuda":
        from scalestudy.specs.hardware import get_device

        gpu = torch.cuda.get_device_name(device)
        for needle, entry in GPU_NAMES:
            if needle in gpu:
                spec = get_device(entry)
                key = peak_precision(precision, tf32_matmul=torch.backends.cuda.matmul.allow_tf32,
                                     peaks=spec.peak_flops)
                return spec.peak(key), f"device entry {entry} ({key} dense peak)"
        return float("nan"), f"unknown GPU {gpu!r}: no peak, MFU not computed"
    from scalestudy.costmodel.cpu_profile import local_cpu_profile, profile_path

    profile = local_cpu_profile(measure=False)  # never measured here: only one a command before cached
    if profile is not None and profile.peak_flops.get(precision):
        flops = profile.peak(precision)
        return flops, (f"measured {precision} matmul peak of this CPU's profile ({flops / 1e9:.1f} GFLOP/s per rank, "
                       f"{torch.get_num_threads()} thread(s); {profile_path().name}), as predictions use")
    flops = measure_matmul_flops(dtype=DTYPES[precision])
    return flops, (f"measured {precision} matmul on this CPU rank ({flops / 1e9:.1f} GFLOP/s, "
                   f"{torch.get_num_threads()} thread(s))")
