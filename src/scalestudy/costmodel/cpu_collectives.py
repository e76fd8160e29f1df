"""gloo collectives at their measured per-op rates in CPU estimates (DeviceSpec.collective_time_ratio).

The alpha-beta link model is fitted on all_reduce timings; on one-thread gloo ranks the same calibration measured
reduce_scatter at ~4x and all_gather at ~1.4x that fit's time for a 16 MB message (calibrate.collective_time_ratios).
ZeRO-2/3 and FSDP move their gradients with reduce_scatter and their parameters with all_gather, so on CPU devices
estimate.py costs each data-parallel collective at its own measured rate (`rates`). GPU devices do not carry the
ratios (NCCL's all-gather / reduce-scatter run at the ring model's rate) and keep the link model.

The CPU profile's "<engine>-<zero>@multi" overhead (engine/cpu_profile.multi_rank_overheads) is what the engine
cost on several ranks beyond the model with the all_reduce fit's rates, at one configuration (PROFILE_MULTI): it
already holds the collectives' excess at that configuration. `cpu_engine.multi_overhead` takes that part out, so the step
at the profile's own configuration is the one measured, and elsewhere the excess scales with the collectives.
"""

from __future__ import annotations

# How engine/cpu_profile.py times the engines on several ranks (its "@multi" overheads): t5-tiny, micro-batch 2,
# accumulation 2, seq 64+16 (engine/cpu_profile.SEQ_LEN / TARGET_LEN), fp32, 2 ranks.
PROFILE_MULTI = dict(model="t5-tiny", micro_batch=2, accum=2, seq=64, target=16, nproc=2)
_NONE = (1.0, 1.0, 1.0)


def measured(device) -> bool:
    """Whether the device is CPU ranks whose calibration measured its collectives' rates."""
    return device.kind == "cpu" and bool(device.collective_time_ratio)


def rates(device) -> tuple[float, float, float]:
    """(all_reduce, all_gather, reduce_scatter) measured / modelled time on a CPU device; 1 where not measured."""
    r = device.collective_time_ratio
    if not measured(device):
        return _NONE
    return r.get("all_reduce", 1.0), r.get("all_gather", 1.0), r.get("reduce_scatter", 1.0)


def broadcast_latency(device, tensors: int, dp: int) -> float:
    """Seconds of ZeroRedundancyOptimizer's post-step broadcasts beyond one collective's latency, on gloo ranks
    with measured rates: it broadcasts every parameter tensor on its own (torch ZeroRedundancyOptimizer
    `_broadcast_params_from_rank`, parameters_as_bucket_view False, our ddp backend's default), and gloo runs a
    process group's collectives one after another on its worker thread, the root sending to each other rank, so
    each pays (dp - 1) link latencies. 0 on devices without measured rates (NCCL queues them on a stream)."""
    if not measured(device) or tensors <= 1 or dp <= 1:
        return 0.0
    return (tensors - 1) * (dp - 1) * device.intra_node_latency_s
