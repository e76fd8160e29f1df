"""gloo collectives at their measured per-op rates in CPU estimates (DeviceSpec.collective_time_ratio, and by message
size DeviceSpec.collective_ratio_by_size: `rate`).

The alpha-beta link model is fitted on all_reduce timings; on one-thread gloo ranks the same calibration measured
reduce_scatter at ~4x and all_gather at ~1.4x that fit's time for a 16 MB message (calibrate.collective_time_ratios).
ZeRO-2/3 and FSDP move their gradients with reduce_scatter and their parameters with all_gather, so on CPU devices
estimate.py costs each data-parallel collective at its own measured rate for its message size (`rate`: small gloo
messages cost far less than the fit's latency, fitted on the smallest messages' noise, says). GPU devices do not carry the
ratios (NCCL's all-gather / reduce-scatter run at the ring model's rate) and keep the link model.

DeepSpeed and FSDP are priced along the code paths `scalestudy train` runs on such ranks (`gloo_dp_comm`: which
collective, how often, on how large a buffer, and the copies into existing or newly allocated buffers around it;
DeepSpeed 0.19 ZeRO-1/2 all-reduce the whole gradient bucket, its ZeRO-3 gathers the model in one prefetched call
per pass, FSDP2 reduce-scatters every micro-batch, ZeroRedundancyOptimizer broadcasts each tensor in place); plain DDP
and the cost-model-only engines keep terms._dp_comm's model at these rates.

The CPU profile's "<engine>-<zero>@multi" overhead (engine/cpu_profile.multi_rank_overheads) is what the engine
cost on several ranks beyond the model with the all_reduce fit's rates, at one configuration (PROFILE_MULTI): it
already holds the collectives' excess at that configuration. `cpu_engine.multi_overhead` takes that part out, so the step
at the profile's own configuration is the one measured, and elsewhere the excess scales with the collectives.
"""

from __future__ import annotations

import math

from scalestudy.costmodel.comm import gather_time
from scalestudy.costmodel.cpu_memory import copy_s, fresh_copy_s, interp_log2

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


# ------------------------------------------------------------------------------------------------------------------
# The data-parallel step on gloo ranks, engine by engine, as the code that `scalestudy train` runs on a CPU does it
# (DeepSpeed 0.19, torch FSDP2, torch DDP; read in .venv/.../deepspeed/runtime). Nothing overlaps on one-thread
# ranks, so every collective and every copy of a gradient or parameter buffer is on the step's critical path.

# DeepSpeed ZeRO-3 releases a module's gathered parameters after its forward only when they are not used again
# within `stage3_max_reuse_distance` elements (engines.yaml deepspeed stage3_max_reuse_elems: the default 1e9,
# engine/settings.py sets it): the backward of the same module is such a reuse, so on a model under that size the
# forward's gather serves the backward too.


def _call(op: str, nbytes: float, calls: int, device, dp: int, per_node: int, lk: tuple, eng) -> float:
    """Seconds of `calls` gloo `op` collectives moving an `nbytes` full buffer among them, each at the measured
    rate of its own message size (all_reduce: reduce-scatter + all-gather volume, tree latency as terms.py)."""
    if nbytes <= 0 or calls <= 0:
        return 0.0
    rails = eng.gather_rails if op != "all_reduce" else eng.grad_rails
    volume = 2.0 if op == "all_reduce" else 1.0
    seconds = volume * gather_time(nbytes, dp, per_node, lk, eng.collective_efficiency, rails, calls,
                                   tree=op == "all_reduce")
    return seconds * rate(device, op, nbytes / calls)


def _buckets(elems: float, bucket_elems: float) -> int:
    return max(1, math.ceil(elems / bucket_elems)) if bucket_elems else 1


def deepspeed_dp_comm(zero: int, psi: float, gathered: float, fetches: int, grad_bytes: int, half: int, device,
                      dp: int, per_node: int, lk: tuple, eng, ga: int) -> float:
    """Seconds per optimizer step of DeepSpeed's data-parallel path on gloo ranks (CPU accelerator, overlap_comm off,
    contiguous_gradients and reduce_scatter at their defaults, one parameter group). Copies into newly allocated
    buffers (torch.cat / flatten) are priced at the fresh-buffer rate (cpu_memory.fresh_copy_s: a model-sized one
    faults every page in), copies into existing buffers at the copy rate; the collectives at gloo's measured rate for
    their message size (one call moves the whole model here).

    - ZeRO-0 (engine.buffered_allreduce_fallback at the boundary): the gradients flattened (fresh) into 5e8-element
      buckets, each scaled in place and all-reduced, then copied back into the parameters' .grad.
    - ZeRO-1/2 (stage_1_and_2.average_tensor with use_multi_rank_bucket_allreduce, the default): every parameter's
      gradient is copied into the contiguous reduce bucket -- a buffer of reduce_bucket_size elements allocated
      afresh for every backward (setup_buckets: torch.empty, so the copy faults in every page it writes, at the
      fresh-buffer rate; measured on t5-micro: 213 ms per micro-batch against 78 ms into ZeRO-3's bucket, which is
      allocated once) -- the bucket divided by dp in place, flattened again by allreduce_bucket (fresh) and
      ALL-REDUCED whole (not reduce-scattered), and this rank's slices copied back and into its gradient partition
      (copy_grads_in_partition); ZeRO-2 reduces after every micro-batch's backward, ZeRO-1 once at the boundary.
      At the boundary the partition is flattened for the optimizer (fresh, 1/dp) and the updated parameters
      all-gathered (allgather_bucket_size buckets).
    - ZeRO-3 (partitioned_param_coordinator): once the module trace is complete (from the third micro-batch on),
      the first fetch hook of a pass prefetches the next stage3_prefetch_bucket_size elements of the trace in ONE
      coalesced all-gather (`fetches` calls per pass: the gathered elements over that bucket, rounded up; traced on
      t5-micro, 2 ranks: one all_gather_coalesced of all 110 partitioned tensors, 38.1M elements, per
      micro-batch), into a newly allocated flat buffer (every page faulted in: this rank's shard by torch.cat,
      the rest by gloo's copy-out; gloo's own staging buffer is in its measured all_gather rate); the parameters
      are views of it. Under stage3_max_reuse_elems nothing is released before the backward: one gather of the
      model per micro-batch. Gradients: copied into the ipg bucket (allocated once), interleaved by
      reduce_scatter_coalesced (fresh) and reduce-scattered in one call, the shard added into the fp32 gradient
      partition (1/dp): after every micro-batch.
    `psi`: parameters on the rank; `gathered`: ZeRO-3's partitioned (non-persistent) ones and `fetches` its
    coalesced gathers per pass (`zero3_fetches`)."""
    grads = psi * grad_bytes

    def call(op: str, nbytes: float, bucket_elems: float, elems: float) -> float:
        return _call(op, nbytes, _buckets(elems, bucket_elems), device, dp, per_node, lk, eng)

    if zero == 0:
        return call("all_reduce", grads, eng.reduce_bucket_elems, psi) + fresh_copy_s(device, grads) \
            + copy_s(device, grads, 2.0)
    if zero in (1, 2):  # bucket copy-in and allreduce_bucket's flatten: fresh; the in-place division, slices back
        reduction = call("all_reduce", grads, eng.reduce_bucket_elems, psi) + fresh_copy_s(device, grads, 2.0) \
            + copy_s(device, grads, 1.0 + 2.0 / dp)
        boundary = fresh_copy_s(device, grads / dp) + call("all_gather", psi * half, eng.allgather_bucket_elems, psi)
        return (ga if zero == 2 else 1) * reduction + boundary
    passes = 1 if gathered <= eng.stage3_max_reuse_elems else 2
    calls = max(1, fetches)
    each = gathered * half / calls  # one coalesced gather's buffer
    # its pages faulted in once (beyond gloo's own copy-out, in the measured rate) and this rank's shard cat in
    faults = max(0.0, fresh_copy_s(device, each) - copy_s(device, each))
    gather = passes * (_call("all_gather", gathered * half, calls, device, dp, per_node, lk, eng)
                       + calls * (faults + copy_s(device, each / dp)))
    reduce = call("reduce_scatter", grads, eng.reduce_bucket_elems, psi) + fresh_copy_s(device, grads) \
        + copy_s(device, grads, 1.0 + 1.0 / dp)
    return ga * (gather + reduce)


def fsdp_calls_per_step(zero: int, units: int, ga: int, sync_last: bool = False) -> dict[str, int]:
    """Collective calls per optimizer step of FSDP2 on gloo ranks as engine/backends/fsdp.py drives it (every one
    of `units` fully_shard groups, the root resharded like the blocks: engine/settings.py fsdp_settings): each
    micro-batch all-gathers every unit for its forward and, resharded after the forward (zero 3), again for its
    backward, and reduce-scatters every unit's gradients in its backward (settings "gradient_sync":
    every_micro_batch, FSDP2's default), adding into the sharded .grad. tests/multiproc count train's calls.
    `sync_last` (Strategy.gradient_sync "last", cost model only): the last micro-batch's backward alone
    reduce-scatters, once per unit and step (memory.fsdp_unsynced_grad_bytes)."""
    return {"all_gather": ga * (2 if zero == 3 else 1) * units, "reduce_scatter": (1 if sync_last else ga) * units}


def fsdp_dp_comm(zero: int, psi: float, units: int, grad_bytes: int, half: int, device, dp: int, per_node: int,
                 lk: tuple, eng, ga: int, sync_last: bool = False) -> float:
    """Seconds per optimizer step of FSDP2 (`fully_shard` per block and the root: `units` groups) on gloo ranks,
    `fsdp_calls_per_step` collectives: each all-gather into a newly allocated output, the shard copied in, the
    unsharded parameters' storage allocated again (1 + 1/dp fresh-buffer passes); each reduce-scatter through a
    newly allocated input and output (1 + 1/dp). Copies at the rates of one unit's buffer size."""
    calls = fsdp_calls_per_step(zero, units, ga, sync_last)
    params, grads = psi * half / units, psi * grad_bytes / units  # one unit's buffers
    gather = _call("all_gather", psi * half, units, device, dp, per_node, lk, eng) \
        + units * fresh_copy_s(device, params, 1.0 + 1.0 / dp)
    reduce = _call("reduce_scatter", psi * grad_bytes, units, device, dp, per_node, lk, eng) \
        + units * fresh_copy_s(device, grads, 1.0 + 1.0 / dp)
    return (calls["all_gather"] * gather + calls["reduce_scatter"] * reduce) / units


def zero_redundancy_dp_comm(psi: float, tensors: int, grad_bytes: int, device, dp: int, per_node: int, lk: tuple,
                            eng) -> float:
    """Seconds per optimizer step of DDP + torch ZeroRedundancyOptimizer on gloo ranks (engine/backends/ddp.py):
    DDP all-reduces the gradients in its buckets as without it, then ZeroRedundancyOptimizer.step updates this
    rank's shard and `_sync_params` broadcasts every parameter tensor from its owner, one `dist.broadcast` per
    tensor (parameters_as_bucket_view False, the default the backend keeps), all queued async and then waited.

    A gloo broadcast works in place on the tensor (gloo/broadcast.cc: a binomial tree, ceil(log2 dp) rounds, each
    sending the whole tensor; no staging buffer, unlike gloo's all_gather, whose measured rate includes flattening
    into a fresh output and copying it out), so its bytes move at the in-place all_reduce's measured rate, once per
    round: summed over the owners, the whole fp32 parameter buffer per round (at dp 2 the same bytes per link
    direction as an all-reduce of it); each tensor pays the link latency per round. Measured on 2 gloo ranks
    (loaded machine): t5-micro's 144 tensors / 152 MB 291 ms against 284 ms for one all_reduce of 152 MB, 136 ms
    for one flat broadcast per owner; t5-tiny (52 tensors, 13 MB) 42 ms against 24 ms."""
    reduce = _call("all_reduce", psi * grad_bytes, _buckets(psi, eng.reduce_bucket_elems), device, dp, per_node, lk,
                   eng)
    params = 4.0 * psi  # DDP keeps fp32 weights (bf16 runs autocast)
    rounds = math.ceil(math.log2(dp))
    bandwidth, latency = (lk[0], lk[1]) if per_node >= dp else (lk[2], lk[3])
    wire = params / (bandwidth * eng.collective_efficiency) * rate(device, "all_reduce", params)
    return reduce + rounds * (wire + max(1, tensors) * latency)


def gloo_dp_comm(st, eng, psi: float, zero3, stage_layers: int, grad_bytes: int, cluster, lk: tuple, dp: int,
                 tp: int, ga: int) -> float | None:
    """Seconds per optimizer step of the data-parallel path of DeepSpeed, FSDP or DDP + ZeroRedundancyOptimizer on
    CPU ranks with measured gloo rates (`deepspeed_dp_comm`, `fsdp_dp_comm`, `zero_redundancy_dp_comm`); None for
    other engines or devices (terms._dp_comm's model)."""
    device = cluster.device
    zero_redundancy = st.engine == "ddp" and st.zero == 1
    if not measured(device) or dp <= 1 or (st.engine not in ("deepspeed", "fsdp") and not zero_redundancy):
        return None
    half = 4 if st.precision == "fp32" else 2
    per_node = max(1, min(dp, cluster.gpus_per_node // tp))
    if zero_redundancy:
        tensors = zero3.tensors if zero3 is not None else stage_layers
        return zero_redundancy_dp_comm(psi, tensors, grad_bytes, device, dp, per_node, lk, eng)
    if st.engine == "fsdp":
        return fsdp_dp_comm(st.zero, psi, stage_layers + 1, grad_bytes, half, device, dp, per_node, lk, eng, ga,
                            st.gradient_sync == "last")
    gathered = zero3.gathered_elems if zero3 is not None else psi
    return deepspeed_dp_comm(st.zero, psi, gathered, zero3_fetches(gathered, eng), grad_bytes, half, device, dp,
                             per_node, lk, eng, ga)


def zero3_fetches(gathered: float, eng) -> int:
    """Coalesced all-gathers per pass of DeepSpeed ZeRO-3 with a complete module trace (partitioned_param_coordinator
    fetch_sub_module): a hook that finds its parameters not yet available prefetches the trace's next
    stage3_prefetch_bucket_size elements (`eng.stage3_prefetch_elems`, DeepSpeed's default 5e7) in one call, and
    later hooks find theirs in flight; the root module of a Hugging Face model owns no parameter of its own, so
    the first call is already a prefetch. One call per pass on models up to that bucket."""
    bucket = eng.stage3_prefetch_elems if eng is not None else 0.0
    return max(1, math.ceil(gathered / bucket)) if bucket > 0 else 1
