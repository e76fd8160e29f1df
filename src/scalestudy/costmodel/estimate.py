"""estimate(model, cluster, strategy, workload) -> Estimate: memory per device, step time, throughput, MFU.

Pure arithmetic over cached per-model quantities, so a planner can evaluate tens of thousands of strategies per
second. `Estimate.to_dict()` is the `scalestudy estimate --json` schema (docs/estimate-schema.md).

Rank placement (Megatron-LM order): tensor-parallel ranks are adjacent inside a node, data-parallel next,
pipeline stages outermost.
"""

from __future__ import annotations

from scalestudy.costmodel.breakdown import Estimate
from scalestudy.costmodel.comm import links, spans_nodes, stage_boundary_time, tp_links
from scalestudy.costmodel.constants import Calibration, stored
from scalestudy.costmodel.cpu_engine import engine_hooks_s
from scalestudy.costmodel.cpu_parallel import hybrid_times
from scalestudy.costmodel.engines import engine_comm
from scalestudy.costmodel.eager_kernels import autocast_ffn_cast_s, autocast_param_s
from scalestudy.costmodel.flops import target_length
from scalestudy.costmodel.memory import boundary_bytes, rank_memory, stage_in_flight
from scalestudy.costmodel.options import DEFAULT_OPTIONS, CostOptions
from scalestudy.costmodel.stages import estimate_stages
from scalestudy.costmodel.terms import (_deepspeed_bf16_pipeline, _dp_comm, _shape, _sublayers,
                                        _tied_embedding_sync, _tp_comm, hp_grad_accumulation_s, model_layout,
                                        optimizer_offload)
from scalestudy.errors import ScalestudyError
from scalestudy.specs.hardware import ClusterSpec
from scalestudy.specs.model import ModelSpec
from scalestudy.specs.strategy import Strategy, Workload



def estimate(model: ModelSpec, cluster: ClusterSpec, strategy: Strategy, workload: Workload,
             options: CostOptions = DEFAULT_OPTIONS, calibration: Calibration | None = None) -> Estimate:
    """Predict memory, time and throughput of one training configuration (raises ScalestudyError if invalid)."""
    if cluster.groups:  # ranks of different devices or speeds: stage by stage, bound by the slowest
        return estimate_stages(model, cluster, strategy, workload, options, calibration)
    st, dev = strategy, cluster.device
    cal = calibration or stored()
    gpn = cluster.gpus_per_node
    layout = model_layout(model, cluster, st, workload)
    peak = dev.peak(st.precision)
    dp, tp, pp, ga = layout.dp, layout.tp, layout.pp, layout.grad_accum
    v = st.virtual_stages
    if pp > 1 and st.pp_schedule == "interleaved" and ga % pp:
        raise ScalestudyError(f"the interleaved schedule needs the micro-batches per step ({ga}) to be a multiple "
                              f"of pp {pp} (Megatron-LM)")
    s = workload.seq_len
    t = target_length(model, workload)
    prec = st.precision

    flash = st.attention == "flash"
    sp = st.sequence_parallel and tp > 1
    split = st.stage_split(model.total_layers) if pp > 1 else (model.total_layers,)
    in_flight = stage_in_flight(st.pp_schedule, pp, ga, v)  # micro-batches each pipeline rank holds (memory.py)
    shape = _shape(model, dev, st, tp, pp, s, t, flash, sp, in_flight, split, cal)
    psi, ct = shape.psi, shape.compute
    eng = engine_comm(st.engine)

    # ---- memory
    mem = rank_memory(model, st, psi, dp, tp, shape.activations, dev, options)
    ranks_per_node = gpn
    capacity = dev.memory_bytes / ranks_per_node if dev.kind == "cpu" else float(dev.memory_bytes)
    host_capacity = dev.host_memory_bytes / ranks_per_node
    fits = mem.total <= capacity and mem.host_bytes <= host_capacity

    # ---- compute and tensor/pipeline communication (per micro-batch on the busiest stage)
    busiest = max(split) / model.total_layers
    fwd, bwd = ct.forward * busiest, ct.backward * busiest
    # the slowest stage sets the slot: the last one holds its own blocks and the LM head (a partition that gives the
    # head a block's slot, e.g. BLOOM's 'type:transformer|embedding', leaves it fewer blocks than the others)
    last = split[-1] / model.total_layers
    stage = max(fwd + bwd, (ct.forward + ct.backward) * last + ct.head) if pp > 1 else fwd + bwd + ct.head
    if _deepspeed_bf16_pipeline(st):  # + the BF16_Optimizer's fp32 gradient fold per micro-batch (terms.py)
        fold = hp_grad_accumulation_s
        stage = max(fwd + bwd + fold(model, st, dev, tp, max(split), False),
                    (ct.forward + ct.backward) * last + ct.head + fold(model, st, dev, tp, split[-1], True))
    # torch.autocast over fp32 parameters (engine ddp in 16 bits): weight casts and gradient copies per micro-batch
    stage += autocast_param_s(model, st.engine, prec, tp, psi, dev) + busiest * autocast_ffn_cast_s(
        model, st.engine, prec, st.kernels, tp, st.micro_batch, s, t, dev, cal.kernel_overhead_s)  # HF T5's wo cast
    lk = links(cluster)
    tp_mb = _tp_comm(st, ct, busiest, tp, tp_links(cluster, tp), cal.overlap_interference) if tp > 1 else 0.0
    pp_mb = 0.0
    if pp > 1:
        boundary = boundary_bytes(model, st.micro_batch, s, t, prec)
        # interleaving sends each micro-batch across v times as many stage boundaries
        pp_mb = 2.0 * v * stage_boundary_time(boundary, tp, sp, eng.pipeline_scatter_gather,
                                              spans_nodes(tp * dp, cluster), cluster)
    slot = stage + tp_mb + pp_mb
    bubble_slots = (pp - 1) / v if st.pp_schedule == "interleaved" else float(pp - 1)
    compute_s, tp_s, pp_s, bubble_s = ga * stage, ga * tp_mb, ga * pp_mb, bubble_slots * slot
    if pp > 1 and model.tie_word_embeddings:
        # the first and the last stage are (pp-1) x tp x dp ranks apart (stages outermost)
        pp_s += _tied_embedding_sync(model, st, tp, spans_nodes((pp - 1) * tp * dp, cluster), cluster)
    hybrid = None
    if dev.kind == "cpu" and (tp > 1 or pp > 1):  # train's hybrid backend on CPU ranks (GPU terms above unchanged)
        hybrid = hybrid_times(model, cluster, st, layout, ct, split, s, t, lk, flash, cal)
        compute_s, tp_s, pp_s, bubble_s = hybrid.compute_s, hybrid.tp_s, hybrid.pp_s, hybrid.bubble_s

    # ---- data-parallel / ZeRO communication
    dp_s, dp_total = _dp_comm(st, eng, shape, cluster, lk, dp, tp, ga, fwd, bwd, cal.overlap_interference)

    # ---- optimizer update and offload traffic
    tensors = shape.zero3.tensors if shape.zero3 is not None else 0
    opt_s, offload_s = optimizer_offload(st, eng, psi, dp, ga, dev, ranks_per_node, tensors, bwd)

    # measured framework time (CPU profiles; 0 elsewhere): per optimizer step and per micro-batch
    framework_s = dev.step_overhead_s + ga * dev.microstep_overhead_s
    if hybrid is not None:  # its engine hooks and DTensor optimizer-step overhead (costmodel/cpu_parallel.py)
        framework_s += hybrid.framework_s
    elif dev.engine_overhead_s:  # the engine's own hooks and bookkeeping, per sublayer of this stage
        sublayers = _sublayers(model) * busiest
        # on several ranks + the "@multi" term, less what the measured collective rates now cost (cpu_engine.py)
        framework_s += engine_hooks_s(dev, st.engine, st.zero, layout.world_size, ga, sublayers)
    step = compute_s + tp_s + pp_s + bubble_s + dp_s + opt_s + offload_s + framework_s
    model_f = workload.global_batch * shape.model_flops_per_seq
    hw_f = workload.global_batch * shape.hardware_flops_per_seq
    return Estimate(
        model=model, cluster=cluster, strategy=st, workload=workload, options=options, layout=layout, target_len=t,
        params_total=shape.params_total, params_per_device=psi, memory=mem, capacity_bytes=capacity,
        host_capacity_bytes=host_capacity, fits=fits, compute_s=compute_s, bubble_s=bubble_s, tp_comm_s=tp_s,
        pp_comm_s=pp_s, dp_comm_s=dp_s, dp_comm_total_s=dp_total, optimizer_s=opt_s, offload_s=offload_s,
        framework_s=framework_s, step_s=step, model_flops=model_f, hardware_flops=hw_f,
        tokens_per_step=workload.global_batch * (s + t), peak_flops=peak,
    )
