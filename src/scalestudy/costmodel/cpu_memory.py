"""Memory-bound work on CPU ranks at this machine's measured rates (CPU profiles only; GPU devices keep
`hbm_bytes_per_s` and step.OPTIMIZER_BYTES).

One 16 MB copy (`hbm_bytes_per_s`) says little about buffers that outgrow the last-level cache: on this 32 MB-L3
machine 1-4 MB copies ran at 75-107 GB/s and 64-256 MB ones at 26-35 GB/s (2 ranks copying at once), and a
38M-parameter model's fp32 gradients are 152 MB. Nor is the optimizer step on a CPU Adam's ~28 bytes per parameter
at that bandwidth: the trainer clips (clip_grad_norm_: a norm per tensor, then a scale of every gradient) and torch
AdamW runs tensor by tensor on CPU (its foreach kernels are for accelerators), about ten element-wise passes per
parameter, each allocating temporaries, plus a fixed dispatch cost per tensor (measured: 1.6-2.1 ns per parameter
in 1 MB tensors, ~6.5 in one 64 MB tensor, 21-28 us per tensor; t5-micro's 38M parameters in 144 tensors: 0.09-0.12
s per step, where OPTIMIZER_BYTES at the 16 MB copy rate said 0.015). The CPU profile measures both on every rank
at once (engine/microbench.py: DeviceSpec.copy_bandwidth, DeviceSpec.optimizer_step_s); this module prices them.
"""

from __future__ import annotations

import math

from scalestudy.costmodel.efficiency import piecewise_linear


def interp_log2(points: list[tuple[float, float]], x: float) -> float:
    """Linear interpolation in log2(x) through ascending (x, y) points, clamped at both ends."""
    if x <= points[0][0]:  # also keeps log2 away from x <= 0
        return points[0][1]
    return piecewise_linear([math.log2(px) for px, _ in points], [py for _, py in points], math.log2(x))


def measured(device) -> bool:
    """Whether the device is CPU ranks whose profile measured the copy curve and the optimizer step."""
    return device.kind == "cpu" and bool(device.copy_bandwidth) and bool(device.optimizer_step_s)


def bandwidth(device, nbytes: float) -> float:
    """Read + write bytes/s of streaming over a buffer of `nbytes` per rank (the measured copy curve, interpolated
    in log2 size, clamped); `hbm_bytes_per_s` where no curve was measured."""
    if device.kind != "cpu" or not device.copy_bandwidth or nbytes <= 0:
        return device.hbm_bytes_per_s
    return interp_log2(sorted((b, r) for b, r in device.copy_bandwidth), nbytes)


def copy_s(device, nbytes: float, copies: float = 1.0) -> float:
    """Seconds of `copies` copies of an `nbytes` buffer (each reads and writes it) at the measured bandwidth."""
    if nbytes <= 0 or copies <= 0:
        return 0.0
    return copies * 2.0 * nbytes / bandwidth(device, nbytes)


def fresh_copy_s(device, nbytes: float, copies: float = 1.0) -> float:
    """Seconds of `copies` copies of an `nbytes` buffer into newly allocated ones (torch.cat, clone, flatten): at the
    profile's measured fresh-buffer rate (DeviceSpec.fresh_copy_bandwidth; beyond the allocator's mmap threshold
    the copy faults every page in), else as `copy_s`."""
    if nbytes <= 0 or copies <= 0:
        return 0.0
    if device.kind != "cpu" or not device.fresh_copy_bandwidth:
        return copy_s(device, nbytes, copies)
    return copies * 2.0 * nbytes / interp_log2(sorted((b, r) for b, r in device.fresh_copy_bandwidth), nbytes)


# A row of the profile's optimizer table whose tensors are at least this large measures the cost per parameter;
# smaller ones measure the cost per tensor.
BULK_TENSOR_ELEMS = 1 << 16
# Tensors over glibc malloc's largest mmap threshold (32 MB of fp32): each step's temporaries of such a tensor are
# fresh mappings, every page faulted in again; rows of such tensors price one-tensor (flat) steps only.
FLAT_TENSOR_ELEMS = (32 << 20) // 4


def optimizer_rates(device) -> tuple[list[tuple[float, float]], float]:
    """([(parameters, seconds per parameter), ...] ascending, seconds per tensor beyond the first) from the
    profile's optimizer rows [[tensors, parameters, seconds], ...]: the small-tensor row less its parameters at the
    smallest bulk row's rate gives the per-tensor cost; each bulk row less its tensors' cost gives the rate per
    parameter at its size (state in the caches, or streamed from DRAM)."""
    rows = [(t, p, s) for t, p, s in device.optimizer_step_s if t >= 1 and p > 0 and p / t <= FLAT_TENSOR_ELEMS]
    bulk = sorted((t, p, s) for t, p, s in rows if p / t >= BULK_TENSOR_ELEMS)
    small = [(t, p, s) for t, p, s in rows if p / t < BULK_TENSOR_ELEMS and t > 1]
    if not bulk:
        return [], 0.0
    first = min(bulk, key=lambda r: r[1])
    base = first[2] / first[1]  # the smallest bulk step, per parameter (its few tensors' cost included)
    extra = [(s - p * base) / (t - first[0]) for t, p, s in small if t > first[0]]
    per_tensor = max(0.0, sum(extra) / len(extra)) if extra else 0.0
    rates = sorted((p, max(0.0, s - (t - 1) * per_tensor) / p) for t, p, s in bulk)
    return rates, per_tensor


def optimizer_step_s(device, params: float, tensors: int) -> float:
    """Seconds of the trainer's optimizer step (clip + torch AdamW) over `params` parameters in `tensors` tensors
    on one rank: every parameter at the measured rate of a step that size (its state in or beyond the caches), and
    each tensor beyond the first its measured dispatch cost; one flat tensor over the mmap threshold (DeepSpeed's
    partition) at the rate measured for such a tensor."""
    rates, per_tensor = optimizer_rates(device)
    if not rates or params <= 0:
        return 0.0
    if tensors <= 1 and params > FLAT_TENSOR_ELEMS:  # one tensor over the mmap threshold: its measured rate
        flat = [s / p for t, p, s in device.optimizer_step_s if t == 1 and p > FLAT_TENSOR_ELEMS]
        if flat:
            return params * max(flat[0], interp_log2(rates, params))
    return params * interp_log2(rates, params) + max(0, tensors - 1) * per_tensor


def engine_optimizer_s(device, engine: str, zero: int, local: float, tensors: int, dp: int) -> float:
    """Seconds of one rank's optimizer step under `engine` on CPU ranks at the measured rates, for `local`
    parameters of this rank (its shard where sharded) out of `tensors` parameter tensors.

    DDP (and ZeroRedundancyOptimizer, which steps the 1/dp of the tensors it owns) and FSDP (every DTensor shard)
    step torch AdamW tensor by tensor after clip_grad_norm_; DeepSpeed ZeRO-0 steps the client AdamW over the
    module's tensors. DeepSpeed ZeRO-1/2/3 step it on one flat fp32 partition (DeepSpeedZeroOptimizer
    `single_partition_of_fp32_groups`, one parameter group here), after flattening the averaged gradients into it,
    and copy the updated partition back into the module's partition: two copies of the shard beside the update."""
    if engine == "deepspeed" and zero >= 1:
        return optimizer_step_s(device, local, 1) + copy_s(device, 4.0 * local, 2.0)
    owned = math.ceil(tensors / dp) if (engine == "ddp" and zero == 1) else tensors
    return optimizer_step_s(device, local, max(1, owned))

