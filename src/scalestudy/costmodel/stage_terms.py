"""One pipeline stage's terms -- what `estimate()` (one device type: the slowest stage, the others' fill-and-drain
slots derived from their shares) and `stages.estimate_stages()` (mixed clusters: every stage its own) both price.

A stage is its device and links, the compute times of the whole model on that device (step.ComputeTimes), its share
of the blocks' FLOPs, the seconds of its blocks per micro-batch (the caller's rule: the busiest stage with the head
for estimate(), its own blocks for estimate_stages()), and its per-configuration quantities (terms._Shape, with the
stage's own parameters and activations). Per micro-batch it costs compute (+ torch.autocast's casts), tensor-
parallel all-reduces and the stage-boundary sends; per step, after the drain, the data-parallel / ZeRO collectives,
the optimizer update and offload traffic, and the measured framework time (CPU profiles); and it holds its memory.
"""

from __future__ import annotations

import itertools
import math
import operator
from typing import NamedTuple

from scalestudy.costmodel import fp8
from scalestudy.costmodel.comm import links, spans_nodes, stage_boundary_time, tp_links, tp_ranks_per_node
from scalestudy.costmodel.constants import Calibration
from scalestudy.costmodel.cpu_engine import engine_hooks_s
from scalestudy.costmodel.eager_kernels import (autocast_ffn_cast_s, autocast_gpt_s, autocast_layer_norm_s,
                                                autocast_param_s, autocast_t5_cast_s, megatron_bias_add_s)
from scalestudy.costmodel.engines import engine_comm, scatters_stage_boundary
from scalestudy.costmodel.input_numbers import IdMemo, InputNumbers
from scalestudy.costmodel.memory import Memory, boundary_bytes, rank_memory
from scalestudy.costmodel.options import CostOptions
from scalestudy.costmodel.optimizers import state_elem
from scalestudy.costmodel.step import DDP_COPY_BACK_PASSES, ComputeTimes, bucket_copy_s, optimizer_loop_s
from scalestudy.costmodel.terms import (BucketedDP, ShardedDP, _deepspeed_bf16_pipeline,
                                       _deepspeed_pipeline_reduces_after, _dp_comm, _Shape, _tp_comm, dp_collectives,
                                       dp_comm_s, main_grad_bytes, optimizer_offload)
from scalestudy.costmodel.zero3 import interleaved_grad_elems
from scalestudy.specs.hardware import ClusterSpec, DeviceSpec
from scalestudy.specs.model import ModelSpec
from scalestudy.specs.strategy import Layout, Strategy


class Setting(NamedTuple):
    """What every stage of one configuration shares."""

    model: ModelSpec
    st: Strategy
    options: CostOptions
    cal: Calibration
    eng: object  # engines.engine_comm(st.engine)
    layout: Layout
    seq_len: int
    target_len: int
    sp: bool  # sequence parallelism in effect (tp > 1)
    boundary_bytes: float  # one stage-boundary send per micro-batch and direction (0 without pipeline)
    cross_node: bool  # whether a stage's dp x tp ranks span nodes (its boundary sends go over the network)


def setting(model: ModelSpec, cluster: ClusterSpec, st: Strategy, layout: Layout, seq_len: int, target_len: int,
            cal: Calibration, options: CostOptions) -> Setting:
    """The configuration-wide quantities of `model` trained with `st` on `cluster` laid out as `layout`."""
    tp = layout.tp
    return _NEW_TUPLE(Setting, (model, st, options, cal, engine_comm(st.engine), layout, seq_len, target_len,
                                st.sequence_parallel and tp > 1, _boundary(model, st, seq_len, target_len, layout),
                                spans_nodes(tp * layout.dp, cluster)))


def setting_at_micro_batch(cfg: Setting, st: Strategy, layout: Layout) -> Setting:
    """`cfg` for `st`, cfg.st at another micro-batch, laid out as `layout` (its gradient accumulation): setting's
    fields, of which only the stage-boundary send reads the micro-batch."""
    boundary = _boundary(cfg.model, st, cfg.seq_len, cfg.target_len, layout)
    return _NEW_TUPLE(Setting, (cfg.model, st, cfg.options, cfg.cal, cfg.eng, layout, cfg.seq_len, cfg.target_len,
                                cfg.sp, boundary, cfg.cross_node))


def _boundary(model: ModelSpec, st: Strategy, seq_len: int, target_len: int, layout: Layout) -> float:
    """Setting.boundary_bytes: what one micro-batch sends across a pipeline stage boundary (0 without a pipeline)."""
    return boundary_bytes(model, st.micro_batch, seq_len, target_len, st.precision) if layout.pp > 1 else 0.0


# tuple.__new__(NamedTuple class, fields in order): plan's hot path builds Setting and StageTerms per strategy, and
# a NamedTuple's generated __new__ (a Python call) takes about twice as long as this; a missing field fails loudly
# (IndexError) at its first read
_NEW_TUPLE = tuple.__new__


class StageTerms(NamedTuple):
    """One stage's seconds per micro-batch (compute, tp, pp), per step (the rest) and bytes."""

    compute_s: float  # its blocks (the caller's rule) + torch.autocast's casts + ZeRO-3's gradient interleave + TE's
    # FP8 amax all-reduces (they block the compute stream between the blocks' kernels)
    tp_comm_s: float
    pp_comm_s: float
    dp_comm_s: float  # exposed
    dp_comm_total_s: float  # incl. what overlaps the backward
    optimizer_s: float
    offload_s: float
    framework_s: float
    memory: Memory

    @property
    def slot_s(self) -> float:
        """Seconds of one micro-batch through this stage (forward + backward + its communication)."""
        return self.compute_s + self.tp_comm_s + self.pp_comm_s


class StageFixed(NamedTuple):
    """What price_stage prices from inputs a stage's micro-batch variants share (stage_fixed): a planner's group of
    strategies that differ only in micro_batch prices it once."""

    comm_inputs: int  # _stage_comm's number for its inputs but the micro-batch quantities (_comm_number)
    optimizer: tuple[float, float] | None  # (optimizer, offload) s per step; None: offloaded, priced per micro-batch
    grad_copy_s: float  # ZeRO-3's gradient interleave per micro-batch (_zero3_interleave_s)
    # the data-parallel collectives and schedule choices on GPUs over dp > 1 (terms.dp_collectives), so that a
    # micro-batch prices only their overlap; None: _dp_comm prices them
    dp_collectives: BucketedDP | ShardedDP | None


def stage_fixed(cfg: Setting, dev: DeviceSpec, cluster: ClusterSpec, shape: _Shape, zero3_tensors: int,
                share: float, like: StageFixed | None = None) -> StageFixed:
    """price_stage's terms, for a stage holding `share` of the blocks, that read no micro-batch quantity of `cfg`
    (the micro-batch, gradient accumulation, compute times, activations): the collectives' memo number of their
    other inputs, the data-parallel collectives (terms.dp_collectives), ZeRO-3's gradient interleave and, with
    nothing offloaded, the optimizer step -- terms.optimizer_offload reads the accumulation only to price
    offload traffic, _optimizer_loop_s neither (`shape`: its parameters and tensors, the same at every
    micro-batch). `like`: stage_fixed of this stage under another recompute, whose optimizer step, interleave and
    bucketed collectives are this one's (none reads the recompute; ZeRO-3 / FSDP's do).
    tests/unit/test_plan_speed_group.py checks a group priced so against each strategy alone."""
    st = cfg.st
    if like is not None:
        collectives = like.dp_collectives
        if type(collectives) is ShardedDP:  # (it reads the recompute)
            collectives = _dp_collectives(cfg, cluster, shape)
        return StageFixed(_comm_number(cfg, dev, cluster, share, like.grad_copy_s), like.optimizer, like.grad_copy_s,
                          collectives)
    optimizer = None
    if st.offload_optimizer == "none" and st.offload_params == "none":
        optimizer = _optimizer_s(cfg, dev, cluster, shape.psi, zero3_tensors)
    grad_copy = _zero3_interleave_s(cfg, dev, shape)
    return StageFixed(_comm_number(cfg, dev, cluster, share, grad_copy), optimizer, grad_copy,
                      _dp_collectives(cfg, cluster, shape))


def _dp_collectives(cfg: Setting, cluster: ClusterSpec, shape: _Shape) -> BucketedDP | ShardedDP | None:
    """StageFixed.dp_collectives (terms.dp_collectives of the stage)."""
    lay = cfg.layout
    return dp_collectives(cfg.st, cfg.eng, shape, cluster, links(cluster), lay.dp, lay.tp)


def price_stage(cfg: Setting, dev: DeviceSpec, cluster: ClusterSpec, ct: ComputeTimes, share: float,
                blocks_s: float, shape: _Shape, zero3_tensors: int, sublayers: float | None,
                mem: Memory | None = None, fixed: StageFixed | None = None,
                window_share: float | None = None, params: float | None = None) -> StageTerms:
    """The terms of one stage on `dev` (links of `cluster`) holding `share` of the blocks' FLOPs, whose blocks take
    `blocks_s` per micro-batch, with `shape.psi` parameters and `shape.activations` bytes of activations.
    `zero3_tensors`: tensors its ZeRO-3 gathers fetch (CPU optimizer rates); `sublayers`: sublayers whose engine
    hooks a CPU profile prices (None: priced elsewhere, train's hybrid backend); `mem`: its memory (rank_memory),
    when the caller priced it already; `fixed`: stage_fixed of this stage (this share) at another micro-batch,
    when the caller has it; `window_share`: the stage's share of the blocks' seconds where it differs from `share`
    (an encoder-decoder's stages, block_seconds), which sets the compute its data-parallel traffic overlaps;
    `params`: the stage's own parameters where `shape.psi` is another stage's (estimate(): the even split's
    params_per_device, where an encoder-decoder's slowest stage holds its own), which its autocast casts read."""
    st, lay, cal = cfg.st, cfg.layout, cfg.cal
    if fixed is None:  # one use (estimate(), a mixed cluster's stage): stage_fixed's terms priced here, no StageFixed
        grad_copy, comm_inputs, optimizer, collectives = _zero3_interleave_s(cfg, dev, shape), None, None, None
    else:
        comm_inputs, optimizer, grad_copy, collectives = fixed  # StageFixed's order
    tp, pp = lay.tp, lay.pp
    bias_adds = share * megatron_bias_add_s(cfg.model, st.engine, st.precision, st.kernels, tp, st.micro_batch,
                                            cfg.seq_len, st.recompute, dev, cal.kernel_overhead_s, cfg.sp)
    norm_casts = share * autocast_layer_norm_s(cfg.model, st.norm_dtype, st.precision, st.kernels, tp,
                                               st.micro_batch, cfg.seq_len, st.recompute, dev, cal.kernel_overhead_s,
                                               cfg.sp)
    psi = shape.psi if params is None else params
    compute = blocks_s + _autocast_s(cfg, dev, share, psi) + bias_adds + norm_casts + grad_copy + \
        _fp8_amax_s(cfg, cluster)
    # interleaving sends each micro-batch across v times as many stage boundaries
    pp_mb = 2.0 * st.virtual_stages * stage_boundary_time(cfg.boundary_bytes, tp, cfg.sp,
                                                          scatters_stage_boundary(st, cfg.eng), cfg.cross_node,
                                                          cluster) if pp > 1 else 0.0
    # the stage's compute beside its blocks' passes (the last stage's LM head and loss, casts, DeepSpeed's folds):
    # compute its per-micro-batch gradient reductions overlap too (terms._bucketed_overlap)
    blocks = (ct.forward + ct.backward) * (share if window_share is None else window_share)
    rest = max(0.0, compute - grad_copy - blocks)
    tp_mb, dp_s, dp_total = _stage_comm(cfg, dev, cluster, ct, share, shape, grad_copy, comm_inputs,
                                        collectives, window_share, rest)
    if optimizer is None:
        opt_s, offload_s = _optimizer_s(cfg, dev, cluster, shape.psi, zero3_tensors)
    else:
        opt_s, offload_s = optimizer
    if mem is None:
        mem = rank_memory(cfg.model, st, shape.psi, lay.dp, tp, shape.activations, dev, cfg.options, lay.grad_accum)
    return _NEW_TUPLE(StageTerms, (compute, tp_mb, pp_mb, dp_s, dp_total, opt_s, offload_s,
                                   _framework_s(cfg, dev, sublayers), mem))


def _optimizer_s(cfg: Setting, dev: DeviceSpec, cluster: ClusterSpec, psi: float,
                 zero3_tensors: int) -> tuple[float, float]:
    """(optimizer, offload) seconds per step of a stage with `psi` parameters in `zero3_tensors` tensors:
    terms.optimizer_offload + an unfused loop's (_optimizer_loop_s)."""
    lay = cfg.layout
    opt_s, offload_s = optimizer_offload(cfg.st, cfg.eng, psi, lay.dp, lay.grad_accum, dev, cluster.gpus_per_node,
                                         zero3_tensors)
    opt_s += _optimizer_loop_s(cfg, dev, zero3_tensors, psi) + _bucket_copy_s(cfg, dev, zero3_tensors, psi)
    return opt_s, offload_s


def _bucket_copy_s(cfg: Setting, dev: DeviceSpec, tensors: int, psi: float) -> float:
    """The copies around the data-parallel gradient all-reduce that run after the backward (step.bucket_copy_s) over
    the stage's `psi` gradient elements in its `tensors` tensors, per step, in series before the optimizer step.
    DeepSpeed's allreduce_and_copy (flatten / average / copy back): ZeRO-0 (engine.allreduce_gradients ->
    buffered_allreduce_fallback: no overlap at stage 0) and ZeRO-1 on its all-reduce path (zero1_all_reduce) without
    overlap_comm or inside the pipeline engine's ReduceGrads (terms._deepspeed_pipeline_reduces_after); not the bf16
    pipeline's BF16_Optimizer, which reduces one flat fp32 buffer (terms._deepspeed_bf16_pipeline), nor ZeRO-2/3
    (contiguous buckets / reduce-scatter). PyTorch DDP (engine ddp, with or without ZeroRedundancyOptimizer) at dp > 1:
    its copy of every bucket back to the gradients (step.DDP_COPY_BACK_PASSES), none where the gradients are views
    into the buckets (grad_buckets "view": reducer.cpp finalize_bucket_dense only re-points them); a single process is
    not wrapped."""
    st = cfg.st
    if st.engine == "ddp":
        if cfg.layout.dp <= 1 or st.grad_buckets == "view":
            return 0.0
        return bucket_copy_s(psi, tensors, main_grad_bytes(st), dev, cfg.cal.kernel_overhead_s, DDP_COPY_BACK_PASSES)
    if st.engine != "deepspeed" or st.zero > 1 or _deepspeed_bf16_pipeline(st):
        return 0.0
    after_backward = not st.overlap_grad_comm or _deepspeed_pipeline_reduces_after(st)
    if st.zero == 1 and not (st.zero1_all_reduce and after_backward):
        return 0.0
    return bucket_copy_s(psi, tensors, main_grad_bytes(st), dev, cfg.cal.kernel_overhead_s)


# Strategy fields but the micro-batch (in _stage_comm's key on its own) and the optimizer's (offload, loop, state
# dtype: neither collective term reads them)
_COMM_FIELDS = operator.itemgetter(*(name for name in Strategy.__dataclass_fields__ if name not in (
    "micro_batch", "offload_optimizer", "offload_params", "optimizer_loop", "optimizer_dtype", "optimizer_kind")))
_COMM_NUMBERS = InputNumbers(itertools.count())
_COMM = IdMemo()


def _comm_number(cfg: Setting, dev: DeviceSpec, cluster: ClusterSpec, share: float, grad_copy: float) -> int:
    """The number of _stage_comm's inputs but the micro-batch quantities (micro-batch, accumulation, shape and its
    compute times): the strategy's _COMM_FIELDS, the cluster, device and engine entry (by identity, kept to guard
    reuse), the share, dp, tp, ZeRO-3 interleave and calibrated interference. Equal numbers, equal inputs (hashing
    the ~40 fields is most of a memo lookup's time; a planner's micro-batch variants look them up once,
    stage_fixed)."""
    return _COMM_NUMBERS.number(_comm_key(cfg, dev, cluster, share, grad_copy), cluster, dev, cfg.eng)


def _comm_key(cfg: Setting, dev: DeviceSpec, cluster: ClusterSpec, share: float, grad_copy: float) -> tuple:
    """_stage_comm's inputs but the micro-batch quantities, the objects by identity (_comm_number's key)."""
    lay = cfg.layout
    return (_COMM_FIELDS(cfg.st.__dict__), id(cluster), id(dev), id(cfg.eng), share, lay.dp, lay.tp, grad_copy,
            cfg.cal.overlap_interference)


def _stage_comm(cfg: Setting, dev: DeviceSpec, cluster: ClusterSpec, ct: ComputeTimes, share: float, shape: _Shape,
                grad_copy: float, inputs: int | None,
                collectives: BucketedDP | ShardedDP | None = None,
                window_share: float | None = None, rest: float = 0.0) -> tuple[float, float, float]:
    """(tensor-parallel seconds per micro-batch, exposed and total data-parallel seconds per step) of a stage:
    _tp_comm and _dp_comm, memoised on every input but the strategy's optimizer fields (offload, loop, state
    dtype), which neither reads (a planner prices a layout's offload variants with the same collectives; shape and
    compute times by identity, kept to guard reuse). `inputs`: _comm_number of the others (this share and
    grad_copy), or None where they are looked up once (price_stage without a StageFixed): _comm_key of them, its
    objects guarded here. `collectives`: StageFixed.dp_collectives, the data-parallel collectives priced (else
    None). `window_share`: the stage's share of the blocks' seconds, where it is not `share` (price_stage); `rest`:
    the stage's compute per micro-batch beside its blocks' passes and grad_copy (price_stage)."""
    st, lay, eng = cfg.st, cfg.layout, cfg.eng
    interference = cfg.cal.overlap_interference
    if inputs is None:
        key = (_comm_key(cfg, dev, cluster, share, grad_copy), st.micro_batch, lay.grad_accum, id(shape), id(ct),
               window_share, rest)
    else:
        key = (inputs, st.micro_batch, lay.grad_accum, id(shape), id(ct), window_share, rest)
    hit = _COMM.get(key)
    if hit is not None:
        return hit
    tp = lay.tp
    tp_mb = _stage_tp_comm(st, eng, ct, share, tp, cluster, interference) if tp > 1 else 0.0
    window = share if window_share is None else window_share  # the stage's blocks' seconds, which the traffic overlaps
    fwd, bwd = ct.forward * window, ct.backward * window
    # the data-parallel collectives (their own stream) also progress while a pass waits on its exposed TP ones, one
    # pass's worth in the forward, the rest in the backward (windows of compute alone let a faster GPU grow both
    # exposures and slow the step: invariants test)
    tp_fwd = tp_mb / (3.0 if st.recompute == "full" else 2.0)
    if collectives is not None:  # _dp_comm's numbers, its collectives priced at the group's first micro-batch
        dp_s, dp_total = dp_comm_s(collectives, lay.grad_accum, fwd + tp_fwd, bwd + (tp_mb - tp_fwd) + grad_copy,
                                   interference, rest)
    else:
        dp_s, dp_total = _dp_comm(st, eng, shape, cluster, links(cluster), lay.dp, tp, lay.grad_accum,
                                  fwd + tp_fwd, bwd + (tp_mb - tp_fwd) + grad_copy, interference, rest)
    return _COMM.put(key, (shape, ct, cluster, dev, eng), (tp_mb, dp_s, dp_total))


_TP = IdMemo()
_TP_GROUPS: dict[tuple, tuple] = {}  # (id(cluster), tp) -> _tp_group(cluster, tp)
_TP_LINKS: dict[tuple, int] = {}  # (tp_links, tp_ranks_per_node) -> its number
_TP_LINK_NUMBERS = itertools.count()


def _tp_group(cluster: ClusterSpec, tp: int) -> tuple:
    """(the cluster, tp_links, tp_ranks_per_node, the number of those two) of a tensor-parallel group of tp ranks on
    `cluster`, registered in _TP_GROUPS (the cluster kept to guard reuse): _stage_tp_comm looks them up once per
    cluster and degree, and keys its memo by their number (equal numbers, equal links; hashing the links' NCCL
    protocol table on every call was most of a lookup's time)."""
    lk, per_node = tp_links(cluster, tp), tp_ranks_per_node(tp, cluster)
    number = _TP_LINKS.get((lk, per_node))
    if number is None:
        number = _TP_LINKS[(lk, per_node)] = next(_TP_LINK_NUMBERS)
    if len(_TP_GROUPS) > 4096:
        _TP_GROUPS.clear()
    group = _TP_GROUPS[(id(cluster), tp)] = (cluster, lk, per_node, number)
    return group


def _stage_tp_comm(st: Strategy, eng, ct: ComputeTimes, share: float, tp: int, cluster: ClusterSpec,
                   interference: float) -> float:
    """terms._tp_comm of a stage, memoised on what it reads: the compute times and the engine entry by identity
    (kept to guard reuse), the share, tp, its links and members per node, the interference, and of the strategy the
    recompute, its early stop, the tensor-parallel overlap, sequence parallelism, the distributed saved inputs and the
    engine. A layout's ZeRO stages share it, which _stage_comm's memo keeps apart (its key holds every other strategy
    field): 3150 -> 892 priced in a mt5-xxl 128 x 8 plan, 2786 -> 801 in a llama-7b one."""
    group = _TP_GROUPS.get((id(cluster), tp))
    if group is None or group[0] is not cluster:
        group = _tp_group(cluster, tp)
    _, lk, per_node, links_number = group
    key = (id(ct), id(eng), share, tp, links_number, interference, st.recompute, st.recompute_early_stop,
           st.tp_comm_overlap, st.sequence_parallel, st.distribute_saved_activations, st.engine)
    hit = _TP.get(key)
    if hit is not None:
        return hit
    return _TP.put(key, (ct, eng), _tp_comm(st, ct, share, tp, lk, interference, per_node))


def sharded_dp_in_slot(st: Strategy, dev: DeviceSpec) -> bool:
    """Whether a pipeline stage's exposed data-parallel time belongs in its micro-batch slot: FSDP's (engine fsdp)
    all-gathers and reduce-scatters run inside every micro-batch's forward and backward (terms._sharded_dp_comm
    prices all of its exposure per micro-batch), also under pipeline parallelism -- train's pipeline Stage keeps
    the reduce-scatter and reshard of every micro-batch (engine/parallel/pipeline.py), and a gather left exposed
    at a small micro-batch delays the stage's send as much as its compute does. So in a pipeline it lengthens each
    stage's slot, and the fill and drain pass every stage's slot once (estimate._estimate, stages.estimate_stages):
    priced after the drain, as the other engines' step-end reductions, it was counted m times instead of m + pp - 1.
    GPUs only (CPU ranks under train's hybrid backend price their own pipeline, costmodel/cpu_parallel.py)."""
    return st.engine == "fsdp" and dev.kind != "cpu"


def _fp8_amax_s(cfg: Setting, cluster: ClusterSpec) -> float:
    """Transformer Engine's delayed-scaling amax all-reduces of one micro-batch on a rank of this stage (fp8.py
    amax_reductions / amax_reduction_s), each followed by its region's amax-history update kernel (a kernel launch,
    cal.kernel_overhead_s; its bytes are in the blocks' element-wise time, fp8.per_micro_batch): blocking on the
    compute stream, among the stage's tp x cp x dp ranks, which sit next to each other in the rank order (tp
    innermost, then cp, then dp), a node's worth to a node."""
    st = cfg.st
    if st.precision != fp8.FP8:
        return 0.0
    chunks = st.virtual_stages if cfg.layout.pp > 1 and st.pp_schedule == "interleaved" else 1
    count = fp8.amax_reductions(fp8.recipe(st.engine), chunks)
    if not count:
        return 0.0
    ranks = cfg.layout.tp * cfg.layout.cp * cfg.layout.dp  # get_amax_reduction_group(with_context_parallel=True)
    reduce_s = fp8.amax_reduction_s(ranks, min(ranks, cluster.gpus_per_node), links(cluster))
    return count * (reduce_s + cfg.cal.kernel_overhead_s)


def _autocast_s(cfg: Setting, dev: DeviceSpec, share: float, psi: float) -> float:
    """torch.autocast over fp32 parameters (engine ddp in 16 bits), per micro-batch: the weight casts and gradient
    copies of the stage's `psi` parameters, + HF T5's FFN output (wo) cast round trip and projection casts, or HF
    GPT-2's fp32 gelu_new chain and eager scores, on its share of the blocks."""
    st, tp = cfg.st, cfg.layout.tp
    if st.engine != "ddp":  # torch.autocast runs under engine ddp only: each of the three is 0 (their first test)
        return 0.0
    return autocast_param_s(cfg.model, st.engine, st.precision, tp, psi, dev) + share * (autocast_ffn_cast_s(
        cfg.model, st.engine, st.precision, st.kernels, tp, st.micro_batch, cfg.seq_len, cfg.target_len, dev,
        cfg.cal.kernel_overhead_s) + autocast_gpt_s(cfg.model, st.engine, st.precision, st.kernels,
                                                    st.attention == "flash", tp, st.micro_batch, cfg.seq_len, dev,
                                                    cfg.cal.kernel_overhead_s) + autocast_t5_cast_s(
        cfg.model, st.engine, st.precision, st.kernels, tp, st.micro_batch, cfg.seq_len, cfg.target_len, dev,
        cfg.cal.kernel_overhead_s))


def _zero3_interleave_s(cfg: Setting, dev: DeviceSpec, shape: _Shape) -> float:
    """DeepSpeed ZeRO-3 on GPUs, per micro-batch: reduce_scatter_coalesced's interleaving torch.cat of every
    multi-tensor reduce bucket (zero3.interleaved_grad_elems), a read and a write of each 16-bit (fp32) gradient
    element at HBM speed. It runs on reduce_and_partition_stream while the backward goes on, sharing its HBM, so it
    lengthens the backward's device time (what the fetch hooks' host time and the collectives hide behind). The
    copies ZeRO-1/2 make as well (ipg buffer, pre-divide, shard) are not priced for either stage. CPU ranks price
    their copies in cpu_collectives."""
    st = cfg.st
    if st.engine != "deepspeed" or st.zero != 3 or dev.kind == "cpu" or shape.model is None:
        return 0.0
    half = 4 if st.precision == "fp32" else 2
    elems = interleaved_grad_elems(shape.model, cfg.layout.tp, cfg.layout.pp, shape.stage_layers, shape.psi,
                                   cfg.eng.reduce_bucket_elems)
    return 2.0 * half * elems / dev.hbm_bytes_per_s


def _optimizer_loop_s(cfg: Setting, dev: DeviceSpec, tensors: int, psi: float) -> float:
    """An unfused optimizer loop's seconds per step (step.optimizer_loop_s) over the stage's `psi` parameters and
    its `tensors` (price_stage's zero3_tensors: zero3.zero3_gathers counts the stage's blocks' tensors, the
    embeddings, final norms and position biases): each rank steps its shard of every tensor, DDP +
    ZeroRedundancyOptimizer the 1/dp of the tensors it owns, DeepSpeed ZeRO-1/2/3 one flat partition (its
    deepspeed-serial overflow / norm checks: the gradient tensors of the rank's partition); none with the
    optimizer offloaded (CPU Adam)."""
    st, lay = cfg.st, cfg.layout
    if st.optimizer_loop == "engine" or st.offload_optimizer != "none":
        return 0.0
    sharded = st.engine == "fsdp" or st.zero >= 1 or st.optimizer_loop == "deepspeed-bf16"  # BF16_Optimizer: 1/dp
    if st.engine == "deepspeed" and st.zero in (1, 2) and st.optimizer_loop == "deepspeed-serial":
        tensors = min(tensors, math.ceil(tensors / lay.dp) + 1)  # its 1/dp of the tensors + the one cut at its start
    elif st.engine == "deepspeed" and st.zero >= 1 and st.optimizer_loop != "deepspeed-stage1-whole":
        tensors = 1  # (deepspeed-stage1-whole checks every tensor of the stage)
    elif st.engine == "ddp" and st.zero == 1:
        tensors = math.ceil(tensors / lay.dp)
    local = psi / lay.dp if sharded else psi
    return optimizer_loop_s(st.optimizer_loop, local, tensors, st.precision, dev, cfg.cal.kernel_overhead_s, psi,
                            st.optimizer_kind, state_elem(st.engine, st.optimizer_dtype))


def _framework_s(cfg: Setting, dev: DeviceSpec, sublayers: float | None) -> float:
    """Measured framework seconds per step (CPU profiles; 0 elsewhere): per optimizer step and per micro-batch, +
    the engine's own hooks and bookkeeping on the stage's `sublayers` (on several ranks + the "@multi" term, less
    what the measured collective rates now cost: cpu_engine.py)."""
    st, lay = cfg.st, cfg.layout
    framework = dev.step_overhead_s + lay.grad_accum * dev.microstep_overhead_s
    if sublayers is not None and dev.engine_overhead_s:
        framework += engine_hooks_s(dev, st.engine, st.zero, lay.world_size, lay.grad_accum, sublayers)
    return framework
