"""The step-time terms estimate.py and stages.py share: the cached per-shape quantities (_Shape), data-parallel
and tensor-parallel communication with their overlap (exposure) rules, the tied-embedding stage sync. Pure
arithmetic; each function cites the mechanism it prices."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import NamedTuple

from scalestudy.costmodel import cpu_memory
from scalestudy.costmodel.alignment import pads_vocab
from scalestudy.costmodel.attention_bias import _stage_blocks, priced_bias_memory, priced_stage_bias_memory
from scalestudy.costmodel.autocast_memory import autocast_rank_bytes, autocast_weights, t5_cast_bytes
from scalestudy.costmodel.comm import (collective, exposed_latency, gather_parts, p2p_time,
                                      per_owner_broadcast_parts)
from scalestudy.costmodel.cpu_collectives import broadcast_latency, gloo_dp_comm, rate as cpu_collective_rate
from scalestudy.costmodel.engines import copies_tied_modules, engine_comm, grad_bucket_elems, tp_overlap
from scalestudy.costmodel import fp8
from scalestudy.costmodel.block_seconds import encoder_decoder_time_shares
from scalestudy.costmodel.fp8 import recipe as fp8_recipe
from scalestudy.costmodel.flops import step_flops_per_sequence, target_length
from scalestudy.costmodel.input_numbers import IdMemo, InputNumbers
from scalestudy.costmodel.kernel_counts import sublayers
from scalestudy.costmodel.memory import (activation_bytes, eager_composed_gelu, eager_fp32_softmax, eager_rms_norms,
                                         fused_swiglu, gqa_native, loss_kernel, split_saved_input)
from scalestudy.costmodel.op_checkpoint import early_stop
from scalestudy.costmodel.params import param_breakdown, param_count, params_per_device
from scalestudy.costmodel.optimizers import flat_update_bytes, state_elem
from scalestudy.costmodel.step import OPTIMIZER_BYTES, ComputeTimes, compute_times
from scalestudy.costmodel.zero3 import (StackOrder, Zero3Gathers, hook_host_s, launch_order_s, pass_launch_s,
                                        per_param_sync_comm_s, reduce_scatter_buckets, reduce_scatter_rank_items,
                                        stack_order, zero3_gathers, zero3_reuse)
from scalestudy.errors import OptionError, ScalestudyError
from scalestudy.specs.hardware import ClusterSpec
from scalestudy.specs.model import ModelSpec
from scalestudy.specs.parallel_layout import check_sequence_parallel, split_chunk_counts
from scalestudy.specs.strategy import (Layout, Strategy, Workload, logit_shards, resolve_layout,
                                      vocab_shards)


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
    root_elems: int = 0  # parameters outside the blocks on a rank (embeddings, untied head, final norms; pp 1)
    launches: tuple[float, float] = (0.0, 0.0)  # host seconds of the stage's kernel launches per pass (GPU; zero3.py)
    model: object = None  # the ModelSpec (pp 1: DeepSpeed ZeRO-3's reuse distance walks its module trace, zero3.py)
    stacks: StackOrder | None = None  # an encoder-decoder's two stacks in pass order (GPU, pp 1; zero3.stack_order)
    matmul_elems: float = 0.0  # the blocks' linear weights on a rank of the busiest stage (fp8.block_matmul_elems)
    # each pipeline stage's share of the blocks' seconds where the blocks differ in kind (an encoder-decoder split
    # over stages: block_seconds.encoder_decoder_time_shares), else None (the FLOP shares are the time shares)
    time_shares: tuple[float, ...] | None = None


_SHAPES: dict[tuple, tuple] = {}


def attention_kernel(st: Strategy, device=None) -> str:
    """The fused attention kernel under flash attention: the strategy's (a published run's software) or its
    engine's (engines.yaml attention_kernel) -- on a `device` that cannot run the engine's kernel, the one its stack
    runs instead (DeviceSpec.attention_kernel_fallback: on a V100 SDPA's memory-efficient kernel); a strategy that
    names a kernel the device cannot run is refused in one line."""
    if st.attention_kernel != "engine":
        kernel = st.attention_kernel
        if device is not None and st.attention == "flash" and kernel in device.attention_kernel_fallback:
            cap = f"compute capability {device.compute_capability}; " if device.compute_capability else ""
            raise OptionError(f"attention kernel {kernel} does not run on {device.name} ({cap}its YAML: "
                              f"attention_kernel_fallback); use --attention-kernel "
                              f"{device.attention_kernel_fallback[kernel]} or engine, or --attention eager",
                              "attention_kernel")
        return kernel
    kernel = engine_comm(st.engine).attention_kernel
    return device.attention_kernel_fallback.get(kernel, kernel) if device is not None else kernel


_SHAPES_BY_FIELDS: dict[tuple, tuple] = {}


def _shape(model, dev, st: Strategy, tp, pp, s, t, flash, sp, in_flight, split, cal,
           group: int | None = None) -> _Shape:
    """_derived_shape, memoised first on the strategy fields its key is derived from -- engine, attention,
    attention_kernel, recompute_early_stop, cross_entropy, kernels, precision, micro_batch, recompute, lm_head (what
    attention_kernel, early_stop, loss_kernel, gqa_native, fused_swiglu, pads_vocab, eager_fp32_softmax, vocab_shards
    read) -- so a hit costs none of those calls; a miss shares _derived_shape's entries across engines. `group`:
    shape_group of these inputs (a planner's micro-batch variants share it), which then keys the memo with the
    micro-batch and `in_flight` alone."""
    if group is None:
        key = _shape_fields(model, dev, st, tp, pp, s, t, flash, sp, split, cal) + (st.micro_batch, in_flight)
    else:
        key = (group, st.micro_batch, in_flight)
    hit = _SHAPES_BY_FIELDS.get(key)
    if hit is not None and hit[0] is model and hit[1] is dev and hit[3] is cal:
        return hit[2]
    if len(_SHAPES_BY_FIELDS) > 200_000:
        _SHAPES_BY_FIELDS.clear()
    shape = _derived_shape(model, dev, st, tp, pp, s, t, flash, sp, in_flight, split, cal)
    _SHAPES_BY_FIELDS[key] = (model, dev, shape, cal)
    return shape


def _shape_fields(model, dev, st: Strategy, tp, pp, s, t, flash, sp, split, cal) -> tuple:
    """_shape's inputs but the micro-batch and `in_flight`, the objects by identity (kept in its memo to guard
    reuse)."""
    return (id(model), id(dev), id(cal), st.precision, tp, pp, s, t, st.recompute, flash, sp, split, st.kernels,
            st.engine, st.attention, st.attention_kernel, st.recompute_early_stop, st.cross_entropy, st.lm_head,
            st.cublas, st.tf32, split_saved_input(st, tp), st.virtual_stages if pp > 1 else 1)


# negative, so (number, micro-batch, in_flight) never equals a full key of _shape's (its first item an id, >= 0)
_SHAPE_GROUPS = InputNumbers(itertools.count(-1, -1))


def shape_group(model, dev, st: Strategy, tp, pp, s, t, flash, sp, split, cal) -> int:
    """The number of _shape's inputs but the micro-batch and the in-flight micro-batches -- what a planner's group of
    micro-batch variants shares (estimate.MicroBatchGroup) -- for _shape's `group`: its memo key is then three items,
    not twenty-one, per strategy. Equal numbers, equal inputs (the objects guarded by identity)."""
    return _SHAPE_GROUPS.number(_shape_fields(model, dev, st, tp, pp, s, t, flash, sp, split, cal), model, dev, cal)


def _stage_masks(model, kernel, flash, dev, st: Strategy, mb, s, t, tp, recompute, in_flight, split
                 ) -> tuple[float, ...]:
    """Each pipeline stage's T5 position-bias mask bytes (attention_bias.priced_bias_memory of its encoder and
    decoder blocks, the encoder stack first, as stages.stage_activations), + HF T5's casts under autocast for its
    in-flight micro-batches (autocast_memory.t5_cast_bytes); () at pp 1 (added whole)."""
    if len(split) < 2 or not model.is_encoder_decoder or sum(split) != model.total_layers:
        return ()
    masks = priced_stage_bias_memory(model, kernel, flash, dev, mb, s, t, tp, recompute, split, in_flight)
    return tuple(m + f * t5_cast_bytes(model, st.engine, st.precision, st.kernels, mb, s, t, recompute, blocks)
                 for m, f, blocks in zip(masks, in_flight, _stage_blocks(model.num_layers, split)))


def _derived_shape(model, dev, st: Strategy, tp, pp, s, t, flash, sp, in_flight, split, cal) -> _Shape:
    """The _Shape of these inputs, memoised in two levels: the inputs the compute, FLOPs and ZeRO-3 gathers read key
    what is built once (_in_flight_free); under it the activations (_activations) are keyed by `in_flight` (the
    micro-batches each pipeline rank holds: the schedule's and the accumulation's) and autocast's fp32 weights, the
    busiest rank's parameters (_rank_params) by the chunks a rank holds and the engine's tied copies -- so a
    pipeline's schedules, accumulations and engines at one micro-batch share the first level."""
    # keyed by object identity (ModelSpec hashing is the hot spot otherwise); the stored references guard reuse
    prec, mb, recompute = st.precision, st.micro_batch, st.recompute
    kernel = attention_kernel(st, dev)
    stop = early_stop(st)  # depends on the engine too, which the key does not hold otherwise
    vocab, embed = vocab_shards(st, tp), logit_shards(st, tp)
    key = (id(model), id(dev), prec, tp, pp, mb, s, t, recompute, flash, sp, split, id(cal), st.kernels, kernel,
           stop, loss_kernel(st), gqa_native(st.engine), fused_swiglu(st.engine), pads_vocab(st.engine),
           eager_fp32_softmax(model, st), vocab, embed, st.cublas, st.tf32, split_saved_input(st, tp),
           fp8_recipe(st.engine) if prec == fp8.FP8 else "")  # read by compute_times in fp8 only
    hit = _SHAPES.get(key)
    if hit is None or hit[0] is not model or hit[1] is not dev or hit[3] is not cal:
        if len(_SHAPES) > 200_000:
            _SHAPES.clear()
        free = _in_flight_free(model, dev, st, tp, pp, s, t, flash, sp, split, cal, kernel, stop)
        hit = _SHAPES[key] = (model, dev, {}, cal, free, {})
    # the activations read in_flight and whether the engine keeps fp32 weights under autocast (its weight copies at
    # pp 1, _whole_extras; a T5's casts, _stage_masks); psi the chunks a rank holds and whether the engine copies tied
    # modules per chunk (pp 1: one chunk)
    flight = (in_flight, (pp == 1 or model.is_encoder_decoder) and autocast_weights(st.engine, prec, st.kernels))
    chunked = (st.virtual_stages, copies_tied_modules(st.engine)) if pp > 1 else None
    shapes, activations = hit[2], hit[5]
    shape = shapes.get((flight, chunked))
    if shape is None:
        acts = activations.get(flight)
        if acts is None:
            acts = activations[flight] = _activations(model, dev, st, tp, pp, s, t, flash, sp, in_flight, split, kernel)
        params_total, *rest = hit[4]
        psi = _rank_params(model, tp, pp, vocab, embed, split, chunked)
        shape = shapes[(flight, chunked)] = _Shape(psi, params_total, acts, *rest)
    return shape


_RANK_PARAMS = IdMemo()


def _rank_params(model, tp, pp, vocab, embed, split, chunked) -> int:
    """_Shape.psi: the busiest rank's parameters -- its blocks at the even split and the vocabulary tensors of the
    chunks it holds (params.params_per_device: an encoder-decoder's embedding copies and a tied head's copy follow
    the chunks of the stage split, specs.parallel_layout.split_chunk_counts). `chunked`: (virtual stages, whether the
    engine copies tied modules per chunk: engines.copies_tied_modules), None at pp 1; `vocab` / `embed`: the
    strategy's vocab_shards / logit_shards. Memoised by the model's identity (IdMemo keeps the model alive)."""
    key = (id(model), tp, pp, vocab, embed, split, chunked)
    psi = _RANK_PARAMS.get(key)
    if psi is None:
        chunks, tied = (tuple(split_chunk_counts(split, chunked[0])), chunked[1]) if chunked else ((), False)
        psi = _RANK_PARAMS.put(key, (model,), params_per_device(model, tp, pp, vocab, embed, chunks, tied))
    return psi


def _in_flight_free(model, dev, st: Strategy, tp, pp, s, t, flash, sp, split, cal, kernel, stop) -> tuple:
    """_Shape's fields but psi and the activations, in its order: what no pipeline rank's in-flight micro-batches,
    chunks or autocast weights enter."""
    prec, mb, recompute = st.precision, st.micro_batch, st.recompute

    def times(m: ModelSpec) -> ComputeTimes:
        return compute_times(m, dev, prec, tp, mb, s, t, recompute, flash, sp, cal, st.kernels, kernel, stop,
                             loss_kernel(st), pads_vocab(st.engine), vocab_shards(st, tp), st.cublas, st.tf32,
                             logit_shards(st, tp), fp8_recipe(st.engine))

    def passes(m: ModelSpec) -> float:  # forward + backward seconds of m's blocks, one micro-batch
        c = ct if m is model else times(m)
        return c.forward + c.backward

    ct = times(model)
    return (param_count(model), ct,
            step_flops_per_sequence(model, s, t, "none"), step_flops_per_sequence(model, s, t, recompute, stop),
            max(split), param_breakdown(model).embedding // tp,
            zero3_gathers(model, tp, pp, max(split), params_per_device(model, tp, pp)),
            _root_elems(model, tp) if pp == 1 else 0,
            (0.0, 0.0) if dev.kind == "cpu" else pass_launch_s(model, st.kernels, flash, cal.kernel_overhead_s,
                                                                max(split), recompute),
            model if pp == 1 else None,
            stack_order(model, st.kernels, flash, cal.kernel_overhead_s, recompute, s, t)
            if pp == 1 and dev.kind != "cpu" else None,
            fp8.block_matmul_elems(model, max(split), tp),
            encoder_decoder_time_shares(model, split, passes, ct))


def _activations(model, dev, st: Strategy, tp, pp, s, t, flash, sp, in_flight, split, kernel) -> float:
    """_Shape.activations: the busiest rank's activation bytes with its `in_flight` micro-batches, + a T5's
    position-bias masks (per stage under a pipeline, _stage_masks; whole at pp 1)."""
    mb, recompute = st.micro_batch, st.recompute
    return activation_bytes(model, mb, s, t, st.precision, tp, pp, in_flight, recompute, flash, sp, split,
                            loss_kernel(st), gqa_native(st.engine), fused_swiglu(st.engine),
                            eager_composed_gelu(model, st.kernels), eager_fp32_softmax(model, st),
                            eager_rms_norms(model, st.kernels),
                            _stage_masks(model, kernel, flash, dev, st, mb, s, t, tp, recompute, in_flight, split),
                            logit_shards(st, tp), split_saved_input(st, tp)) \
        + (_whole_extras(model, kernel, flash, dev, st, tp, s, t) if pp == 1 else 0.0)


def _whole_extras(model, kernel, flash, dev, st: Strategy, tp, s, t) -> float:
    """What a rank without pipeline parallelism holds beside memory.activation_bytes: a T5's position-bias masks,
    autocast's weight copies and HF T5's own casts under autocast (costmodel/autocast_memory.py)."""
    mb, recompute = st.micro_batch, st.recompute
    params = params_per_device(model, tp, 1, vocab_shards(st, tp), logit_shards(st, tp))
    return (priced_bias_memory(model, kernel, flash, dev, mb, s, t, tp, recompute)
            + autocast_rank_bytes(model, st.engine, st.precision, st.kernels, mb, s, t, tp, recompute, params))


def _root_elems(model: ModelSpec, tp: int) -> int:
    """Parameters of a tensor-parallel rank outside the transformer blocks: the input embedding (and learned
    positions), an untied output head and the final norms -- what FSDP's root unit holds when every block is
    wrapped on its own."""
    pc = param_breakdown(model)
    return (pc.embedding + pc.lm_head) // tp + pc.other


def _sublayers(model: ModelSpec) -> int:
    """Attention, cross-attention and FFN sublayers of the whole model."""
    if model.is_encoder_decoder:
        return sublayers(model, model.num_layers, model.num_decoder_layers)
    return sublayers(model, 0, model.num_layers)


def _exposed(compute: float, comm: float, interference: float, s: float) -> float:
    """Communication left on the critical path when `comm` overlaps `compute` (ZeRO-3 / FSDP, per pass), both
    slowing each other while they run together: the compute runs `s` slower beside the collectives (the device
    YAML's compute_slowdown_under_comm, measured by Lee et al. 2025; the pass lasts compute + comm x s/(1+s) while
    that is longer than comm), the collectives `interference` slower beside the compute (a comm-bound pass lasts
    comm + interference x the overlapped time).
    MosaicML's FSDP rows (llm-foundry tables, A100 and H100 alike) lose ~0.35-0.7 s per second of modelled FSDP
    traffic as the micro-batch shrinks (13b seq 2048 micro-batch 2: +21% vs +3.5% at micro-batch 40); this
    prices the measured share of it."""
    return max(comm * s / (1.0 + s), comm - compute + interference * min(compute, comm))


def main_grad_bytes(st: Strategy) -> int:
    """Bytes per gradient element as the engine reduces it (Strategy.grad_reduce: "fp32" / "compute" as the run's
    software set it, "engine" as below): DDP under autocast holds fp32 gradients; FSDP reduce-scatters in fp32
    (scalestudy's FSDP2 MixedPrecisionPolicy reduce_dtype fp32, engine/settings.py; torchtitan, OLMo-core and
    Composer's amp 'DEFAULT' mixed precision the same -- FSDP casts each block's bf16 gradient to fp32 before the
    reduce-scatter); Megatron's main-gradient buffer is fp32 for bf16 (Megatron-LM forces
    --accumulate-allreduce-grads-in-fp32 with bf16) and fp32 runs, but 16-bit for fp16 (that flag is off by
    default: Megatron-LM arguments.py since 2021, Megatron-Core distrib_optimizer.md's fp16 rows); DeepSpeed
    reduces in the compute dtype -- its bf16 pipeline too: the BF16_Optimizer's fp32 buffer is cast to bf16 for the
    all-reduce and back (engine.allreduce_bucket with communication_data_type bf16 for bf16 at ZeRO stage 0: BLOOM's
    olruwase/bf16-updates 77b649d1..5ea1c60f and HEAD; fp32 only between 261d6370 and d56268f3, 2023-03/04)."""
    if st.grad_reduce != "engine" and st.precision != "fp32":
        return 4 if st.grad_reduce == "fp32" else 2
    if st.precision == "fp32" or st.engine in ("ddp", "fsdp"):
        return 4
    if st.engine == "megatron":
        return 2 if st.precision == "fp16" else 4
    return 2


def _deepspeed_bf16_pipeline(st: Strategy) -> bool:
    """DeepSpeed's pipeline engine in bf16 runs the BF16_Optimizer (DeepSpeed 56c52238, 2022-04, from the BigScience
    fork BLOOM trained with; ZeRO stage 0 in the config, its own stage-1 partitioning of the optimizer -- pipeline +
    bf16 + zero 1 raises NotImplementedError): gradients accumulate in one fp32 buffer of the whole stage, not sharded,
    all-reduced over the data-parallel group after the pipeline drains (pipe/engine.py _bf16_reduce_grads ->
    buffered_allreduce_fallback), then each rank steps its partition and all-gathers the bf16 parameters
    (all_gather_dp_groups)."""
    return st.engine == "deepspeed" and st.pp > 1 and st.precision == "bf16" and st.zero <= 1


def _deepspeed_pipeline_accumulates(st: Strategy) -> bool:
    """DeepSpeed's pipeline engine adds each micro-batch's 16-bit weight gradients into an accumulator after its
    backward, a memory-bound pass per parameter (hp_grad_accumulation_s): in bf16 BF16_Optimizer's fp32 fold; in
    fp16 / fp32 (ZeRO 0 or 1) autograd's AccumulateGrad, since .grad is neither cleared per micro-batch nor taken by
    a gradient hook (pipe/engine.py _exec_backward_pass runs torch.autograd.backward; ZeRO stage 1/2's optimizer
    creates its reduce hooks only with partition_gradients or overlap_comm: zero/stage_1_and_2.py at v0.6.1)."""
    return st.engine == "deepspeed" and st.pp > 1 and st.zero <= 1


def _deepspeed_pipeline_reduces_after(st: Strategy) -> bool:
    """DeepSpeed's PipelineEngine reduces the data-parallel gradients only in its ReduceGrads instruction, after the
    step's last backward (TrainSchedule: ReduceTiedGrads, ReduceGrads, OptimizerStep): its
    is_gradient_accumulation_boundary() returns _force_grad_boundary, False during every backward, so ZeRO-1's hooks
    never fire there and _exec_reduce_grads -> allreduce_gradients -> reduce_gradients(pipeline_parallel=True)
    buckets and reduces everything once the pipeline drains (deepspeed/runtime/pipe/engine.py at v0.5.0 and
    38327e07 of 2025-02 alike; ZeRO-2/3 are refused under pipelines). Whatever overlap_grad_comm says: ZeRO's
    overlap_comm only moves the reduction to another stream, still inside that instruction."""
    return st.engine == "deepspeed" and st.pp > 1 and st.zero <= 1


# BF16_Optimizer.update_hp_grads, per parameter and micro-batch: lp.grad.to(fp32) reads 2 B and writes 4 B, then
# hp_grad.add_(...) reads 4 + 4 and writes 4 (DeepSpeed bf16_optimizer.py as of 9b70ce5, 2022-06)
HP_GRAD_BYTES_PER_PARAM = 18
# autograd's AccumulateGrad into an existing .grad, per parameter and micro-batch: variable.grad += new_grad in place,
# reads both and writes one, 3 elements of the gradient's dtype (torch/csrc/autograd/functions/accumulate_grad.h)
ACCUMULATE_GRAD_ELEMENTS = 3


def hp_grad_accumulation_s(model: ModelSpec, st: Strategy, dev, tp: int, blocks: int, head: bool) -> float:
    """Seconds per micro-batch a DeepSpeed pipeline stage of `blocks` blocks (+ the tied/untied LM head's weight
    when `head`) spends accumulating its weight gradients (_deepspeed_pipeline_accumulates), memory-bound, whatever
    the micro-batch size. bf16: pipe/engine.py _exec_backward_pass clears the bf16 .grad before every micro-batch's
    backward and calls optimizer.update_hp_grads() after it (the last stage the same via BF16_Optimizer.backward), a
    cast and an add per parameter (HP_GRAD_BYTES_PER_PARAM); the head's weight pays the difference to the fp32
    accumulation flops.vocab_grad_bytes already counts (10 B per element). fp16 / fp32: AccumulateGrad's in-place
    add (ACCUMULATE_GRAD_ELEMENTS of the dtype per parameter) on the blocks' weights -- from the second micro-batch
    of a step on, priced on every slot (1/m high); the head's is in flops.vocab_grad_bytes. 0 for other engines."""
    if not _deepspeed_pipeline_accumulates(st):
        return 0.0
    p = param_breakdown(model)
    rank_layers = (p.encoder_layer_matmul // tp + p.encoder_layer - p.encoder_layer_matmul) * p.encoder_layers + \
        (p.decoder_layer_matmul // tp + p.decoder_layer - p.decoder_layer_matmul) * p.decoder_layers
    params = rank_layers / model.total_layers * blocks
    if st.precision != "bf16":
        return ACCUMULATE_GRAD_ELEMENTS * (4 if st.precision == "fp32" else 2) * params / dev.hbm_bytes_per_s
    if head:
        params += (p.lm_head or p.embedding) / tp * (HP_GRAD_BYTES_PER_PARAM - 10) / HP_GRAD_BYTES_PER_PARAM
    return HP_GRAD_BYTES_PER_PARAM * params / dev.hbm_bytes_per_s


def _tied_embedding_sync(model: ModelSpec, st: Strategy, tp: int, cross_node: bool, cluster: ClusterSpec) -> float:
    """Seconds per step to keep a tied embedding equal on the first and the last pipeline stage: their copies'
    gradients are all-reduced between the two stages after the backward, before the optimizer step (Megatron-LM
    `_allreduce_word_embedding_grads`, fp32 main gradients; DeepSpeed pipeline tied-module all-reduce of the
    gradients). A two-rank all-reduce moves the whole vocab/tp x d gradient once each way; every tensor x data
    parallel rank pair does its own at once, each over its own link share. DeepSpeed's bf16 pipeline all-reduces
    the tied weight's fp32 gradient (weight._hp_grad) as it is, not cast like the data-parallel buffer."""
    grad_bytes = 4 if _deepspeed_bf16_pipeline(st) and st.grad_reduce == "engine" else main_grad_bytes(st)
    nbytes = model.vocab_size // tp * model.d_model * grad_bytes
    return p2p_time(nbytes, cross_node, cluster)


def _dp_comm(st: Strategy, eng, shape: _Shape, cluster: ClusterSpec, lk: tuple, dp: int, tp: int, ga: int,
             fwd: float, bwd: float, interference: float, rest: float = 0.0) -> tuple[float, float]:
    """(exposed, total) seconds of data-parallel / ZeRO communication per optimizer step: the bytes exposed as
    _dp_comm_overlapped overlaps them, plus every collective's ring latency (comm.ring_latency / tree_latency: the
    (n-1) dependent hops at NCCL's per-hop constants) in full -- comm.exposed_latency says why. `rest`: the stage's
    compute per micro-batch beside its blocks' passes `fwd` + `bwd` (_bucketed_overlap)."""
    collectives = dp_collectives(st, eng, shape, cluster, lk, dp, tp)
    if collectives is not None:
        return dp_comm_s(collectives, ga, fwd, bwd, interference, rest)
    (exposed, total), _ = _dp_comm_overlapped(st, eng, shape, cluster, lk, dp, tp, ga, fwd, bwd, interference,
                                              rest)
    return exposed, total  # dp 1, or CPU ranks (gloo): no ring latency beside the bytes


def _dp_comm_overlapped(st: Strategy, eng, shape: _Shape, cluster: ClusterSpec, lk: tuple, dp: int, tp: int,
                        ga: int, fwd: float, bwd: float, interference: float,
                        rest: float = 0.0) -> tuple[tuple, tuple]:
    """((exposed, total), (bytes_exposed, bytes_total)) seconds of data-parallel / ZeRO communication per optimizer
    step, every collective overlapped by the engine's schedule: with its latency, and its bytes alone (the
    collectives are priced once, comm.gather_parts; the schedule runs on both).

    ZeRO-3 / FSDP, per micro-batch: the blocks' weights are all-gathered layer by layer for the forward, again for
    the backward (FSDP zero=2 keeps them), again for a full recompute when the engine re-gathers; gradients are
    reduce-scattered layer by layer. With prefetch a layer's transfer hides behind the previous layer's compute,
    so per pass the excess over compute is exposed, plus the first layer's transfer, plus the interference share.
    DeepSpeed's per-module fetch hooks run on the host thread, so a pass lasts at least their host time
    (zero3.hook_host_s; a full recompute runs the forward's again in the backward).
    ZeRO-0/1/2 and DDP: the gradient reduction overlaps the backward (every micro-batch's for ZeRO-2, the last
    one's otherwise) when overlap_grad_comm -- never under DeepSpeed's pipeline engine, which reduces after the
    pipeline drains (_deepspeed_pipeline_reduces_after); the post-step weight all-gather of ZeRO-1/2 is exposed.
    dp 1: nothing to communicate, but DeepSpeed ZeRO-3's hooks still run (_zero3_hooks_alone).
    """
    if dp <= 1:
        if _zero3_hooks_alone(st, shape, cluster):
            return _sharded_dp_comm(st, eng, shape, cluster, lk, dp, tp, ga, fwd, bwd, interference)
        return (0.0, 0.0), (0.0, 0.0)
    gloo = None  # DeepSpeed / FSDP as their code runs on gloo ranks (costmodel/cpu_collectives.py): CPU devices only
    if cluster.device.kind == "cpu":
        gloo = gloo_dp_comm(st, eng, shape.psi, shape.zero3, shape.stage_layers, main_grad_bytes(st), cluster, lk, dp,
                            tp, ga)
    if gloo is not None:
        return (gloo, gloo), (gloo, gloo)
    if st.engine == "fsdp" or st.zero == 3:
        return _sharded_dp_comm(st, eng, shape, cluster, lk, dp, tp, ga, fwd, bwd, interference)
    return _bucketed_dp_comm(st, eng, shape, cluster, lk, dp, tp, ga, fwd, bwd, interference, rest)


def _zero3_hooks_alone(st: Strategy, shape: _Shape, cluster: ClusterSpec) -> bool:
    """Whether a single data-parallel GPU rank still pays DeepSpeed ZeRO-3's module hooks: stage 3 has no world-size-1
    path (0.19.8: DeepSpeedZeroOptimizer_Stage3 and parameter_offload.py's hooks on every module whatever the
    group size; partition_parameters.py all-gathers a one-rank group), so each pass lasts at least its hooks' host
    time (zero3.hook_host_s), with no bytes to move (gather_parts prices none at one rank). CPU ranks: their
    measured engine hooks (cpu_engine.engine_hooks_s)."""
    return st.engine == "deepspeed" and st.zero == 3 and shape.zero3 is not None and cluster.device.kind != "cpu"


def fsdp_regathers_after_recompute(st: Strategy) -> bool:
    """Whether FSDP gathers each block a third time per micro-batch: FULL_SHARD under a reentrant full recompute
    (early stop off: Hugging Face's gradient_checkpointing_enable() wraps the FSDP unit's __call__) -- the
    recompute's forward unshards the block and reshards it after, then its backward's pre-backward hook gathers it
    again (torch fsdp/_runtime_utils.py _pre_forward / _post_forward / _pre_backward_hook). The collective
    (_sharded_dp_comm) and, under CPU offload, the host-to-device copy of the shard it starts (optimizer_offload)."""
    return st.engine == "fsdp" and st.zero == 3 and st.recompute == "full" and not early_stop(st)


def regathers_on_recompute(st: Strategy, eng) -> bool:
    """Whether a full recompute gathers each block's parameters once more per micro-batch: the engine re-gathers for
    its recompute (engines.yaml regather_on_recompute), or FSDP under a reentrant one (fsdp_regathers_after_recompute).
    The collective (sharded_dp_setup) and, under CPU offload, the copy of the shard it starts (optimizer_offload)."""
    return st.recompute == "full" and (eng.regather_on_recompute or fsdp_regathers_after_recompute(st))


def _sharded_dp_comm(st: Strategy, eng, shape: _Shape, cluster: ClusterSpec, lk: tuple, dp: int, tp: int,
                     ga: int, fwd: float, bwd: float, interference: float) -> tuple[tuple, tuple]:
    """_dp_comm_overlapped for ZeRO-3 / FSDP: per-layer gathers and reduce-scatters behind each pass -- the
    collectives (sharded_dp_setup), overlapped as this micro-batch's passes allow (_sharded_overlap)."""
    return _sharded_overlap(sharded_dp_setup(st, eng, shape, cluster, lk, dp, tp), ga, fwd, bwd, interference)


class ShardedDP(NamedTuple):
    """What _sharded_dp_comm prices from inputs but the micro-batch quantities (accumulation, pass times): its
    collectives per micro-batch and the schedule's choices, for one recompute. A planner's micro-batch variants share
    one (stage_terms.StageFixed)."""

    gather: float  # one pass's all-gathers, with their latency
    reduce: float  # the reduce-scatters, with their latency
    gather_bw: float  # the same, their bytes alone
    reduce_bw: float
    ends: tuple[float, float]  # (head, tail) with nothing to hide behind (FSDP root unit / DeepSpeed's last bucket)
    ends_bw: tuple[float, float]
    host_f: float  # DeepSpeed's fetch hooks' host seconds per forward / backward pass (0: none)
    host_b: float
    sync: tuple[float, float] | None  # DeepSpeed per-param-sync: per micro-batch, in series (else None)
    serial: bool  # nothing overlapped (CPU ranks, no prefetch)
    in_series: bool  # DeepSpeed overlap_comm false: the collectives on the default stream
    bwd_gathers: float  # gathers per backward pass (in units of the forward's)
    nlayers: int
    fsdp_ends: bool
    tables_elems: float  # DeepSpeed's embedding / head tables gathered with nothing ahead (0: none)
    gathered_elems: float  # DeepSpeed's gathered elements (tables_elems' denominator)
    regathers: bool  # FSDP under a reentrant full recompute: a gather issued when the recompute ends
    slow: float  # the device's compute_slowdown_under_comm
    first_host: tuple[float, float]  # host_f / host_b of the pass's first stack (encoder-decoder; else 0)
    second_share: tuple[float, float]  # the pass's second stack's share of its device time (zero3.launch_order_s)
    sync_last: bool  # FSDP2 reduce-scatters in the step's last micro-batch only (Strategy.gradient_sync "last")


# ranks of the run engines.yaml fetch_host_s was measured on (its hooks' per-rank loops ran over that many ranks)
FETCH_HOST_RANKS = 2


def sharded_dp_setup(st: Strategy, eng, shape: _Shape, cluster: ClusterSpec, lk: tuple, dp: int,
                     tp: int) -> ShardedDP:
    """_sharded_dp_comm's collectives and schedule choices (ShardedDP): they read the recompute but no micro-batch
    quantity (shape: its parameters, blocks, ZeRO-3 gathers and launch times, the same at every micro-batch)."""
    half = 4 if st.precision == "fp32" else 2
    psi = shape.psi
    per_node = max(1, min(dp, cluster.gpus_per_node // tp))
    eff = eng.collective_efficiency
    cpu = cluster.device.kind == "cpu"
    nlayers = shape.stage_layers
    elems, fetches = psi, nlayers * eng.collectives_per_layer
    reuse = None
    if st.engine == "deepspeed" and shape.zero3 is not None:  # persistent small tensors are never gathered
        z = shape.zero3
        elems, fetches = z.gathered_elems, z.layer_fetches * eng.collectives_per_layer + z.other_fetches
        if shape.model is not None and not cpu:
            # stage3_max_reuse_distance: modules kept gathered from their forward to their backward are not gathered
            # again (a small model's are all kept), a recompute's gathers are held into the backward; the prefetch
            # batches them: the micro-batch's all-gathers, each with its ring latency (zero3.zero3_reuse)
            reuse = zero3_reuse(shape.model, tp, st.recompute, eng.stage3_max_reuse_elems)
            passes = 1.0 + reuse.backward_elems / max(1.0, z.gathered_elems)  # gather = one pass, as priced below
            fetches = reuse.collectives / passes if reuse.collectives else fetches
    gather_bw, gather_lat = gather_parts(elems * half, dp, per_node, lk, eff, eng.gather_rails, fetches)
    grad_b = main_grad_bytes(st)  # FSDP: fp32 unless the run set its reduce dtype to the compute dtype
    reduces = nlayers  # FSDP: one reduce-scatter per unit; DeepSpeed: one per reduce bucket (zero3.py)
    if reuse is not None:
        reduces = reduce_scatter_buckets(shape.model, tp, st.pp, nlayers, eng.reduce_bucket_elems)
    reduce_bw, reduce_lat = gather_parts(psi * grad_b, dp, per_node, lk, eff, eng.gather_rails, reduces)
    gather, reduce = gather_bw + gather_lat, reduce_bw + reduce_lat
    if cpu:  # gloo's all_gather / reduce_scatter at their measured rates for these message sizes
        gather *= cpu_collective_rate(cluster.device, "all_gather", elems * half / max(1, fetches))
        reduce *= cpu_collective_rate(cluster.device, "reduce_scatter", psi * grad_b / max(1, nlayers))
    bwd_gathers = 0 if (st.engine == "fsdp" and st.zero == 2) else 1
    fsdp_reentrant = fsdp_regathers_after_recompute(st)
    if regathers_on_recompute(st, eng):
        bwd_gathers += 1
    hook_passes = bwd_gathers  # the backward's module calls (and the recompute's) run the hooks, gathering or not
    tables_elems = 0.0
    if reuse is not None:  # DeepSpeed's reuse distance (above)
        bwd_gathers = reuse.backward_elems / max(1.0, z.gathered_elems)
        # the forward's table fetches: the input embedding first, with nothing before it; the later ones (positions,
        # a T5 decoder's embedding, the head) prefetched behind one Linear, a fraction of a table's gather
        tables_elems = z.first_elems + reuse.restart_elems if z.gathered_elems else 0.0
    fsdp_ends = st.engine == "fsdp" and bool(shape.root_elems)
    ends = ends_bw = (0.0, 0.0)
    if fsdp_ends and not cpu:
        ends, ends_bw = _fsdp_unit_ends(shape, half, grad_b, dp, per_node, lk, eff, eng.gather_rails)
    elif st.engine == "deepspeed" and not cpu:
        # stage3.py (0.9-0.12 and on): the reduce-scatter of the last bucket -- the input embedding's gradient,
        # complete only when the backward's last op ends, or the partly filled bucket it flushes -- runs in
        # independent_gradient_partition_epilogue after the backward, which then reduce_and_partition_stream
        # .synchronize()s: nothing left to hide behind, as ZeRO-2's last bucket (_bucketed_dp_comm)
        last = min(1.0, max(eng.reduce_bucket_elems, shape.embed_elems) / psi)
        ends, ends_bw = (0.0, reduce * last), (0.0, reduce_bw * last)
    host_f = host_b = 0.0  # DeepSpeed's fetch hooks on the host thread: a pass runs no faster than they do
    first_host, second_share = (0.0, 0.0), (0.0, 0.0)
    if st.engine == "deepspeed" and shape.zero3 is not None and eng.fetch_host_s:
        launch_f, launch_b = shape.launches  # the same host thread dispatches the pass's kernels
        host_f = hook_host_s(shape.zero3, eng.fetch_host_s, 1) + launch_f
        host_b = hook_host_s(shape.zero3, eng.fetch_host_s, hook_passes) + launch_b
        if st.zero3_fetch != "per-param-sync" and reuse is not None and dp > 1:
            # the current DeepSpeed's per-rank Python loops on the same thread (zero3.py): each waited all-gather
            # split per rank into its parameters, the reduce buckets' per-rank slices, interleave and views
            share_b = reuse.backward_elems / max(1.0, z.gathered_elems)
            waits = z.partitioned_tensors + reuse.collectives / (1.0 + share_b)  # per rank, the forward's
            ranks = max(0, dp - FETCH_HOST_RANKS)  # fetch_host_s holds the waits' loops over its 2 ranks
            host_f += ranks * waits * eng.gather_wait_host_s
            host_b += ranks * waits * share_b * eng.gather_wait_host_s
            interleaved, divisible = reduce_scatter_rank_items(shape.model, tp, st.pp, nlayers,
                                                               eng.reduce_bucket_elems, dp)
            host_b += interleaved * eng.rs_interleave_host_s + divisible * eng.rs_divisible_host_s
        if shape.stacks is not None:
            first_host, second_share = _stack_host(shape.stacks, shape.zero3, eng.fetch_host_s, hook_passes,
                                                   shape.launches, host_f, host_b)
    sync = None
    if st.engine == "deepspeed" and st.zero3_fetch == "per-param-sync" and shape.zero3 is not None and not cpu:
        # DeepSpeed before 0.5.5: every collective after a device-wide synchronize, in series (zero3.py)
        sync = per_param_sync_comm_s(shape.zero3, half, grad_b, psi, dp, per_node, lk, eff, eng.gather_rails,
                                     eng.list_rank_host_s, 1 + bwd_gathers, cluster.device.hbm_bytes_per_s)
    return _NEW_TUPLE(ShardedDP, (gather, reduce, gather_bw, reduce_bw, ends, ends_bw, host_f, host_b, sync,
                                  cpu or eng.prefetch_layers < 1, st.engine == "deepspeed" and not st.overlap_grad_comm,
                                  bwd_gathers, nlayers, fsdp_ends, tables_elems,
                                  z.gathered_elems if tables_elems else 1.0, fsdp_reentrant,
                                  cluster.device.compute_slowdown_under_comm, first_host, second_share,
                                  st.engine == "fsdp" and st.gradient_sync == "last"))


def _stack_host(o: StackOrder, z: Zero3Gathers, fetch_host_s: float, hook_passes: float,
                launches: tuple[float, float], host_f: float, host_b: float) -> tuple[tuple, tuple]:
    """(first_host, second_share) of ShardedDP for an encoder-decoder on one rank: the host seconds of each pass's
    first stack -- the forward's encoder, the backward's decoder -- as their share of the pass's hooks and launches
    (the per-rank loops beside them shared alike), and the other stack's share of the pass's device time."""
    whole_f = z.hook_calls * fetch_host_s + launches[0]
    whole_b = z.hook_calls * fetch_host_s * hook_passes + launches[1]
    enc_f = o.encoder_calls * fetch_host_s + o.encoder_launch[0]
    dec_b = o.decoder_calls * fetch_host_s * hook_passes + o.decoder_launch[1]
    first = (host_f * min(1.0, enc_f / whole_f) if whole_f > 0 else 0.0,
             host_b * min(1.0, dec_b / whole_b) if whole_b > 0 else 0.0)
    return first, (1.0 - o.encoder_share, o.encoder_share)


def _sharded_overlap(z: ShardedDP, ga: int, fwd: float, bwd: float, interference: float) -> tuple[tuple, tuple]:
    """((exposed, total), (bytes_exposed, bytes_total)) of _sharded_dp_comm: `z`'s collectives overlapped with a
    micro-batch's forward `fwd` and backward `bwd` seconds, `ga` micro-batches per step."""
    # a pass lasts at least its hooks' host time, and, the device running only what the host has launched, an
    # encoder-decoder's first stack's host time plus the second's device time (zero3.launch_order_s)
    fwd_w = launch_order_s(fwd, z.host_f, z.first_host[0], z.second_share[0])
    bwd_w = launch_order_s(bwd, z.host_b, z.first_host[1], z.second_share[1])
    if z.sync is not None:
        per_mb, per_mb_bw = z.sync
        host = (fwd_w - fwd) + (bwd_w - bwd)
        return (ga * (host + per_mb),) * 2, (ga * (host + per_mb_bw),) * 2
    bwd_gathers, nlayers, slow = z.bwd_gathers, z.nlayers, z.slow

    def overlap(gather: float, reduce: float, head: float, tail: float) -> tuple[float, float]:
        if not z.sync_last or ga == 1:
            return micro_batches(ga, gather, reduce, head, tail)
        # gradient_sync "last": the other micro-batches' backwards reduce-scatter nothing -- no per-unit reduce, no
        # root / first-block reduce-scatter at the end (_fsdp_unit_ends' tail) -- the last one all of the step's
        # (torch FSDPParamGroup.post_backward: reduce_grads False keeps the unsharded gradient, memory.py)
        unsynced, unsynced_total = micro_batches(ga - 1, gather, 0.0, head, 0.0)
        synced, synced_total = micro_batches(1, gather, reduce, head, tail)
        return unsynced + synced, unsynced_total + synced_total

    def micro_batches(ga: int, gather: float, reduce: float, head: float, tail: float) -> tuple[float, float]:
        fwd_comm, bwd_comm = gather, bwd_gathers * gather + reduce
        total = ga * (fwd_comm + bwd_comm)
        if z.serial:
            return total, total
        per_mb = (fwd_w - fwd) + (bwd_w - bwd)  # the hooks' host time beyond compute
        if z.in_series:
            # DeepSpeed overlap_comm false (engine/settings.py: overlap_grad_comm) issues ZeRO-3's all-gathers
            # (parameter_offload.py __allgather_stream) and reduce-scatters (stage3.py reduce_and_partition_stream)
            # on the default stream: in series with the compute
            return ga * per_mb + total, ga * per_mb + total
        # the first layer's gather of a pass has nothing to hide behind
        first = 0.0 if z.fsdp_ends else gather / nlayers
        if z.tables_elems:  # DeepSpeed's embedding / head tables: no compute ahead of them to hide behind
            first = max(first, gather * z.tables_elems / z.gathered_elems)
        bwd_first = gather / nlayers if bwd_gathers else 0.0  # (FSDP: the forward's first block is part of `head`)
        per_mb += min(fwd_comm, head + first + _exposed(fwd_w, max(0.0, fwd_comm - head), interference, slow))
        regather = gather if z.regathers else 0.0  # issued when the recompute ends: nothing to hide behind
        per_mb += regather + min(bwd_comm - regather, tail + bwd_first + _exposed(
            bwd_w, max(0.0, bwd_comm - regather - tail), interference, slow))
        # the total is the path's communication; when the hooks' host time dominates, what is exposed is at least it
        return ga * per_mb, max(total, ga * per_mb)

    return overlap(z.gather, z.reduce, *z.ends), overlap(z.gather_bw, z.reduce_bw, *z.ends_bw)


def _bucketed_dp_comm(st: Strategy, eng, shape: _Shape, cluster: ClusterSpec, lk: tuple, dp: int, tp: int,
                      ga: int, fwd: float, bwd: float, interference: float,
                      rest: float = 0.0) -> tuple[tuple, tuple]:
    """_dp_comm_overlapped for DDP and ZeRO-0/1/2: bucketed gradient reduction behind the backward, the post-step
    parameter all-gather (or per-owner broadcasts) -- the collectives (bucketed_dp_setup), overlapped as this
    micro-batch's passes allow (_bucketed_overlap)."""
    return _bucketed_overlap(bucketed_dp_setup(st, eng, shape, cluster, lk, dp, tp), ga, fwd, bwd, interference,
                             rest)


class BucketedDP(NamedTuple):
    """What _bucketed_dp_comm prices from inputs but the micro-batch quantities (accumulation, pass times): its
    collectives and the schedule's choices. A planner's micro-batch variants share one (stage_terms.StageFixed)."""

    full: tuple[float, float, float]  # (all-reduce, reduce-scatter, all-gather) seconds, each with its latency
    bandwidth: tuple[float, float, float]  # the same, their bytes alone
    per_micro_batch: bool  # ZeRO-2 (DeepSpeed, Megatron): a reduction every micro-batch, else one per step
    gather_buckets: int
    param_gather_overlaps: bool  # overlap_param_gather (GPUs): the parameter all-gather behind the next forward
    window: float  # _chunk_window
    after: bool  # reduced after the backward / the pipeline drain, nothing overlapped (CPU ranks too)
    tail: float  # the share of the reduction produced at the end of the backward (_reduction_exposed)


def bucketed_dp_setup(st: Strategy, eng, shape: _Shape, cluster: ClusterSpec, lk: tuple, dp: int,
                      tp: int) -> BucketedDP:
    """_bucketed_dp_comm's collectives and schedule choices (BucketedDP): they read no micro-batch quantity (shape:
    its parameters, tensors and input embedding, the same at every micro-batch)."""
    half = 4 if st.precision == "fp32" else 2
    psi = shape.psi
    per_node = max(1, min(dp, cluster.gpus_per_node // tp))
    eff = eng.collective_efficiency
    cpu = cluster.device.kind == "cpu"
    grad_bytes = main_grad_bytes(st)
    rails = eng.grad_rails
    # gradients are reduced in buckets (DDP: bytes; DeepSpeed: elements; Megatron-Core: growing with dp), each
    # bucket one collective
    reduce_elems, gather_elems = grad_bucket_elems(eng, dp, st.overlap_grad_comm)
    reduce_buckets = max(1, math.ceil(psi / reduce_elems)) if reduce_elems else 1
    gather_buckets = max(1, math.ceil(psi / gather_elems)) if gather_elems else 1
    ar = rs = ag = (0.0, 0.0)  # (bandwidth, latency) seconds
    # DeepSpeed 0.4.4-0.12 ZeRO-1: a full all-reduce per bucket, then the weights all-gathered (Strategy docstring)
    z1_all_reduce = st.zero1_all_reduce and st.engine == "deepspeed" and st.zero == 1
    if st.engine == "ddp" or st.zero == 0 or eng.grad_all_reduce or _deepspeed_bf16_pipeline(st) or z1_all_reduce:
        # an all-reduce = reduce-scatter + all-gather of the gradient buffer
        ar = gather_parts(psi * grad_bytes, dp, per_node, lk, eff, rails, reduce_buckets, tree=True)
        if st.engine == "ddp" and st.zero == 1:  # ZeroRedundancyOptimizer re-broadcasts the updated shards
            ag = gather_parts(psi * 4, dp, per_node, lk, eff, rails, gather_buckets)
        elif (_deepspeed_bf16_pipeline(st) or z1_all_reduce) and st.zero == 1:  # BF16_Optimizer's partitioned step, then bf16 params
            ag = gather_parts(psi * half, dp, per_node, lk, eff, rails, gather_buckets)
    else:
        rs = gather_parts(psi * grad_bytes, dp, per_node, lk, eff, rails, reduce_buckets)
        # fp8_params: the distributed optimizer gathers the blocks' linear weights as FP8 (fp8.py)
        gathered = psi * half - (fp8.param_bytes_saved(shape.matmul_elems) if st.fp8_params else 0.0)
        ag = gather_parts(gathered, dp, per_node, lk, eff, rails, gather_buckets)
    if eng.param_broadcast_per_owner and st.zero >= 1 and not cpu:
        # whole tensors are assigned to owners: at most one owner per tensor, each broadcasting its share
        owners = min(dp, shape.zero3.tensors) if shape.zero3 is not None and shape.zero3.tensors else dp
        ag = per_owner_broadcast_parts(psi * half, owners, dp, per_node, lk, eff)
    full = [2.0 * (ar[0] + ar[1]), rs[0] + rs[1], ag[0] + ag[1]]  # each collective with its latency
    if cpu:  # gloo's collectives at their measured rates for these message sizes (costmodel/cpu_collectives.py)
        dev, bucket = cluster.device, psi * grad_bytes / reduce_buckets
        full[0] *= cpu_collective_rate(dev, "all_reduce", bucket)
        full[1] *= cpu_collective_rate(dev, "reduce_scatter", bucket)
        full[2] *= cpu_collective_rate(dev, "all_gather", psi * (4 if st.engine == "ddp" else half) / gather_buckets)
        if st.engine == "ddp" and st.zero == 1 and shape.zero3 is not None:  # one broadcast per parameter tensor
            full[2] += broadcast_latency(cluster.device, shape.zero3.tensors, dp)
    # ZeRO-2: every micro-batch
    per_micro_batch = st.engine in ("deepspeed", "megatron") and st.zero == 2
    # what completes only when the backward ends: the last bucket, and on the first stage the input embedding's
    # gradient (its lookup is the last op of the backward; a tied head's gradient joins it there)
    last = reduce_elems or psi
    if st.pp == 1:
        last = max(last, shape.embed_elems)
    after = cpu or not st.overlap_grad_comm or _deepspeed_pipeline_reduces_after(st)  # after the pipeline drains
    return _NEW_TUPLE(BucketedDP, ((full[0], full[1], full[2]), (2.0 * ar[0], rs[0], ag[0]), per_micro_batch,
                                   gather_buckets, st.overlap_param_gather and not cpu, _chunk_window(st), after,
                                   min(1.0, last / psi)))


_NEW_TUPLE = tuple.__new__  # a NamedTuple built without its generated __new__ (a Python call; plan's hot path)


def _bucketed_overlap(b: BucketedDP, ga: int, fwd: float, bwd: float, interference: float,
                      rest: float = 0.0) -> tuple[tuple, tuple]:
    """((exposed, total), (bytes_exposed, bytes_total)) of _bucketed_dp_comm: `b`'s collectives overlapped with a
    micro-batch's forward `fwd` and backward `bwd` seconds of the stage's blocks, `ga` micro-batches per step;
    `rest`: the stage's other compute per micro-batch (the last stage's LM head and loss, casts, DeepSpeed's folds:
    stage_terms.price_stage's compute beyond its blocks' passes)."""
    reductions = ga if b.per_micro_batch else 1
    window = b.window

    def overlap(ar: float, rs: float, ag: float) -> tuple[float, float]:
        total = reductions * (ar + rs) + ag
        if b.param_gather_overlaps:
            ag = _param_gather_exposed(ag, b.gather_buckets, fwd * window, interference)
        if b.after:  # (the parameter gather may still overlap the next forward)
            return reductions * (ar + rs) + ag, total
        # one reduction per step hides behind the chunks' backward passes; one per micro-batch (ZeRO-2) at most
        # behind one micro-batch's compute on the stage: ga reductions cannot hide behind more compute than the step
        # has (with the chunk window each, a faster GPU gave a slower step; invariants test) -- all of it, head and
        # loss included: the blocks' passes alone let twice the sequence hide more traffic than it added compute
        # once the slowest stage moved off the last (invariants test)
        hide = bwd * window if reductions == 1 else min(bwd * window, fwd + bwd + rest)
        return reductions * _reduction_exposed(hide, ar + rs, b.tail, interference) + ag, total

    return overlap(*b.full), overlap(*b.bandwidth)


def dp_collectives(st: Strategy, eng, shape: _Shape, cluster: ClusterSpec, lk: tuple, dp: int,
                   tp: int) -> BucketedDP | ShardedDP | None:
    """A GPU stage's data-parallel collectives and schedule choices, as _dp_comm_overlapped picks them (ZeRO-3 /
    FSDP: sharded_dp_setup, else bucketed_dp_setup), priced once for a stage's micro-batch variants (dp_comm_s);
    None where _dp_comm prices none (dp 1) or prices them its own way (CPU ranks: gloo)."""
    if dp <= 1 or cluster.device.kind == "cpu":
        return None
    if st.engine == "fsdp" or st.zero == 3:
        return sharded_dp_setup(st, eng, shape, cluster, lk, dp, tp)
    return bucketed_dp_setup(st, eng, shape, cluster, lk, dp, tp)


def dp_comm_s(collectives: BucketedDP | ShardedDP, ga: int, fwd: float, bwd: float,
              interference: float, rest: float = 0.0) -> tuple[float, float]:
    """_dp_comm's (exposed, total) seconds per step of a stage whose collectives (dp_collectives) are priced
    already: the same numbers, the same operations."""
    if type(collectives) is BucketedDP:
        (exposed, total), (bytes_exposed, bytes_total) = _bucketed_overlap(collectives, ga, fwd, bwd, interference,
                                                                           rest)
    else:
        (exposed, total), (bytes_exposed, bytes_total) = _sharded_overlap(collectives, ga, fwd, bwd, interference)
    if exposed >= total:
        return exposed, total
    return exposed_latency(exposed, bytes_exposed, total - bytes_total), total


def _fsdp_unit_ends(shape: _Shape, param_bytes: int, grad_bytes: int, dp: int, per_node: int, lk: tuple,
                    eff: float, rails: str) -> tuple[tuple[float, float], tuple[float, float]]:
    """((head, tail), the same of their bytes alone) seconds of FSDP traffic per micro-batch with nothing to hide
    behind, when every block is its own unit and the root unit holds the rest (embeddings, head, final norms:
    `shape.root_elems`), as torchtitan / OLMo-core (fully_shard per block, then the model) and Composer /
    llm-foundry (FSDP1, one unit per block) wrap.

    Head: the forward starts with the root unit's all-gather and the first block's -- the embedding lookup between
    them is no compute to hide the second behind -- while prefetch hides each later block's gather behind the block
    before it. Tail: the backward ends with the first block's gradient, then the root unit's (the input embedding's
    lookup is its last op; a tied head's gradient joins it there): their reduce-scatters come after the last
    compute of the micro-batch and the next forward's first gather queues behind them on the process group's one
    NCCL stream."""
    block = max(0.0, shape.psi - shape.root_elems) / max(1, shape.stage_layers)

    def one(elems: float, nbytes: int) -> tuple[float, float]:  # (with its latency, bytes alone) of one collective
        bandwidth, latency = gather_parts(elems * nbytes, dp, per_node, lk, eff, rails, 1)
        return bandwidth + latency, bandwidth

    root_g, block_g = one(shape.root_elems, param_bytes), one(block, param_bytes)
    root_s, block_s = one(shape.root_elems, grad_bytes), one(block, grad_bytes)
    return (root_g[0] + block_g[0], root_s[0] + block_s[0]), (root_g[1] + block_g[1], root_s[1] + block_s[1])


def _chunk_window(st: Strategy) -> float:
    """How many micro-batch passes of a stage the data-parallel collectives of one step can hide behind: 1, except
    under the interleaved pipeline schedule, where each of the v model chunks syncs on its own (Megatron-Core
    schedules.py at f2e5db40, forward_backward_pipelining_with_interleaving: grad_sync_func[chunk] right after the
    chunk's last micro-batch backward, param_sync_func[chunk] before its first forward). The last group of pp
    micro-batches runs backward chunk by chunk, pp chunk-passes each, so chunk k's reduction hides behind the later
    chunks' (v-1-k) x pp chunk-passes: all but the last chunk's behind (pp-1)(v-1)/v stage passes beyond its own
    (the forward's parameter gathers symmetrically, in the warm-up)."""
    v = st.virtual_stages if st.pp > 1 and st.pp_schedule == "interleaved" else 1
    return 1.0 + (st.pp - 1) * (v - 1) / v


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


def _tp_comm(st: Strategy, ct, share: float, tp: int, lk: tuple, interference: float, per_node: int) -> float:
    """Tensor-parallel communication seconds on the critical path per micro-batch, on a stage holding `share` of
    the layers: one all-reduce volume (all-gather + reduce-scatter under sequence parallelism) per sublayer and pass
    (ComputeTimes.tp_ops), exposed -- or with `Strategy.tp_comm_overlap` what the projection GEMMs next to each
    collective cannot hide (engines.yaml tp_comm_overlap: Transformer Engine userbuffers, _tp_overlap_exposed, or the
    torch engines' micro-pipeline TP, _micro_pipeline_exposed), or under sequence parallelism on an engine whose
    linear layers overlap their backward collectives (engines.yaml tp_async_backward) what the backward GEMMs cannot
    hide (_sp_async_exposed). Plus what the recompute adds or skips (_recompute_tp_delta).

    `per_node`: the group's members per node (comm.tp_ranks_per_node); a group spanning nodes (per_node < tp) rides
    the NICs, and no tp_comm_overlap applies to it: Transformer Engine's userbuffers need the group inside one
    NVLink domain ('only possible with single-node tensor-parallelism', NVIDIA/TransformerEngine#1071), as
    PyTorch's micro-pipeline TP needs its symmetric memory -- so a run of it had the overlap off."""
    per_op = collective(2.0, ct.tp_bytes, tp, per_node, lk)
    passes = 3 if st.recompute == "full" else 2  # as step.compute_times counts tp_ops
    delta = _recompute_tp_delta(st, ct, per_op)
    if ct.linear <= 0.0:
        return (ct.tp_ops * per_op + delta) * share
    gemm = ct.linear * passes / ct.tp_ops  # forward linear-GEMM seconds of one sublayer
    if st.tp_comm_overlap and ct.tp_gemms and per_node >= tp:
        ov = tp_overlap()
        torch_tp = st.engine in ov.micro_pipeline_engines
        total = 0.0
        for kind, (gather, scatter, n) in enumerate(ct.tp_gemms):  # attention, FFN sublayers: their own projections
            if not n:
                continue
            if torch_tp:
                fg, fs, bwd = _micro_pipeline_exposed(per_op / 2.0, gather / n, scatter / n, tp, ct.tp_pass_s, ov)
            else:
                fg, fs, bwd = _tp_overlap_exposed(per_op / 2.0, gather / n, scatter / n, tp, ov.pipeline_splits,
                                                  ov.interference)
            skipped = fs if kind == 1 and early_stop(st) else 0.0  # the re-run stops before the FFN output GEMM
            total += n * ((passes - 1) * (fg + fs) + bwd - skipped)
        return (total + (delta if st.recompute == "op" else 0.0)) * share  # the early stop's skip is in `total`
    if st.sequence_parallel and engine_comm(st.engine).tp_async_backward:
        return (ct.tp_ops * _sp_async_exposed(per_op, gemm, passes, interference) + delta) * share
    return (ct.tp_ops * per_op + delta) * share


def _recompute_tp_delta(st: Strategy, ct, per_op: float) -> float:
    """Seconds of tensor-parallel collectives that a recompute adds to or removes from tp_ops' count (passes x
    sublayers, `per_op` s each: an all-reduce, or an all-gather + reduce-scatter pair), all layers, exposed. A full
    recompute that stops early (op_checkpoint.early_stop: the FFN output projection and what follows are not re-run)
    skips each block's FFN output collective (the reduce-scatter, or the all-reduce) in the re-run. torchtitan's
    per-op selective checkpoint saves reduce_scatter_tensor outputs but not all_gather_into_tensor's (its _save_list:
    'communication ops whose outputs should be saved to avoid re-communication' lists the reduce-scatter only), so
    under sequence parallelism the backward re-gathers every sublayer's input once more. A checkpointed input kept
    split over the ranks (Strategy.distribute_saved_activations) is all-gathered back before each block's re-run:
    one all-gather of a sublayer output's size (`per_op` / 2) per block (its FFN sublayer count), exposed -- the
    re-run waits for it (Megatron-LM CheckpointFunction.backward: gather_split_1d_tensor, then the forward)."""
    if not ct.tp_gemms:
        return 0.0
    gathers = ct.tp_gemms[1][2] * per_op / 2.0 if (st.distribute_saved_activations and st.recompute == "full"
                                                    and not st.sequence_parallel) else 0.0
    return gathers + _recompute_collectives_delta(st, ct, per_op)


def _recompute_collectives_delta(st: Strategy, ct, per_op: float) -> float:
    """_recompute_tp_delta's re-run collectives: what an early stop skips, what op checkpointing re-gathers."""
    if early_stop(st):
        return -ct.tp_gemms[1][2] * (per_op / 2.0 if st.sequence_parallel else per_op)
    if st.recompute == "op" and st.sequence_parallel:
        return sum(n for _, _, n in ct.tp_gemms) * per_op / 2.0
    return 0.0


def _sp_async_exposed(comm: float, gemm: float, passes: int, interference: float) -> float:
    """Exposed seconds per sublayer collective pair (all-gather + reduce-scatter, `comm` s) under sequence
    parallelism in Megatron-LM / apex (LinearWithGradAccumulationAndAsyncCommunication; Korthikanti et al. 2022
    Sec. 4.2.2), averaged over the passes.

    Forward (and a full recompute's forward): the all-gather before the column-parallel linear and the
    reduce-scatter after the row-parallel one are synchronous: exposed. Backward: the row-parallel linear's gradient
    all-gather is synchronous (comm / 2); the column-parallel linear re-gathers its sequence-sharded input (an extra
    comm / 2, the full input is not kept) asynchronously beside its dgrad GEMM, and reduce-scatters its input
    gradient beside its wgrad GEMM -- each of those GEMMs about half the sublayer's forward linear time (`gemm` / 2).
    Every overlapped second costs `interference` of GEMM time (NCCL kernels on SMs)."""
    col = gemm / 2.0
    half = comm / 2.0
    bwd = half + 2.0 * (max(0.0, half - col) + interference * min(half, col))
    return ((passes - 1) * comm + bwd) / passes


def _tp_overlap_exposed(comm: float, gather: float, scatter: float, tp: int, splits: int,
                        interference: float) -> tuple[float, float, float]:
    """Exposed seconds of one sublayer's all-gather and reduce-scatter (`comm` s each) -- (forward all-gather, forward
    reduce-scatter, backward both) -- under Transformer Engine's userbuffers overlap (engines.yaml tp_comm_overlap); `gather` / `scatter`: forward seconds of
    the projection GEMMs the all-gather feeds (QKV / FC1) and the reduce-scatter follows (proj / FC2).

    Forward (and a full recompute's forward): the all-gather runs as a ring exchange inside its GEMM -- tp chunks, the
    local one first, so (tp-1)/tp of the GEMM hides it; the reduce-scatter behind its GEMM in `splits` chunks, the
    last chunk's -- comm / splits -- exposed. Backward: the gradient all-gather inside the proj / FC2 dgrad (ring
    exchange), the input-gradient reduce-scatter beside the QKV / FC1 wgrad (bulk overlap). Every overlapped second
    costs `interference` of GEMM time.
    """
    hide_g = gather * (tp - 1) / tp
    fwd_g = max(0.0, comm - hide_g) + interference * min(comm, hide_g)
    fwd_s = max(comm / splits, comm - scatter * (splits - 1) / splits) + interference * min(comm, scatter)
    bwd = (max(0.0, comm - scatter * (tp - 1) / tp) + max(0.0, comm - gather)
           + interference * (min(comm, scatter) + min(comm, gather)))
    return fwd_g, fwd_s, bwd


def _micro_pipeline_exposed(comm: float, gather: float, scatter: float, tp: int, hbm_pass: float,
                            ov) -> tuple[float, float, float]:
    """Exposed seconds of one sublayer's all-gather and reduce-scatter (`comm` s each) -- (forward all-gather, forward
    reduce-scatter, backward both) -- under PyTorch's
    micro-pipeline TP (engines.yaml tp_comm_overlap.micro_pipeline); `gather` / `scatter` as _tp_overlap_exposed,
    `hbm_pass`: seconds of one HBM pass over the sublayer output.

    fused_all_gather_matmul: (tp-1)/tp of the GEMM hides the peers' shards, plus the local shard's unoverlapped copy
    into the symmetric buffer (read + write of 1/tp of the output). fused_matmul_reduce_scatter: (tp-1)/tp of the GEMM
    hides the transfers, then the partial sum (tp shards read, one written) runs exposed. Backward: the gradient
    all-gather fused with the proj / FC2 dgrad; the input-gradient reduce-scatter fused with the QKV / FC1 dgrad only
    when that gradient is one matmul's output (backward_reduce_scatter_fused), else an exposed NCCL collective.
    """
    share = (tp - 1) / tp
    copy_in = 2.0 * hbm_pass / tp
    partial_sum = hbm_pass * (1.0 + 1.0 / tp)
    i = ov.micro_pipeline_interference

    def gathered(gemm: float) -> float:
        return max(0.0, comm - share * gemm) + copy_in + i * min(comm, share * gemm)

    def scattered(gemm: float) -> float:
        return max(0.0, comm - share * gemm) + partial_sum + i * min(comm, share * gemm)

    bwd = gathered(scatter) + (scattered(gather) if ov.backward_reduce_scatter_fused else comm)
    return gathered(gather), scattered(scatter), bwd


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

# NVMe offload: DeepSpeed swaps optimizer states through pinned host buffers, both directions every step, at the
# device YAML's nvme_fraction_of_pcie x pcie_bytes_per_s.
# Host passes of a DeepSpeed offloaded step beside CPU Adam's ~30 B per parameter (fp32 param, grad, m, v read;
# param, m, v written), at the same memory-bound host rate (device YAML cpu_adam_params_per_s): unscale_and_clip_grads
# multiplies the fp32 gradient partition in place every step (8 B), and the updated fp32 partition is cast to bf16/
# fp16 on the host before going up (6 B; ZeRO-1/2 into a pinned bit16 buffer, stage_1_and_2.py; ZeRO-3 through
# torch's copy_, which converts on the CPU for CPU->GPU copies, Copy.cu)
HOST_PASSES_SHARE_OF_CPU_ADAM = (8.0 + 6.0) / 30.0
# Where those bytes live. With offload_optimizer pin_memory (both stages' default in DeepSpeed's examples), the fp32
# master partition, its fp32 gradient partition and the 16-bit upload buffer are pinned -- get_accelerator()
# .pin_memory -> tensor.pin_memory() -> torch's CachingHostAllocator -> cudaHostAlloc, which page-locks, so
# allocates, every page at the call from the calling thread: under Linux's default (local) memory policy all of a
# rank's pinned buffers sit on the one NUMA node its main thread ran on. The Adam moments are not pinned
# (DeepSpeedCPUAdam.step: torch.zeros_like, first touched by torch's parallel fill over its threads' nodes).
# `deepspeed --bind_cores_to_rank` adds `numactl -m` only when a rank's cores lie in one node (deepspeed/utils/
# numa.py get_numactl_cmd, read at edaa7221): a DGX A100 rank of 2 (64 cores over 4 NPS4 nodes) keeps the default.
# Pinned bytes per parameter: CPU-Adam's fp32 parameter read + write and gradient read (12 of its ~30 B) and every
# host pass beside it (unscale in place on the gradient, the cast from the fp32 partition).
PINNED_SHARE_OF_CPU_ADAM = 12.0 / 30.0


def numa_pinned_slowdown(dev, ranks_per_node: int, host_share: float) -> float:
    """How much longer a DeepSpeed host step (CPU Adam + `host_share` of its time in host passes) takes than at the
    whole host's memory bandwidth (the device YAML's cpu_adam_params_per_s) when the ranks' pinned buffers sit on
    fewer NUMA nodes than the host has (device YAML host_numa_nodes): each rank's pinned traffic is served by its one
    node, 1/host_numa_nodes of the host's bandwidth, the rest by every node. 1 once every node serves a rank."""
    nodes = dev.host_numa_nodes
    pinned = (PINNED_SHARE_OF_CPU_ADAM + host_share) / (1.0 + host_share)
    return max(1.0, pinned * nodes / min(max(1, ranks_per_node), nodes))
# torch's fused CPU AdamW (AdamW(fused=True) on host tensors, torch >= 2.4; the kernel of
# aten/src/ATen/native/cpu/FusedAdamKernel.cpp) reads param, grad, exp_avg, exp_avg_sq and writes param and both
# moments once per element: 28 B per fp32 parameter, 14 B when all four are bf16 (Strategy.optimizer_dtype bf16 on
# fsdp: torchtune's `dtype: bf16`; the kernel computes in fp32 registers), against the ~30 B of DeepSpeed's CPU-Adam
# that cpu_adam_params_per_s times (its fp16 copy included), at the same memory-bound host rate. MEASURED
# (benchmarks/bench_cpu_adamw.py, this project's AVX2 host, torch 2.13 / DeepSpeed 0.19.8, one Llama layer's FSDP
# shard, one thread): fused fp32 0.93 x DeepSpeed CPU-Adam's time (= 28 / 30); the single-tensor loop torch picks for
# host tensors 5.72 x (ZeRO-Offload's 6.4, engines.yaml host_adam_slowdown); fused bf16 1.46 x -- one thread is
# compute-bound on the bf16 <-> fp32 conversions (257 M parameters/s per thread vs CPU-Adam's 375 M). A whole host
# is not: torchtune gives each of 8 ranks cpu_count / 8 threads (training.set_torch_num_threads), so a DGX A100's
# 128 cores convert ~33e9 parameters/s while its memory feeds 219 GB/s (7.3e9 x 30 B) / 14 B = 15.6e9: bytes bind.
HOST_FUSED_ADAMW_BYTES = {"engine": 28.0, "bf16": 14.0}  # by Strategy.optimizer_dtype
# Bytes per parameter of FSDP's host shard and its gradient (CPUOffloadPolicy copies each up per gather, down per
# reduce-scatter): fp32 under mixed precision, bf16 when the parameters themselves are bf16 (optimizer_dtype bf16)
FSDP_SHARD_BYTES = {"engine": 4.0, "bf16": 2.0}


def host_adam_slowdown(st: Strategy, eng) -> float:
    """The host optimizer's time per parameter over DeepSpeed CPU-Adam's (the device YAML's cpu_adam_params_per_s) on
    a GPU host. optimizer_loop "engine" steps with the engine's own (engines.yaml host_optimizer: FSDP's torch fused
    CPU AdamW, what `train` runs; DeepSpeed's CPU-Adam); a run that names one: torch's fused CPU AdamW (fused),
    CPU-Adam (cpu-adam: fairseq's cpu_adam on FSDP), else a torch loop tensor by tensor at the engine's measured host
    slowdown (engines.yaml host_adam_slowdown: FSDP's single-tensor torch AdamW, whatever the dtype)."""
    loop = eng.host_optimizer if st.optimizer_loop == "engine" else st.optimizer_loop
    if loop == "fused":
        return HOST_FUSED_ADAMW_BYTES[st.optimizer_dtype] / OPTIMIZER_BYTES["bf16"]
    if loop == "cpu-adam":
        return 1.0
    return eng.host_adam_slowdown
# The measured slowdowns of the engines' host code -- ZeRO-3's pageable upload (DeepSpeed PR #5301), unbound ranks
# sharing a host (PR #7474), torch AdamW against DeepSpeed's CPU-Adam (ZeRO-Offload Sec. 6.2.4) -- are per-engine data:
# engines.yaml host_adam_slowdown, unbound_ranks_host_adam_slowdown, zero3_upload_slowdown(_one_gpu), with their sources.


def optimizer_offload(st: Strategy, eng, psi: float, dp: int, ga: int, dev, ranks_per_node: int,
                      tensors: int = 0) -> tuple[float, float]:
    """(optimizer, offload) seconds per step for `psi` parameters in `tensors` tensors per model-parallel rank (a
    stage's own on a mixed cluster): the Adam update on the device at HBM speed or on the host (CPU Adam), and the
    PCIe traffic offloading implies, in series with the passes (none of it hidden behind the backward), every GPU
    of the node copying at once over its share of the host link (device YAML gpus_per_host_link).
    CPU ranks with a measured profile: the trainer's clip + torch AdamW at the measured rates (cpu_memory.py).
    The engine's measured host slowdowns are `eng`'s (engines.yaml)."""
    prec = st.precision
    half = 4 if prec == "fp32" else 2
    local = psi / dp if (st.engine == "fsdp" or st.zero >= 1) else psi
    offload_s = 0.0
    link = dev.host_link_bytes_per_s(ranks_per_node)  # data-parallel ranks copy in lockstep
    if st.offload_optimizer != "none":
        opt_s = local * ranks_per_node / dev.cpu_adam_params_per_s
        if dev.kind != "cpu":  # CPU profiles measure their ranks and their torch AdamW
            unbound = eng.unbound_ranks_host_adam_slowdown if ranks_per_node > 1 else 1.0
            opt_s *= host_adam_slowdown(st, eng) * unbound
        if st.engine == "fsdp":
            # CPUOffloadPolicy: every gather copies the host shard to the device, every reduce-scatter copies the
            # gradient shard back (per micro-batch); the Adam step runs on the host
            gathers = 1 if st.zero == 2 else (3 if regathers_on_recompute(st, eng) else 2)
            offload_s = ga * (gathers + 1) * FSDP_SHARD_BYTES[st.optimizer_dtype] * local / link
        elif st.zero == 3:
            offload_s, host_share = _zero3_offload_copies(local, link, st.offload_params != "none",
                                                          ranks_per_node, eng, half)
            opt_s *= (1.0 + host_share) * numa_pinned_slowdown(dev, ranks_per_node, host_share)
        else:
            # DeepSpeed ZeRO-1/2 offload: the last micro-batch's bucket reductions cast each gradient of the rank's
            # partition to fp32 and copy it to host memory (4 B per parameter), not hidden by the backward:
            # stage_1_and_2.py reduce_ipg_grads (v0.19.8; stage2.py the same from v0.3.0) runs, per parameter of
            # a reduced bucket on one stream, the norm, update_offload_overflow_tracker's `if ... and
            # self._has_inf_or_nan(grad.data)` (its truth value read back to the host; v0.3.0 `float(x.float()
            # .sum())`), then the non_blocking copy -- each read waits for the previous parameter's copy, and the
            # host, inside the backward's hook, launches no compute meanwhile; without overlap_comm (the default
            # below stage 3) the copies are on the compute stream itself ("copy_grad_stream is disabled because of
            # race with reduce. This hurts perf", ibid.). The updated parameters go up after CPU Adam, in series.
            offload_s = local * (4.0 + half) / link
            opt_s *= (1.0 + HOST_PASSES_SHARE_OF_CPU_ADAM) * \
                numa_pinned_slowdown(dev, ranks_per_node, HOST_PASSES_SHARE_OF_CPU_ADAM)
        if st.offload_optimizer == "nvme":
            offload_s += 2 * 16.0 * local / (dev.pcie_bytes_per_s * dev.nvme_fraction_of_pcie)
    elif cpu_memory.measured(dev) and tensors:
        opt_s = cpu_memory.engine_optimizer_s(dev, st.engine, st.zero, local, tensors, dp)
    else:
        opt_s = local * flat_update_bytes(st.optimizer_kind, prec, state_elem(st.engine, st.optimizer_dtype)) / \
            dev.hbm_bytes_per_s
    if st.optimizer_kind != "adamw" and (st.offload_optimizer != "none" or cpu_memory.measured(dev) and tensors):
        # host / measured AdamW rates, memory-bound: another optimizer's pass in proportion to its bytes
        opt_s *= flat_update_bytes(st.optimizer_kind, prec) / flat_update_bytes("adamw", prec)
    if st.offload_params != "none" and st.engine == "deepspeed":
        bw = dev.pcie_bytes_per_s * dev.nvme_fraction_of_pcie if st.offload_params == "nvme" else link
        offload_s += ga * 2 * psi * half / dp / bw  # fetched for forward and again for backward
    return opt_s, offload_s


def _zero3_offload_copies(local: float, pcie_bytes_per_s: float, params_on_host: bool,
                          ranks_per_node: int, eng, grad_bytes: int = 2) -> tuple[float, float]:
    """(seconds, host-pass share of CPU Adam) of DeepSpeed ZeRO-3's copies around a CPU-offloaded step, for `local`
    parameters per rank; every rank's copies run at once, each at `pcie_bytes_per_s` (its share of the host link).

    Down: each gradient partition is cast to fp32 on the device and copied to pinned host memory, 4 B/parameter,
    none of it behind the backward. Up to 0.19.4 partition_grads copies each parameter's partition with a blocking
    copy_ inside the backward (stage3.py at v0.19.2, line 1756: fp32_grad_tensor.copy_(grad_buffer.to(fp32)), no
    non_blocking): the host waits on the reduce stream, which waited on the compute stream, so no backward kernel is
    queued while it copies. From 0.19.5 (#8225, _finalize_offload_gradient_accumulation) the copies are non-blocking
    but issued at the boundary, after the backward, and CPU Adam needs them. Up: the pageable upload of the updated
    partition (engines.yaml zero3_upload_slowdown), its host cast included -- so the host passes beside CPU Adam are the
    unscale only (8 of the 30 B/parameter), not the cast. With the parameters offloaded too (offload_param), the
    16-bit partition lives on the host: the copy_ is a host cast (the 6 B pass) and nothing goes up in step() (the
    fetches bring the parameters up, priced with offload_params).

    Before that fp32 copy each partition makes a round trip in the model's dtype (`grad_bytes` per element): the
    partition buffer (__param_id_to_grad_partition, one flat grad_partitions_flat_buffer) is allocated on
    self.device, which is the host when the optimizer is offloaded (stage3.py v0.6.0 - v0.19.8: device=self.device,
    OffloadDeviceEnum.cpu, pinned), so partition_grads copies the reduced partition down into it (copy_,
    non_blocking) and straight back up ('ensure grad buffer is a CUDA buffer', .to(device, non_blocking)) for the
    inf/nan check, the norm and the fp32 copy -- queued on the same stream ahead of the blocking fp32 copy_, so in
    series with it. Priced on the boundary micro-batch (the earlier micro-batches' round trips, with no blocking
    copy behind them, run on the reduce stream beside the backward)."""
    grads_down = local * (4.0 + 2.0 * grad_bytes) / pcie_bytes_per_s
    if params_on_host:
        return grads_down, HOST_PASSES_SHARE_OF_CPU_ADAM
    slowdown = eng.zero3_upload_slowdown_one_gpu if ranks_per_node == 1 else eng.zero3_upload_slowdown
    params_up = slowdown * local * 4.0 / pcie_bytes_per_s
    return grads_down + params_up, 8.0 / 30.0


_LAYOUTS: dict[tuple, tuple] = {}


def model_layout(model: ModelSpec, cluster: ClusterSpec, st: Strategy, workload: Workload) -> Layout:
    """dp x tp x pp and gradient accumulation of `st` on `cluster` (tp divides a node or fills whole nodes, heads and
    layers divisible), or a one-line error; grouped-query KV heads must divide by tp as well (each rank keeps whole
    KV heads)."""
    # memo keyed by every input _checked_layout reads (a planner asks again for each engine of a layout)
    # (the workload by identity too: hashing the frozen dataclass was a third of a hit's time)
    key = (id(model), id(cluster), id(workload), st.tp, st.pp, st.cp, st.micro_batch, st.virtual_stages,
           st.stage_layers, st.sequence_parallel)
    hit = _LAYOUTS.get(key)
    if hit is not None and hit[0] is model and hit[1] is cluster and hit[3] is workload:
        return hit[2]
    if len(_LAYOUTS) > 100_000:
        _LAYOUTS.clear()
    layout = _checked_layout(model, cluster, st, workload)
    _LAYOUTS[key] = (model, cluster, layout, workload)
    return layout


def _checked_layout(model: ModelSpec, cluster: ClusterSpec, st: Strategy, workload: Workload) -> Layout:
    layout = resolve_layout(st, cluster.world_size, workload.global_batch,
                            gpus_per_node=cluster.gpus_per_node if st.tp > 1 else 0, num_heads=model.num_heads,
                            num_layers=model.total_layers if st.pp > 1 else 0, tp_across_nodes=True)
    if st.tp > 1 and model.kv_heads % st.tp:
        raise OptionError(f"{model.kv_heads} key/value heads are not divisible by tp {st.tp}", "tp")
    check_sequence_parallel(st, workload.seq_len, target_length(model, workload))  # train/study's rule, one place
    return layout
