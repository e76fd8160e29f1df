"""Memory-bound element-wise traffic of a transformer block run as eager PyTorch kernels (no torch.compile, no
fused norm / activation / rotary kernels), counted kernel by kernel from the code that launches them.

`Strategy.kernels`:
- "fused" (default): Megatron / Transformer Engine / compiled graphs -- each stored activation byte is written once
  and read once per pass (step.ELEMENTWISE_PASSES); what step.compute_times charged before this option existed.
- "eager": every element-wise op of the model's eager forward is its own kernel that reads its inputs from and
  writes its output to HBM (norms in fp32 with their casts, rotary embedding, activation and gate, dropout, residual
  adds); autograd launches one kernel per derivative formula in backward.
- "eager-fused-norm": as eager, but the RMS norms are one fused kernel each way (torchtitan `norm_type =
  "fused_rmsnorm"`, its Triton RMSNorm, torchtitan/models/norms.py; GPT-2's LayerNorm is one kernel either way).

Counts are bytes per token per layer on one tensor-parallel rank, forward and backward, for activations of `a`
bytes (2 in bf16/fp16, 4 in fp32; a 16-bit <-> fp32 cast reads one and writes the other, and vanishes in fp32).
Reductions to one value per token (the norms' mean, rsqrt) and per-channel weight-gradient sums write
negligible bytes; the attention core (SDPA / flash) is not element-wise here -- an eager softmax is the
`attention` option's (memory.activation_parts' softmax bytes, charged by step.compute_times either way).
Widths: h = d_model, i = heads x d_kv (query / output), kv = kv_heads x d_kv, f = d_ff; i, kv, f are sharded over
tp, h too under sequence parallelism.
"""

from __future__ import annotations

from functools import lru_cache

FP32 = 4
ACT_16BIT = 2  # bytes of a bf16 / fp16 activation


def _cast(a: int) -> int:
    """A 16-bit <-> fp32 copy: read one, write the other (a no-op in fp32)."""
    return 0 if a == FP32 else a + FP32


def rms_norm_eager(a: int) -> tuple[float, float]:
    """(forward, backward) bytes per element of a composed fp32 RMSNorm: torchtitan RMSNorm
    (`self._norm(x.float()).type_as(x) * self.weight`, `x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)`,
    torchtitan/models/norms.py at 9dec370a), and the same ops in HF T5LayerNorm and fms LayerNormParameterized.

    Forward: x.float(); pow(2) (r4 w4); mean (r4); x * rsqrt (r4 w4); type_as; * weight (r a, w a).
    Backward (autograd's formulas): * weight -> grad_x = g*w (r a, w a) and grad_w = sum(g*x) (mul r 2a w a,
    sum r a); type_as -> cast; * rsqrt -> g*r (r4 w4) and sum(g*x) (mul r8 w4, sum r4); mean -> expand / n (w4);
    pow(2) -> pow_backward's grad * (2 * x.pow(1)) (copy r4 w4, scale r4 w4, mul r8 w4); the two grads of x.float()
    summed (r8 w4); .float() -> cast."""
    c = _cast(a)
    forward = c + 8 + 4 + 8 + c + 2 * a
    backward = 2 * a + 4 * a + c + 8 + 16 + 4 + 28 + 12 + c
    return float(forward), float(backward)


def rms_norm_fused(a: int) -> tuple[float, float]:
    """torchtitan's Triton RMSNorm (torchtitan/models/norms.py at 1ea476e9, _rms_norm_fwd_kernel /
    _rms_norm_bwd_kernel_sm): forward reads x, writes y (and one rstd per token); backward reads dy and x, writes dx
    (and one dW partial per block of rows)."""
    return float(2 * a), float(3 * a)


def _gelu_tanh(a: int) -> tuple[float, float]:
    """HF NewGELUActivation / FastGELUActivation as eager ops: 0.5 * x * (1 + tanh(c * (x + 0.044715 * x**3))):
    pow, two scalar muls, add, tanh, add 1, 0.5*x, the final product = 8 kernels (forward 18a); backward: the final
    product's two grads (6a), tanh_backward (3a), three scalar muls (6a), pow_backward (copy, scale, mul: 7a),
    the add passes through, three contributions to x summed (6a) -> 28a."""
    return 18.0 * a, 28.0 * a


def activation_bytes(ffn: str, a: int) -> tuple[float, float]:
    """(forward, backward) bytes per element of the FFN activation as eager kernels (HF transformers ACT2FN):
    one-kernel activations (relu, silu, erf gelu, torch's tanh gelu) read x and write y, backward reads g and x and
    writes dx; quick_gelu = x * sigmoid(1.702 x): 3 kernels (7a), backward 14a; the composed tanh GELUs above."""
    act = ffn.removeprefix("gated-")
    if act in ("gelu_new", "gelu_fast"):
        return _gelu_tanh(a)
    if act == "quick_gelu":
        return 7.0 * a, 14.0 * a
    return 2.0 * a, 3.0 * a


def _dropout(a: int) -> tuple[float, float]:
    """Dropout in training: forward reads x, writes y and a one-byte mask; backward reads g and the mask, writes
    dx."""
    return float(2 * a + 1), float(2 * a + 1)


def llama_block(h: float, i: float, kv: float, f: float, a: int, fused_norm: bool) -> tuple[float, float]:
    """torchtitan TransformerBlock (torchtitan/models/llama/model.py at 9dec370a, identical kernels at 1ea476e9):
    `h = x + attention(attention_norm(x))`, `out = h + feed_forward(ffn_norm(h))`.

    - two RMSNorms (eager or torchtitan's fused Triton kernel);
    - apply_rotary_emb on q (width i) and k (kv): `.float()`, complex multiply by freqs_cis (r4 w4 per element),
      `.type_as()`; backward the same three the other way;
    - repeat_kv on k and v when kv_heads < heads: expand + reshape copies kv -> i wide (r a*kv, w a*i each);
      backward sums the copies back; F.scaled_dot_product_attention (flash) returns its output already in
      (batch, seq, heads, dim) order, so `.transpose(1, 2).contiguous()` copies nothing;
    - FeedForward `w2(F.silu(w1(x)) * w3(x))`: silu (r a, w a), the product (r 2a, w a); backward: the product's
      two grads (6a) and silu_backward (3a);
    - two residual adds (r 2a, w a); backward: the residual's and the branch's gradients of x summed (same bytes)."""
    norm_f, norm_b = rms_norm_fused(a) if fused_norm else rms_norm_eager(a)
    rope = 8.0 + 2 * _cast(a)
    repeat = 2.0 * a * (i + kv) if kv < i else 0.0
    forward = 2 * norm_f * h + rope * (i + kv) + repeat + 5 * a * f + 2 * 3 * a * h
    backward = 2 * norm_b * h + rope * (i + kv) + repeat + 9 * a * f + 2 * 3 * a * h
    return forward, backward


def gpt2_block(h: float, i: float, f: float, a: int, ffn: str, eager_attention: bool) -> tuple[float, float]:
    """HF transformers GPT2Block (modeling_gpt2.py): `ln_1` (torch native_layer_norm: one kernel, r a w a; backward
    a dx kernel r 2a w a and a gamma/beta kernel r 2a), attention, resid_dropout, residual add; `ln_2`, MLP with the
    activation of width f (gelu_new), dropout, residual add. With SDPA (flash) c_attn's split and transposes are
    views, SDPA applies the attention dropout inside and its output needs no copy. Eager attention (`_attn`,
    transformers 4.x; Megatron-LM 2019's ParallelSelfAttention the same way): torch.matmul on the permuted
    (b, heads, s, d) q, k^T and v reshapes each to 3-D batches, a copy (r a, w a of width i each), and
    `_merge_heads`' `.permute().contiguous()` copies the context: 4 copies, the same in backward (as HF T5's,
    t5_block); the scores' element-wise work is gpt_score_bytes'."""
    act_f, act_b = activation_bytes(ffn, a)
    drop_f, drop_b = _dropout(a)
    copies = 4 * 2 * a * i if eager_attention else 0.0
    forward = 2 * 2 * a * h + 2 * drop_f * h + 2 * 3 * a * h + act_f * f + copies
    backward = 2 * 5 * a * h + 2 * drop_b * h + 2 * 3 * a * h + act_b * f + copies
    return forward, backward


# Megatron-LM 2019 (NVIDIA/Megatron-LM a0368ddf, mpu/layers.py) adds each linear's bias as its own kernel, where
# gpt2_block's HF Conv1D folds it into addmm: ColumnParallelLinear calls F.linear on the 3-D (b, s, h) input, which
# in torch 1.x is `input.matmul(weight.t())` then `output += bias` (addmm only for 2-D input), and RowParallelLinear
# adds `output_ + self.bias` after its all-reduce. Per layer, forward: QKV (3i) and FC1 (f), sharded over tp, and the
# attention dense and FC2 outputs (h, whole on every rank), each read and written once (the bias vector is
# negligible): 4 kernels. Backward is the same in both codes (the bias-gradient sum, counted by kernel_counts'
# BIAS_LINEAR either way), so nothing is added there.
MEGATRON_BIAS_ADDS = 4


def megatron_bias_add_s(model, engine: str, precision: str, kernels: str, tp: int, micro_batch: int, seq_len: int,
                        recompute: str, device, kernel_s: float, sp: bool = False) -> float:
    """Seconds per micro-batch, all layers on one tensor-parallel rank, of Megatron-LM 2019's separate bias adds
    (above): memory-bound, + their launches (`kernel_s` each, calibration kernel_overhead_s); a full recompute runs
    the forward, and its adds, twice. Engine megatron with eager kernels only (the unfused Megatron code; its fused
    paths fold the biases into bias-GeLU / bias-dropout-add), GPT layouts (not Llama: no biases), GPU devices.
    `sp`: sequence parallelism, whose reduce-scatter leaves the row-parallel outputs h / tp wide."""
    if (engine != "megatron" or kernels == "fused" or model.is_encoder_decoder or model.family == "llama"
            or device.kind == "cpu"):
        return 0.0
    a = FP32 if precision == "fp32" else ACT_16BIT
    width = (3.0 * model.inner_dim + model.d_ff) / tp + 2.0 * model.d_model / (tp if sp else 1)
    passes = 2.0 if recompute == "full" else 1.0
    per_layer = passes * (2.0 * a * micro_batch * seq_len * width / device.hbm_bytes_per_s
                          + MEGATRON_BIAS_ADDS * kernel_s)
    return model.num_layers * per_layer


# nn.LayerNorm under torch.autocast over 16-bit weights and a 16-bit residual stream (Strategy.norm_dtype "fp32":
# Composer's amp_bf16 under FSDP mixed precision, param_dtype bf16). `layer_norm` is on autocast's fp32 list (PyTorch
# AMP op reference, "CUDA Ops that can autocast to float32"; autocast_mode.cpp KERNEL_CUDA(layer_norm, fp32)), so
# the 16-bit input, weight and bias are cast up, the norm runs and returns fp32, and the next linear's autocast casts
# that output back down -- each its own kernel. Composer's own account (mosaicml/composer PR #1525, 2022-09-13,
# introducing LowPrecisionLayerNorm): torch's LayerNorm "does not run in FP16/BF16 while autocast is on", the reason
# Apex's FusedLayerNorm and then LPLayerNorm (autocast disabled, the norm in 16 bits) were faster; PyTorch's ngimel
# (huggingface/pytorch-image-models PR #1340, 2022-07-16): "layer_norm is force-cast to fp32 by amp ... perf
# difference with force casting of course will be huge in eager". Bytes per normalised element beyond gpt2_block's
# 16-bit norm (r a w a forward; dx r 2a w a + gamma/beta r 2a backward):
# - forward: cast up (r a w 4), the fp32 norm (r4 w4), the linear's cast down (r4 w a): 2 casts + 8 against 2a;
# - backward: the linear's 16-bit input gradient cast up (ToCopyBackward r a w 4), layer_norm_backward in fp32 (dx
#   r4 r4 w4, gamma/beta r4 r4: 20), the input cast's gradient back down (r4 w a): 2 casts + 20 against 5a.
# Kernels per norm: forward the input, weight and bias casts and the linear's cast (4); backward their 4 gradients.
LN_AUTOCAST_KERNELS = (4, 4)


def layer_norm_autocast_bytes(a: int) -> tuple[float, float]:
    """(forward, backward) bytes per element an autocast fp32 LayerNorm adds to a 16-bit one (above); 0 in fp32."""
    c = _cast(a)
    return float(2 * c + 8 - 2 * a), float(2 * c + 20 - 5 * a)


def autocast_layer_norm_s(model, norm_dtype: str, precision: str, kernels: str, tp: int, micro_batch: int,
                          seq_len: int, recompute: str, device, kernel_s: float, sp: bool = False) -> float:
    """Seconds per micro-batch, all layers on one tensor-parallel rank, that Strategy.norm_dtype "fp32" adds to a GPT
    block's two LayerNorms and the final one (LN_AUTOCAST_KERNELS, layer_norm_autocast_bytes), memory-bound, + their
    kernels (`kernel_s` each, calibration kernel_overhead_s); a full (or op-level) recompute runs the blocks'
    forward norms twice. 0 for fused kernels (a fused / compiled norm is one kernel either way), fp32 runs, RMSNorm
    layouts (Llama, T5: the eager count already runs them in fp32), CPU devices. `sp`: sequence parallelism, whose
    norms run on d_model / tp."""
    if (norm_dtype != "fp32" or kernels == "fused" or precision == "fp32" or model.is_encoder_decoder
            or model.family == "llama" or device.kind == "cpu"):
        return 0.0
    fwd_b, bwd_b = layer_norm_autocast_bytes(ACT_16BIT)  # fp32 runs returned above
    passes = 2.0 if recompute in ("full", "op") else 1.0
    fwd_norms, bwd_norms = 2.0 * model.num_layers * passes + 1.0, 2.0 * model.num_layers + 1.0
    h = model.d_model / (tp if sp else 1)
    moved = micro_batch * seq_len * h * (fwd_norms * fwd_b + bwd_norms * bwd_b)
    launches = fwd_norms * LN_AUTOCAST_KERNELS[0] + bwd_norms * LN_AUTOCAST_KERNELS[1]
    return moved / device.hbm_bytes_per_s + launches * kernel_s


def gpt_score_bytes(a: int) -> tuple[float, float]:
    """(forward, backward) bytes per attention-score element of a GPT block's eager attention in the model's own
    dtype (`a` bytes; fp16 weights as DeepSpeed / Megatron hold them, or fp32), counted per op:
    - HF transformers GPT2Attention._attn (modeling_gpt2.py, 4.x eager): `attn_weights / sqrt(d)` (r a w a),
      `torch.where(causal_mask, attn_weights, masked_bias)` (r a w a; the bool (1, 1, s, s) mask slice is read
      from cache), `+ attention_mask` (the (b, 1, 1, s) padding mask HF Trainer's run_clm passes: r a w a),
      nn.Softmax (r a w a), `.type(value.dtype)` (a no-op in the model's dtype), attn_dropout (r a, w a and a
      one-byte mask);
    - Megatron-LM 2019 (a0368ddf mpu/transformer.py GPT2ParallelSelfAttention): `/ sqrt(d)`, `torch.mul(scores,
      ltor_mask) - 10000 * (1 - ltor_mask)` (two passes over the scores; the mask-side ops are (1, 1, s, s)),
      Softmax in the fp16 of FP16_Module, dropout: the same 3 passes before the softmax.
    Backward (autograd's formulas): dropout (r a + 1, w a), softmax_backward (r 2a, w a), the mask's gradient
    (where: `where(cond, grad, 0)`; mul: grad * mask: r a w a; the additive mask and the subtraction pass the
    gradient through without a kernel), the scale's (r a w a). The score matmuls are GEMMs (step.py)."""
    forward = 3 * 2 * a + 2 * a + (2 * a + 1)
    backward = (2 * a + 1) + 3 * a + 2 * a + 2 * a
    return float(forward), float(backward)


# HF GPT2Attention._attn under torch.autocast over fp32 weights (HF Trainer --fp16 / --bf16 under DDP), beyond
# gpt_score_bytes(2): GPT2Model casts the padding mask to self.dtype (fp32 parameters), so the 16-bit scores plus
# the fp32 mask promote to fp32 (r2 w4: +2 B); softmax runs on fp32 (autocast's fp32 list; r4 w4: +4); the
# `.type(value.dtype)` cast back to 16 bits (transformers 4.13+, before the dropout; r4 w2: 6, its own kernel).
# Backward: the cast's gradient up to fp32 (ToCopyBackward r2 w4: 6), softmax_backward in fp32 (r8 w4: +6), the
# add's fp32 gradient cast to the scores' 16-bit dtype (autograd casts a gradient to its input's dtype: r4 w2: 6).
# Kernels: the cast and masked_bias.to(dtype) forward, the two gradient casts backward. (transformers 4.12 drops
# out before the cast, on fp32, and autocast's matmul casts: +4 B each way; counted as 4.13-4.35's order.)
GPT_SCORE_AUTOCAST_BYTES = (12.0, 18.0)
# HF OPTAttention in fp16 (transformers 4.2x modeling_opt.py, DeepSpeed-Chat's OPT runs; Strategy.attention_kernel
# hf-fp32-softmax), beyond gpt_score_bytes(2), with the same kernel count: forward `+ attention_mask` (r2 w2),
# `torch.max(.., finfo.min)` (r2 w2), `softmax(.., dtype=float32)` (ATen's half-to-float kernel: r2 w4),
# `.to(float16)` (r4 w2), dropout (r2 w2 + 1) = 25 against the GPT-2 pattern's 21 (its scale on the scores is OPT's
# on q); backward dropout (5), ToCopyBackward up to fp32 (r2 w4), the half-to-float softmax backward (grad and
# output r4 + r4, w2), max's masked gradient (r2 + r2, w2) = 27 against 19.
HF_FP32_SOFTMAX = "hf-fp32-softmax"
HF_FP32_SOFTMAX_BYTES = (4.0, 8.0)


def hf_fp32_softmax_pass_s(model, device, tp: int, micro_batch: int, seq_len: int) -> tuple[float, float]:
    """(forward, backward) seconds HF_FP32_SOFTMAX_BYTES add to one micro-batch of a decoder-only model on one
    tensor-parallel rank, all layers: b x heads/tp x s x s scores per layer at the device's memory rate."""
    scores = micro_batch * model.num_heads / tp * model.num_layers * seq_len * seq_len
    return tuple(scores * b / device.hbm_bytes_per_s for b in HF_FP32_SOFTMAX_BYTES)
GPT_SCORE_AUTOCAST_KERNELS = (2, 2)


def t5_activation(ffn: str) -> str:
    """The activation HF T5 runs for a T5 `ffn`: T5Config maps feed_forward_proj "gated-gelu" to dense_act_fn
    "gelu_new" (the composed tanh GELU, T5 v1.1 / mT5 checkpoints); other activations by name."""
    return "gated-gelu_new" if ffn == "gated-gelu" else ffn


def t5_score_bytes(a: int, position_bias_grad: bool) -> tuple[float, float]:
    """(forward, backward) bytes per attention-score element of HF T5Attention in eager mode (modeling_t5.py; nanoT5's
    t5_model.py is the same code): `scores += position_bias_masked` adds the fp32 bias-plus-mask tensor
    (b, heads, q, k) into the 16-bit scores in place (r a + 4, w a); `softmax(scores.float(), -1).type_as(scores)`
    (cast, fp32 softmax r4 w4, cast back); dropout (r a, w a and a one-byte mask). Backward: dropout (r a + 1,
    w a), the casts, softmax_backward in fp32 (r 8, w 4), and where the bias trains (the self-attention's learned
    relative_attention_bias, shared by every layer of the stack): the score gradient cast to fp32 for the bias
    and summed into the gradient the other layers left (r 8, w 4). The score matmuls are GEMMs (step.py)."""
    c = _cast(a)
    forward = (2 * a + 4) + c + 8 + c + (2 * a + 1)
    backward = (2 * a + 1) + c + 12 + c + ((c + 12) if position_bias_grad else 0)
    return float(forward), float(backward)


def t5_block(h: float, i: float, f: float, a: int, ffn: str, sublayers: int, fused_norm: bool) -> tuple[float, float]:
    """HF transformers T5Block (modeling_t5.py): per sublayer (self-attention, cross-attention in the decoder, FFN)
    a T5LayerNorm (fp32 variance as rms_norm_eager), dropout of its output and the residual add; each attention
    sublayer's q, k, v `.view().transpose(1, 2)` are copied by torch.matmul (not viewable as 3-D batches) and its
    output `.transpose(1, 2).contiguous()` is copied: 4 copies of width i (r a, w a each), the same in backward;
    the FFN's activation (t5_activation; gated, also the product with wi_1's output: r 2a w a, backward 6a) and its
    dropout, all of width f. The attention scores' element-wise work is t5_score_bytes'."""
    norm_f, norm_b = rms_norm_fused(a) if fused_norm else rms_norm_eager(a)
    drop_f, drop_b = _dropout(a)
    act_f, act_b = activation_bytes(t5_activation(ffn), a)
    gated = ffn.startswith("gated-")
    attention = (sublayers - 1) * 4 * 2 * a * i
    ffn_f = (act_f + (3 * a if gated else 0) + drop_f) * f
    ffn_b = (act_b + (6 * a if gated else 0) + drop_b) * f
    forward = sublayers * (norm_f + drop_f + 3 * a) * h + attention + ffn_f
    backward = sublayers * (norm_b + drop_b + 3 * a) * h + attention + ffn_b
    return forward, backward


def eager_block_bytes(model, a: int, tp: int, sp: bool, kernels: str, flash: bool = True
                      ) -> tuple[tuple[float, float], tuple[float, float]]:
    """((encoder forward, backward), (decoder / only-stack forward, backward)) element-wise bytes per token per layer
    on one tensor-parallel rank under eager kernels. The family picks the code counted (see the block functions);
    `flash` False: eager attention (the GPT block's head copies)."""
    h = model.d_model / tp if sp else float(model.d_model)
    i, kv, f = model.inner_dim / tp, model.kv_heads * model.d_kv / tp, model.d_ff / tp
    fused_norm = kernels == "eager-fused-norm"
    if model.is_encoder_decoder:
        return t5_block(h, i, f, a, model.ffn, 2, fused_norm), t5_block(h, i, f, a, model.ffn, 3, fused_norm)
    if model.family == "llama":
        return (0.0, 0.0), llama_block(h, i, kv, f, a, fused_norm)
    return (0.0, 0.0), gpt2_block(h, i, f, a, model.ffn, not flash)


# torch.autocast over fp32 parameters (PyTorch DistributedDataParallel under autocast, engine "ddp" in 16 bits; NeMo
# 1.x / Lightning native amp with megatron_amp_O2 False, "O1"), per parameter and micro-batch, on the compute stream:
# - forward: one cast of the fp32 weight to 16 bits (read 4, write 2). Autocast caches the casts of fp32 leaf tensors
#   that require grad until the outermost autocast region exits (aten/src/ATen/autocast_mode.cpp cached_cast;
#   torch.autocast.__exit__ calls clear_autocast_cache), so a weight is cast once per forward, not once per use;
# - backward: the cast's gradient back to fp32 (ToCopyBackward: read 2, write 4);
# - DDP's autograd hook copies the fp32 gradient into its bucket (Reducer copy_grad_to_bucket: read 4, write 4).
AUTOCAST_CAST_BYTES = 12.0
AUTOCAST_GRAD_COPY_BYTES = 8.0


def autocast_param_bytes(params: float, uncast_params: float) -> float:
    """Bytes one micro-batch moves for autocast's fp32 parameters on one rank: every parameter's gradient copy, and
    the two casts for those a 16-bit op reads (`uncast_params`: an untied input embedding -- torch's embedding is
    not on autocast's lower-precision list, so it looks up fp32 rows; norm weights, a small share, count as cast)."""
    return AUTOCAST_GRAD_COPY_BYTES * params + AUTOCAST_CAST_BYTES * max(0.0, params - uncast_params)


def autocast_param_s(model, engine: str, precision: str, tp: int, params: float, device) -> float:
    """Seconds per micro-batch of the fp32-parameter traffic above, memory-bound on the device. Only engine "ddp" in
    bf16/fp16 keeps fp32 parameters under autocast (terms.main_grad_bytes: its gradients are fp32); Megatron/
    DeepSpeed/FSDP hold 16-bit working weights. 0 on CPU devices, whose measured profile times the whole step."""
    if engine != "ddp" or precision not in ("bf16", "fp16") or device.kind == "cpu":
        return 0.0
    uncast = 0.0 if model.tie_word_embeddings else model.vocab_size * model.d_model / tp
    return autocast_param_bytes(params, uncast) / device.hbm_bytes_per_s


def _gelu_new_autocast() -> tuple[float, float]:
    """(forward, backward) bytes per element of HF NewGELUActivation (`0.5 * x * (1 + tanh(c * (x + 0.044715 *
    torch.pow(x, 3.0))))`, transformers activations.py) on a 16-bit input under autocast: `pow` is on autocast's
    fp32 list (PyTorch AMP op reference, "CUDA Ops that can autocast to float32": pow; autocast_mode.h
    AT_FORALL_FP32), so x is cast up (r2 w4) and every op after it runs in fp32, the output too.
    Forward: cast 6, pow 8, * 0.044715 8, x + (r2 r4 w4) 10, * c 8, tanh 8, 1 + 8, 0.5 * x (bf16) 4,
    product (r2 r4 w4) 10 = 70. Backward (fp32 incoming gradient; autograd casts a gradient to its input's dtype,
    engine.cpp validate_outputs): product's two grads (12 + 10) and the bf16 one's cast 6, 0.5 * 4, tanh_backward
    12, * c 8, the x + branch's cast 6, * 0.044715 8, pow_backward (pow 8, * 3 8, * grad 12) and its cast 6, the
    three bf16 gradients of x summed (2 x 6) = 112."""
    return 70.0, 112.0


@lru_cache(maxsize=None)  # a function of the FFN's name: a planner asks for every engine-ddp T5 strategy
def ffn_autocast_bytes(ffn: str) -> tuple[tuple[float, float], tuple[int, int]]:
    """((forward, backward) bytes, (forward, backward) kernels) per d_ff-wide element that autocast over fp32
    weights adds to HF T5's FFN beyond the 16-bit chain t5_block counts (T5DenseGatedActDense / T5DenseActDense,
    modeling_t5.py since transformers PRs #20760 / #21281 -- nanoT5's t5_model.py imports them from 4.30.2:
    act, gate product, dropout, `hidden_states.to(self.wo.weight.dtype)` when the dtypes differ, `self.wo`):
    - a 16-bit activation (relu, erf gelu, silu): the `.to()` copies the 16-bit product to fp32 and autocast's
      F.linear casts it back for `wo`: two casts each pass (r a w 4, r 4 w a), 2 kernels each;
    - gelu_new (T5 v1.1 / mT5): the activation runs in fp32 (_gelu_new_autocast, 3 gradient casts more than
      eager's 8 / 11 ops), so the gate product reads an fp32 and a 16-bit operand and writes fp32 (r4 r2 w4;
      backward 10 + 12 and the 16-bit operand's gradient cast 6), dropout runs on fp32 (r4 w4 + mask), the `.to()`
      is a no-op and only autocast's cast for `wo` remains (6 B and one kernel each pass)."""
    c = _cast(ACT_16BIT)
    if t5_activation(ffn).removeprefix("gated-") != "gelu_new":
        return (2.0 * c, 2.0 * c), (2, 2)
    gated = ffn.startswith("gated-")
    act_f, act_b = _gelu_new_autocast()
    half_f, half_b = activation_bytes("gelu_new", ACT_16BIT)
    gate16 = (3.0 * ACT_16BIT, 6.0 * ACT_16BIT) if gated else (0.0, 0.0)
    gate32 = (10.0, 22.0 + c) if gated else (0.0, 0.0)
    drop32, drop16 = _dropout(FP32)[0], _dropout(ACT_16BIT)[0]
    forward = act_f + gate32[0] + drop32 + c - (half_f + gate16[0] + drop16)
    backward = act_b + gate32[1] + drop32 + c - (half_b + gate16[1] + drop16)
    return (forward, backward), (2, 4 + (1 if gated else 0))


def autocast_ffn_cast_s(model, engine: str, precision: str, kernels: str, tp: int, micro_batch: int, seq_len: int,
                        target_len: int, device, kernel_s: float) -> float:
    """Seconds per micro-batch, all layers on one tensor-parallel rank, of what autocast over fp32 weights (the
    engines and devices of autocast_param_s) adds to HF T5's FFN (ffn_autocast_bytes: the `.to(wo.weight.dtype)`
    round trip, or gelu_new's fp32 chain), memory-bound, + its kernels (`kernel_s` each, calibration
    kernel_overhead_s). Eager kernels only: a compiled graph fuses the casts and keeps the fp32 intermediates in
    registers."""
    if (not model.is_encoder_decoder or kernels == "fused" or engine != "ddp" or precision not in ("bf16", "fp16")
            or device.kind == "cpu"):
        return 0.0
    tokens_x_layers = micro_batch * (model.num_layers * seq_len + model.num_decoder_layers * target_len)
    (fwd_b, bwd_b), (fwd_k, bwd_k) = ffn_autocast_bytes(model.ffn)
    cast_bytes = (fwd_b + bwd_b) * tokens_x_layers * model.d_ff / tp
    kernels_launched = (fwd_k + bwd_k) * (model.num_layers + model.num_decoder_layers)
    return cast_bytes / device.hbm_bytes_per_s + kernels_launched * kernel_s


# HF T5's projections under autocast over fp32 weights, beyond the 16-bit chain t5_block counts (counted with
# saved_tensors_hooks, costmodel/autocast_memory.py): T5LayerNorm returns fp32 and autocast's F.linear casts its input
# afresh for every projection (r4 w2, 6 B per element each pass: the cast forward, ToCopyBackward's r2 w4 back), and
# autograd sums the casts' gradients of one fp32 tensor in fp32 (r4 r4 w4, 6 B more than a 16-bit add). Per token
# and d_model element: an encoder block casts its normed input for q, k, v and wi (4 casts, 2 fp32 sums), a decoder
# block for q, k, v, cross-attention's q and wi (5, 2); every decoder block's cross-attention k and v cast the fp32
# encoder output again (2 per encoder token, 2 fp32 sums into its gradient). ((forward, backward) bytes, kernels).
T5_AUTOCAST_CASTS = {"encoder": (4, 2), "decoder": (5, 2), "cross": (2, 2)}  # (casts, fp32 gradient sums)


def _t5_casts(kind: str) -> tuple[tuple[float, float], int]:
    casts, sums = T5_AUTOCAST_CASTS[kind]
    c = _cast(ACT_16BIT)
    return (casts * c, casts * c + sums * (3 * FP32 - 3 * ACT_16BIT)), casts


def autocast_t5_cast_s(model, engine: str, precision: str, kernels: str, tp: int, micro_batch: int, seq_len: int,
                       target_len: int, device, kernel_s: float) -> float:
    """Seconds per micro-batch, all blocks on one tensor-parallel rank, of HF T5's projection casts under autocast
    over fp32 weights (T5_AUTOCAST_CASTS; the engines, kernels and devices of autocast_ffn_cast_s), memory-bound,
    + one kernel per cast each pass (`kernel_s`)."""
    if (not model.is_encoder_decoder or kernels == "fused" or engine != "ddp" or precision not in ("bf16", "fp16")
            or device.kind == "cpu"):
        return 0.0
    le, ld, h = model.num_layers, model.num_decoder_layers, model.d_model
    seconds = 0.0
    for kind, tokens_x_layers, layers in (("encoder", le * seq_len, le), ("decoder", ld * target_len, ld),
                                          ("cross", ld * seq_len, ld)):
        (fwd, bwd), casts = _t5_casts(kind)
        seconds += (fwd + bwd) * micro_batch * tokens_x_layers * h / device.hbm_bytes_per_s
        seconds += 2 * casts * layers * kernel_s
    return seconds


@lru_cache(maxsize=None)  # a function of the FFN's name: a planner asks for every engine-ddp GPT-2 strategy
def gpt_ffn_autocast_bytes(ffn: str) -> tuple[tuple[float, float], tuple[int, int]]:
    """((forward, backward) bytes, (forward, backward) kernels) per d_ff-wide element that autocast over fp32 weights
    adds to HF GPT2MLP (`c_proj(act(c_fc(x)))`, then dropout on c_proj's 16-bit output) beyond the 16-bit count of
    gpt2_block: gelu_new / gelu_fast run in fp32 from torch.pow on (_gelu_new_autocast: 70 / 112 B against eager's
    18a / 28a) and c_proj's addmm casts the fp32 activation back to 16 bits (r4 w2 forward; its gradient r2 w4):
    (40, 62) B, the input's cast up and c_proj's cast forward, 3 gradient casts and c_proj's backward. One-kernel
    activations (erf gelu, relu) stay 16-bit: nothing."""
    if ffn not in ("gelu_new", "gelu_fast"):
        return (0.0, 0.0), (0, 0)
    act_f, act_b = _gelu_new_autocast()
    half_f, half_b = activation_bytes(ffn, ACT_16BIT)
    c = _cast(ACT_16BIT)
    return (act_f + c - half_f, act_b + c - half_b), (2, 4)


def autocast_gpt_s(model, engine: str, precision: str, kernels: str, flash: bool, tp: int, micro_batch: int,
                   seq_len: int, device, kernel_s: float) -> float:
    """Seconds per micro-batch, all layers on one tensor-parallel rank, that autocast over fp32 weights (engine ddp
    in 16 bits, autocast_param_s) adds to an HF GPT-2 block run as eager kernels: the gelu_new fp32 chain
    (gpt_ffn_autocast_bytes) and, under eager attention, the scores' fp32 promotions (GPT_SCORE_AUTOCAST_BYTES per
    score element of the b x heads/tp x s x s per layer), memory-bound, + their kernels (`kernel_s` each,
    calibration kernel_overhead_s). 0 for fused kernels (a compiled graph keeps the fp32 intermediates in
    registers), other families and engines, CPU devices."""
    if (model.family != "gpt2" or kernels == "fused" or engine != "ddp" or precision not in ("bf16", "fp16")
            or device.kind == "cpu"):
        return 0.0
    (ffn_f, ffn_b), (ffn_kf, ffn_kb) = gpt_ffn_autocast_bytes(model.ffn)
    moved = (ffn_f + ffn_b) * micro_batch * seq_len * model.d_ff / tp
    launches = ffn_kf + ffn_kb
    if not flash:
        moved += sum(GPT_SCORE_AUTOCAST_BYTES) * micro_batch * model.num_heads / tp * seq_len * seq_len
        launches += sum(GPT_SCORE_AUTOCAST_KERNELS)
    return model.num_layers * (moved / device.hbm_bytes_per_s + launches * kernel_s)
