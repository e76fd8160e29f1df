"""gloo collectives at their measured per-op rates in CPU estimates (DeviceSpec.collective_time_ratio, and by message
size DeviceSpec.collective_ratio_by_size: `rate`).

The alpha-beta link model is fitted on all_reduce timings; on one-thread gloo ranks the same calibration measured
reduce_scatter at ~4x and all_gather at ~1.4x that fit's time for a 16 MB message (calibrate.collective_time_ratios).
ZeRO-2/3 and FSDP move their gradients with reduce_scatter and their parameters with all_gather, so on CPU devices
estimate.py costs each data-parallel collective at its own measured rate for its message size (`rate`: small gloo
messages cost far less than the fit's latency, fitted on the smallest messages' noise, says). GPU devices do not carry the
ratios (NCCL's all-gather / reduce-scatter run at the ring model's rate) and keep the link model.

The CPU profile's "<engine>-<zero>@multi" overhead (engine/cpu_profile.multi_rank_overheads) is what the engine
cost on several ranks beyond the model with the all_reduce fit's rates, at one configuration (PROFILE_MULTI): it
already holds the collectives' excess at that configuration. `cpu_engine.multi_overhead` takes that part out, so the step
at the profile's own configuration is the one measured, and elsewhere the excess scales with the collectives.
"""

from __future__ import annotations

from scalestudy.costmodel.cpu_memory import interp_log2

# How engine/cpu_profile.py times the engines on several ranks (its "@multi" overheads): t5-tiny, micro-batch 2,
# accumulation 2, seq 64+16 (engine/cpu_profile.SEQ_LEN / TARGET_LEN), fp32, 2 ranks.
PROFILE_MULTI = dict(model="t5-tiny", micro_batch=2, accum=2, seq=64, target=16, nproc=2)


def measured(device) -> bool:
    """Whether the device is CPU ranks whose calibration measured its collectives' rates."""
    return device.kind == "cpu" and bool(device.collective_time_ratio)


def rate(device, op: str, nbytes: float) -> float:
    """Measured / modelled time of one `op` collective whose full buffer is `nbytes` on a CPU device: the
    calibration's ratio at that message size (DeviceSpec.collective_ratio_by_size, interpolated in log2 size,
    clamped at the measured sizes), else at its largest message; 1 where not measured."""
    if not measured(device):
        return 1.0
    curve = device.collective_ratio_by_size.get(op)
    if not curve:
        return device.collective_time_ratio.get(op, 1.0)
    return interp_log2(sorted((b, r) for b, r in curve), max(nbytes, 1.0))


def broadcast_latency(device, tensors: int, dp: int) -> float:
    """Seconds of ZeroRedundancyOptimizer's post-step broadcasts beyond one collective's latency, on gloo ranks
    with measured rates: it broadcasts every parameter tensor on its own (torch ZeroRedundancyOptimizer
    `_broadcast_params_from_rank`, parameters_as_bucket_view False, our ddp backend's default), and gloo runs a
    process group's collectives one after another on its worker thread, the root sending to each other rank, so
    each pays (dp - 1) link latencies. 0 on devices without measured rates (NCCL queues them on a stream)."""
    if not measured(device) or tensors <= 1 or dp <= 1:
        return 0.0
    return (tensors - 1) * (dp - 1) * device.intra_node_latency_s
