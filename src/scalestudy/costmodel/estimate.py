"""estimate(model, cluster, strategy, workload) -> Estimate: memory per device, step time, throughput, MFU.

Pure arithmetic over cached per-model quantities, so a planner can evaluate tens of thousands of strategies per
second. `Estimate.to_dict()` is the `scalestudy estimate --json` schema (docs/estimate-schema.md).

Rank placement (Megatron-LM order): tensor-parallel ranks are adjacent inside a node, data-parallel next,
pipeline stages outermost.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scalestudy.costmodel.comm import collective, gather_time, links, p2p_time
from scalestudy.costmodel.constants import Calibration, stored
from scalestudy.costmodel.cpu_collectives import broadcast_latency, multi_overhead, rates as cpu_collective_rates
from scalestudy.costmodel.cpu_parallel import hybrid_times
from scalestudy.costmodel.engines import engine_comm, tp_overlap
from scalestudy.costmodel.flops import step_flops_per_sequence, target_length
from scalestudy.costmodel.memory import (ACT_BYTES, Memory, activation_bytes, buffer_bytes, model_states,
                                         overhead_bytes)
from scalestudy.costmodel.mfu import FLOPS_CONVENTION as MODEL_FLOPS_CONVENTION, flops_utilization
from scalestudy.costmodel.options import DEFAULT_OPTIONS, CostOptions
from scalestudy.costmodel.params import param_breakdown, param_count, params_per_device
from scalestudy.costmodel.step import OPTIMIZER_BYTES, OVERLAP_MODEL, ComputeTimes, compute_times
from scalestudy.costmodel.zero3 import Zero3Gathers, zero3_gathers
from scalestudy.errors import ScalestudyError
from scalestudy.specs.hardware import ClusterSpec
from scalestudy.specs.model import ModelSpec
from scalestudy.specs.strategy import Layout, Strategy, Workload, resolve_layout

SCHEMA = "scalestudy.estimate/1"
FLOPS_CONVENTION = (f"{MODEL_FLOPS_CONVENTION}; hardware FLOPs add recomputation; MFU/HFU = FLOP/s per device / "
                    "dense peak of the precision (scalestudy.costmodel.mfu)")
# NVMe offload: DeepSpeed swaps optimizer states through pinned host buffers; we assume NVMe reads/writes at a
# quarter of the PCIe bandwidth (a PCIe 4.0 x4 drive behind a x16 GPU link), both directions every step.
NVME_FRACTION_OF_PCIE = 0.25


@dataclass(slots=True)
class Estimate:
    model: ModelSpec
    cluster: ClusterSpec
    strategy: Strategy
    workload: Workload
    options: CostOptions
    layout: Layout
    target_len: int  # decoder length used (enc-dec: workload.target_len, or the span-corruption need when that is 0)
    params_total: int
    params_per_device: int  # on the busiest model-parallel rank, before ZeRO partitioning
    memory: Memory
    capacity_bytes: float
    host_capacity_bytes: float
    fits: bool
    compute_s: float
    bubble_s: float
    tp_comm_s: float
    pp_comm_s: float
    dp_comm_s: float  # exposed
    dp_comm_total_s: float
    optimizer_s: float
    offload_s: float
    framework_s: float  # fixed per-step framework time of a measured CPU profile (0 for GPUs)
    step_s: float
    model_flops: float  # per optimizer step, whole global batch
    hardware_flops: float
    tokens_per_step: int
    peak_flops: float
    stages: tuple = ()  # clusters mixing devices: per pipeline stage (costmodel/stages.py, StageEstimate)

    @property
    def per_device_bytes(self) -> float:
        return self.memory.total

    @property
    def samples_per_s(self) -> float:
        return self.workload.global_batch / self.step_s

    @property
    def tokens_per_s(self) -> float:
        return self.tokens_per_step / self.step_s

    @property
    def model_tflops_per_device(self) -> float:
        return self.model_flops / self.step_s / self.layout.world_size / 1e12

    @property
    def hardware_tflops_per_device(self) -> float:
        return self.hardware_flops / self.step_s / self.layout.world_size / 1e12

    @property
    def mfu(self) -> float:
        return flops_utilization(self.model_flops, self.step_s, self.layout.world_size, self.peak_flops)

    @property
    def hfu(self) -> float:
        return flops_utilization(self.hardware_flops, self.step_s, self.layout.world_size, self.peak_flops)

    @property
    def time_to_train_s(self) -> float | None:
        return self.workload.train_tokens / self.tokens_per_s if self.workload.train_tokens else None

    @property
    def device_hours(self) -> float | None:
        t = self.time_to_train_s
        return None if t is None else t * self.layout.world_size / 3600.0

    def time_parts(self) -> dict:
        return {"compute_s": self.compute_s, "pipeline_bubble_s": self.bubble_s, "tp_comm_s": self.tp_comm_s,
                "pp_comm_s": self.pp_comm_s, "dp_comm_exposed_s": self.dp_comm_s, "optimizer_s": self.optimizer_s,
                "offload_s": self.offload_s, "framework_s": self.framework_s}

    def to_dict(self) -> dict:
        c, m, lay = self.cluster, self.memory, self.layout
        out = {
            "schema": SCHEMA,
            "model": self.model.name,
            "params_total": self.params_total,
            "params_per_device": self.params_per_device,
            "cluster": {"device": c.device.name, "nodes": c.nodes, "gpus_per_node": c.gpus_per_node,
                        "world_size": c.world_size, "intra_node_bytes_per_s": c.intra_bw,
                        "inter_node_bytes_per_s": c.inter_bw, "peak_flops_per_device": self.peak_flops},
            "strategy": self.strategy.to_dict(),
            "workload": {"global_batch": self.workload.global_batch, "seq_len": self.workload.seq_len,
                         "target_len": self.target_len if self.model.is_encoder_decoder else 0,
                         "tokens_per_step": self.tokens_per_step, "train_tokens": self.workload.train_tokens},
            "layout": {"world_size": lay.world_size, "dp": lay.dp, "tp": lay.tp, "pp": lay.pp,
                       "grad_accum": lay.grad_accum, "micro_batch": self.strategy.micro_batch},
            "memory": {
                "per_device_bytes": m.total,
                "parts": m.parts(),
                "model_states_bytes": m.model_states,
                "capacity_bytes": self.capacity_bytes,
                "host_bytes_per_rank": m.host_bytes,
                "host_capacity_bytes_per_rank": self.host_capacity_bytes,
                "nvme_bytes_per_rank": m.nvme_bytes,
                "unit": "bytes",
            },
            "fits": self.fits,
            "time": {
                "step_s": self.step_s,
                "parts": self.time_parts(),
                "dp_comm_total_s": self.dp_comm_total_s,
                "time_to_train_s": self.time_to_train_s,
                "device_hours": self.device_hours,
            },
            "throughput": {
                "samples_per_s": self.samples_per_s,
                "tokens_per_s": self.tokens_per_s,
                "tokens_per_s_per_device": self.tokens_per_s / lay.world_size,
                "model_tflops_per_device": self.model_tflops_per_device,
                "hardware_tflops_per_device": self.hardware_tflops_per_device,
            },
            "flops": {"model_per_step": self.model_flops, "hardware_per_step": self.hardware_flops,
                      "convention": FLOPS_CONVENTION},
            "mfu": self.mfu,
            "hfu": self.hfu,
            "assumptions": {**self.options.to_dict(), "overlap_model": OVERLAP_MODEL},
        }
        if self.stages:  # clusters mixing devices: time and memory per pipeline stage
            from scalestudy.costmodel.stages import stages_dict

            stages_dict(self, out)
        return out


@dataclass(frozen=True, slots=True)
class _Shape:
    """Everything that depends only on (model, device, precision, tp, pp, micro-batch, lengths, recompute, ...)."""

    psi: int
    params_total: int
    activations: float
    compute: ComputeTimes
    model_flops_per_seq: float
    hardware_flops_per_seq: float
    stage_layers: int  # transformer blocks on the busiest pipeline stage
    embed_elems: int  # input-embedding elements on a rank of the first stage (their gradient completes last)
    zero3: Zero3Gathers | None = None  # what DeepSpeed ZeRO-3 gathers per pass (costmodel/zero3.py)


_SHAPES: dict[tuple, tuple] = {}


def _shape(model, dev, st: Strategy, tp, pp, s, t, flash, sp, in_flight, split, cal) -> _Shape:
    # keyed by object identity (ModelSpec hashing is the hot spot otherwise); the stored references guard reuse
    prec, mb, recompute = st.precision, st.micro_batch, st.recompute
    key = (id(model), id(dev), prec, tp, pp, mb, s, t, recompute, flash, sp, in_flight, split, id(cal))
    hit = _SHAPES.get(key)
    if hit is not None and hit[0] is model and hit[1] is dev and hit[3] is cal:
        return hit[2]
    if len(_SHAPES) > 200_000:
        _SHAPES.clear()
    total_layers = model.total_layers
    shape = _Shape(
        psi=params_per_device(model, tp, pp), params_total=param_count(model),
        activations=activation_bytes(model, mb, s, t, prec, tp, pp, in_flight, recompute, flash, sp,
                                     split[0] / total_layers),
        compute=compute_times(model, dev, prec, tp, mb, s, t, recompute, flash, sp, cal),
        model_flops_per_seq=step_flops_per_sequence(model, s, t, "none"),
        hardware_flops_per_seq=step_flops_per_sequence(model, s, t, recompute),
        stage_layers=max(split),
        embed_elems=param_breakdown(model).embedding // tp,
        zero3=zero3_gathers(model, tp, pp, max(split), params_per_device(model, tp, pp)),
    )
    _SHAPES[key] = (model, dev, shape, cal)
    return shape


def _sublayers(model: ModelSpec) -> int:
    """Attention, cross-attention and FFN sublayers of the whole model."""
    if model.is_encoder_decoder:
        return 2 * model.num_layers + 3 * model.num_decoder_layers
    return 2 * model.num_layers


def _exposed(compute: float, comm: float, interference: float) -> float:
    """Communication left on the critical path when `comm` overlaps `compute`: the excess, plus the share of the
    overlapped part that slows the compute it runs beside."""
    return max(0.0, comm - compute) + interference * min(compute, comm)


def estimate(model: ModelSpec, cluster: ClusterSpec, strategy: Strategy, workload: Workload,
             options: CostOptions = DEFAULT_OPTIONS, calibration: Calibration | None = None) -> Estimate:
    """Predict memory, time and throughput of one training configuration (raises ScalestudyError if invalid)."""
    if cluster.groups:  # ranks of different devices or speeds: stage by stage, bound by the slowest
        from scalestudy.costmodel.stages import estimate_stages

        return estimate_stages(model, cluster, strategy, workload, options, calibration)
    st, dev = strategy, cluster.device
    cal = calibration or stored()
    gpn = cluster.gpus_per_node
    layout = resolve_layout(st, cluster.world_size, workload.global_batch, gpus_per_node=gpn if st.tp > 1 else 0,
                            num_heads=model.num_heads, num_layers=model.total_layers if st.pp > 1 else 0)
    if st.tp > 1 and model.kv_heads % st.tp:
        raise ScalestudyError(f"{model.kv_heads} key/value heads are not divisible by tp {st.tp}")
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
    if pp == 1 or st.pp_schedule == "1f1b":
        in_flight = float(min(pp, ga))
    elif st.pp_schedule == "gpipe":
        in_flight = float(ga)  # every micro-batch's activations are held until its backward
    else:
        in_flight = min(pp, ga) * (1.0 + (pp - 1) / (pp * v))
    shape = _shape(model, dev, st, tp, pp, s, t, flash, sp, in_flight, split, cal)
    psi, ct = shape.psi, shape.compute
    eng = engine_comm(st.engine)

    # ---- memory
    w, g, o, host, nvme = model_states(psi, dp, st.engine, st.zero, prec, st.offload_optimizer, st.offload_params)
    buf = buffer_bytes(model, psi, dp, tp, st.engine, st.zero, prec, st.offload_optimizer, options,
                       st.overlap_grad_comm)
    mem = Memory(w, g, o, shape.activations, buf, overhead_bytes(dev.kind), host, nvme)
    ranks_per_node = gpn
    capacity = dev.memory_bytes / ranks_per_node if dev.kind == "cpu" else float(dev.memory_bytes)
    host_capacity = dev.host_memory_bytes / ranks_per_node
    fits = mem.total <= capacity and host <= host_capacity

    # ---- compute and tensor/pipeline communication (per micro-batch on the busiest stage)
    busiest = max(split) / model.total_layers
    fwd, bwd = ct.forward * busiest, ct.backward * busiest
    stage = fwd + bwd + ct.head
    lk = links(cluster)
    tp_mb = _tp_comm(st, ct, busiest, tp, lk) if tp > 1 else 0.0
    pp_mb = 0.0
    if pp > 1:
        boundary = st.micro_batch * (s + t) * model.d_model * ACT_BYTES[prec] / (tp if sp else 1)
        # interleaving sends each micro-batch across v times as many stage boundaries
        pp_mb = 2.0 * v * p2p_time(boundary, tp * dp >= gpn and cluster.nodes > 1, cluster)
    slot = stage + tp_mb + pp_mb
    bubble_slots = (pp - 1) / v if st.pp_schedule == "interleaved" else float(pp - 1)
    compute_s, tp_s, pp_s, bubble_s = ga * stage, ga * tp_mb, ga * pp_mb, bubble_slots * slot
    if pp > 1 and model.tie_word_embeddings:
        # the first and the last stage are (pp-1) x tp x dp ranks apart (stages outermost)
        pp_s += _tied_embedding_sync(model, st, tp, (pp - 1) * tp * dp >= gpn and cluster.nodes > 1, cluster)
    hybrid = None
    if dev.kind == "cpu" and (tp > 1 or pp > 1):  # train's hybrid backend on CPU ranks (GPU terms above unchanged)
        hybrid = hybrid_times(model, cluster, st, layout, ct, split, s, t, lk, flash, cal)
        compute_s, tp_s, pp_s, bubble_s = hybrid.compute_s, hybrid.tp_s, hybrid.pp_s, hybrid.bubble_s

    # ---- data-parallel / ZeRO communication
    dp_s, dp_total = _dp_comm(st, eng, shape, cluster, lk, dp, tp, ga, fwd, bwd, cal.overlap_interference)

    # ---- optimizer update and offload traffic
    half = 4 if prec == "fp32" else 2
    sharded = st.engine == "fsdp" or st.zero >= 1
    local = psi / dp if sharded else psi
    offload_s = 0.0
    if st.offload_optimizer != "none":
        opt_s = local * ranks_per_node / dev.cpu_adam_params_per_s
        if st.engine == "fsdp":
            # CPUOffloadPolicy: every gather copies the fp32 shard to the device, every reduce-scatter copies the
            # gradient shard back (per micro-batch); the Adam step runs on the host
            gathers = 1 if st.zero == 2 else (3 if st.recompute == "full" and eng.regather_on_recompute else 2)
            offload_s = ga * (gathers + 1) * 4.0 * local / dev.pcie_bytes_per_s
        else:
            offload_s = local * 2 * half / dev.pcie_bytes_per_s  # gradients down, updated weights up
        if st.offload_optimizer == "nvme":
            offload_s += 2 * 16.0 * local / (dev.pcie_bytes_per_s * NVME_FRACTION_OF_PCIE)
    else:
        opt_s = local * OPTIMIZER_BYTES[prec] / dev.hbm_bytes_per_s
    if st.offload_params != "none" and st.engine == "deepspeed":
        shard = psi * half / dp
        bw = dev.pcie_bytes_per_s * (NVME_FRACTION_OF_PCIE if st.offload_params == "nvme" else 1.0)
        offload_s += ga * 2 * shard / bw  # fetched for forward and again for backward

    # measured framework time (CPU profiles; 0 elsewhere): per optimizer step and per micro-batch
    framework_s = dev.step_overhead_s + ga * dev.microstep_overhead_s
    if hybrid is not None:  # its engine hooks and DTensor optimizer-step overhead (costmodel/cpu_parallel.py)
        framework_s += hybrid.framework_s
    elif dev.engine_overhead_s:  # the engine's own hooks and bookkeeping, per sublayer of this stage
        sublayers = _sublayers(model) * busiest
        key = f"{st.engine}-{st.zero}"
        per = dev.engine_overhead_s.get(key, 0.0)
        if layout.world_size > 1:  # measured on several ranks: collectives of small buckets, shared cores
            per += multi_overhead(dev, st.engine, st.zero)  # less what the measured collective rates now cost
        framework_s += ga * sublayers * per
    step = compute_s + tp_s + pp_s + bubble_s + dp_s + opt_s + offload_s + framework_s
    model_f = workload.global_batch * shape.model_flops_per_seq
    hw_f = workload.global_batch * shape.hardware_flops_per_seq
    return Estimate(
        model=model, cluster=cluster, strategy=st, workload=workload, options=options, layout=layout, target_len=t,
        params_total=shape.params_total, params_per_device=psi, memory=mem, capacity_bytes=capacity,
        host_capacity_bytes=host_capacity, fits=fits, compute_s=compute_s, bubble_s=bubble_s, tp_comm_s=tp_s,
        pp_comm_s=pp_s, dp_comm_s=dp_s, dp_comm_total_s=dp_total, optimizer_s=opt_s, offload_s=offload_s,
        framework_s=framework_s, step_s=step, model_flops=model_f, hardware_flops=hw_f, tokens_per_step=workload.global_batch * (s + t),
        peak_flops=peak,
    )


def _tied_embedding_sync(model: ModelSpec, st: Strategy, tp: int, cross_node: bool, cluster: ClusterSpec) -> float:
    """Seconds per step to keep a tied embedding equal on the first and the last pipeline stage: their copies'
    gradients are all-reduced between the two stages after the backward, before the optimizer step (Megatron-LM
    `_allreduce_word_embedding_grads`, fp32 main gradients; DeepSpeed pipeline tied-module all-reduce of the
    gradients). A two-rank all-reduce moves the whole vocab/tp x d gradient once each way; every tensor x data
    parallel rank pair does its own at once, each over its own link share."""
    grad_bytes = 4 if (st.engine in ("ddp", "megatron") or st.precision == "fp32") else 2
    nbytes = model.vocab_size // tp * model.d_model * grad_bytes
    return p2p_time(nbytes, cross_node, cluster)


def _dp_comm(st: Strategy, eng, shape: _Shape, cluster: ClusterSpec, lk: tuple, dp: int, tp: int, ga: int,
             fwd: float, bwd: float, interference: float) -> tuple[float, float]:
    """(exposed, total) seconds of data-parallel / ZeRO communication per optimizer step.

    ZeRO-3 / FSDP, per micro-batch: the blocks' weights are all-gathered layer by layer for the forward, again for
    the backward (FSDP zero=2 keeps them), again for a full recompute when the engine re-gathers; gradients are
    reduce-scattered layer by layer. With prefetch a layer's transfer hides behind the previous layer's compute,
    so per pass the excess over compute is exposed, plus the first layer's transfer, plus the interference share.
    ZeRO-0/1/2 and DDP: the gradient reduction overlaps the backward (every micro-batch's for ZeRO-2, the last
    one's otherwise) when overlap_grad_comm; the post-step weight all-gather of ZeRO-1/2 is exposed.
    """
    if dp <= 1:
        return 0.0, 0.0
    half = 4 if st.precision == "fp32" else 2
    psi = shape.psi
    per_node = max(1, min(dp, cluster.gpus_per_node // tp))
    eff = eng.collective_efficiency
    cpu = cluster.device.kind == "cpu"
    if st.engine == "fsdp" or st.zero == 3:
        nlayers = shape.stage_layers
        elems, fetches = psi, nlayers * eng.collectives_per_layer
        if st.engine == "deepspeed" and shape.zero3 is not None:  # persistent small tensors are never gathered
            z = shape.zero3
            elems, fetches = z.gathered_elems, z.layer_fetches * eng.collectives_per_layer + z.other_fetches
        gather = gather_time(elems * half, dp, per_node, lk, eff, eng.gather_rails, fetches)
        reduce = gather_time(psi * half, dp, per_node, lk, eff, eng.gather_rails, nlayers)
        if cpu:  # gloo's all_gather / reduce_scatter at their measured rates (costmodel/cpu_collectives.py)
            _, r_ag, r_rs = cpu_collective_rates(cluster.device)
            gather, reduce = gather * r_ag, reduce * r_rs
        bwd_gathers = 0 if (st.engine == "fsdp" and st.zero == 2) else 1
        if st.recompute == "full" and eng.regather_on_recompute:
            bwd_gathers += 1
        fwd_comm, bwd_comm = gather, bwd_gathers * gather + reduce
        total = ga * (fwd_comm + bwd_comm)
        if cpu:
            return total, total
        if eng.prefetch_layers < 1:
            return total, total
        first = gather / nlayers  # the first layer's gather of each pass has no compute to hide behind
        per_mb = min(fwd_comm, _exposed(fwd, fwd_comm, interference) + first)
        per_mb += min(bwd_comm, _exposed(bwd, bwd_comm, interference) + (first if bwd_gathers else 0.0))
        return ga * per_mb, total
    grad_bytes = 4 if st.engine in ("ddp", "megatron") else half  # fp32 (main-)gradient buffers
    rails = eng.grad_rails
    # gradients are reduced in buckets (DDP: bytes; DeepSpeed: elements), each bucket one collective
    reduce_buckets = max(1, math.ceil(psi / eng.reduce_bucket_elems)) if eng.reduce_bucket_elems else 1
    gather_buckets = max(1, math.ceil(psi / eng.allgather_bucket_elems)) if eng.allgather_bucket_elems else 1
    ar = rs = ag = 0.0
    if st.engine == "ddp" or st.zero == 0:
        # an all-reduce = reduce-scatter + all-gather of the gradient buffer
        ar = 2.0 * gather_time(psi * grad_bytes, dp, per_node, lk, eff, rails, reduce_buckets, tree=True)
        if st.engine == "ddp" and st.zero == 1:  # ZeroRedundancyOptimizer re-broadcasts the updated shards
            ag = gather_time(psi * 4, dp, per_node, lk, eff, rails, gather_buckets)
    else:
        rs = gather_time(psi * grad_bytes, dp, per_node, lk, eff, rails, reduce_buckets)
        ag = gather_time(psi * half, dp, per_node, lk, eff, rails, gather_buckets)
    if cpu:  # gloo's collectives at their measured rates (costmodel/cpu_collectives.py)
        r_ar, r_ag, r_rs = cpu_collective_rates(cluster.device)
        ar, rs, ag = ar * r_ar, rs * r_rs, ag * r_ag
        if st.engine == "ddp" and st.zero == 1 and shape.zero3 is not None:  # one broadcast per parameter tensor
            ag += broadcast_latency(cluster.device, shape.zero3.tensors, dp)
    reductions = ga if (st.engine == "deepspeed" and st.zero == 2) else 1
    total = reductions * (ar + rs) + ag
    if st.overlap_param_gather and not cpu:
        ag = _param_gather_exposed(ag, gather_buckets, fwd, interference)
        if not st.overlap_grad_comm:
            return reductions * (ar + rs) + ag, total
    if cpu or not st.overlap_grad_comm:
        return total, total
    # what completes only when the backward ends: the last bucket, and on the first stage the input embedding's
    # gradient (its lookup is the last op of the backward; a tied head's gradient joins it there)
    last = eng.reduce_bucket_elems or psi
    if st.pp == 1:
        last = max(last, shape.embed_elems)
    return reductions * _reduction_exposed(bwd, ar + rs, min(1.0, last / psi), interference) + ag, total


def _param_gather_exposed(gather: float, buckets: int, window: float, interference: float) -> float:
    """Exposed seconds of a post-step parameter all-gather (ZeRO-1/2, Megatron-Core distributed optimizer) overlapped
    with the next step's forward (`Strategy.overlap_param_gather`, Megatron-Core `--overlap-param-gather`).

    Megatron-Core (distrib_optimizer.py at f2e5db40) launches the first bucket's all-gather before the forward and
    each next bucket's when the forward pre-hook of a module waits on the previous one: one bucket in flight, each
    hidden behind the forward of the layers the previous bucket holds. The first bucket has nothing to hide behind;
    the rest hides behind the first micro-batch's forward on this stage (`window`), the excess is exposed and the
    hidden part slows that forward by `interference`. (Megatron does not bucket pipeline stages after the first:
    their single gather runs during the pipeline fill; the first stage's bucketed figure is used for all.)
    """
    first = gather / max(1, buckets)
    rest = gather - first
    return first + max(0.0, rest - window) + interference * min(window, rest)


def _tp_comm(st: Strategy, ct, share: float, tp: int, lk: tuple) -> float:
    """Tensor-parallel communication seconds on the critical path per micro-batch, on a stage holding `share` of
    the layers: one all-reduce volume (all-gather + reduce-scatter under sequence parallelism) per sublayer and pass
    (ComputeTimes.tp_ops), exposed -- or with `Strategy.tp_comm_overlap` what the adjacent GEMMs cannot hide
    (_tp_overlap_exposed)."""
    per_op = collective(2.0, ct.tp_bytes, tp, tp, lk)
    if not st.tp_comm_overlap or ct.linear <= 0.0:
        return ct.tp_ops * share * per_op
    passes = 3 if st.recompute == "full" else 2  # as step.compute_times counts tp_ops
    gemm = ct.linear * passes / ct.tp_ops  # forward linear-GEMM seconds of one sublayer
    ov = tp_overlap()
    return ct.tp_ops * share * _tp_overlap_exposed(per_op, gemm, passes, ov.pipeline_splits, ov.interference)


def _tp_overlap_exposed(comm: float, gemm: float, passes: int, splits: int, interference: float) -> float:
    """Exposed seconds per tensor-parallel collective pair (all-gather + reduce-scatter of one sublayer, `comm` s)
    under Transformer Engine's userbuffers overlap (engines.yaml tp_comm_overlap), averaged over the passes.

    Forward (and a full recompute's forward): the all-gather runs inside the QKV / FC1 GEMM (ring exchange), the
    reduce-scatter behind the proj / FC2 GEMM in `splits` chunks, the last chunk's -- comm / (2 splits) -- exposed;
    exposure max(that tail, comm - gemm). Backward: the collectives run beside the dgrad and wgrad GEMMs (2 gemm),
    exposure max(0, comm - 2 gemm). Every overlapped second costs `interference` of GEMM time.
    """
    fwd = max(comm / (2.0 * splits), comm - gemm) + interference * min(comm, gemm)
    bwd = max(0.0, comm - 2.0 * gemm) + interference * min(comm, 2.0 * gemm)
    return ((passes - 1) * fwd + bwd) / passes


def _reduction_exposed(window: float, comm: float, tail: float, interference: float) -> float:
    """Exposed seconds of a bucketed gradient reduction issued as the backward pass (`window` s) produces it
    (PyTorch DDP, Li et al. VLDB 2020; DeepSpeed ZeRO-1/2 reduce buckets; Megatron/NeMo grad-buffer chunks).

    Buckets are reduced in the order their gradients complete. The `tail` share of the traffic is produced at
    the end of the backward and has no compute left to hide behind; the rest hides behind the backward up to its
    length, and the hidden part still slows the compute beside it by `interference`.
    """
    late = tail * comm
    early = comm - late
    return late + max(0.0, early - window) + interference * min(window, early)
