"""Step time: compute (GEMMs at interpolated efficiency + memory-bound element-wise work), tensor-parallel and
pipeline communication, the 1F1B bubble, data-parallel / ZeRO communication with a stated overlap model, the
optimizer update and ZeRO-Offload transfers.

Overlap model (what hides behind what):
- tensor-parallel all-reduces and pipeline sends: on the critical path (Megatron-LM runs them synchronously),
  except the sequence-parallel backward re-gather / reduce-scatter of Megatron-family linear layers, which hide
  behind their dgrad / wgrad GEMMs (engines.yaml tp_async_backward); a stage boundary replicated over the tp
  ranks goes 1/tp per rank plus an NVLink all-gather where the engine scatters it (pipeline_scatter_gather);
- pipeline: (m + pp - 1) slots of one micro-batch's time on the busiest stage, i.e. a bubble of (pp-1)/m for 1F1B and
  GPipe, (pp-1)/(v m) for the interleaved schedule with v model chunks per device (Narayanan et al. 2021);
- data-parallel gradient reduction (DDP, ZeRO-0/1/2): bucketed, it overlaps the backward pass of the micro-batch it
  follows (every micro-batch's under DeepSpeed ZeRO-2 and engine megatron zero 2) when `Strategy.overlap_grad_comm`,
  except what completes only at the end of that backward (the last bucket; the input embedding's gradient, whose
  lookup is the backward's last op) -- otherwise, and always under DeepSpeed's pipeline engine, it runs after the
  backward pass (terms._deepspeed_pipeline_reduces_after); `zero1_all_reduce`: DeepSpeed 0.4.4-0.12 ZeRO-1
  all-reduces each bucket; the post-step weight all-gather of ZeRO-1/2 is exposed; a tied embedding split over the
  first and last pipeline stage is all-reduced between them once per step, exposed; whatever hides the bytes of a
  data-parallel collective (here and under ZeRO-3 / FSDP), its NCCL ring latency, (n-1) dependent hops, is exposed
  in full (comm.exposed_latency);
- ZeRO-3 / FSDP: per layer, all-gathers in forward and backward (again under a full recompute when the engine
  re-gathers, engines.yaml), a reduce-scatter per micro-batch; with prefetch a layer's transfer hides behind the
  previous layer's compute, the excess and the first layer's gather are exposed; while both run, the compute is
  18.9% slower (device YAML compute_slowdown_under_comm, measured; NCCL kernels occupy SMs) and the transfers
  `overlap_interference` slower -- the longer side sets the pass (terms._exposed);
- optimizer step: memory-bound on the device, or CPU-Adam on the host with PCIe transfers (offload), exposed; with
  it DeepSpeed's flatten / average / copy-back around a bucketed all-reduce that runs after the backward
  (bucket_copy_s);
- CPU devices (gloo, OMP_NUM_THREADS=1): collectives and compute share the rank's thread, nothing overlaps.
"""

from __future__ import annotations

from dataclasses import dataclass

from scalestudy.costmodel import cpu_memory, fp8
from scalestudy.costmodel.alignment import flash_head_dim_factor, gemm_fraction, triton_flash_head_dim_factor
from scalestudy.costmodel.attention_bias import BIAS_KERNELS, bias_launches, bias_pass_bytes
from scalestudy.costmodel.constants import Calibration
from scalestudy.costmodel.eager_kernels import (HF_FP32_SOFTMAX, eager_block_bytes, gpt_score_bytes,
                                              hf_fp32_softmax_pass_s, t5_score_bytes)
from scalestudy.costmodel.efficiency import attention_efficiency, gemm_dim, matmul_efficiency
from scalestudy.costmodel.flash_v1 import fa1_loop_bytes
from scalestudy.costmodel.flops import (attention_backward_factor, cross_entropy_bytes_per_logit,
                                       fused_linear_chunk_bytes, fused_linear_chunk_tokens, head_bias_bytes_per_logit,
                                       logit_elements, vocab_grad_bytes)
from scalestudy.costmodel.fused_kernels import gpt_block_fused
from scalestudy.costmodel.kernel_counts import attention_core_kernels, model_block_kernels, sublayers
from scalestudy.costmodel.memory import ACT_BYTES, activation_parts, layer_activation_bytes
from scalestudy.costmodel.megatron_softmax import TORCH_SOFTMAX, torch_softmax_pass_s
from scalestudy.costmodel.mfu import peak_precision
from scalestudy.costmodel.op_checkpoint import early_stop_tail, recomputed_gemms
from scalestudy.costmodel.optimizers import flat_update_bytes, loop_step_delta
from scalestudy.specs.hardware import DeviceSpec
from scalestudy.specs.model import ModelSpec

OVERLAP_MODEL = ("tp all-reduces and pipeline sends exposed (Megatron-family sequence-parallel backward "
                 "collectives beside the dgrad/wgrad GEMMs, engines.yaml tp_async_backward; pipeline sends "
                 "scattered over tp ranks + all-gathered where the engine does, pipeline_scatter_gather); "
                 "pipeline bubble (pp-1) micro-batch slots (1F1B, GPipe) "
                 "or (pp-1)/v (interleaved); DP gradient reduction overlaps the backward of the micro-batch it follows "
                 "when overlap_grad_comm (ZeRO-2: every micro-batch's) except the last bucket and the input "
                 "embedding's gradient, never under DeepSpeed's pipeline engine (reduces after the drain); "
                 "ZeRO-1/2 post-step all-gather exposed; tied-embedding first/last-stage "
                 "all-reduce exposed; every DP collective's ring latency exposed in full (its bytes overlap); "
                 "ZeRO-3/FSDP per-layer gathers and reduce-scatters overlap each pass with prefetch, the excess and "
                 "the first layer's gather exposed; while both run the compute is slower by the device YAML's "
                 "compute_slowdown_under_comm (18.9% measured) and the traffic "
                 "overlap_interference slower, the longer side sets the pass; "
                 "optimizer and offload transfers exposed; CPU devices (gloo, one thread per rank): no overlap; "
                 "cost-model-only options: overlap_param_gather hides the ZeRO-1/2 post-step all-gather bucket by "
                 "bucket behind the next forward (first bucket exposed), tp_comm_overlap hides each TP all-gather/"
                 "reduce-scatter behind its adjacent linear GEMMs (max(0, comm - GEMM), engines.yaml tp_comm_overlap)")

# Element-wise kernels (norms, activations, dropout, residuals, softmax) are memory-bound: each stored activation
# byte is written once and read once forward, and read plus its gradient written and read backward: ~4 passes.
# A full recompute repeats the forward's 2 passes. (Eager, unfused kernels: costmodel/eager_kernels.py.)
ELEMENTWISE_PASSES = 4.0
# Adam's update touches, per local parameter: fp32 weight, momentum, variance (read + write), the gradient and the
# 16-bit weight copy -> ~30 bytes mixed precision, ~28 bytes in fp32 (ZeRO-Offload paper, Sec. 4).
OPTIMIZER_BYTES = {"bf16": 30.0, "fp16": 30.0, "fp32": 28.0, "fp8": 30.0}  # fp8: bf16 weights, fp32 states
# Unfused optimizer loops (Strategy.optimizer_loop): Python iterates over the parameter tensors and every op of the
# update is its own kernel; per tensor (kernels, host syncs) and bytes per parameter (fp32 state and gradients):
OPTIMIZER_LOOPS = {
    # torch AdamW foreach=False (torch/optim/adamw.py _single_tensor_adamw, torch 2.0): param.mul_ (weight decay,
    # r4 w4), exp_avg.lerp_ (r8 w4), exp_avg_sq.mul_ (r4 w4) .addcmul_ (r8 w4), sqrt, / bias correction, .add_(eps)
    # (r4 w4 each), param.addcdiv_ (r12 w4); transformers' AdamW (optimization.py) the same less lerp_ (mul_ + add_)
    "per-tensor": ((8, 0), 80.0),
    # nanoT5 AdamWScale (nanoT5/utils/copied_utils.py): transformers' AdamW (weight decay 0: no add_) whose step size
    # is scaled by `max(1e-3, self._rms(p.data))`: p.norm(2) (r4), / sqrt(numel), Python's max compares the 0-dim
    # CUDA tensor and bool() reads it back (a host sync), * step_size, then `addcdiv_(exp_avg, denom,
    # value=-step_size)` takes the negated 0-dim tensor as its scalar, which the argument parser reads with .item()
    # (a second sync)
    "per-tensor-rms": ((12, 2), 76.0),
    # 2019 fp16 master-weight optimizer, Megatron-LM a0368ddf (fp16/ = apex fp16_utils before its multi-tensor
    # rework 6763a8be), dynamic loss scale, clip_grad 1.0, apex FusedAdam of before 007c5947 (2019-08-13: one
    # fused_adam_cuda.adam launch per tensor, no fp16 output). Per tensor and step: zero_grad's fp32 master + fp16
    # model grad zero_ (w4 + w2); loss_scaler.has_overflow_serial's `float(x.float().sum())` (r2 w4, r4; the float()
    # reads back: sync 1); fp16util.model_grads_to_master_grads copy_ (r2 w4); _downscale_master mul_ (r4 w4);
    # mpu/grads.clip_grad_norm `p.grad.data.norm(2)` then `.item()` (r4; sync 2); FusedAdam (p, m, v r/w, grad r:
    # 28); master_params_to_model_params copy_ (r4 w2). Not counted: clip's mul_ (only while the norm exceeds
    # 1.0), the own DDP's per-tensor copy back of the all-reduced flat buffer (gradient path, model/distributed.py)
    "per-tensor-fp16": ((9, 2), 68.0),
    # HF Trainer (transformers 4.x) on torch 1.6-1.13, native AMP: transformers' AdamW (optimization.py) at the
    # Trainer's default weight_decay 0 -- exp_avg.mul_ (r4 w4) .add_ (r8 w4), exp_avg_sq.mul_ (r4 w4) .addcmul_ (r8
    # w4), sqrt (r4 w4), .add_(eps) (r4 w4), p.addcdiv_ (r12 w4): 72 B --, then torch.nn.utils.clip_grad_norm_
    # (max_grad_norm 1.0): a norm per tensor (r4) and, from torch 1.10 (pytorch#61042: clamp, no sync), a mul_ per
    # tensor (r4 w4), and model.zero_grad() (set_to_none False before torch 2.0): a zero_ per tensor (w4). No sync per
    # tensor: GradScaler's unscale_ is one foreach kernel per dtype and reads found_inf back once per step.
    "per-tensor-hf": ((10, 0), 88.0),
    # DeepSpeed ZeRO-1/2 (runtime/zero/stage2.py v0.3.0-0.5.x, stage_1_and_2.py to v0.13.1; not legacy_stage1, not
    # offloaded): the optimizer itself steps one flat fp32 partition, but before it, per gradient tensor of the
    # rank's partition (averaged_gradients: the rank's 1/dp slice of each param group, so ~tensors/dp + the tensor
    # cut at its start; stage_terms), has_overflow_partitioned_grads_serial -> _has_inf_or_nan's
    # `float(x.float().sum())` (cast r2 w4, sum r4; sync 1) and get_grad_norm_direct's `g.data.double().norm(2)`
    # then `.item()` (cast r2 w8, norm r8; sync 2): 4 kernels, 2 syncs, 28 B beyond the flat update's 30.
    # Replaced by on-device reductions in #4974 (v0.13.2, norm) and #5115 (v0.13.3, overflow), 2024-02.
    "deepspeed-serial": ((4, 2), 58.0),
    # DeepSpeed ZeRO-1 of runtime/zero/stage1.py (FP16_DeepSpeedZeroOptimizer_Stage1, read at v0.3.0 / 2dea61f2; the
    # releases that route stage 1 through stage2.py are deepspeed-serial): step() runs CheckOverflow over every fp16
    # group's parameters -- _has_inf_or_nan's `float(x.float().sum())` per gradient tensor of the WHOLE model, not the
    # partition (cast r2 w4, sum r4; sync 1) -- then utils.get_grad_norm over the whole group, `p.grad.data.float()
    # .norm(2)` then `.item()` per tensor (cast r2 w4, norm r4; sync 2), and only then frees the gradients it does not
    # own: 4 kernels, 2 syncs per tensor of the stage and STAGE_LOOP_BYTES 20 per stage parameter; the flat fused
    # step on the partition as the engine's (30).
    "deepspeed-stage1-whole": ((4, 2), 30.0),
    # torch AdamW as it defaults on GPUs (foreach, not fused: optimizer._default_to_fused_or_foreach; adam.py
    # _multi_tensor_adam, read at torch 2.13): the passes of "per-tensor", each one foreach kernel over lists of
    # tensors (multi_tensor_apply launches per chunk of tensors, not per tensor: no per-tensor launches counted) --
    # mul_ weight decay (r4 w4), lerp_ (r8 w4), mul_ (r4 w4), addcmul_ (r8 w4), sqrt (r4 w4), div_ (r4 w4), add_ eps
    # (r4 w4), addcdiv_ (r12 w4): 80 B. scalestudy's `train` on every engine (backends/common.make_adamw; DeepSpeed
    # takes it as a client optimizer and steps its flat ZeRO partitions with it), HF Trainer adamw_torch
    "foreach": ((0, 0), 80.0),
    # DeepSpeed ZeRO-0 in 16 bits around a client optimizer that is not DeepSpeed's FusedAdam, as `train`'s torch
    # AdamW (engine._configure_fp16_optimizer -> FP16_UnfusedOptimizer, runtime/fp16/unfused_optimizer.py step(),
    # read at v0.19.8), per tensor: the overflow check utils.has_inf_or_nan (amax and amin r2 each, two isfinite, and,
    # not: 6 kernels) whose `if` reads it back (sync 1); get_weight_norm's .float() (r2 w4), .norm (r4), ** 2 and the
    # sum (4 kernels, one .item() per group); the fp32 gradient copy .to (r2 w4); unscale mul_ (r4 w4); after the
    # foreach AdamW step (80 B) the copy back to the 16-bit weight (r4 w2): 13 kernels, 1 sync, 34 + 80 B
    "deepspeed-unfused": ((13, 1), 114.0),
    # A DeepSpeed bf16 pipeline at ZeRO-0 around a client optimizer, as `train`'s DeepSpeed settings would run it
    # (BF16_Optimizer with gradient accumulation in bf16, runtime/bf16_optimizer.py step(), read at v0.19.8): per
    # tensor of the stage utils.get_global_norm_of_tensors' .float() and .norm (2 kernels; the norm's host read is
    # once per step); then on the rank's 1/dp flat fp32 partition the gradient cast .to(fp32) (r2 w4), the foreach
    # AdamW step (80 B) and update_lp_params' copy_ into the bf16 partition (r4 w2): 92 B per partition parameter;
    # per parameter of the stage also STAGE_LOOP_BYTES
    "deepspeed-bf16": ((2, 0), 92.0),
    # torch AdamW fused=True (torch >= 2.0 on CUDA, >= 2.4 on CPU tensors: _fused_adamw, one kernel per chunk of
    # tensors reading p, g, m, v and writing p, m, v once, 28 B in fp32): the engine's fused update on a GPU, nothing
    # added here; what it changes is a CPU-offloaded step's host time (terms.host_adam_slowdown, FSDP's CPU offload)
    "fused": ((0, 0), 28.0),
    # DeepSpeed's CPU-Adam (DeepSpeedCPUAdam) as FSDP's host optimizer under CPU offload (fairseq --optimizer
    # cpu_adam): a host step only, its rate the device YAML's cpu_adam_params_per_s (terms.host_adam_slowdown)
    "cpu-adam": ((0, 0), 30.0),
}
# Bytes per parameter of the whole stage (not the rank's partition) a loop moves beside OPTIMIZER_LOOPS': BF16_Optimizer
# reads every bf16 gradient for the norm (.float(): r2 w4, .norm: r4) and zeroes the flat bf16 gradient buffer after
# the step (zero_grad -> clear_hp_grads: w2)
STAGE_LOOP_BYTES = {"deepspeed-bf16": 12.0, "deepspeed-stage1-whole": 20.0}
# The embedding gradient is a dense vocab x d tensor per lookup (torch embedding backward zero-fills it and
# scatter-adds the tokens' rows), then accumulated into the fp32 main gradient: ~write 2 + read 2 + fp32 r/w 8.
# (Per lookup, for the CPU pipeline terms of costmodel/cpu_parallel.py; the GPU head uses flops.vocab_grad_bytes.)
EMBED_GRAD_BYTES = 12.0


def optimizer_loop_s(loop: str, params: float, tensors: float, precision: str, device: DeviceSpec,
                     kernel_s: float, stage_params: float = 0.0, optimizer_kind: str = "adamw",
                     elem: float = 4.0) -> float:
    """Seconds per step an unfused optimizer `loop` (OPTIMIZER_LOOPS) adds to the fused update terms.optimizer_offload
    prices (OPTIMIZER_BYTES per parameter at HBM speed), for `params` parameters in `tensors` tensors on the rank: its
    extra bytes, and per tensor its kernels and host syncs at `kernel_s` each (calibration kernel_overhead_s, the
    fitted time one launch costs a block; not refitted here): a tensor of a small model's update moves a few MB, so
    the launches, not the bytes, set the loop's pace, and a sync drains the queue, the next kernel waiting one
    launch gap. 0 for the engine's fused / multi-tensor optimizer and on CPU devices (measured profiles).
    `stage_params`: the parameters of the rank's whole stage when `params` is its partition (STAGE_LOOP_BYTES).
    `optimizer_kind`: the loop's AdamW step replaced by another optimizer's ops (optimizers.loop_step_delta) and the
    fused pass by its own (optimizers.flat_update_bytes); `elem`: bytes per state element (2: a bf16 model stepped
    as it is, optimizers.state_elem), the table's fp32 bytes scaled by it."""
    if loop == "engine" or device.kind == "cpu":
        return 0.0
    (kernels, syncs), loop_bytes = OPTIMIZER_LOOPS[loop]
    more_kernels, more_bytes = loop_step_delta(optimizer_kind, loop)
    loop_bytes = (loop_bytes + more_bytes) * elem / 4.0
    extra_bytes = params * max(0.0, loop_bytes - flat_update_bytes(optimizer_kind, precision, elem)) + \
        stage_params * STAGE_LOOP_BYTES.get(loop, 0.0)
    return extra_bytes / device.hbm_bytes_per_s + tensors * (kernels + more_kernels + syncs) * kernel_s


# DeepSpeed's bucketed gradient all-reduce (ZeRO-0: engine.buffered_allreduce_fallback; ZeRO-1 on the all-reduce
# path, Strategy.zero1_all_reduce: stage2.py / stage_1_and_2.py buffered_reduce_fallback) -> allreduce_no_retain ->
# allreduce_and_copy: per bucket `flatten(bucket)` (torch.cat: read + write each gradient element), the average
# (ZeRO-1 allreduce_bucket `div_(dp)`; ZeRO-0 postscale `mul_(predivide / dp)`: read + write), the NCCL all-reduce,
# then per TENSOR `buf.copy_(synced)` back from the flat buffer (read + write, one launch each) -- DeepSpeed v0.5.5
# stage2.py and runtime/engine.py, the same in v0.9-0.12 (stage_1_and_2.py allreduce_and_copy). Bytes per gradient
# element in units of its size; the passes run on the reduction's stream after the backward, nothing beside them.
BUCKET_COPY_PASSES = 6.0
# PyTorch DistributedDataParallel with gradient_as_bucket_view False (its default): once the backward's last bucket
# is all-reduced, Reducer::finalize_backward -> finalize_bucket_dense -> copy_bucket_to_grad runs `grad.copy_
# (bucket_view)` (or clones the view where .grad is None) for every parameter tensor (torch/csrc/distributed/c10d/
# reducer.cpp, torch 1.8-2.x): read + write of each gradient element, one launch per tensor, after the backward.
# (The copy into the bucket, fused with the 1/world-size scaling, rides the backward: AUTOCAST_GRAD_COPY_BYTES.)
DDP_COPY_BACK_PASSES = 2.0


def bucket_copy_s(params: float, tensors: float, grad_bytes: int, device: DeviceSpec, kernel_s: float,
                  passes: float = BUCKET_COPY_PASSES) -> float:
    """Seconds per step of the copies around a bucketed gradient all-reduce that run after the backward -- DeepSpeed's
    flatten / average / copy-back (BUCKET_COPY_PASSES), DDP's copy back to .grad (DDP_COPY_BACK_PASSES) -- over the
    `params` gradient elements (`grad_bytes` each) of the rank's `tensors` tensors: the bytes at HBM speed and one
    launch per tensor's copy_ at `kernel_s` (calibration kernel_overhead_s). For a small model it is the launches that
    count: GPT-2 124M's 148 tensors cost ~4 ms, its 124M elements ~1.6 ms of DeepSpeed's passes on a V100. 0 on CPU
    devices (cpu_collectives prices gloo ranks' copies)."""
    if device.kind == "cpu":
        return 0.0
    return params * grad_bytes * passes / device.hbm_bytes_per_s + tensors * kernel_s


@dataclass(frozen=True, slots=True)
class ComputeTimes:
    """Seconds for one micro-batch on one device holding the whole depth (divide layer terms by pp)."""

    forward: float  # layers, forward pass
    backward: float  # layers, backward pass incl. recomputation
    head: float  # LM head forward + backward, softmax/cross-entropy and embedding gradient (last pipeline stage)
    tp_bytes: float  # bytes of one tensor-parallel all-reduce (one sublayer output of this micro-batch)
    tp_ops: int  # number of those all-reduces over all layers (forward + backward + recompute)
    flops_hw: float  # hardware FLOPs of this micro-batch on this device (all layers + head)
    linear: float = 0.0  # forward seconds of the layers' linear (non-attention-core) GEMMs, all layers (tp overlap)
    # tp overlap (terms._tp_comm): ((gather-side, scatter-side forward GEMM seconds, sublayers) of the attention and
    # the FFN sublayers, all layers; step.TP_GEMM_ROLES), and seconds of one HBM pass over one sublayer output
    tp_gemms: tuple = ()
    tp_pass_s: float = 0.0


def _layer_gemms(model: ModelSpec, b: int, s: int, t: int, tp: int):
    """Yield (forward FLOPs, characteristic dim, role, leading dims) of every matmul of one micro-batch, all layers.
    role: "core" (attention scores / values), or which tensor-parallel collective the projection sits next to
    (TP_GEMM_ROLES): the sublayer input's all-gather feeds the QKV / FC1 (gather side), the output's reduce-scatter
    follows the out-projection / FC2 (scatter side). Leading dims: the row lengths its operands are stored with
    (N, K of a projection; sequence and head dimension of the core), for costmodel/alignment.py."""
    m, d, i = model, model.d_model, model.inner_dim
    f_in = m.d_ff * (2 if m.gated_ffn else 1)
    dk = m.d_kv
    if m.is_encoder_decoder:
        stacks = ((s, m.num_layers, None), (t, m.num_decoder_layers, s))
    else:
        stacks = ((s, m.num_layers, None),)
    kv = m.kv_heads * dk
    for length, layers, cross in stacks:
        tok = b * length
        qkv_n = (i + 2 * kv) if not m.is_encoder_decoder else 3 * i
        for (mm, nn, kk), role in zip(((tok, qkv_n / tp, d), (tok, d, i / tp), (tok, f_in / tp, d),
                                       (tok, d, m.d_ff / tp)), TP_GEMM_ROLES):
            yield layers * 2.0 * mm * nn * kk, gemm_dim(mm, nn, kk), role, (nn, kk)
        # scores and attention-over-values: batch b*heads/tp, (length x dk) @ (dk x length)
        yield layers * 4.0 * b * length * length * i / tp, gemm_dim(length, length, dk), "core", (length, dk)
        if cross is not None:  # cross Q and O (half each side), K and V from the encoder output (gather side)
            src = b * cross
            qo = layers * 2.0 * tok * (2 * i / tp) * d
            yield qo / 2, gemm_dim(tok, 2 * i / tp, d), "attn_gather", (i / tp, d)
            yield qo / 2, gemm_dim(tok, 2 * i / tp, d), "attn_scatter", (i / tp, d)
            yield layers * 2.0 * src * (2 * i / tp) * d, gemm_dim(src, 2 * i / tp, d), "attn_gather", (i / tp, d)
            yield layers * 4.0 * b * length * cross * i / tp, gemm_dim(length, cross, dk), "core", (cross, dk)


# Projections beside each tensor-parallel collective, by sublayer (attention, FFN) and side (gather, scatter)
TP_GEMM_ROLES = ("attn_gather", "attn_scatter", "ffn_gather", "ffn_scatter")


def counted_per_kernel(model: ModelSpec, kernels: str) -> bool:
    """Whether elementwise_bytes counts the path's bytes kernel by kernel (eager paths, fused GPT blocks), moved at
    calibration elementwise_hbm_fraction of the HBM peak, or by the footprint rule (the other fused paths)."""
    return kernels != "fused" or model.family == "gpt2"


def elementwise_bytes(model: ModelSpec, micro_batch: int, seq_len: int, target_len: int, precision: str,
                      flash: bool, tp: int, sp: bool, kernels: str) -> tuple[float, float]:
    """(forward, backward) bytes of the memory-bound element-wise kernels of one micro-batch, all layers, on one
    tensor-parallel rank. Fused kernels: the activation footprint (no recomputation, this tp/sp layout), each byte
    written and read once per pass (ELEMENTWISE_PASSES), but GPT blocks, counted per fused kernel
    (costmodel/fused_kernels.py; their materialised scores stay on the footprint rule). Eager kernels: counted per
    kernel from the model's code (costmodel/eager_kernels.py) per token, plus an eager attention's score bytes:
    counted per op for HF T5 (t5_score_bytes) and GPT blocks (HF GPT2Attention, Megatron-LM 2019: gpt_score_bytes),
    as in the fused count for Llama layouts."""
    enc, dec = activation_parts(model, micro_batch, seq_len, target_len, precision, flash)
    le = model.num_layers if model.is_encoder_decoder else 0
    ld = model.num_decoder_layers if model.is_encoder_decoder else model.num_layers
    if kernels == "fused" and model.family == "gpt2":
        h = model.d_model / tp if sp else float(model.d_model)
        blk_f, blk_b = gpt_block_fused(h, model.d_ff / tp, ACT_BYTES[precision], model.gated_ffn)
        soft = ld * dec[2] / tp * (ELEMENTWISE_PASSES / 2)
        tokens = ld * micro_batch * seq_len
        return tokens * blk_f + soft, tokens * blk_b + soft
    if kernels == "fused":
        act = le * layer_activation_bytes(enc, tp, sp, "none") + ld * layer_activation_bytes(dec, tp, sp, "none")
        return act * (ELEMENTWISE_PASSES / 2), act * (ELEMENTWISE_PASSES / 2)
    (enc_f, enc_b), (dec_f, dec_b) = eager_block_bytes(model, ACT_BYTES[precision], tp, sp, kernels, flash)
    enc_tok = micro_batch * seq_len if model.is_encoder_decoder else 0
    dec_tok = micro_batch * (target_len if model.is_encoder_decoder else seq_len)
    soft_f = soft_b = (le * enc[2] + ld * dec[2]) / tp * (ELEMENTWISE_PASSES / 2)
    if model.is_encoder_decoder and not flash:  # HF T5Attention's fp32 softmax over biased scores, counted per op
        soft_f, soft_b = _t5_eager_score_bytes(model, micro_batch, seq_len, target_len, precision, tp)
    elif model.family == "gpt2" and not flash:  # scale, two mask passes, softmax, dropout: each its own kernel
        scores = ld * micro_batch * model.num_heads / tp * seq_len * seq_len
        soft_f, soft_b = (scores * x for x in gpt_score_bytes(ACT_BYTES[precision]))
    return (le * enc_tok * enc_f + ld * dec_tok * dec_f + soft_f,
            le * enc_tok * enc_b + ld * dec_tok * dec_b + soft_b)


def _t5_eager_score_bytes(model: ModelSpec, b: int, s: int, t: int, precision: str, tp: int) -> tuple[float, float]:
    """(forward, backward) element-wise bytes of every attention score of an eager HF T5 (eager_kernels.t5_score_bytes):
    encoder self-attention (s x s) and decoder self-attention (t x t) train the relative position bias, decoder
    cross-attention (t x s) adds a constant mask."""
    heads = b * model.num_heads / tp
    self_f, self_b = t5_score_bytes(ACT_BYTES[precision], True)
    cross_f, cross_b = t5_score_bytes(ACT_BYTES[precision], False)
    self_el = heads * (model.num_layers * s * s + model.num_decoder_layers * t * t)
    cross_el = heads * model.num_decoder_layers * t * s
    return self_el * self_f + cross_el * cross_f, self_el * self_b + cross_el * cross_b


_CACHE: dict = {}


# Kernels whose device rate (DeviceSpec.flash_attention_fraction) is stated on the FLOPs they execute: a causal mask
# skips the key tiles past each query tile, so a decoder's self-attention runs (n+1)/2n of the full square (n query
# tiles of CAUSAL_TILE_ROWS; the diagonal tiles run whole). FlashAttention-3 (Shah et al. 2024, arXiv 2407.08608)
# counts causal attention that way, and measures cuDNN's fused attention (Transformer Engine's kernel on Hopper) on
# the same count (Sec. 4.1: 'with causal masking, we divide this number by 2'); so cudnn runs the triangle on a device
# that states a cudnn rate (Hopper YAMLs), while elsewhere TE runs FlashAttention instead (engines.yaml). The fa2
# entries are taken against the full square (the model's FLOPs convention, flops.py) and are left so: counting FA2's
# triangle too puts the 180 MosaicML H100 rows at +21% (LOSO 8.4 -> 14.5%, benchmarks/RESULTS.md 2026-12-02 gemmcurve).
CAUSAL_EXECUTED_KERNELS = ("fa3", "cudnn")
CAUSAL_TILE_ROWS = 128  # FA3's query tile for head dim 128 on Hopper
# FlashAttention-1 (flash-attn < 2.0) runs its FLOPs at FA2's device rate -- the FA1 runs listed at seq <= 2K, where
# its loop traffic does not bind, sit there (flashattn2022, pytorch2023sdpa) -- plus its key-block loop's HBM traffic
# (costmodel/flash_v1.py), whichever takes longer.
FA1, FA1_RATE_KERNEL = "fa1", "fa2"
# The Triton FlashAttention (flash-attn 0.2-1.0's flash_attn_triton.py; llm-foundry's attn_impl triton is a copy of
# it) runs at FA2's device rate on the model's FLOP count -- llm-foundry's Triton rows (mosaicml2023, mosaicml2023ext,
# head dim 64 / 128, 512-65K tokens) are priced so -- on its head dimension padded to a power of two
# (alignment.triton_flash_head_dim_factor).
TRITON, TRITON_RATE_KERNEL = "triton", "fa2"
RATE_KERNELS = {FA1: FA1_RATE_KERNEL, TRITON: TRITON_RATE_KERNEL}  # the kernel whose device rate each is priced at


def executed_attention_share(model: ModelSpec, seq_len: int, kernel: str, device: DeviceSpec | None = None) -> float:
    """Share of the counted attention FLOPs the fused `kernel` executes on `device` (1 unless it skips causally masked
    tiles; a kernel the device states no rate for does not run there as itself: TE falls back to FlashAttention)."""
    stated = device is None or kernel in device.flash_attention_fraction
    if kernel not in CAUSAL_EXECUTED_KERNELS or not stated or model.is_encoder_decoder:
        return 1.0  # encoder-decoder stacks mix causal and full attention: not split here
    n = max(seq_len / CAUSAL_TILE_ROWS, 1.0)
    return (n + 1.0) / (2.0 * n)


def _fixed_block_s(model: ModelSpec, device: DeviceSpec, cal: Calibration, kernels: str,
                   flash: bool) -> tuple[float, float]:
    """(forward, backward) fixed seconds of all blocks of one micro-batch that do not scale with tokens: on GPUs
    the kernels each block launches per pass (costmodel/kernel_counts.py: by kernel path, attention kernel, encoder
    vs decoder block) x the fitted time one launch costs (calibration kernel_overhead_s); it does not shrink with
    tensor parallelism or fewer tokens. CPU devices: the measured profile's time per sublayer (attention, FFN,
    cross-attention) per forward, twice that backward (engine/cpu_profile.py)."""
    le = model.num_layers if model.is_encoder_decoder else 0
    ld = model.num_decoder_layers if model.is_encoder_decoder else model.num_layers
    if device.kind == "cpu":
        fixed = device.layer_overhead_s * sublayers(model, le, ld)
        return fixed, 2.0 * fixed
    (enc_f, enc_b), (dec_f, dec_b) = model_block_kernels(model, kernels, flash)
    k = cal.kernel_overhead_s
    return k * (le * enc_f + ld * dec_f), k * (le * enc_b + ld * dec_b)


def _selective_fixed_s(model: ModelSpec, device: DeviceSpec, cal: Calibration, kernels: str, flash: bool) -> float:
    """Fixed seconds of re-running every attention core once (selective recompute); 0 on CPU devices."""
    if device.kind == "cpu":
        return 0.0
    le = model.num_layers if model.is_encoder_decoder else 0
    ld = model.num_decoder_layers if model.is_encoder_decoder else model.num_layers
    cores = le + (2 if model.is_encoder_decoder else 1) * ld  # self (+ cross) attention
    return cal.kernel_overhead_s * cores * attention_core_kernels(kernels, flash)


def _gemm_s(flops: float, peak: float, device: DeviceSpec, dim: float, cal: Calibration, precision: str, n: float,
            k: float, aligned: bool = False, cublas: str = "11") -> float:
    """Seconds of a dense GEMM of `flops`: the device's GEMM curve at characteristic dimension `dim`, times the
    fraction of the aligned rate its leading dimensions `n`, `k` reach under the run's `cublas` (costmodel/
    alignment.py; 1 when `aligned`, e.g. an LM head whose engine pads the vocabulary)."""
    fraction = 1.0 if aligned else gemm_fraction(device, precision, n, k, cublas=cublas)
    return flops / (peak * matmul_efficiency(device, dim, cal) * fraction)


def flash_core_s(model: ModelSpec, device: DeviceSpec, kernel: str, flops: float, dim: float, lead: tuple,
                 seq_len: int, peak: float, cal: Calibration) -> float:
    """Seconds of an attention core (scores and attention-over-values, `flops` counted on the full square; `lead`:
    key length, head dim) run by the fused `kernel` at `seq_len`: the tiles it executes (executed_attention_share) at
    the rate of the kernel it is priced as (RATE_KERNELS; efficiency.attention_efficiency), times its head-dimension
    padding (the Triton kernel's power of two, alignment.triton_flash_head_dim_factor; the others' tiles on
    devices that price alignment, flash_head_dim_factor). FA1's key-block loop traffic is compute_times' own."""
    rate = RATE_KERNELS.get(kernel, kernel)
    padding = (triton_flash_head_dim_factor(int(lead[1])) if kernel == TRITON else
               flash_head_dim_factor(lead[1]) if device.unaligned_gemm_fraction else 1.0)
    return flops * executed_attention_share(model, seq_len, rate, device) / (
        peak * attention_efficiency(device, dim, rate, cal)) * padding


def eager_core_bytes(flops: float, head_dim: float, precision: str) -> float:
    """HBM bytes of an eager attention core's two batched GEMMs (scores = Q K^T, context = P V) of `flops` (both
    GEMMs, counted as step._layer_gemms does: 2 x head_dim FLOPs per score each): the first writes every score, the
    second reads every probability, in the run's activation dtype. With a head dimension of 64-128 a score costs
    2 x head_dim FLOPs against `a` bytes -- 64 FLOP/B for 16-bit scores at d 64, below an A100's ~126 at the GEMM
    curve's rate (312 TFLOP/s x 0.63 / 1.555 TB/s) -- so the GEMMs stream the score matrix at HBM speed rather than
    run at the GEMM curve (the roofline, Williams et al., CACM 2009). The backward's four GEMMs each touch the scores
    once too (dP, dV; dQ, dK read dS): twice the forward's bytes, as attention_backward_factor's 2x the forward time.
    The Q, K, V and context operands (b x s x head_dim each) are a head_dim / s share of this and not counted."""
    scores = flops / (4.0 * head_dim)  # per GEMM
    return 2.0 * scores * ACT_BYTES[precision]


def _matmul_peak(device: DeviceSpec, precision: str, tf32: bool) -> float:
    """FLOP/s peak the GEMMs of a `precision` run are priced at: fp32 matmuls with TF32 allowed (Strategy.tf32) run
    on the TF32 Tensor Cores where the device has them (mfu.peak_precision; NVIDIA A100 datasheet: 156 TFLOP/s TF32
    dense against 19.5 fp32) -- the same peak MFU divides by. At the same GEMM curve as 16 bits: TF32 reaches the
    same share of its own peak where it is published -- a 10240^3 matmul in 0.016 s on GA100, 134 TFLOP/s = 86%
    (PyTorch docs, notes/cuda.rst 'TensorFloat-32 (TF32) on Ampere devices'; bf16 MAMF 86.9%, a100-40gb.yaml), and
    116 of 156 vs 230 of 312 TFLOP/s fp16, 74% each (mli/transformers-benchmarks README, A100 square matmuls) --
    and its 4-byte operands at half the FLOP rate stream the same bytes per second as 16-bit ones at full rate,
    so no roofline separates them either. (The eager attention cores' score traffic is eager_core_bytes'.)"""
    return device.peak(peak_precision(precision, tf32_matmul=tf32, peaks=device.peak_flops))


def _head_s(model: ModelSpec, device: DeviceSpec, precision: str, tp: int, micro_batch: int, seq_len: int,
            target_len: int, cal: Calibration, loss: str = "engine",
            megatron_head: bool = False, cublas: str = "11", tf32: bool = False,
            logit_tp: int = 0) -> tuple[float, float]:
    """(seconds, model FLOPs of one forward) of the LM head of one micro-batch: its GEMM forward + backward (3 x the
    forward) at the GEMM curve, plus the vocabulary-proportional memory traffic (costmodel/flops.py, vocabulary
    section): the softmax / cross-entropy over every logit by the run's `loss` kernel (Strategy.cross_entropy) and
    the dense gradients of the V x d weights. Liger's fused linear cross-entropy runs the GEMMs per token chunk:
    each at the chunk's GEMM efficiency, and no faster than its re-reads of the weight and its gradient
    (flops.fused_linear_chunk_bytes) allow -- a roofline, those bytes stream inside the GEMM kernels. `tf32`:
    Strategy.tf32 (the GEMM peak, _matmul_peak); `logit_tp`: the ranks the logits and the loss over them are split
    over when not the head GEMM's `tp` (strategy.logit_shards: 1 under lm_head gathered, whose tp ranks each run the
    loss over all V; 0 = tp). The gathered logits' all-gather itself is not priced."""
    peak = _matmul_peak(device, precision, tf32)
    out_tok = micro_batch * (target_len if model.is_encoder_decoder else seq_len)
    chunked = loss == "fused-linear" and device.kind != "cpu"
    gemm_tok = fused_linear_chunk_tokens(out_tok, model.vocab_size, model.d_model) if chunked else out_tok
    head_f = 2.0 * out_tok * model.d_model * model.vocab_size / tp
    head_t = _gemm_s(3.0 * head_f, peak, device, gemm_dim(gemm_tok, model.vocab_size / tp, model.d_model), cal,
                     precision, model.vocab_size / tp, model.d_model, aligned=megatron_head, cublas=cublas)
    if chunked:
        head_t = max(head_t, fused_linear_chunk_bytes(model, out_tok, precision, tp) / device.hbm_bytes_per_s)
    logits = logit_elements(model, micro_batch, seq_len, target_len, logit_tp or tp)
    ce_bytes = logits * (cross_entropy_bytes_per_logit(precision, loss, not model.is_encoder_decoder)
                         + head_bias_bytes_per_logit(model, precision, megatron_head))
    vocab_grad = vocab_grad_bytes(model, precision, tp)
    if device.kind == "cpu" and device.copy_bandwidth:  # buffers beyond the caches stream at DRAM speed (cpu_memory)
        head_t += (ce_bytes / cpu_memory.bandwidth(device, 4.0 * logits)
                   + vocab_grad / cpu_memory.bandwidth(device, vocab_grad))
    else:
        head_t += (ce_bytes + vocab_grad) / device.hbm_bytes_per_s
    return head_t, head_f


def _tp_allreduces(model: ModelSpec, precision: str, tp: int, micro_batch: int, seq_len: int, target_len: int,
                   recompute: str) -> tuple[float, int]:
    """(bytes of one, how many) tensor-parallel all-reduces of one micro-batch over all layers (Megatron-LM,
    Shoeybi et al. 2019): one (or a reduce-scatter + all-gather under sequence parallelism) per sublayer --
    attention, cross-attention, FFN -- of its output activations, forward and backward; a full recomputation
    repeats the forward ones. (0, 0) without tensor parallelism."""
    if tp <= 1:
        return 0.0, 0
    le = model.num_layers if model.is_encoder_decoder else 0
    ld = model.num_decoder_layers if model.is_encoder_decoder else model.num_layers
    a = ACT_BYTES[precision]
    passes = 3 if recompute == "full" else 2
    if model.is_encoder_decoder:
        total = (2 * le * seq_len + 3 * ld * target_len) * micro_batch * model.d_model * a
        tp_ops = passes * (2 * le + 3 * ld)
    else:
        total = 2 * ld * micro_batch * seq_len * model.d_model * a
        tp_ops = passes * 2 * ld
    return total * passes / tp_ops, tp_ops


_PASSES: dict = {}


def _passes(model: ModelSpec, device: DeviceSpec, precision: str, tp: int, micro_batch: int, seq_len: int,
            target_len: int, flash: bool, sp: bool, cal: Calibration, kernels: str, attention_kernel: str, loss: str,
            megatron_head: bool, head_tp: int, cublas: str, tf32: bool, logit_tp: int = 0,
            fp8_recipe: str = "") -> tuple:
    """compute_times' terms no recompute enters, in its order: (GEMM peak, the layers' dense and attention-core
    seconds and FLOPs, FA1's forward and backward loop traffic, the dense seconds by TP_GEMM_ROLES, the LM head's
    seconds and FLOPs, the element-wise forward and backward seconds, the kernels' fixed forward and backward
    seconds) -- a micro-batch's recompute variants (full, selective, none: three compute_times a planner asks for)
    share them, priced once (memoised on every input but the recompute and its early stop; the objects by
    identity, kept to guard reuse). `precision` "fp8": the blocks' linear GEMMs at the device's FP8 peak with
    `fp8_recipe`'s casts (costmodel/fp8.py), the rest at bf16; the returned GEMM peak is the linears'."""
    key = (id(model), id(device), precision, tp, micro_batch, seq_len, target_len, flash, sp, id(cal), kernels,
           attention_kernel, loss, megatron_head, head_tp, cublas, tf32, logit_tp, fp8_recipe)
    hit = _PASSES.get(key)
    if hit is not None and hit[0] is model and hit[1] is device and hit[2] is cal:
        return hit[3]
    linear_prec, precision = precision, fp8.compute_precision(precision)
    peak = _matmul_peak(device, precision, tf32)
    linear_peak = device.peak(linear_prec) if linear_prec == fp8.FP8 else peak
    cast_f = cast_b = 0.0  # FP8 cast bytes of the linears' inputs, weights and output gradients (fp8.py)
    dense_t = attn_t = dense_f = attn_f = 0.0
    loop_fwd = loop_bwd = 0.0  # FA1's loop traffic beyond its FLOP time (flash_v1.py), forward and backward
    by_role = dict.fromkeys(TP_GEMM_ROLES, 0.0)
    for flops, dim, role, lead in _layer_gemms(model, micro_batch, seq_len, target_len, tp):
        is_attn = role == "core"
        if is_attn and flash:  # a fused kernel, not two batched GEMMs (an eager softmax's bytes are elementwise_bytes')
            sec = flash_core_s(model, device, attention_kernel, flops, dim, lead, seq_len, peak, cal)
            if attention_kernel == FA1 and device.kind != "cpu":  # lead: key length, head dim
                loop_f, loop_b = (x / device.hbm_bytes_per_s for x in fa1_loop_bytes(
                    flops, int(lead[0]), int(lead[1]), causal=not model.is_encoder_decoder))
                loop_fwd += max(0.0, loop_f - sec)
                loop_bwd += max(0.0, loop_b - attention_backward_factor(flash) * sec)
        elif is_attn:  # unaligned operands (costmodel/alignment.py) at the device's fraction of the aligned rate
            sec = _gemm_s(flops, peak, device, dim, cal, precision, *lead, cublas=cublas)
            if device.kind != "cpu":  # an eager core no faster than its score traffic (eager_core_bytes)
                sec = max(sec, eager_core_bytes(flops, lead[1], precision) / device.hbm_bytes_per_s)
        else:  # a block's linear layer: at the FP8 peak in an fp8 run, its inputs cast (fp8.linear_cast_bytes)
            sec = _gemm_s(flops, linear_peak, device, dim, cal, linear_prec, *lead, cublas=cublas)
            if linear_prec == fp8.FP8:
                f_bytes, b_bytes = fp8.linear_cast_bytes(flops, *lead, fp8_recipe)
                cast_f, cast_b = cast_f + f_bytes, cast_b + b_bytes
        if is_attn:
            attn_t += sec
            attn_f += flops
        else:
            dense_t += sec
            dense_f += flops
            by_role[role] += sec
    head_t, head_f = _head_s(model, device, precision, head_tp, micro_batch, seq_len, target_len, cal, loss,
                             megatron_head, cublas, tf32, logit_tp)
    ew_rate = device.hbm_bytes_per_s * (
        cal.elementwise_hbm_fraction if counted_per_kernel(model, kernels) and device.kind != "cpu" else 1.0)
    ew_fwd, ew_bwd = (x / ew_rate for x in elementwise_bytes(
        model, micro_batch, seq_len, target_len, precision, flash, tp, sp, kernels))
    fixed, fixed_bwd = _fixed_block_s(model, device, cal, kernels, flash)
    if linear_prec == fp8.FP8:
        bytes_f, bytes_b, kernels_f, kernels_b = fp8.per_micro_batch(model, tp, fp8_recipe)
        ew_fwd += (cast_f + bytes_f) / ew_rate  # element-wise passes: a full recompute re-runs the forward's
        ew_bwd += (cast_b + bytes_b) / ew_rate
        fixed, fixed_bwd = fixed + kernels_f * cal.kernel_overhead_s, fixed_bwd + kernels_b * cal.kernel_overhead_s
    if len(_PASSES) > 100_000:
        _PASSES.clear()
    passes = (linear_peak, dense_t, attn_t, dense_f, attn_f, loop_fwd, loop_bwd, by_role, head_t, head_f, ew_fwd,
              ew_bwd, fixed, fixed_bwd)
    _PASSES[key] = (model, device, cal, passes)
    return passes


def compute_times(model: ModelSpec, device: DeviceSpec, precision: str, tp: int, micro_batch: int, seq_len: int,
                  target_len: int, recompute: str, flash: bool, sp: bool, cal: Calibration,
                  kernels: str = "fused", attention_kernel: str = "fa2", early_stop: bool = False,
                  loss: str = "engine", megatron_head: bool = False, head_tp: int = 0,
                  cublas: str = "11", tf32: bool = False, logit_tp: int = 0, fp8_recipe: str = "") -> ComputeTimes:
    """Compute and tensor-parallel time of one micro-batch (cached per configuration); `kernels` as
    Strategy.kernels (costmodel/eager_kernels.py); `attention_kernel` the fused attention kernel the engine runs
    under flash attention (engines.yaml; efficiency.attention_efficiency); `early_stop`: a full recompute stops
    before each block's FFN output projection (op_checkpoint.early_stop); `loss` the cross-entropy kernel over the
    logits (Strategy.cross_entropy; _head_s); `megatron_head`: the engine is Megatron-LM / NeMo (alignment.pads_vocab),
    which pads the vocabulary to an aligned width, so the LM-head GEMMs run aligned whatever the model's
    vocab_size, and gives a T5 head a bias (flops.head_bias_bytes_per_logit); `head_tp`: the ranks the vocabulary
    is split over (Strategy.lm_head, strategy.vocab_shards: 1 when every tp rank runs the whole head; 0 = tp);
    `cublas`: Strategy.cublas, whether an unaligned GEMM keeps its Tensor Cores (costmodel/alignment.py); `tf32`:
    Strategy.tf32, fp32 GEMMs at the TF32 peak (_matmul_peak; element-wise bytes stay those of `precision`);
    `logit_tp`: the logits' and loss's ranks where they differ from `head_tp` (strategy.logit_shards; _head_s);
    `fp8_recipe`: the FP8 library of a precision "fp8" run (fp8.recipe of the engine; _passes)."""
    head_tp = head_tp or tp
    logit_tp = 0 if logit_tp == head_tp else logit_tp  # one memo entry for the usual case
    key = (model, id(device), precision, tp, micro_batch, seq_len, target_len, recompute, flash, sp, id(cal), kernels,
           attention_kernel, early_stop, loss, megatron_head, head_tp, cublas, tf32, logit_tp, fp8_recipe)
    hit = _CACHE.get(key)
    if hit is not None and hit[0] is device and hit[2] is cal:
        return hit[1]
    passes = _passes(model, device, precision, tp, micro_batch, seq_len, target_len, flash, sp, cal, kernels,
                     attention_kernel, loss, megatron_head, head_tp, cublas, tf32, logit_tp, fp8_recipe)
    linear_prec, precision = precision, fp8.compute_precision(precision)  # recompute GEMMs below are linears
    peak, dense_t, attn_t, dense_f, attn_f, loop_fwd, loop_bwd, by_role, head_t, head_f, ew_fwd, ew_bwd, fixed, \
        fixed_bwd = passes
    le = model.num_layers if model.is_encoder_decoder else 0
    ld = model.num_decoder_layers if model.is_encoder_decoder else model.num_layers
    if flash and attention_kernel in BIAS_KERNELS and device.kind != "cpu":  # T5's bias as a float mask (GPU SDPA)
        bias_f, bias_b = (x / device.hbm_bytes_per_s for x in bias_pass_bytes(
            model, micro_batch, seq_len, target_len, tp, recompute))
        ew_fwd, ew_bwd = ew_fwd + bias_f, ew_bwd + bias_b
        launch_f, launch_b = bias_launches(model, seq_len, target_len, recompute)
        fixed, fixed_bwd = fixed + launch_f * cal.kernel_overhead_s, fixed_bwd + launch_b * cal.kernel_overhead_s
    if not flash and attention_kernel == TORCH_SOFTMAX and device.kind != "cpu":  # Megatron's fp32 softmax fallback
        soft_f, soft_b = torch_softmax_pass_s(model, device, ACT_BYTES[precision], tp, micro_batch, seq_len,
                                              target_len, cal.kernel_overhead_s)
        ew_fwd, ew_bwd = ew_fwd + soft_f, ew_bwd + soft_b  # a full recompute re-runs the forward's (below)
    if not flash and attention_kernel == HF_FP32_SOFTMAX and device.kind != "cpu" and not model.is_encoder_decoder:
        soft_f, soft_b = hf_fp32_softmax_pass_s(model, device, tp, micro_batch, seq_len)  # HF OPT's score passes
        ew_fwd, ew_bwd = ew_fwd + soft_f, ew_bwd + soft_b
    fwd = dense_t + attn_t + loop_fwd + ew_fwd + fixed
    # a flash kernel's backward recomputes the scores: 2.5x its forward FLOPs, eager attention 2x (flops.py)
    bwd = 2.0 * dense_t + fixed_bwd + attention_backward_factor(flash) * attn_t + loop_bwd + ew_bwd
    hw = 3.0 * (dense_f + attn_f)
    if recompute == "full":
        bwd += dense_t + attn_t + loop_fwd + fixed + ew_fwd  # the forward again, its element-wise kernels too
        hw += dense_f + attn_f
        if early_stop:  # ... but not the FFN output projections (op_checkpoint.early_stop_tail)
            for flops, mm, nn, kk in early_stop_tail(model, micro_batch, seq_len, target_len, tp):
                bwd -= _gemm_s(flops, peak, device, gemm_dim(mm, nn, kk), cal, linear_prec, nn, kk, cublas=cublas)
                hw -= flops
    elif recompute == "selective":  # the attention cores again, their kernels' fixed cost too
        bwd += attn_t + loop_fwd + _selective_fixed_s(model, device, cal, kernels, flash)
        hw += attn_f
    elif recompute == "op":  # the unsaved projections and the element-wise forward (costmodel/op_checkpoint.py)
        op_f = op_t = 0.0
        for flops, mm, nn, kk in recomputed_gemms(model, micro_batch * seq_len, tp):
            op_f += model.num_layers * flops
            op_t += _gemm_s(model.num_layers * flops, peak, device, gemm_dim(mm, nn, kk), cal, linear_prec, nn, kk,
                            cublas=cublas)
        bwd += op_t + ew_fwd
        hw += op_f
    tp_bytes, tp_ops = _tp_allreduces(model, precision, tp, micro_batch, seq_len, target_len, recompute)
    if len(_CACHE) > 100_000:
        _CACHE.clear()
    attn_sublayers = le + (2 if model.is_encoder_decoder else 1) * ld  # self (+ cross) attention
    tp_gemms = ((by_role["attn_gather"], by_role["attn_scatter"], attn_sublayers),
                (by_role["ffn_gather"], by_role["ffn_scatter"], le + ld))
    tp_pass = tp_bytes / device.hbm_bytes_per_s if tp > 1 and device.hbm_bytes_per_s else 0.0
    result = ComputeTimes(forward=fwd, backward=bwd, head=head_t, tp_bytes=tp_bytes, tp_ops=tp_ops,
                          flops_hw=hw + 3.0 * head_f, linear=dense_t, tp_gemms=tp_gemms, tp_pass_s=tp_pass)
    _CACHE[key] = (device, result, cal)
    return result
