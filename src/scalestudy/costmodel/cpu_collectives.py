"""gloo collectives at their measured per-op rates in CPU estimates (DeviceSpec.collective_time_ratio).

The alpha-beta link model is fitted on all_reduce timings; on one-thread gloo ranks the same calibration measured
reduce_scatter at ~4x and all_gather at ~1.4x that fit's time for a 16 MB message (calibrate.collective_time_ratios).
ZeRO-2/3 and FSDP move their gradients with reduce_scatter and their parameters with all_gather, so on CPU devices
estimate.py costs each data-parallel collective at its own measured rate (`rates`). GPU devices do not carry the
ratios (NCCL's all-gather / reduce-scatter run at the ring model's rate) and keep the link model.

The CPU profile's "<engine>-<zero>@multi" overhead (engine/cpu_profile.multi_rank_overheads) is what the engine
cost on several ranks beyond the model with the all_reduce fit's rates, at one configuration (PROFILE_MULTI): it
already holds the collectives' excess at that configuration. `multi_overhead` takes that part out, so the step
at the profile's own configuration is the one measured, and elsewhere the excess scales with the collectives.
"""

from __future__ import annotations

from dataclasses import replace

# How engine/cpu_profile.py times the engines on several ranks (its "@multi" overheads): t5-tiny, micro-batch 2,
# accumulation 2, seq 64+16 (engine/cpu_profile.SEQ_LEN / TARGET_LEN), fp32, 2 ranks.
PROFILE_MULTI = dict(model="t5-tiny", micro_batch=2, accum=2, seq=64, target=16, nproc=2)
_NONE = (1.0, 1.0, 1.0)
_EXCESS: dict = {}


def measured(device) -> bool:
    """Whether the device is CPU ranks whose calibration measured its collectives' rates."""
    return device.kind == "cpu" and bool(device.collective_time_ratio)


def rates(device) -> tuple[float, float, float]:
    """(all_reduce, all_gather, reduce_scatter) measured / modelled time on a CPU device; 1 where not measured."""
    r = device.collective_time_ratio
    if not measured(device):
        return _NONE
    return r.get("all_reduce", 1.0), r.get("all_gather", 1.0), r.get("reduce_scatter", 1.0)


def profile_comm_excess(device, engine: str, zero: int) -> float:
    """Seconds per sublayer per micro-step of the engine's "@multi" overhead that are its collectives running at
    their measured rather than the all_reduce fit's rate, at the profile's configuration (0 without ratios)."""
    if not measured(device):
        return 0.0
    key = (id(device), engine, zero)
    hit = _EXCESS.get(key)
    if hit is not None and hit[0] is device:
        return hit[1]
    from scalestudy.costmodel.estimate import estimate
    from scalestudy.specs.hardware import ClusterSpec
    from scalestudy.specs.model import get_model
    from scalestudy.specs.strategy import Strategy, Workload

    p = PROFILE_MULTI
    tiny = get_model(p["model"])
    probe = Strategy(engine=engine, zero=zero, precision="fp32", micro_batch=p["micro_batch"])
    w = Workload(p["micro_batch"] * p["accum"] * p["nproc"], p["seq"], p["target"])
    bare = replace(device, engine_overhead_s={})  # no "@multi": no recursion
    rated, plain = (estimate(tiny, ClusterSpec(device=d, nodes=1, gpus_per_node=p["nproc"]), probe, w).dp_comm_total_s
                    for d in (bare, replace(bare, collective_time_ratio={})))
    sublayers = 2 * tiny.num_layers + 3 * tiny.num_decoder_layers
    excess = max(0.0, rated - plain) / (p["accum"] * sublayers)
    _EXCESS[key] = (device, excess)
    return excess


def multi_overhead(device, engine: str, zero: int) -> float:
    """The profile's "<engine>-<zero>@multi" overhead per sublayer per micro-step, less what the collectives at
    their measured rates now cost explicitly (`profile_comm_excess`)."""
    per = device.engine_overhead_s.get(f"{engine}-{zero}@multi", 0.0)
    if per <= 0.0:
        return 0.0
    return per - min(per, profile_comm_excess(device, engine, zero))


def broadcast_latency(device, tensors: int, dp: int) -> float:
    """Seconds of ZeroRedundancyOptimizer's post-step broadcasts beyond one collective's latency, on gloo ranks
    with measured rates: it broadcasts every parameter tensor on its own (torch ZeroRedundancyOptimizer
    `_broadcast_params_from_rank`, parameters_as_bucket_view False, our ddp backend's default), and gloo runs a
    process group's collectives one after another on its worker thread, the root sending to each other rank, so
    each pays (dp - 1) link latencies. 0 on devices without measured rates (NCCL queues them on a stream)."""
    if not measured(device) or tensors <= 1 or dp <= 1:
        return 0.0
    return (tensors - 1) * (dp - 1) * device.intra_node_latency_s
