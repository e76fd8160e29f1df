"""estimate(model, cluster, strategy, workload) -> Estimate: memory per device, step time, throughput, MFU.

Pure arithmetic over cached per-model quantities, so a planner can evaluate tens of thousands of strategies per
second. `Estimate.to_dict()` is the `scalestudy estimate --json` schema (docs/estimate-schema.md).

Rank placement (Megatron-LM order): tensor-parallel ranks are adjacent inside a node, data-parallel next,
pipeline stages outermost.
"""

from __future__ import annotations

from dataclasses import dataclass

from scalestudy.costmodel.comm import collective, dp_comm_volume, links, p2p_time
from scalestudy.costmodel.flops import step_flops_per_sequence, target_length
from scalestudy.costmodel.memory import (ACT_BYTES, Memory, activation_bytes, buffer_bytes, model_states,
                                         overhead_bytes)
from scalestudy.costmodel.options import DEFAULT_OPTIONS, CostOptions
from scalestudy.costmodel.params import param_count, params_per_device
from scalestudy.costmodel.step import OPTIMIZER_BYTES, OVERLAP_MODEL, ComputeTimes, compute_times
from scalestudy.errors import ScalestudyError
from scalestudy.specs.hardware import ClusterSpec
from scalestudy.specs.model import ModelSpec
from scalestudy.specs.strategy import Layout, Strategy, Workload, resolve_layout

SCHEMA = "scalestudy.estimate/1"
FLOPS_CONVENTION = ("model FLOPs = 3 x forward matmul FLOPs (weights + attention scores/values over the full "
                    "square, encoder and decoder with their own lengths, LM head), no recomputation; hardware FLOPs "
                    "add recomputation; MFU/HFU = FLOP/s per device / dense peak of the precision")
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
    target_len: int  # decoder length used (enc-dec: workload.target_len, or seq_len when that is 0)
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
    step_s: float
    model_flops: float  # per optimizer step, whole global batch
    hardware_flops: float
    tokens_per_step: int
    peak_flops: float

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
        return self.model_flops / (self.step_s * self.layout.world_size * self.peak_flops)

    @property
    def hfu(self) -> float:
        return self.hardware_flops / (self.step_s * self.layout.world_size * self.peak_flops)

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
                "offload_s": self.offload_s}

    def to_dict(self) -> dict:
        c, m, lay = self.cluster, self.memory, self.layout
        return {
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


@dataclass(frozen=True, slots=True)
class _Shape:
    """Everything that depends only on (model, device, precision, tp, pp, micro-batch, lengths, recompute)."""

    psi: int
    params_total: int
    activations: float
    compute: ComputeTimes
    model_flops_per_seq: float
    hardware_flops_per_seq: float


_SHAPES: dict[tuple, tuple] = {}


def _shape(model, dev, prec, tp, pp, mb, s, t, recompute, flash, sp, in_flight, options) -> _Shape:
    # keyed by object identity (ModelSpec hashing is the hot spot otherwise); the stored references guard reuse
    key = (id(model), id(dev), prec, tp, pp, mb, s, t, recompute, flash, sp, in_flight)
    hit = _SHAPES.get(key)
    if hit is not None and hit[0] is model and hit[1] is dev:
        return hit[2]
    if len(_SHAPES) > 200_000:
        _SHAPES.clear()
    shape = _Shape(
        psi=params_per_device(model, tp, pp), params_total=param_count(model),
        activations=activation_bytes(model, mb, s, t, prec, tp, pp, in_flight, recompute, flash, sp),
        compute=compute_times(model, dev, prec, tp, mb, s, t, recompute, flash, sp),
        model_flops_per_seq=step_flops_per_sequence(model, s, t, "none"),
        hardware_flops_per_seq=step_flops_per_sequence(model, s, t, recompute),
    )
    _SHAPES[key] = (model, dev, shape)
    return shape


def estimate(model: ModelSpec, cluster: ClusterSpec, strategy: Strategy, workload: Workload,
             options: CostOptions = DEFAULT_OPTIONS) -> Estimate:
    """Predict memory, time and throughput of one training configuration (raises ScalestudyError if invalid)."""
    st, dev = strategy, cluster.device
    gpn = cluster.gpus_per_node
    layout = resolve_layout(st, cluster.world_size, workload.global_batch, gpus_per_node=gpn if st.tp > 1 else 0,
                            num_heads=model.num_heads, num_layers=model.total_layers if st.pp > 1 else 0)
    if st.tp > 1 and model.kv_heads % st.tp:
        raise ScalestudyError(f"{model.kv_heads} key/value heads are not divisible by tp {st.tp}")
    peak = dev.peak(st.precision)
    dp, tp, pp, ga = layout.dp, layout.tp, layout.pp, layout.grad_accum
    s = workload.seq_len
    t = target_length(model, workload)
    prec, mb = st.precision, st.micro_batch

    flash = st.attention == "flash"
    sp = st.sequence_parallel and tp > 1
    shape = _shape(model, dev, prec, tp, pp, mb, s, t, st.recompute, flash, sp, min(pp, ga), options)
    psi, ct = shape.psi, shape.compute

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
    fwd, bwd = ct.forward / pp, ct.backward / pp
    stage = fwd + bwd + ct.head
    lk = links(cluster)
    tp_mb = ct.tp_ops / pp * collective(2.0, ct.tp_bytes, tp, tp, lk) if tp > 1 else 0.0
    pp_mb = 0.0
    if pp > 1:
        boundary = mb * (s + t) * model.d_model * ACT_BYTES[prec] / (tp if sp else 1)
        pp_mb = 2.0 * p2p_time(boundary, tp * dp >= gpn and cluster.nodes > 1, cluster)
    slot = stage + tp_mb + pp_mb
    compute_s, tp_s, pp_s, bubble_s = ga * stage, ga * tp_mb, ga * pp_mb, (pp - 1) * slot

    # ---- data-parallel / ZeRO communication
    half = 4 if prec == "fp32" else 2
    grad_bytes = 4 if st.engine == "ddp" else half
    param_bytes = 4 if st.engine == "ddp" else half
    ar = rs = ag = 0.0
    if dp > 1:
        vol = dp_comm_volume(psi, st.engine, st.zero, ga, grad_bytes, param_bytes)
        per_node = max(1, min(dp, gpn // tp))
        ar = collective(2.0, vol["grad_allreduce"], dp, per_node, lk)
        rs = collective(1.0, vol["grad_reduce_scatter"], dp, per_node, lk)
        ag = collective(1.0, vol["param_allgather"], dp, per_node, lk)
    dp_total = ar + rs + ag
    if dev.kind == "cpu":
        dp_s = dp_total  # gloo collectives and compute share the ranks' only thread: nothing overlaps
    elif st.engine == "fsdp" or st.zero == 3:
        gathers = 1 if (st.engine == "fsdp" and st.zero == 2) else 2
        ag_mb, rs_mb = ag / ga / gathers, rs / ga
        bwd_ag = ag_mb if gathers == 2 else 0.0
        dp_s = ga * (max(0.0, ag_mb - fwd) + max(0.0, bwd_ag + rs_mb - bwd))
    else:
        if not st.overlap_grad_comm:
            grad_s = ar + rs
        elif st.engine == "deepspeed" and st.zero == 2:
            grad_s = ga * max(0.0, rs / ga - bwd)
        else:
            grad_s = max(0.0, ar + rs - bwd)
        dp_s = grad_s + ag

    # ---- optimizer update and offload traffic
    sharded = st.engine == "fsdp" or st.zero >= 1
    local = psi / dp if sharded else psi
    offload_s = 0.0
    if st.offload_optimizer != "none":
        opt_s = local * ranks_per_node / dev.cpu_adam_params_per_s
        offload_s = local * 2 * half / dev.pcie_bytes_per_s  # gradients down, updated weights up
        if st.offload_optimizer == "nvme":
            offload_s += 2 * 16.0 * local / (dev.pcie_bytes_per_s * NVME_FRACTION_OF_PCIE)
    else:
        opt_s = local * OPTIMIZER_BYTES[prec] / dev.hbm_bytes_per_s
    if st.offload_params != "none":
        shard = psi * half / dp
        bw = dev.pcie_bytes_per_s * (NVME_FRACTION_OF_PCIE if st.offload_params == "nvme" else 1.0)
        offload_s += ga * 2 * shard / bw  # fetched for forward and again for backward

    step = compute_s + tp_s + pp_s + bubble_s + dp_s + opt_s + offload_s
    model_f = workload.global_batch * shape.model_flops_per_seq
    hw_f = workload.global_batch * shape.hardware_flops_per_seq
    return Estimate(
        model=model, cluster=cluster, strategy=st, workload=workload, options=options, layout=layout, target_len=t,
        params_total=shape.params_total, params_per_device=psi, memory=mem, capacity_bytes=capacity,
        host_capacity_bytes=host_capacity, fits=fits, compute_s=compute_s, bubble_s=bubble_s, tp_comm_s=tp_s,
        pp_comm_s=pp_s, dp_comm_s=dp_s, dp_comm_total_s=dp_total, optimizer_s=opt_s, offload_s=offload_s,
        step_s=step, model_flops=model_f, hardware_flops=hw_f, tokens_per_step=workload.global_batch * (s + t),
        peak_flops=peak,
    )
