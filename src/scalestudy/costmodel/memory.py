"""Memory per device, term by term: parameters, gradients, optimizer states, activations, buffers, overhead.

Model states follow the ZeRO paper (Rajbhandari et al. 2020, Sec. 3.1 and 5): mixed-precision Adam keeps
2 bytes/param of 16-bit weights, 2 of 16-bit gradients and K = 12 of fp32 master weights, momentum and variance;
ZeRO-1 partitions the K term over the N_d data-parallel ranks, ZeRO-2 also the gradients, ZeRO-3 also the weights.
fp32 training keeps 4 + 4 + 8 (no master copy). What an implementation adds beyond the paper's formula (DeepSpeed's
fp32 gradient partition and communication buckets, ZeRO-3 gathered layers, DDP's gradient buckets) is reported
separately as `buffers`, so `params + grads + optimizer` is always the paper's number.

Activations follow Korthikanti et al. 2022 (Sec. 4, Table 2): per layer s*b*h*(34 + 5*a*s/h) bytes in 16-bit,
generalised to inner width != d_model, gated FFNs (Megatron-Core's fused SwiGLU saving its input only), fp32,
dropout-free models (Llama), T5 cross-attention with its own lengths, tensor parallelism (with or without sequence
parallelism), selective / full recomputation, and the pipeline schedules (each rank holds its warm-up micro-batches
plus one, `stage_in_flight`; the busiest rank, by its own layer count, sets the figure).

The figure is the step's PEAK, taken at its highest moment, not the sum of what the papers' formulas keep: in the
backward, the stored activations plus what runs beside them (`block_gradient_bytes`, a recomputed block's working
set, the loss's buffers -- `logits_bytes`, torch's cross-entropy peaking in its backward); or at the optimizer step,
with the activations freed and the step's temporaries allocated (`step_temporary_bytes`, the `transient` part).
`Memory.tensor_peak` is what torch.cuda.max_memory_allocated counts; `total` adds the CUDA context (`overhead`), as
nvidia-smi does. Not in either: the caching allocator's cached free blocks (max_memory_reserved and nvidia-smi read
them: `allocator_cache_bytes` / `reserved_bytes` price those the code's allocation order fixes; the allocator releases
them and retries before it reports out of memory, c10/cuda/CUDACachingAllocator.cpp malloc:
release_available_cached_blocks / release_cached_blocks, so they do not decide 'fits'), NCCL's and cuBLAS's own
buffers (`device_total_bytes` adds them for what nvidia-smi reads) and a model loaded whole onto the device before it
is sharded (`whole_model_load_bytes`, for a peak read over the whole run).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from scalestudy.costmodel import fp8
from scalestudy.costmodel.engines import engine_comm, engine_table
from scalestudy.costmodel.flops import fused_linear_chunk_tokens
from scalestudy.costmodel.optimizers import STATE_TENSORS, moments_saved
from scalestudy.costmodel.options import CostOptions
from scalestudy.costmodel.params import param_breakdown
from scalestudy.costmodel.zero3 import _block_modules, zero3_reuse
from scalestudy.specs.model import ModelSpec
from scalestudy.specs.strategy import logit_shards

# Bytes per parameter: (weights, gradients, optimizer states) -- ZeRO paper Sec. 3.1 (K = 12 for mixed precision).
STATE_BYTES = {"bf16": (2, 2, 12), "fp16": (2, 2, 12), "fp32": (4, 4, 8)}
ACT_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
# fp8 runs (costmodel/fp8.py) hold bf16 weights, gradients and activations: only their linear GEMM inputs are FP8
STATE_BYTES["fp8"], ACT_BYTES["fp8"] = STATE_BYTES["bf16"], ACT_BYTES["bf16"]


@dataclass(slots=True, unsafe_hash=True)
class Memory:
    """Bytes per device (and per rank on the host), by term. Not frozen (no code changes one): a frozen dataclass's
    __init__ sets each field through object.__setattr__, ~5x the time, and plan builds one per strategy."""

    params: float
    grads: float
    optimizer: float
    activations: float
    buffers: float
    overhead: float
    host_bytes: float = 0.0  # offloaded states held in host RAM, per rank
    nvme_bytes: float = 0.0  # offloaded states held on NVMe, per rank
    transient: float = 0.0  # what the optimizer step's peak adds above the backward's: `peak_transient`

    @property
    def model_states(self) -> float:
        return self.params + self.grads + self.optimizer

    @property
    def total(self) -> float:
        """Device bytes at the step's peak: tensors (what torch.cuda.max_memory_allocated counts) + `overhead` (the
        CUDA context, which nvidia-smi counts and the allocator's figures do not; `tensor_peak` leaves it out)."""
        return self.tensor_peak + self.overhead

    @property
    def tensor_peak(self) -> float:
        """Tensor bytes at the peak, the allocator's max_memory_allocated (no CUDA context, no allocator cache)."""
        return (self.params + self.grads + self.optimizer + self.activations + self.buffers) + self.transient

    def parts(self) -> dict:
        return {"params": self.params, "grads": self.grads, "optimizer": self.optimizer,
                "activations": self.activations, "buffers": self.buffers, "transient": self.transient,
                "overhead": self.overhead}


# ---------------------------------------------------------------------------------------------- model states

def zero_model_states(psi: float, dp: int, stage: int, precision: str = "bf16") -> tuple[float, float, float]:
    """(weights, gradients, optimizer) bytes per device for `psi` parameters, ZeRO paper Sec. 5.1-5.3 / Fig. 1.

    Stage 0: (2+2+K)psi; 1: 2psi + 2psi + K psi/N_d; 2: 2psi + (2+K)psi/N_d; 3: (2+2+K)psi/N_d.
    """
    p, g, k = STATE_BYTES[precision]
    return (p * psi / (dp if stage >= 3 else 1), g * psi / (dp if stage >= 2 else 1), k * psi / (dp if stage >= 1 else 1))


def model_states(psi: float, dp: int, engine: str, zero: int, precision: str, offload_optimizer: str = "none",
                 offload_params: str = "none", grad_reduce: str = "engine",
                 optimizer_dtype: str = "engine", pp: int = 1,
                 grad_accum_dtype: str = "engine",
                 optimizer_kind: str = "adamw") -> tuple[float, float, float, float, float]:
    """(weights, grads, optimizer, host, nvme) bytes per rank for `psi` parameters on this model-parallel rank
    (`grad_reduce`, `optimizer_dtype`: Strategy's, the dtypes of Megatron's main-gradient buffer and optimizer;
    `pp`, `grad_accum_dtype`: which DeepSpeed optimizer wrapper holds the states, `deepspeed_bf16_wrapper`;
    `optimizer_kind`: the states beside the master copy, AdamW's two moments or another optimizer's,
    costmodel/optimizers.py)."""
    states = STATE_TENSORS[optimizer_kind]
    if engine == "ddp":
        # DDP + autocast keeps fp32 weights and gradients (4 + 4) and fp32 Adam moments (8); ZeroRedundancyOptimizer
        # (zero=1) partitions the moments.
        return 4.0 * psi, 4.0 * psi, 4.0 * states * psi / (dp if zero else 1), 0.0, 0.0
    if engine == "megatron":
        return megatron_model_states(psi, dp, zero, precision, grad_reduce, optimizer_dtype, optimizer_kind)
    if engine == "fsdp":
        # FSDP2: sharded fp32 weights, grads and moments (16/N_d); zero=2 (no reshard after forward) keeps the
        # unsharded compute-dtype weights alive from forward to backward.
        # optimizer_dtype bf16 (torchtune `dtype: bf16`: the model built in bf16, no mixed-precision policy): the
        # shards, their gradients and the AdamW moments torch allocates like them are all bf16 (2 + 2 + 4)
        shard = 2.0 if optimizer_dtype == "bf16" else 4.0
        kept = ACT_BYTES[precision] * psi if zero == 2 else 0.0
        if offload_params != "none":
            # CPUOffloadPolicy: the shards, their gradients and the Adam moments live in host memory
            return kept, 0.0, 0.0, (2.0 + states) * shard * psi / dp, 0.0
        return shard * psi / dp + kept, shard * psi / dp, states * shard * psi / dp, 0.0, 0.0
    w, g, o = zero_model_states(psi, dp, zero, precision)
    o -= moments_saved(optimizer_kind) * psi / (dp if zero >= 1 else 1)  # the paper's K is AdamW's
    if zero == 0 and grad_accum_dtype == "compute" and \
            deepspeed_bf16_wrapper(engine, zero, precision, pp, grad_accum_dtype) == "bf16":
        # BF16_Optimizer partitions its fp32 master weights and the Adam moments over dp whatever the ZeRO stage:
        # fp32_groups_flat_partition is 1/dp of the flat bf16 group, the client optimizer steps only that
        # (runtime/bf16_optimizer.py _setup_for_real_optimizer, v0.19.8; measured, docs/costmodel-validation.md
        # 'trainmem'). Priced for train's runs (compute accumulation: a bf16 pipeline at ZeRO-0); "engine" keeps
        # the published view's whole ZeRO-0 states (no published bf16 ZeRO-0 row; its ZeRO-1 prices an all-gather
        # bucket, so partitioning ZeRO-0 alone there would rank ZeRO-1 above it in memory)
        o = o / dp
    if precision == "fp32" and zero in (1, 2):
        # DeepSpeed stage 1/2 always clones its partition into a separate fp32 master copy
        # (stage_1_and_2.py: single_partition_of_fp32_groups), even when the model is already fp32: K = 4 + 8.
        o = (12.0 - moments_saved(optimizer_kind)) * psi / dp
    host = nvme = 0.0
    if offload_optimizer != "none":
        # ZeRO-Offload: fp32 master weights + moments (and the fp32 gradient partition) live off the device.
        off = o + 4.0 * psi / dp
        o = 0.0
        if offload_optimizer == "cpu":
            host += off
        else:
            nvme += off
        if zero == 3:
            # stage 3 keeps its 16-bit gradient partition (grad_partitions_flat_buffer) on the optimizer's device,
            # pinned host memory for either offload target (stage3.py: self.device = cpu when offload_optimizer;
            # v0.6.2 and 0.19 alike)
            host, g = host + g, 0.0
        else:
            # stages 1/2 never allocate grads_in_partition under cpu_offload: each reduced bucket is copied into the
            # host fp32 partition (counted in `off`) and param.grad freed (stage_1_and_2.py copy_grads_in_partition,
            # async_inplace_copy_grad_to_fp32_buffer_from_gpu, 0.3 to 0.19). Not counted: the pinned 16-bit host
            # copy it keeps only under gradient accumulation (accumulated_grads_in_cpu).
            g = 0.0
    if offload_params != "none":
        if offload_params == "cpu":
            host += w
        else:
            nvme += w
        w = 0.0
    return w, g, o, host, nvme


def megatron_model_states(psi: float, dp: int, zero: int, precision: str, grad_reduce: str = "engine",
                          optimizer_dtype: str = "engine",
                          optimizer_kind: str = "adamw") -> tuple[float, float, float, float, float]:
    """Megatron-Core (engine megatron): the parameters in their dtype, the contiguous main-gradient buffer, and the
    optimizer's fp32 master copy + Adam moments (and an fp32 gradient copy when the gradients are 16-bit), sharded
    over dp by the distributed optimizer (zero 1). Megatron-LM docs/source/distrib_optimizer.md (f2e5db40), bytes
    per parameter non-distributed / distributed: fp16 param + fp16 grads 20 / 4 + 16/d; bf16 param + fp32 grads
    (bf16 forces fp32 gradient accumulation and reduction) 18 / 6 + 12/d; fp32 16 / 8 + 8/d. The buffer takes the
    reduce dtype (`megatron_grad_bytes`): a bf16 buffer (NeMo 2.0 grad_reduce_in_fp32=False, grad_reduce compute)
    is the 16-bit row, 4 + 16/d (DistributedOptimizer copies each main-gradient shard to an fp32 .grad of its
    master shard). Gradients and parameters are reduced / gathered in place in those buffers: no separate
    communication buffers (buffer_bytes 0). optimizer_dtype bf16 (NeMo distributed_fused_adam `dtype: bf16`):
    apex DistributedFusedAdam allocates each bucket's params_shard, exp_avg_shard and exp_avg_sq_shard in that
    dtype and steps on the gradient shard as reduced -- 6 bytes per parameter / dp (distributed_fused_adam.py).
    zero 2, Megatron-FSDP data_parallel_sharding_strategy optim_grads (megatron/core/distributed/fsdp, Megatron-LM
    d98e8a64: "shards gradients and optimizer states ... similar to ZeRO-2", reduce-scatter "on all microbatches"):
    the main gradients are sharded too, g / dp; the unsharded gradient of the unit being reduced is a buffer.
    `optimizer_kind`: Adam's two moments in those figures, or another optimizer's states (Megatron-LM --optimizer
    sgd: apex FusedSGD's momentum buffer, costmodel/optimizers.py)."""
    g = megatron_grad_bytes(precision, grad_reduce)
    w, o = (4.0, 8.0) if precision == "fp32" else (2.0, 12.0 if g == 4 else 16.0)
    o -= moments_saved(optimizer_kind)
    if optimizer_dtype == "bf16":
        o = 6.0 - moments_saved(optimizer_kind, 2.0)
    return w * psi, g * psi / (dp if zero >= 2 else 1), o * psi / (dp if zero else 1), 0.0, 0.0


def megatron_grad_bytes(precision: str, grad_reduce: str = "engine") -> int:
    """Bytes per element of Megatron's main-gradient buffer (DistributedDataParallelConfig.grad_reduce_in_fp32:
    the buffer dtype is fp32 when set, else the parameter dtype -- param_and_grad_buffer.py): fp32 for bf16 runs
    by default (Megatron-LM forces --accumulate-allreduce-grads-in-fp32 with bf16), 16-bit for fp16, as
    Strategy.grad_reduce says otherwise (terms.main_grad_bytes prices the reduction with the same rule)."""
    if precision == "fp32" or grad_reduce == "fp32":
        return 4
    if grad_reduce == "compute":
        return 2
    return 4 if precision in ("bf16", "fp8") else 2  # fp8: bf16 parameters (costmodel/fp8.py)


def buffer_bytes(model: ModelSpec, psi: float, dp: int, tp: int, engine: str, zero: int, precision: str,
                 offload_optimizer: str, options: CostOptions, overlap_grad_comm: bool = True, pp: int = 1,
                 grad_accum_dtype: str = "engine", grad_buckets: str = "engine", grad_accum: int = 1) -> float:
    """Communication buckets, gathered-parameter working sets (implementation defaults, see CostOptions) and
    DeepSpeed's gradient accumulator (`deepspeed_accumulator_bytes`); DDP's buckets by `ddp_bucket_copy_bytes`."""
    half = ACT_BYTES[precision]
    if engine == "megatron":
        # zero 0/1: reduce-scatter / all-gather in place in the gradient and parameter buffers; zero 2 (Megatron-FSDP
        # optim_grads): one FSDP unit's (a block's) unsharded gradient before its reduce-scatter, fp32 (bf16 runs)
        return 4.0 * _layer_elems(model, tp) if zero == 2 else 0.0
    if engine == "internlm":
        # HybridZeroOptimizer flattens one 512 MiB gradient bucket at a time for its all-reduce (the comm stream is
        # synchronized before the next); no fp32 gradient accumulation buffer (engines.yaml internlm)
        return half * min(engine_comm("internlm").reduce_bucket_elems, psi)
    if engine == "ddp":
        return ddp_bucket_copy_bytes(psi, grad_buckets, grad_accum)
    if engine == "fsdp":
        # two layers gathered (current + prefetched) and one layer's unsharded gradient for reduce-scatter, and the
        # root unit's parameters, gathered from its forward to the end of the backward (`fsdp_root_gathered_bytes`)
        layer = _layer_elems(model, tp)
        return 2 * half * layer + 4.0 * layer + fsdp_root_gathered_bytes(model, psi, tp, precision)
    # gradient (all-)reduce bucket: every DeepSpeed stage flattens gradients into it (two when overlapping)
    reduce = half * min(options.reduce_bucket_elems, psi) * (2 if overlap_grad_comm else 1)
    bf16_accum = deepspeed_accumulator_bytes(psi, engine, zero, precision, pp, grad_accum_dtype)
    if zero == 0 or dp == 1 and zero < 3:
        return reduce + bf16_accum
    # DeepSpeedZeroOptimizer.step casts the rank's reduced 16-bit gradient partition to fp32 for its master partition,
    # single_partition_of_fp32_groups[i].grad = flatten(averaged_gradients[i]).to(fp32) (zero/stage_1_and_2.py,
    # v0.16.4); BF16_Optimizer's partition is a view into its full fp32 buffer, bf16_accum
    fp32_grad_partition = 0.0 if offload_optimizer != "none" or precision == "fp32" or bf16_accum else \
        4.0 * psi / dp
    if zero in (1, 2):
        return fp32_grad_partition + reduce + half * min(options.allgather_bucket_elems, psi) + bf16_accum
    return fp32_grad_partition + reduce + half * zero3_gathered_elems(model, psi, tp, options.stage3_prefetch_elems)


def ddp_bucket_copy_bytes(psi: float, grad_buckets: str, grad_accum: int) -> float:
    """Bytes of DDP's fp32 gradient buckets beside the .grad tensors through the backward (Strategy.grad_buckets).
    gradient_as_bucket_view False (torch's default, "engine" / "copy"): the buckets are a second copy, 4 psi. True
    ("view", train's): Reducer::mark_variable_ready_dense copies a fresh .grad into its bucket and points .grad at the
    bucket view (torch/csrc/distributed/c10d/reducer.cpp, torch 1.7 .. 2.x) -- but train zeroes with set_to_none, so
    each step's .grad tensors start fresh, and under no_sync (every micro-batch but the step's last) the reducer is
    idle: with accumulation the fresh .grad tensors sit beside the buckets from the first micro-batch into the last
    one's backward, 4 psi again; with one micro-batch only the buckets exist, 0. Measured through train's DDPBackend on
    a 1-rank gloo t5-tiny (tests/unit/test_ddp_grad_buckets.py): 1 gradient storage at accumulation 1, one per
    parameter after a no_sync micro-batch."""
    return 0.0 if grad_buckets == "view" and grad_accum == 1 else 4.0 * psi


def deepspeed_bf16_wrapper(engine: str, zero: int, precision: str, pp: int, grad_accum_dtype: str = "engine") -> str:
    """The optimizer wrapper that holds a DeepSpeed bf16 run's gradients and master states (ZeRO 0-2; "" for other
    engines and precisions), by its gradient accumulation dtype (Strategy.grad_accum_dtype). DeepSpeed 0.19.8
    engine._do_optimizer_sanity_check: ZeRO 1 with fp32 accumulation -> BFLOAT16 (BF16_Optimizer), other ZeRO
    stages -> ZERO_OPTIMIZATION (DeepSpeedZeroOptimizer, "zero"); ZeRO-0 with bf16 accumulation -> BFLOAT16 in a
    pipeline (PipelineEngine), else DDP_BFLOAT16 (FP16_UnfusedOptimizer around a client optimizer, "unfused");
    ZeRO-0 with fp32 accumulation is refused there ("unsupported mix"), and BF16_Optimizer is what every ZeRO-0
    bf16 run got while DeepSpeed defaulted its accumulation to fp32 there.
    "engine" is DeepSpeed's default, engine.get_data_types with no data_types.grad_accum_dtype: fp32 for bf16
    without ZeRO, the model dtype with it (microsoft/DeepSpeed 06938835 'Support fp32 gradaccum for bf16 model',
    v0.7.7; 4be8df72, v0.8.1 .. v0.16.4 at 38327e07 alike) -- so a bf16 ZeRO-1 run gets BF16_Optimizer only when it
    asks for fp32 ("fp32"), else DeepSpeedZeroOptimizer with bf16 gradients; before v0.7.6 there was no such key and
    ZeRO with bf16 always took DeepSpeedZeroOptimizer (engine._configure_optimizer at v0.7.5). "engine" at ZeRO-0
    stays fp32: DeepSpeed 0.19.8 defaults it to the model dtype too, which no published bf16 ZeRO-0 row ran."""
    if engine != "deepspeed" or precision != "bf16" or zero > 2:
        return ""
    if grad_accum_dtype == "fp32" or (grad_accum_dtype == "engine" and zero == 0):  # fp32 accumulation
        return "bf16" if zero <= 1 else "zero"
    if zero >= 1:
        return "zero"
    return "bf16" if pp > 1 else "unfused"


def deepspeed_accumulator_bytes(psi: float, engine: str, zero: int, precision: str, pp: int = 1,
                                grad_accum_dtype: str = "engine") -> float:
    """Bytes of DeepSpeed's gradient accumulation buffer beside the bf16 gradients (`deepspeed_bf16_wrapper`):
    BF16_Optimizer zeroes one flat buffer of the whole stage in the accumulation dtype, fp32_groups_gradients_flat =
    torch.zeros_like(bf16_groups_flat, dtype=grad_acc_dtype), and adds each micro-batch's .grad into it, keeping the
    bf16 .grad (zeroed, not freed: immediate_grad_update false by default) -- 4 psi in fp32, 2 psi in bf16
    (bf16_optimizer.py _setup_for_real_optimizer / update_hp_grads, v0.19.8). DeepSpeedZeroOptimizer with bf16
    accumulation keeps no second copy (the gradients accumulate in .grad / the reduced partition, `grads`), nor does
    FP16_UnfusedOptimizer: 0. Measured on 2 gloo ranks, DeepSpeed 0.19.8, train's deepspeed_config
    (docs/costmodel-validation.md 'trainmem')."""
    if deepspeed_bf16_wrapper(engine, zero, precision, pp, grad_accum_dtype) != "bf16":
        return 0.0
    return (2.0 if grad_accum_dtype == "compute" else 4.0) * psi


def fsdp_unsynced_grad_bytes(psi: float, precision: str, grad_reduce: str, gradient_sync: str,
                             grad_accum: int) -> float:
    """Bytes of the unsharded gradients FSDP2 holds between micro-batches when the run defers their reduce-scatter to
    the step's last micro-batch (Strategy.gradient_sync "last": set_requires_gradient_sync(False) on the others --
    KempnerForge training/grad.py maybe_no_sync, torch.distributed.pipelining's PipelineStage for FSDP2 chunks).
    torch _fsdp_param.py FSDPParam.to_accumulated_grad_if_needed, after each unit's backward: a gradient whose dtype
    is not the MixedPrecisionPolicy reduce_dtype is upcast into `unsharded_accumulated_grad` (later micro-batches add
    into it, accumulate_unsharded_grad_if_needed) -- the parameter resharded, its whole gradient kept -- so every
    parameter this rank holds before dp sharding (`psi`: its tp / pp share, the root's embedding and head included)
    keeps one unsharded gradient in the reduce dtype (4 B under the fp32 reduce of engine fsdp, 2 B with grad_reduce
    compute) from the first micro-batch's backward into the last one's, where each unit's reduce-scatter frees it.
    torchtnt #1057 measured the same deferral at 3.25 -> ~52 GB per rank (26B model, 16 GPUs). 0 when every
    micro-batch reduce-scatters ("every", "engine") or one micro-batch makes the step."""
    if gradient_sync != "last" or grad_accum <= 1:
        return 0.0
    return (2.0 if grad_reduce == "compute" and precision != "fp32" else 4.0) * psi


def fsdp_pipeline_unsharded_param_bytes(psi: float, precision: str, gradient_sync: str, pp: int,
                                         grad_accum: int) -> float:
    """Bytes of the unsharded parameters an FSDP2 pipeline stage keeps between micro-batches under
    torch.distributed.pipelining (Strategy.gradient_sync "last" at pp > 1): PipelineStage.backward_maybe_with_nosync
    calls set_reshard_after_backward(False) beside set_requires_gradient_sync(False) on every backward but the
    last (torch/distributed/pipelining/stage.py), so each unit's parameters, all-gathered in the compute dtype for
    its backward, stay gathered -- the whole stage's (`psi`) by the end of a backward, through the next micro-batch's
    until the last one's post-backward reshards them. On top of fsdp_unsynced_grad_bytes' gradients. 0 without a
    pipeline (KempnerForge's maybe_no_sync defers the reduce-scatter only), with "every" or one micro-batch."""
    if gradient_sync != "last" or pp <= 1 or grad_accum <= 1:
        return 0.0
    return ACT_BYTES[precision] * psi


def fsdp_root_gathered_bytes(model: ModelSpec, psi: float, tp: int, precision: str) -> float:
    """FSDP2 never reshards the root unit after forward (torch/distributed/_composable/fsdp/_fsdp_state.py
    _lazy_init: 'For the root, do not reshard after forward since for training, the parameters would be freed and
    all-gathered immediately' -- post_forward_mesh_info = None, torch 2.4 .. 2.6): with every block wrapped on its
    own (torchtitan apply_fsdp, fully_shard(model) last), the root holds the embedding, the untied head and the
    final norm, so they stay gathered in the compute dtype from the first forward op to the end of the backward,
    through the backward's peak. Capped at this rank's parameters."""
    pc = param_breakdown(model)
    return ACT_BYTES[precision] * min(psi, (pc.embedding + pc.lm_head) / tp + pc.other)


def _layer_elems(model: ModelSpec, tp: int) -> float:
    """Parameters of the larger block (encoder or decoder) on a tensor-parallel rank."""
    p = param_breakdown(model)
    return max(p.encoder_layer, p.decoder_layer) / tp


def zero3_gathered_elems(model: ModelSpec, psi: float, tp: int, prefetch_elems: float) -> float:
    """Elements DeepSpeed ZeRO-3 holds gathered at once: the module being computed (its fetch hook gathers the
    tensors it owns directly -- a Linear, an embedding, not a whole block) and what the coordinator prefetches:
    whole tensors of the next modules until the prefetch bucket is reached, so at most the bucket plus one tensor
    (partitioned_param_coordinator.py fetch_sub_module, v0.6.2 .. 0.19: `while numel_prefetching <
    max_params_to_prefetch`). Modules that stage3_max_reuse_distance keeps gathered from their forward into the
    backward (zero3.zero3_reuse: every module of a model under ~reuse/2 elements per rank, else the last blocks and
    the head) are all held when the backward starts, the first of them being computed, with the prefetch of the next
    ones not held (bucket plus one tensor); the others are released after their module's use. The largest module (a
    block's widest Linear, or the vocabulary embedding / head) bounds the tensor being computed or prefetched."""
    return min(psi, _zero3_held_elems(model, tp, engine_comm("deepspeed").stage3_max_reuse_elems) + prefetch_elems)


@lru_cache(maxsize=4096)
def _zero3_held_elems(model: ModelSpec, tp: int, reuse_elems: float) -> float:
    """zero3_gathered_elems before the prefetch bucket: the modules kept gathered (or the largest one) + the largest
    one (per model and tp; a planner asks for every ZeRO-3 candidate)."""
    blocks = [sum(m) for decoder in (False, True) for m in _block_modules(model, decoder, tp)]
    largest = max(*blocks, model.vocab_size * model.d_model / tp)
    kept = zero3_reuse(model, tp, "none", reuse_elems).kept_elems
    return max(kept, largest) + largest


# ---------------------------------------------------------------------------------------------- activations

def _attn_block(h: int, inner: int, q_tokens: int, kv_tokens: int, heads: int, a: int, mask: int, flash: bool,
                cross: bool, kv_inner: int = 0, fp32_scores: bool = False) -> tuple[float, float, float]:
    """(replicated, tensor-parallel-sharded, softmax) bytes of one attention sublayer (Korthikanti Sec. 4.1).

    Self-attention: LN output into QKV (a*h), Q and K (2a*inner), V (a*inner), output-projection input
    (a*inner), dropout mask (mask*h); per query token. Cross-attention keeps K and V of the encoder output
    (kv_tokens each). Softmax: probabilities + dropout mask + dropout output, (2a + mask)*heads*kv_len per query.
    Grouped-query K and V count at the full width unless `kv_inner` is given: Hugging Face's and torchtitan's
    repeat_kv expand them to every head before SDPA, which saves the copies; a GQA-native kernel saves them at their
    own width `kv_inner` (Transformer Engine's DotProductAttention with num_gqa_groups, flash-attn: ctx saves the
    un-repeated k, v). `fp32_scores` (`eager_fp32_softmax`): the softmax output is saved in fp32, 4 + a + mask.
    """
    kv = kv_inner or inner
    if cross:
        rep = q_tokens * (a * h + mask * h)
        shard = q_tokens * 2 * a * inner + kv_tokens * 2 * a * inner
    else:
        rep = q_tokens * (a * h + mask * h)
        shard = q_tokens * a * (2 * inner + 2 * kv)
    probs = 4 if fp32_scores else a
    soft = 0.0 if flash else q_tokens * kv_tokens * heads * (probs + a + mask)
    return rep, shard, soft


def _ffn_block(h: int, f: int, tokens: int, a: int, mask: int, gated: bool,
               fused_glu: bool = False, eager_gelu: bool = False) -> tuple[float, float]:
    """(replicated, sharded): input (a*h), activation inputs/outputs (2 tensors of width f; gated 4, or 3 when the
    gated activation saves only its input, `fused_swiglu`; + 3 for an eager composed GELU, `eager_composed_gelu`),
    dropout mask."""
    width = ((3 if fused_glu else 4) if gated else 2) + (3 if eager_gelu else 0)
    return tokens * (a * h + mask * h), tokens * a * f * width


def eager_composed_gelu(model: ModelSpec, kernels: str) -> bool:
    """Whether the FFN activation is Hugging Face's composed tanh GELU run as eager ops (`kernels` eager*):
    gelu_new = 0.5 * x * (1 + tanh(c * (x + 0.044715 * x**3))) (transformers activations.py; GPT-2's
    activation_function, T5 v1.1 / mT5's dense_act_fn for feed_forward_proj gated-gelu). Autograd saves x (pow's
    input, counted as the activation's input), tanh's output, 0.5 * x and 1 + tanh (the final product's operands):
    three tensors of width d_ff beyond the fused kernel's one, in the compute dtype (a lower bound under autocast,
    where pow runs in fp32). Fused kernels (Megatron's bias_gelu, torch.compile) save the input only, as does a
    one-kernel activation (erf gelu, relu: a gpt model's `ffn: gelu`, Megatron-LM's fused GeLU) under eager kernels:
    keyed on the activation, as kernel_counts and eager_kernels price its time."""
    act = "gelu_new" if model.ffn == "gated-gelu" else model.ffn.removeprefix("gated-")  # T5Config's mapping
    return kernels != "fused" and act in ("gelu_new", "gelu_fast")


def eager_rms_norms(model: ModelSpec, kernels: str) -> bool:
    """Whether the blocks' RMSNorms run as eager ops (`kernels` eager) that save more than a fused norm's input:
    Hugging Face's LlamaRMSNorm and torchtitan's RMSNorm without torch.compile (`_eager_norm_bytes`), HF's
    T5LayerNorm (T5 / mT5, `_eager_t5_norm_bytes`). Fused (Liger, Megatron's TE, Inductor) and one-kernel norms
    (eager-fused-norm) do not; GPT-2's LayerNorm is one aten kernel that saves its input."""
    return (model.family == "llama" or model.is_encoder_decoder) and kernels == "eager"


def _eager_norm_bytes(model: ModelSpec) -> float:
    """Bytes per token an eager Llama block's two RMSNorms save beyond the fused count (the input, a B per element):
    `x.float()` is saved by `pow` and by the normalising `mul` (4 B per element; the 16-bit input itself is then
    saved by nothing) and the weight `mul` saves the normalised tensor cast back (a) -- HF LlamaRMSNorm.forward
    (transformers 4.x / 5.x) and torchtitan's RMSNorm (`_norm(x.float()).type_as(x) * weight`, models/norms.py at
    9dec370a) alike: 4 + a for a, +4 B per element and norm (fp32 runs: x itself and the normalised fp32 tensor).
    Eager RoPE adds nothing: `q * cos + rotate_half(q) * sin` (HF) and `xq_ * freqs_cis` (torchtitan) save only the
    cos / sin / freqs operand, autograd saving a mul's input only for an operand that requires grad."""
    return 2 * 4.0 * model.d_model


def _eager_t5_norm_bytes(model: ModelSpec, a: int) -> float:
    """Bytes per token and norm HF's T5LayerNorm saves beyond the fused count (transformers 4.x modeling_t5.py):
    `hidden_states.to(torch.float32).pow(2)` saves the fp32 copy (4 B per element, none when x is fp32: pow saves x),
    the normalising `mul` saves the input x itself (the counted a) and its fp32 product is cast back to the weight's
    dtype, which the weight `mul` saves (a): 4 + a beyond the input at 16 bits, a at 32."""
    return ((4 if a < 4 else 0) + a) * model.d_model


def eager_fp32_softmax(model: ModelSpec, st) -> bool:
    """Whether an eager (materialised-score) attention saves its softmax output in fp32, 4 bytes per score element
    instead of the compute dtype's (SoftmaxBackward saves its result): Hugging Face T5 / mT5 and nanoT5 take
    `softmax(scores.float(), dim=-1).type_as(scores)` under any engine (transformers 4.x T5Attention.forward), and HF
    GPT2Attention._attn under torch.autocast (engine ddp in 16 bits: softmax is on autocast's fp32 list, and
    GPT2Model adds its padding mask in the fp32 parameters' dtype; gpt2eager, costmodel/eager_kernels.autocast_gpt_s).
    The dropout output, in the compute dtype, is what the score @ v matmul saves. Not Megatron's fused scale-mask
    softmax (engine megatron), nor DeepSpeed's fp16 GPT-2 or Megatron-LM 2019's FP16_Module (16-bit softmax). HF
    OPT / BLOOM / Llama eager also softmax in fp32 under any engine: keyed by attention_kernel hf-fp32-softmax (OPT,
    dschat2023sft), the others not (no published row runs them)."""
    if st.attention == "flash" or st.engine == "megatron":
        return False
    if model.is_encoder_decoder:  # t5 / mt5
        return True
    if st.attention_kernel == "hf-fp32-softmax":
        return True
    return model.family == "gpt2" and st.engine == "ddp" and st.precision in ("bf16", "fp16")


@lru_cache(maxsize=8192)
def activation_parts(model: ModelSpec, micro_batch: int, seq_len: int, target_len: int, precision: str,
                     flash: bool, kv_native: bool = False, fused_glu: bool = False, eager_gelu: bool = False,
                     fp32_scores: bool = False, eager_norms: bool = False
                     ) -> tuple[tuple[float, float, float, float], tuple[float, float, float, float]]:
    """Per-layer activation bytes of one micro-batch, for one encoder block and one decoder block:
    each (replicated, sharded, softmax, block input). `kv_native`: a flash kernel that takes grouped-query K, V
    un-repeated (`gqa_native`); `fused_glu`: a SwiGLU that saves only its input (`fused_swiglu`); `eager_gelu`: HF's
    composed tanh GELU as eager ops (`eager_composed_gelu`); `fp32_scores`: eager scores' softmax saved in fp32
    (`eager_fp32_softmax`); `eager_norms`: eager RMSNorms (`eager_rms_norms`)."""
    m, a = model, ACT_BYTES[precision]
    h, i, f, heads = m.d_model, m.inner_dim, m.d_ff, m.num_heads
    mask = 0 if m.family == "llama" else 1  # Llama has no dropout
    b = micro_batch
    enc = (0.0, 0.0, 0.0, 0.0)
    if m.is_encoder_decoder:
        s, t = seq_len * b, target_len * b
        r1, s1, x1 = _attn_block(h, i, s, seq_len, heads, a, mask, flash, False, fp32_scores=fp32_scores)
        r2, s2 = _ffn_block(h, f, s, a, mask, m.gated_ffn, eager_gelu=eager_gelu)
        t5n = _eager_t5_norm_bytes(m, a) if eager_norms else 0.0  # 2 norms an encoder block, 3 a decoder block
        enc = (r1 + r2 + 2 * a * h * s + 2 * t5n * s, s1 + s2, x1, a * h * s)
        r1, s1, x1 = _attn_block(h, i, t, target_len, heads, a, mask, flash, False, fp32_scores=fp32_scores)
        r3, s3, x3 = _attn_block(h, i, t, seq_len, heads, a, mask, flash, True, fp32_scores=fp32_scores)
        r2, s2 = _ffn_block(h, f, t, a, mask, m.gated_ffn, eager_gelu=eager_gelu)
        dec = (r1 + r2 + r3 + 3 * a * h * t + 3 * t5n * t, s1 + s2 + s3, x1 + x3, a * h * t)
        return enc, dec
    s = seq_len * b
    kv = m.kv_heads * m.d_kv if flash and kv_native else 0
    r1, s1, x1 = _attn_block(h, i, s, seq_len, heads, a, mask, flash, False, kv, fp32_scores)
    r2, s2 = _ffn_block(h, f, s, a, mask, m.gated_ffn, fused_glu and m.ffn == "swiglu", eager_gelu)
    norms = _eager_norm_bytes(m) * s if eager_norms and m.family == "llama" else 0.0
    return enc, (r1 + r2 + 2 * a * h * s + norms, s1 + s2, x1, a * h * s)


def gqa_native(engine: str) -> bool:
    """Whether the engine's flash attention saves grouped-query K, V at their own width: Megatron-Core's Transformer
    Engine DotProductAttention (num_gqa_groups) does; the Hugging Face / torchtitan models the other engines run
    expand them with repeat_kv first."""
    return engine == "megatron"


def fused_swiglu(engine: str) -> bool:
    """Whether the engine's SwiGLU saves only its input. Megatron-Core's MLP runs bias_swiglu_impl (bias_swiglu_fusion,
    on by default): SwiGLUFunction saves the fc1 output [gate | up] (2 x f per token) and its backward recomputes
    silu(gate) * up from it (megatron/core/fusions/fused_bias_swiglu.py, swiglu_back); fc2 saves the product (f):
    3 tensors of width f. The Hugging Face / torchtitan act_fn(gate) * up keeps gate, silu(gate), up and the product
    (4), as legacy Megatron's unfused swiglu keeps the fc1 output, silu(gate) and the product (4 x f)."""
    return engine == "megatron"


def split_saved_input(st, tp: int) -> bool:
    """Whether a full recomputation keeps each checkpointed block input split over the tensor-parallel ranks
    (Strategy.distribute_saved_activations: Megatron-LM's CheckpointFunction stores split_tensor_into_1d_equal_chunks
    of it and gathers it back before the re-run). Under sequence parallelism the input is already split."""
    return st.distribute_saved_activations and st.recompute == "full" and tp > 1 and not st.sequence_parallel


def layer_activation_bytes(part: tuple[float, float, float, float], tp: int, sp: bool, recompute: str,
                           split_input: bool = False) -> float:
    """One block's stored activations on one tensor-parallel rank (Korthikanti Table 2); `split_input`: the
    checkpointed input of a full recomputation kept 1/tp per rank (split_saved_input)."""
    rep, shard, soft, inp = part
    if recompute == "full":
        return inp / tp if sp or split_input else inp  # only the block input is kept
    if recompute == "selective":
        soft = 0.0  # the softmax and its dropout are recomputed
    return (rep + shard + soft) / tp if sp else rep + (shard + soft) / tp


def boundary_bytes(model: ModelSpec, micro_batch: int, seq_len: int, target_len: int, precision: str) -> float:
    """Bytes a pipeline stage sends across its boundary per micro-batch and direction: the hidden state of every
    token (encoder and decoder), in the compute dtype."""
    return micro_batch * (seq_len + target_len) * model.d_model * ACT_BYTES[precision]


def rank_memory(model: ModelSpec, st, psi: float, dp: int, tp: int, activations: float, device,
                options: CostOptions, grad_accum: int) -> Memory:
    """Bytes on one rank that holds `psi` parameters before ZeRO/FSDP sharding and `activations` bytes of
    activations: its model states (sharded over `dp`, or offloaded), the engine's buffers and the process overhead."""
    return memory_with_activations(rank_states(model, st, psi, dp, tp, device, options, grad_accum), activations)


def memory_with_activations(states: tuple, activations: float) -> Memory:
    """rank_memory of a rank with `activations` bytes of activations whose other terms are `states` (rank_states:
    a planner's micro-batch variants of one strategy share them, costmodel.estimate.MicroBatchGroup)."""
    w, g, o, host, nvme, buf, step, overhead = states
    transient = peak_transient(w + g + o + activations + buf, w + g + o + step)
    return Memory(w, g, o, activations, buf, overhead, host, nvme, transient)


_RANK_STATES: dict[tuple, tuple] = {}


def rank_states(model: ModelSpec, st, psi: float, dp: int, tp: int, device, options: CostOptions,
                grad_accum: int) -> tuple:
    """(weights, grads, optimizer, host, nvme, buffers, step temporaries, overhead) bytes of rank_memory -- what
    does not depend on the activations -- memoised by every argument its functions take and the engines.yaml entry
    buffer_bytes reads (the model, device, options and that entry by identity, guarded by the stored references:
    a test may swap the entry): a plan's micro-batches of one strategy share them (but DDP's bucket views, which
    differ with and without accumulation: `grad_accum` enters as whether it is 1). A new input of model_states /
    buffer_bytes / step_temporary_bytes belongs in the key."""
    eng = engine_table().get(st.engine)
    key = (id(model), id(device), id(options), id(eng), psi, dp, tp, st.engine, st.zero, st.precision,
           st.offload_optimizer, st.offload_params, st.grad_reduce, st.optimizer_dtype, st.overlap_grad_comm,
           st.optimizer_loop, st.optimizer_kind, st.pp, st.grad_accum_dtype, st.grad_buckets, grad_accum == 1, st.gradient_sync,
           st.fp8_params)
    hit = _RANK_STATES.get(key)
    if hit is not None and hit[0] is model and hit[1] is device and hit[2] is options and hit[4] is eng:
        return hit[3]
    if len(_RANK_STATES) > 100_000:
        _RANK_STATES.clear()
    w, g, o, host, nvme = model_states(psi, dp, st.engine, st.zero, st.precision, st.offload_optimizer,
                                       st.offload_params, st.grad_reduce, st.optimizer_dtype, st.pp,
                                       st.grad_accum_dtype, st.optimizer_kind)
    buf = buffer_bytes(model, psi, dp, tp, st.engine, st.zero, st.precision, st.offload_optimizer, options,
                       st.overlap_grad_comm, st.pp, st.grad_accum_dtype, st.grad_buckets, grad_accum)
    # deferred reduce-scatters: the unsharded gradients take the place of the sharded ones, which exist only after the
    # last micro-batch's reduce-scatter has freed them (zero_grad sets .grad to None each step)
    buf += max(0.0, fsdp_unsynced_grad_bytes(psi, st.precision, st.grad_reduce, st.gradient_sync, grad_accum) - g)
    if st.precision == fp8.FP8:  # Transformer Engine's cached FP8 weights (costmodel/fp8.py)
        buf += fp8.weight_cache_bytes(model, psi, fp8.recipe(st.engine), st.fp8_params)
    if st.fp8_params:  # the blocks' linear weights held as FP8 (1 B), not bf16: the psi share of a rank's blocks
        p = param_breakdown(model)
        w -= fp8.param_bytes_saved(psi * p.layers_matmul / p.total)
    buf += fsdp_pipeline_unsharded_param_bytes(psi, st.precision, st.gradient_sync, st.pp, grad_accum)
    step = 0.0 if st.offload_optimizer != "none" or st.offload_params != "none" else \
        step_temporary_bytes(psi, dp, st.engine, st.zero, st.precision,
                             device.kind != "cpu" and st.optimizer_loop in FOREACH_LOOPS,  # per-tensor: no foreach
                             st.optimizer_loop, st.pp, st.grad_buckets)
    states = (w, g, o, host, nvme, buf, step, overhead_bytes(device))
    _RANK_STATES[key] = (model, device, options, states, eng)
    return states


def peak_transient(backward_peak: float, step_peak: float) -> float:
    """Bytes the step's highest moment adds above the backward's (model states + buffers + activations) when that
    moment is the optimizer step: activations and communication buckets are freed by then, its temporaries
    allocated. (A peak over a whole run -- max_memory_allocated/reserved never reset, nvidia-smi -- also sees the
    model's load: DeepSpeed moves a model not built under deepspeed.zero.Init to the device whole before ZeRO-3
    partitions it, runtime/engine.py _configure_distributed_model `self.module.to(self.device)`; not priced: no
    strategy key says how a run built its model, and the published ZeRO-3 runs built under zero.Init.)"""
    return max(0.0, step_peak - backward_peak)


# optimizer_loop values whose step runs torch's foreach AdamW. Not "engine": on fsdp / ddp it is torch
# AdamW(fused=True), as step.optimizer_loop_s prices its time (no unfused loop) -- torch._fused_adamw_ updates the
# parameters and moments in place, no temporary of the parameters' size (torch/optim/adam.py _fused_adam, torch
# 2.13); torchtitan's default since 6e498855 (2025-02, 'use Fused AdamW as default'), KempnerForge's, nanoGPT's
FOREACH_LOOPS = ("foreach", "deepspeed-unfused", "deepspeed-bf16")


def deepspeed_fp16_optimizer(engine: str, zero: int, precision: str, pp: int) -> bool:
    """Whether DeepSpeed wraps the optimizer in its FP16_Optimizer (ZeRO 0 in fp16, or in bf16 outside a pipeline:
    step_temporary_bytes says from which code), whose step flattens fp32 copies of the gradients."""
    return engine == "deepspeed" and zero == 0 and (precision == "fp16" or (precision == "bf16" and pp == 1))


def step_temporary_bytes(psi: float, dp: int, engine: str, zero: int, precision: str, foreach: bool = True,
                         loop: str = "engine", pp: int = 1, grad_buckets: str = "engine") -> float:
    """What the optimizer step holds beside the model states (the step runs on the device; offloaded steps run on the
    host). DeepSpeed's FP16_Optimizer (fp16, ZeRO 0 -- the engine wraps a fused Adam in it: runtime/fp16/
    fused_optimizer.py step(), v0.9.5 .. 0.19 alike; bf16, ZeRO 0, outside a pipeline too since DeepSpeed's
    DDP_BFLOAT16 path -- engine._do_optimizer_sanity_check at v0.19.8: bf16 with bf16 gradient accumulation, the
    default without ZeRO, is wrapped by _configure_fp16_optimizer with a bf16 low-precision dtype; a bf16 pipeline
    keeps BF16_Optimizer, and so did every ZeRO-0 bf16 run while DeepSpeed defaulted its gradient accumulation to
    fp32 there, get_data_types) flattens the gradients into a new fp32 buffer,
    `_flatten_dense_tensors([p.grad.to(fp32) for p in group])`: the per-tensor fp32 copies (4 psi) and the flat
    result (4 psi) exist at once, beside the fp16 gradients, which are dropped only after. torch's foreach AdamW
    (`foreach` True, FOREACH_LOOPS: torchtitan before 6e498855, scalestudy's make_adamw, HF Trainer's adamw_torch --
    foreach by default on CUDA; False: a CPU rank's per-tensor loop, or the fused AdamW "engine" means on fsdp / ddp,
    whose kernel updates in place), allocates one fp32
    temporary of its parameters' size (_multi_tensor_adam: `exp_avg_sq_sqrt = torch._foreach_sqrt(exp_avg_sqs)`):
    4 psi / dp under FSDP or ZeroRedundancyOptimizer, 4 psi under DDP, whose gradient buckets
    (gradient_as_bucket_view False) also stay allocated through the step -- with it True (grad_buckets "view") the
    step's .grad tensors are the buckets (ddp_bucket_copy_bytes), nothing beside them. Others step in place on flat or
    sharded fp32 buffers already counted
    (BF16_Optimizer and ZeRO 1-3 with DeepSpeed's fused Adam, Megatron's distributed optimizer). DeepSpeed given
    torch's AdamW as a client optimizer (`loop` foreach: scalestudy's `train`) holds its foreach temporary over the
    rank's flat partition, 4 psi / dp; at ZeRO-0 in 16 bits FP16_UnfusedOptimizer (`loop` deepspeed-unfused) makes a
    per-tensor fp32 gradient copy (4 psi) beside that temporary (4 psi); a bf16 pipeline's BF16_Optimizer (`loop`
    deepspeed-bf16, with train's bf16 gradient accumulation: runtime/bf16_optimizer.py step() at v0.19.8) casts the
    rank's 1/dp gradient partition to fp32 and steps its flat fp32 partition: 4 psi / dp + 4 psi / dp."""
    if loop == "deepspeed-bf16" and engine == "deepspeed":
        return 8.0 * psi / dp
    if deepspeed_fp16_optimizer(engine, zero, precision, pp) or (engine, zero, loop) == ("deepspeed", 0,
                                                                                          "deepspeed-unfused"):
        return 8.0 * psi
    if engine == "deepspeed" and loop == "foreach" and foreach:
        return 4.0 * psi / (dp if zero else 1)
    temporary = 4.0 * psi / (dp if engine == "fsdp" or zero else 1) if foreach else 0.0
    if engine == "fsdp":
        return temporary
    if engine == "ddp":
        return (0.0 if grad_buckets == "view" else 4.0 * psi) + temporary
    return 0.0


@lru_cache(maxsize=4096)
def stage_in_flight(schedule: str, pp: int, m: int, v: int) -> tuple[float, ...]:
    """Micro-batches whose activations each pipeline rank holds at its peak, rank 0 first, in whole-stage units.
    Megatron-Core's schedules hold a rank's warm-up forwards plus one (max_outstanding_backprops = warm-up + 1,
    core/pipeline_parallel/schedules.py): 1F1B warms up pp - r - 1 micro-batches, at most m (DeepSpeed's
    TrainSchedule: num_pipe_buffers min(stages - stage_id, micro_batches), the same); GPipe runs every forward
    first (m); interleaved warms up 2 (pp - r - 1) + (v - 1) pp model chunks of 1/v stage each, at most m v, and
    all of them when m == pp (all_warmup_microbatches, f2e5db40). Rank 0 holds the most, but a later rank with
    more layers (uneven `stage_layers`) can hold more bytes."""
    if pp == 1:
        return (1.0,)
    if schedule == "gpipe" or (schedule == "interleaved" and m == pp):
        return (float(m),) * pp
    if schedule == "interleaved":
        return tuple(min(m * v, 2 * (pp - 1 - r) + (v - 1) * pp + 1) / v for r in range(pp))
    return tuple(float(min(pp - r, m)) for r in range(pp))


def activation_bytes(model: ModelSpec, micro_batch: int, seq_len: int, target_len: int, precision: str,
                     tp: int, pp: int, in_flight: tuple[float, ...], recompute: str, flash: bool, sp: bool,
                     stage_layers: tuple[int, ...] = (), cross_entropy: str = "engine",
                     kv_native: bool = False, fused_glu: bool = False, eager_gelu: bool = False,
                     fp32_scores: bool = False, eager_norms: bool = False,
                     stage_masks: tuple[float, ...] = (), head_tp: int = 0, split_input: bool = False) -> float:
    """Activation bytes on the busiest device, plus the logits (split over `head_tp` ranks: strategy.logit_shards;
    0 = tp). Under pipeline parallelism rank r holds
    `in_flight[r]` micro-batches (`stage_in_flight`) of its `stage_layers[r]` layers (an even split when not
    given), the last rank also the logits of its micro-batch in the head, and `stage_masks[r]` bytes beside them
    (a T5's position-bias masks: attention_bias.priced_bias_memory of the stage's blocks; none when not given)."""
    total, encoder, working, logits = _stored_working_logits(model, micro_batch, seq_len, target_len, precision, tp,
                                                             recompute, flash, sp and tp > 1, cross_entropy,
                                                             kv_native, fused_glu, eager_gelu, fp32_scores,
                                                             eager_norms, head_tp, split_input)
    if pp == 1:
        return total + head_or_recompute_bytes(logits, working)
    stored = _stage_stored_bytes(model, stage_layers or (1,) * pp, total, encoder)
    masks = stage_masks or (0.0,) * pp
    busiest = max(b * f + m for b, f, m in zip(stored[:-1], in_flight[:-1], masks[:-1])) + working
    return max(busiest, stored[-1] * in_flight[-1] + masks[-1] + head_or_recompute_bytes(logits, working))


_STAGE_STORED: dict[tuple, tuple] = {}


def _stage_stored_bytes(model: ModelSpec, layers: tuple[int, ...], total: float, encoder: float) -> tuple[float, ...]:
    """_stage_stored_bytes_of, memoised (the model by identity, kept to guard reuse): a planner asks again for each
    schedule and accumulation of a pipeline depth, which none of its inputs holds."""
    key = (id(model), layers, total, encoder)
    hit = _STAGE_STORED.get(key)
    if hit is not None and hit[0] is model:
        return hit[1]
    if len(_STAGE_STORED) > 100_000:
        _STAGE_STORED.clear()
    stored = tuple(_stage_stored_bytes_of(model, layers, total, encoder))
    _STAGE_STORED[key] = (model, stored)
    return stored


def _stage_stored_bytes_of(model: ModelSpec, layers: tuple[int, ...], total: float, encoder: float) -> list[float]:
    """Each pipeline stage's stored activations of one micro-batch: its own blocks' -- a T5's encoder stack comes
    first, its blocks at the encoder length, the decoder's at the target length (as stages.stage_activations: the
    per-stage path), so the encoder's stages hold more than the average block; evenly per block for one kind of
    block, or where the split does not name the blocks (no stage_layers). `encoder`: the encoder blocks' part of
    `total`."""
    le, blocks = (model.num_layers if model.is_encoder_decoder else 0), sum(layers)
    if not le or not encoder or blocks != model.total_layers:
        return [total / blocks * n for n in layers]
    enc, dec = encoder / le, (total - encoder) / (blocks - le)
    out, start = [], 0
    for n in layers:
        n_enc = max(0, min(start + n, le) - start)
        out.append(n_enc * enc + (n - n_enc) * dec)
        start += n
    return out


_STORED: dict[tuple, tuple] = {}


def _stored_working_logits(model: ModelSpec, micro_batch: int, seq_len: int, target_len: int, precision: str,
                           tp: int, recompute: str, flash: bool, sp: bool, cross_entropy: str, kv_native: bool,
                           fused_glu: bool, eager_gelu: bool, fp32_scores: bool,
                           eager_norms: bool = False, head_tp: int = 0,
                           split_input: bool = False) -> tuple[float, float, float, float]:
    """(stored activations of every block, the encoder blocks' part of them, a block's backward working set, the
    loss's buffers) of one micro-batch on one rank without pipeline parallelism (`activation_bytes` spreads them
    over the stages). Memoised on its inputs, the model by identity (kept to guard reuse): a planner asks again
    for each pipeline depth, schedule and accumulation, which none of them enters."""
    key = (id(model), micro_batch, seq_len, target_len, precision, tp, recompute, flash, sp, cross_entropy, kv_native,
           fused_glu, eager_gelu, fp32_scores, eager_norms, head_tp, split_input)
    hit = _STORED.get(key)
    if hit is not None and hit[0] is model:
        return hit[1]
    if len(_STORED) > 100_000:
        _STORED.clear()
    parts = _stored_working_logits_of(model, micro_batch, seq_len, target_len, precision, tp, recompute, flash, sp,
                                      cross_entropy, kv_native, fused_glu, eager_gelu, fp32_scores, eager_norms,
                                      head_tp, split_input)
    _STORED[key] = (model, parts)
    return parts


def _stored_working_logits_of(model: ModelSpec, micro_batch: int, seq_len: int, target_len: int, precision: str,
                              tp: int, recompute: str, flash: bool, sp: bool, cross_entropy: str, kv_native: bool,
                              fused_glu: bool, eager_gelu: bool, fp32_scores: bool, eager_norms: bool,
                              head_tp: int, split_input: bool = False) -> tuple[float, float, float, float]:
    enc, dec = activation_parts(model, micro_batch, seq_len, target_len, precision, flash, kv_native, fused_glu,
                                eager_gelu, fp32_scores, eager_norms)
    le, ld = (model.num_layers, model.num_decoder_layers) if model.is_encoder_decoder else (0, model.num_layers)
    if recompute == "op":  # torchtitan's operator-level selective checkpointing (costmodel/op_checkpoint.py)
        from scalestudy.costmodel.op_checkpoint import layer_bytes

        kept = layer_bytes(model, micro_batch * seq_len, ACT_BYTES[precision], tp, sp)
        encoder, total = 0.0, ld * kept
        working = layer_activation_bytes(dec, tp, sp, "none") - kept  # one block re-run at a time
    else:
        encoder = le * layer_activation_bytes(enc, tp, sp, recompute, split_input)
        total = encoder + ld * layer_activation_bytes(dec, tp, sp, recompute, split_input)
        working = recompute_working_bytes(enc, dec, tp, sp, recompute, split_input)
    working += block_gradient_bytes(model, micro_batch, seq_len, target_len, precision, tp, sp)
    return total, encoder, working, logits_bytes(model, micro_batch, seq_len, target_len, precision,
                                                 head_tp or tp, cross_entropy)


def head_or_recompute_bytes(logits: float, working: float) -> float:
    """The loss's buffers and a recomputed block's activations are never alive together: the logits (and the
    cross-entropy's copies or, fused-linear, its precomputed gradients) live from the head's forward to the head's
    backward, which frees them before the last block's backward -- the first to re-run its forward -- begins."""
    return max(logits, working)


def block_gradient_bytes(model: ModelSpec, micro_batch: int, seq_len: int, target_len: int, precision: str,
                         tp: int, sp: bool) -> float:
    """Gradients alive while a block's backward runs, beside the stored activations (which Korthikanti's per-layer
    accounting, the stored tensors only, leaves out): the gradient of the block's output arriving and of its input
    being formed (two hidden-width tensors per token, sequence-sharded under sp) and the gradient of the FFN's
    widest activation (d_ff per token, tensor-parallel-sharded), in the compute dtype -- the autograd engine frees
    an input gradient only after the node that consumes it has produced its own. A lower bound: it counts one
    d_ff-wide gradient, as Liger's SwiGLU backward (writes d(gate), d(up) in place of its saved inputs) holds; an
    unfused x * silu(g) holds up to three at once. The longest stream (encoder or decoder) sets the tokens."""
    sp = sp and tp > 1
    tokens = micro_batch * max(seq_len, target_len if model.is_encoder_decoder else 0)
    return ACT_BYTES[precision] * tokens * (2 * model.d_model / (tp if sp else 1) + model.d_ff / tp)


def recompute_working_bytes(enc: tuple, dec: tuple, tp: int, sp: bool, recompute: str,
                            split_input: bool = False) -> float:
    """What a recomputed block holds while its backward runs, beyond what is stored: under full recomputation the
    block's whole activation set, one block at a time (Korthikanti et al. 2022 Sec. 5: "in addition to the
    stored inputs, the activations of one layer") -- with `split_input` the gathered whole input among them;
    under selective, its attention softmax and dropout."""
    if recompute == "none":
        return 0.0
    parts = [p for p in (enc, dec) if p[3]]
    if recompute == "full":
        return max(layer_activation_bytes(p, tp, sp, "none") - layer_activation_bytes(p, tp, sp, "full", split_input)
                   for p in parts)
    return max(p[2] / tp for p in parts)


def loss_kernel(st) -> str:
    """The loss kernel a strategy's `cross_entropy: engine` means for the memory model: "torch" (F.cross_entropy on
    the upcast logits, `logits_bytes`) on the torch-native engines (fsdp, ddp: torchtitan's loss_fn, the Hugging Face
    models' loss), Megatron's vocab-parallel kernel otherwise; "hf" as "hf-autocast" where torch.autocast runs the
    loss in fp32 (engine ddp in 16 bits, as eager_kernels.autocast_param_s); an explicit value as given. Time
    (step._head_s) and memory both take this name."""
    if st.cross_entropy == "engine" and st.engine in ("fsdp", "ddp"):
        return "torch"
    if st.cross_entropy == "hf" and st.engine == "ddp" and st.precision in ("bf16", "fp16"):
        return "hf-autocast"
    return st.cross_entropy


def logits_bytes(model: ModelSpec, micro_batch: int, seq_len: int, target_len: int, precision: str,
                 tp: int, cross_entropy: str = "engine") -> float:
    """Peak bytes of the logits and the cross-entropy over them (vocabulary-parallel under tp), by the loss kernel
    the run used (Strategy.cross_entropy; `a` = bytes of the compute dtype, per logit):
    - engine: the logits, their fp32 copy and the fp32 shifted logits that become the saved softmax, a + 8
      (Megatron-LM's vocab_parallel_cross_entropy on `logits.float()` before 9634c0e4: its backward turns the saved
      softmax into the gradient in place);
    - torch (`loss_kernel`: engine on fsdp/ddp): torch F.cross_entropy on `logits.float()` (torchtitan train.py
      loss_fn at 9dec370a, HF's loss): the forward holds the logits, the fp32 copy and log_softmax's output (a + 8);
      its backward is the higher peak, 12 -- the saved log-softmax, nll_loss's gradient and log_softmax_backward's
      output, all fp32, alive at once (torchtitan `del pred` frees the 16-bit logits before loss.backward()).
      On logits split over tp ranks (torchtitan's loss_parallel: the head's output a Shard(-1) DTensor) torch's
      DTensor handlers run it instead (torch/distributed/tensor/parallel/loss.py, the same from its first version
      to torch 2.13): _nll_loss_and_log_softmax_backward computes `(grad_input + torch.exp(x)) * grad_output` over
      the saved log-softmax x, with grad_input a zero-filled fp32 buffer -- x, grad_input, the sum and the product
      alive at once, 16 (`loss_parallel_peak_bytes`);
    - torch-compiled: that loss under torch.compile (torchtitan components/loss.py build_cross_entropy_loss since
      bbb1b616, 2025-04-02: `torch.compile(loss_fn)` when training.compile is set; Dec 2024's 9dec370a ran it
      eager, e8977b00). The min-cut partitioner saves the 16-bit logits and two fp32 per token (the row max and
      log-sum-exp) and the backward kernel writes the gradient in the logits' dtype, 2a + 8 per token
      (`compiled_loss_peak_bytes`; read off Inductor's forward and backward graphs, torch 2.13);
    - inplace: Megatron-Core since 9634c0e4 (2024-06-13), fused (cross_entropy_loss_fusion) or not: one fp32 copy
      of the logits, max-subtracted, exponentiated and normalised in place into the saved softmax, a + 4
      (tensor_parallel/cross_entropy.py calculate_predicted_logits; the backward's gradient is that buffer, cast
      to the compute dtype at the end: 4 + a);
    - fused: flash-attn's CrossEntropyLoss (llm-foundry's default loss_fn fused_crossentropy): the kernel reads the
      logits in their dtype and saves them with one fp32 log-sum-exp per token; the backward writes a gradient of
      the logits' dtype, 2a (+ 4 per token);
    - fused-linear: Liger's LigerFusedLinearCrossEntropyFunction never materialises the logits: it runs the head
      GEMM and the loss over token chunks of next_power_of_2(ceil(tokens / ceil(V / h))) rows (~ tokens x h
      elements of logits) and computes, during the forward, the gradient of the head input (tokens x h) and of the
      head weight (V x h), both in the compute dtype and held until the backward (+ 4 per token of fp32 loss)
      (liger_kernel/ops/fused_linear_cross_entropy.py fused_linear_cross_entropy_forward);
    - torch-16bit: torch F.cross_entropy on the 16-bit logits, no upcast, with the caller's reference to the logits
      kept through loss.backward() (KempnerForge scripts/train.py: `logits = model(input_ids)`, then
      F.cross_entropy(logits.view(-1, V), labels.view(-1)) and backward in the same scope). aten cross_entropy =
      nll_loss(log_softmax(x)): the forward holds the logits and log_softmax's output (2a); at log_softmax_backward
      the logits, the saved log-softmax, nll_loss_backward's zero-filled gradient and log_softmax_backward's output
      are alive at once, 4a -- the peak;
    - hf / hf-autocast: a Hugging Face transformers 4.x model's CrossEntropyLoss (flops.cross_entropy_bytes_per_logit)
      in `c` bytes (the logits' dtype; fp32 under autocast). Forward peak: the logits, a causal model's shifted
      copy, autocast's fp32 copy and log_softmax's output (a [+ a] [+ 4] + c); the backward's: the saved
      log-softmax, nll_loss's zero-filled gradient and log_softmax_backward's output (3c). The model's output keeps
      the logits until the step's end in neither (the Trainer's compute_loss drops the outputs); the larger wins."""
    out_tokens = micro_batch * (target_len if model.is_encoder_decoder else seq_len)
    a, v, h = ACT_BYTES[precision], model.vocab_size, model.d_model
    if cross_entropy in ("hf", "hf-autocast"):
        c = 4 if cross_entropy == "hf-autocast" else a
        forward = a + (0 if model.is_encoder_decoder else a) + (4 if c > a else 0) + c
        return out_tokens * v * max(forward, 3 * c) / tp
    if cross_entropy == "fused-linear":
        chunk = fused_linear_chunk_tokens(out_tokens, v, h)
        return a * (out_tokens * h + (v * h + chunk * v) / tp) + 4 * out_tokens
    if cross_entropy in ("fused", "fused-metrics"):  # the metrics' fp32 passes run after the backward, no_grad
        return out_tokens * v * 2 * a / tp + 4 * out_tokens
    if cross_entropy == "torch":
        per_logit = loss_parallel_peak_bytes() if tp > 1 else max(a + 8 if a < 4 else 8, 12)
        return out_tokens * v * per_logit / tp
    if cross_entropy == "torch-compiled":
        return out_tokens * (v * compiled_loss_peak_bytes(a) / tp + 8)
    if cross_entropy == "torch-16bit":
        return out_tokens * v * 4 * a / tp
    return out_tokens * v * (a + (4 if cross_entropy == "inplace" else 8)) / tp


def loss_parallel_peak_bytes() -> float:
    """Bytes per logit at the peak of torch's DTensor loss_parallel cross-entropy on `logits.float()` (torch/
    distributed/tensor/parallel/loss.py): its fused nll / log-softmax backward `(grad_input + torch.exp(x)) *
    grad_output` holds the saved fp32 log-softmax x, the zero-filled fp32 grad_input, their sum and the product
    (exp(x) is freed once summed): 4 fp32 buffers. The forward's peak is lower: the fp32 copy, the shifted logits and
    exp(shifted) or the output, 12 beside the 16-bit logits."""
    return 4.0 * 4


def compiled_loss_peak_bytes(a: int) -> float:
    """Bytes per logit at the peak of torch.compile'd F.cross_entropy(logits.float(), labels) on `a`-byte logits:
    the backward holds the saved logits and writes a new gradient of their dtype (Inductor's backward graph
    allocates it, no reuse of the saved input); the fp32 upcast, the log-softmax and exp are fused away."""
    return 2.0 * a


def overhead_bytes(device) -> float:
    """Per-process framework memory (CUDA context and workspaces, or a CPU rank's imports): the device YAML's
    process_memory_bytes."""
    return device.process_memory_bytes


# ------------------------------------------------------------------ device total: what nvidia-smi reads beyond it
# `Memory.total` is tensors + the CUDA context (`overhead`: the device YAML's process_memory_bytes, 1 GiB on a GPU;
# pytorch#86509 measured 666,632,192 B for torch's own kernels loaded eagerly, 287 MB lazily -- CUDA >= 11.7 --
# and CUDA < 11.7 loads every kernel of cuBLAS / cuDNN too, '>1000MB' (pytorch#107667): the allowance is a floor
# there). nvidia-smi also counts memory the caching allocator never hands out as tensors: NCCL's communicator buffers
# (cudaMalloc'd by NCCL itself) and cuBLAS's workspace. Those are `device_total_bytes`, compared with the measured
# rows that read nvidia-smi (published.py memory_row); `total` and 'fits' are unchanged. The allocator's cached free
# blocks that the code's allocation order fixes are `allocator_cache_bytes` (below); it frees them before it reports
# out of memory (module docstring), so they do not decide 'fits' either.

# One NCCL connection's buffers, one per protocol (NCCL 2.10.3 -- the version BigScience's Jean Zay logs print,
# bigscience experiments/bandwidth/all_reduce_bench-a100-n4.txt 'NCCL version 2.10.3+cuda11.3'; src/init.cc
# DEFAULT_BUFFSIZE / DEFAULT_LL_BUFFSIZE / DEFAULT_LL128_BUFFSIZE from src/include/devcomm.h; transport/p2p.cc puts
# all three on the receiving side, the Simple one on the sender under P2P read: one set per connection either way)
NCCL_SIMPLE_BYTES = 1 << 22  # DEFAULT_BUFFSIZE, 4 MiB (NCCL_BUFFSIZE)
NCCL_LL_BYTES = 8 * 512 * 8 * 16  # NCCL_LL_LINES_PER_THREAD x NCCL_LL_MAX_NTHREADS x NCCL_STEPS x 16 B fifo line
NCCL_LL128_BYTES = 120 * 640 * 8 * 8  # NCCL_LL128_ELEMS_PER_THREAD x NCCL_LL128_MAX_NTHREADS x NCCL_STEPS x 8 B
NCCL_CONNECTION_BYTES = NCCL_SIMPLE_BYTES + NCCL_LL_BYTES + NCCL_LL128_BYTES  # 9,633,792 B
# Channels per communicator: within one NVSwitch node NCCL builds 24 rings (nccl-tests#100, HGX A100 8-GPU, NCCL
# log 'Channel 23/24 ... via P2P/IPC/read'); across Jean Zay's A100 nodes 2 (the BigScience log above, 32 ranks on
# 4 nodes: '2 coll channels, 2 p2p channels, 1 p2p channels per peer').
NCCL_CHANNELS_INTRA_NODE = 24
NCCL_CHANNELS_INTER_NODE = 2
NCCL_P2P_CHANNELS_PER_PEER = 1
# torch's cuBLAS workspace per handle and stream (docs notes/cuda.rst 'cuBLAS workspaces'; CublasHandlePool.cpp
# default ':4096:2:16:8' = 2 x 4096 + 8 x 16 KiB, 32 MiB on Hopper): one compute stream runs the GEMMs
CUBLAS_WORKSPACE_BYTES = {"default": (2 * 4096 + 8 * 16) * 1024, "hopper": 4096 * 8 * 1024}


def nccl_communicator_bytes(ranks: int, intra_node: bool) -> float:
    """Device bytes one NCCL communicator of `ranks` ranks holds on a member: NCCL 2.10 connects a ring and a tree on
    every channel at init (init.cc initTransportsRank): the ring's previous rank (1 connection) and the tree's parent
    and child (1 more for 2 ranks, 2 for more), each one `NCCL_CONNECTION_BYTES`. Checked against nccl#964 (4 A100
    with NVLink, one 4 MB all-reduce per group): 544 MB for a 2-rank group, 688 MB for 3-4 ranks; this gives 462 / 694.
    Across nodes the network connections are counted on the device too (GPUDirect RDMA; without it -- Jean Zay's log
    says NET/IB, not NET/IB/GDRDMA -- net.cc keeps them in host memory: an upper bound there, 58 MB a communicator)."""
    if ranks < 2:
        return 0.0
    channels = NCCL_CHANNELS_INTRA_NODE if intra_node else NCCL_CHANNELS_INTER_NODE
    return channels * (2 if ranks == 2 else 3) * NCCL_CONNECTION_BYTES


def nccl_p2p_bytes() -> float:
    """A pipeline neighbour's send/recv connections (both directions: activations forward, gradients back) on
    NCCL's p2p channels to that peer (1 per peer in the Jean Zay log above; all protocols' buffers,
    transport/p2p.cc)."""
    return 2 * NCCL_P2P_CHANNELS_PER_PEER * NCCL_CONNECTION_BYTES


def rank_communicators(st, dp: int, gpus_per_node: int) -> list[tuple[int, bool, bool]]:
    """(ranks, within one node, carries pipeline send/recv) of every NCCL communicator a first-stage rank uses; torch
    ProcessGroupNCCL creates one lazily per group at its first collective, so only the groups a step touches count.
    Rank order is tp fastest, then dp, then pp (Megatron / DeepSpeed's PipeModelDataParallelTopology). Every run: the
    world group (barriers, the loss and timer reductions), its tensor- and data-parallel groups. DeepSpeed's pipeline
    engine (pipe/engine.py) also reduces over the pipe group (_aggregate_total_loss broadcast) and the model-parallel
    group (tp x pp: the gradient norm, runtime/utils.py get_global_norm with mpu), all-reduces the tied embedding's
    gradient in a first+last stage group (PipelineModule tied_comms), and sends activations with dist.send/recv
    (pipe/p2p.py, torch >= 1.8), for which ProcessGroupNCCL makes a 2-rank communicator per neighbour pair. Its grid
    (pipe/topology.py PipelineParallelGrid, v0.5-0.6) makes its own groups with dist.new_group, so under tp > 1 the
    tensor-parallel ranks share two communicators: Megatron's mpu group (the layers' all-reduces) and the grid's
    slice group (the partitioned activations' and gradients' all-gathers, PartitionedTensor.full, every micro-batch).
    Megatron's own pipelines keep one set of groups (parallel_state: embedding group, p2p on the pipe group)."""
    tp, pp = st.tp, st.pp
    world = tp * dp * pp
    groups: list[tuple[int, bool, bool]] = [(world, world <= gpus_per_node, False)]
    if tp > 1 and tp < world:
        groups.append((tp, tp <= gpus_per_node, False))
    if dp > 1 and dp < world:
        groups.append((dp, tp * dp <= gpus_per_node, False))
    if pp > 1:
        intra = world <= gpus_per_node
        groups.append((pp, intra, False))
        if tp > 1:
            groups.append((tp * pp, intra, False))
            if st.engine == "deepspeed":
                groups.append((tp, tp <= gpus_per_node, False))  # the grid's slice group
        groups.append((2, tp * dp * (pp - 1) < gpus_per_node, False))  # tied embedding: first + last stage
        groups.append((2, tp * dp < gpus_per_node, True))  # the next stage's send/recv pair
    return groups


def nccl_buffer_bytes(st, dp: int, gpus_per_node: int, device) -> float:
    """NCCL's device buffers on one rank: its communicators (`rank_communicators`), 0 on CPU ranks (gloo)."""
    if device.kind == "cpu":
        return 0.0
    return sum(nccl_communicator_bytes(n, intra) + (nccl_p2p_bytes() if p2p else 0.0)
               for n, intra, p2p in rank_communicators(st, dp, gpus_per_node))


def cublas_workspace_bytes(device) -> float:
    """torch's cuBLAS workspace on the compute stream (CUBLAS_WORKSPACE_BYTES), 0 on CPU ranks."""
    if device.kind == "cpu":
        return 0.0
    return CUBLAS_WORKSPACE_BYTES["hopper" if device.name.startswith(("h100", "h200", "gh200")) else "default"]


# ------------------------------------------------------- the caching allocator: what max_memory_reserved adds
# torch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp, the header comment; torch 2.x) keeps freed
# blocks cached: reserved = tensors + cached free blocks, and reserved only grows (empty_cache or an out-of-memory
# retry gives blocks back). Three rules decide what it holds beyond the tensors at the peak:
# - "Allocations are associated with a stream. Once freed, blocks can be re-allocated on the same stream, but not
#   on any other stream": a side stream's high-water mark stays reserved beside the compute stream's.
# - "The allocator attempts to find the smallest cached block that will fit the requested size ... If no block is
#   found, the allocator will delegate to cudaMalloc" (best fit; with expandable_segments one segment per stream
#   grows at its end, Note [Expandable Segments]): a freed block smaller than the next request stays a hole.
# - sizes round to 512 B, requests over 1 MiB come from 20 MiB blocks or their own 2 MiB-rounded segment: under
#   0.1% of a step's gigabytes, not priced.
# The cache is not what decides 'fits': the allocator frees cached blocks and retries before it reports out of
# memory (module docstring), so `Memory.total` stays the verdict and these terms only price what the allocator
# and nvidia-smi READ (published.memory_row compares like for like).

def loss_hole_bytes(model: ModelSpec, st, micro_batch: int, seq_len: int, target_len: int, tp: int, pp: int,
                    transient: float = 0.0) -> float:
    """Reserved bytes the loss's allocations leave unused at their peak, beyond the tensor peak. torch
    F.cross_entropy on the upcast logits (`loss_kernel` "torch": torchtitan's loss_fn, `del pred` before
    loss.backward()): the forward allocates the logits (a B per logit), their fp32 copy (4) and log_softmax's
    output (4), then frees the copy and the logits -- one free block of a + 4 below the saved log-softmax. The
    backward's nll_loss gradient (4, zero-filled) takes the smallest block that fits, that one, leaving a; the
    log_softmax_backward output (4) fits nowhere below and extends the heap: a B per logit reserved and unused
    while 12 are allocated (aten cross_entropy = nll_loss(log_softmax(x)); the allocator's best fit, block comment
    above); fp32 logits have no copy, and the gradient fills their block exactly: 0. That moment is the step's
    peak when the loss outweighs a block's recompute working set and the optimizer step's temporaries
    (`transient`); otherwise the hole counts as far as it rises above the peak. Other loss kernels free nothing
    below a live buffer before a larger request (Megatron's works in place, the fused kernels chunk or save one
    buffer): 0. One stage only (pp 1): a pipeline's last stage is not its busiest rank."""
    if pp != 1 or loss_kernel(st) != "torch":
        return 0.0
    a = ACT_BYTES[st.precision]
    tokens = micro_batch * (target_len if model.is_encoder_decoder else seq_len)
    if a >= 4:  # fp32 logits: .float() is no copy, the nll gradient fills the logits' freed block exactly
        return 0.0
    hole = a * tokens * model.vocab_size / logit_shards(st, tp)
    _, _, working, logits = _stored_working_logits(
        model, micro_batch, seq_len, target_len, st.precision, tp, st.recompute, st.attention == "flash",
        st.sequence_parallel and tp > 1, loss_kernel(st), gqa_native(st.engine), fused_swiglu(st.engine),
        eager_composed_gelu(model, st.kernels), eager_fp32_softmax(model, st), eager_rms_norms(model, st.kernels),
        logit_shards(st, tp))
    return max(0.0, logits + hole - max(logits, working) - transient)


def side_stream_cache_bytes(model: ModelSpec, st, psi: float, tp: int) -> float:
    """The high-water mark of an engine's side-stream pool that no compute-stream tensor can reuse. FSDP2
    (engine fsdp) allocates each all-gather's flat output on its all-gather copy-in stream (_fsdp_collectives.py
    foreach_all_gather: `with torch.cuda.stream(all_gather_copy_in_stream): all_gather_output = torch.empty(
    (all_gather_input_numel * world_size,) ...)`, torch 2.3 .. 2.6) and copies it out into the parameters on the
    compute stream, so that pool holds the largest unit's flat buffer in the compute dtype: the root (the embedding,
    an untied head, the final norm -- gathered once, `fsdp_root_gathered_bytes`) or a block, the next block's
    output at most in flight beside the copy-out (the unsharded parameters themselves are `buffer_bytes`'). Its
    reduce-scatter outputs become the sharded gradients (counted as grads). DeepSpeed ZeRO-3 gathers on its
    all-gather stream and reduces on its reduce stream too, but those pools hold what `buffer_bytes` counts at the
    peak (gathered modules, reduce buckets): 0 beside them."""
    if st.engine != "fsdp":
        return 0.0
    layer = ACT_BYTES[st.precision] * _layer_elems(model, tp)
    return max(fsdp_root_gathered_bytes(model, psi, tp, st.precision), layer)


def allocator_cache_bytes(model: ModelSpec, st, micro_batch: int, seq_len: int, target_len: int, tp: int, pp: int,
                          psi: float, device, transient: float = 0.0) -> float:
    """What max_memory_reserved (and nvidia-smi) counts beyond the tensor peak, from the allocator's rules (block
    comment above): the loss's hole and the side streams' pools; 0 on CPU ranks (no caching allocator)."""
    if device.kind == "cpu":
        return 0.0
    return (loss_hole_bytes(model, st, micro_batch, seq_len, target_len, tp, pp, transient)
            + side_stream_cache_bytes(model, st, psi, tp))


def reserved_bytes(mem: Memory, cache: float, device) -> float:
    """torch.cuda.max_memory_reserved at the step's peak: the tensors, the allocator's cache (`allocator_cache_bytes`)
    and the cuBLAS workspace, which torch takes from the allocator (CublasHandlePool.cpp getNewWorkspace: one per
    handle and stream)."""
    return mem.tensor_peak + cache + cublas_workspace_bytes(device)


def whole_model_load_bytes(model: ModelSpec, psi: float, dp: int, tp: int, zero: int, precision: str) -> float:
    """The reserved peak of DeepSpeed's start-up when the model was not built under deepspeed.zero.Init: the engine
    moves it to the device whole (runtime/engine.py _configure_distributed_model, `self.module.to(self.device)`,
    v0.6 .. 0.19), one allocation per parameter (a B per element); ZeRO-3 then partitions parameter by parameter,
    each partition allocated before its parameter is freed (zero/partition_parameters.py _partition_param:
    `torch.empty(partition_size ...)`, copy, `free_param`), so the first -- the input embedding's, V h / tp / dp
    elements -- finds no freed block and adds its own; the later ones are carved from freed parameters' blocks
    (best fit). Nothing more: defragment() copies the partitions to the host and calls empty_cache() before it
    allocates the flat partition buffer (zero/utils.py, v0.19.2), so the load's cache is gone before the first step.
    A peak read over the whole run (max_memory_reserved never reset) sees max(this, the step's). Other stages keep
    the whole model anyway: 0."""
    if zero != 3:
        return 0.0
    return ACT_BYTES[precision] * (psi + model.vocab_size * model.d_model / tp / dp)


def device_total_bytes(mem: Memory, st, dp: int, gpus_per_node: int, device, cache: float = 0.0) -> float:
    """What nvidia-smi shows at the step's peak: `Memory.total` (tensors + CUDA context) + NCCL's buffers + cuBLAS's
    workspace + the caching allocator's cache beyond the tensors (`cache`, `allocator_cache_bytes`)."""
    return mem.total + cache + nccl_buffer_bytes(st, dp, gpus_per_node, device) + cublas_workspace_bytes(device)
