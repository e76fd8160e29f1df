"""Kernels one transformer block launches per pass, by the kernel path its software runs, counted from the code.

A block's fixed time per pass is (kernels launched) x calibration.kernel_overhead_s: each launch costs the device a
fixed time beyond the work the GEMM curve and the element-wise bytes already price (launch latency and the
kernel's ramp-up / tail on the SMs; in eager PyTorch also the host-side dispatch of the op when the host falls
behind the device). The count depends on the software, not on tokens or tensor parallelism: a fused path launches
fewer kernels per block than eager PyTorch, an encoder-decoder decoder block (cross-attention) more than an encoder
block, eager attention (scores, softmax, dropout, context, copy) more than one flash kernel.

Counts are (forward, backward) per block. A kernel of the forward is, in backward, typically two (a GEMM's dgrad
and wgrad, an element-wise op's gradient plus the gradient sum where a tensor fans out). Collectives (TP all-reduce
/ all-gather / reduce-scatter, ZeRO-3 gathers) are priced by costmodel/comm.py and not counted here.

Paths (Strategy.kernels x Strategy.attention x the model family):
- "fused": Megatron-LM / NeMo 1.x (apex FusedLayerNorm, Megatron's fused scale-mask-softmax, TorchScript
  bias-GeLU and bias-dropout-add: megatron/model/transformer.py ParallelAttention / ParallelMLP /
  ParallelTransformerLayer), Megatron-Core with Transformer Engine (LayerNormLinear, fused RoPE, DotProductAttention,
  fused bias-SwiGLU), and one-kernel torch modules (llm-foundry MPT: nn.LayerNorm, nn.GELU, flash attention);
- "eager": every element-wise op is a kernel (torchtitan TransformerBlock: fp32 RMSNorm of 8 ops, complex RoPE
  on q and k, separate wq / wk / wv and w1 / w3; HF GPT2Block / T5Block), as costmodel/eager_kernels.py counts
  their bytes;
- "eager-fused-norm": eager, one fused RMSNorm kernel each way (torchtitan fused_rmsnorm).
"""

from __future__ import annotations

from functools import lru_cache

Counts = tuple[int, int]

LINEAR: Counts = (1, 2)  # GEMM; backward dgrad + wgrad
BIAS_LINEAR: Counts = (1, 3)  # bias in the GEMM epilogue / the next fused kernel; backward + the bias-gradient sum
LAYER_NORM: Counts = (1, 2)  # apex / torch native LayerNorm; backward dx + gamma/beta partials
RMS_NORM: Counts = (1, 2)  # TE / apex / Triton RMSNorm; backward dx + gamma partials
# composed fp32 RMSNorm (torchtitan RMSNorm, HF T5LayerNorm): .float(), pow, mean, + eps, rsqrt, mul, type_as,
# * weight; backward the autograd formulas of each (eager_kernels.rms_norm_eager lists them)
NORM_EAGER: Counts = (8, 15)
FLASH: Counts = (1, 3)  # FlashAttention-2 forward; backward dot(dO, O) preprocess, main kernel, dq fp32 -> bf16
# Megatron eager attention: baddbmm scores, fused scale-mask-softmax, attention dropout, bmm context, permute copy;
# backward the copy, two bmm, dropout, softmax, two for baddbmm
ATTN_MEGATRON: Counts = (5, 7)
# HF eager attention: scores matmul, mask / position-bias add, softmax with its fp32 casts (3), dropout, context
# matmul; backward the same ops' gradients and the two matmuls' two operands
ATTN_HF: Counts = (7, 9)
# GPT eager attention (HF GPT2Attention._attn): q @ k^T, / sqrt(d), the causal mask (bias slice .bool(), torch.where),
# the padding-mask add, softmax, dropout, @ v = 8; backward two GEMMs per matmul, dropout, softmax, the mask's and
# the scale's gradients = 8 (eager_kernels.gpt_score_bytes); plus torch.matmul's copies of the permuted q, k, v and
# the context's .contiguous() each way. Megatron-LM 2019 launches 9 forward (mul, and the subtraction with its two
# small ops on the (1, 1, s, s) mask, instead of where and the add): counted as HF's.
ATTN_GPT_EAGER: Counts = (12, 12)
RESIDUAL_FUSED: Counts = (1, 2)  # (bias-)dropout-add in one kernel; backward the mask multiply + gradient sum
RESIDUAL: Counts = (1, 1)  # residual add; backward the gradient sum where the stream fans out
DROPOUT: Counts = (1, 1)
ACT: Counts = (1, 1)  # one-kernel activation (fused bias-GeLU, nn.GELU, SiLU, ReLU, fused SwiGLU)
MUL: Counts = (1, 2)  # gate product; backward one kernel per operand
ROPE_FUSED: Counts = (2, 2)  # q and k (TE / Megatron-Core fused RoPE)
ROPE_EAGER: Counts = (6, 6)  # per q and k: .float(), complex multiply by freqs_cis, .type_as() (torchtitan)
TANH_GELU_EAGER: Counts = (8, 11)  # HF gelu_new / gelu_fast composed of 8 ops (eager_kernels._gelu_tanh)


def _add(*parts: Counts) -> Counts:
    return sum(p[0] for p in parts), sum(p[1] for p in parts)


def _times(n: int, part: Counts) -> Counts:
    return n * part[0], n * part[1]


def _activation(ffn: str, eager: bool) -> Counts:
    """The FFN activation (and, gated, the product with the gate). Fused paths run a gated activation as one
    kernel (NeMo's fused_bias_geglu, Megatron-Core's bias_swiglu); eager code runs the activation's ops and the
    product."""
    act = ffn.removeprefix("gated-")
    one = TANH_GELU_EAGER if eager and act in ("gelu_new", "gelu_fast") else ACT
    gated = ffn.startswith("gated-") or ffn == "swiglu"
    return _add(one, MUL) if gated and eager else one


def _decoder_only(family: str, ffn: str, kv_heads_lt_heads: bool, path: str, flash: bool) -> Counts:
    eager = path != "fused"
    if family == "llama":
        norm = RMS_NORM if path != "eager" else NORM_EAGER
        if not eager:  # Megatron-Core / TE: one QKV GEMM, fused RoPE, one fc1 GEMM (w1 and w3 fused), fused SwiGLU
            attn = FLASH if flash else ATTN_MEGATRON
            return _add(norm, LINEAR, ROPE_FUSED, attn, LINEAR, RESIDUAL_FUSED,
                        norm, LINEAR, ACT, LINEAR, RESIDUAL_FUSED)
        # torchtitan: wq, wk, wv; RoPE on q, k; repeat_kv copies when grouped; SDPA; wo; w1, w3, silu, mul, w2
        attn = FLASH if flash else ATTN_HF
        repeat = (2, 2) if kv_heads_lt_heads else (0, 0)
        gate = _add(ACT, MUL) if ffn == "swiglu" else ACT
        fc1 = _times(2 if ffn == "swiglu" else 1, LINEAR)
        return _add(norm, _times(3, LINEAR), ROPE_EAGER, repeat, attn, LINEAR, RESIDUAL,
                    norm, fc1, gate, LINEAR, RESIDUAL)
    # GPT-2 / GPT-3 layout: LayerNorm, biased QKV / proj / fc1 / fc2, GeLU
    if not eager:  # Megatron: fused softmax attention or flash, bias-dropout-add fused
        attn = FLASH if flash else ATTN_MEGATRON
        return _add(LAYER_NORM, BIAS_LINEAR, attn, BIAS_LINEAR, RESIDUAL_FUSED,
                    LAYER_NORM, BIAS_LINEAR, _activation(ffn, False), BIAS_LINEAR, RESIDUAL_FUSED)
    # HF GPT2Block: ln, c_attn, SDPA (dropout inside) or eager attention, c_proj, resid dropout, add; ln, c_fc, act,
    # c_proj, dropout, add
    attn = FLASH if flash else ATTN_GPT_EAGER
    return _add(LAYER_NORM, BIAS_LINEAR, attn, BIAS_LINEAR, DROPOUT, RESIDUAL,
                LAYER_NORM, BIAS_LINEAR, _activation(ffn, True), BIAS_LINEAR, DROPOUT, RESIDUAL)


def _t5_attention_sublayer(path: str, flash: bool, cross: bool) -> Counts:
    """Norm, q / k / v (cross: q from the decoder, k and v from the encoder output), core, output, residual."""
    # NeMo 1.x Megatron T5 (nemo/collections/nlp/modules/common/megatron/transformer.py ParallelTransformerLayer_:
    # input_layernorm, self_attention, bias_dropout_add; decoder: post_attention_layernorm, inter_attention,
    # bias_dropout_add; post_inter_attention_layernorm, mlp, bias_dropout_add): fused QKV (self) or Q + fused KV
    # (cross), Megatron attention
    if path == "fused":
        proj = _times(2 if cross else 1, BIAS_LINEAR)
        return _add(LAYER_NORM, proj, FLASH if flash else ATTN_MEGATRON, BIAS_LINEAR, RESIDUAL_FUSED)
    # HF T5Attention: q, k, v, o GEMMs; q, k, v transposes and the output transpose copied (4 copies)
    norm = RMS_NORM if path == "eager-fused-norm" else NORM_EAGER
    return _add(norm, _times(3, LINEAR), (4, 4), FLASH if flash else ATTN_HF, LINEAR, DROPOUT, RESIDUAL)


def _t5_ffn_sublayer(ffn: str, path: str) -> Counts:
    gated = ffn.startswith("gated-")
    if path == "fused":  # NeMo ParallelMLP: dense_h_to_4h (and dense_h_to_4h_2 when gated), dense_4h_to_h, biased
        fc1 = _times(2 if gated else 1, BIAS_LINEAR)
        return _add(LAYER_NORM, fc1, _activation(ffn, False), BIAS_LINEAR, RESIDUAL_FUSED)
    fc1 = _times(2 if gated else 1, LINEAR)
    norm = RMS_NORM if path == "eager-fused-norm" else NORM_EAGER
    act = _activation("gated-gelu_new" if ffn == "gated-gelu" else ffn, True)  # HF T5Config: gated-gelu -> gelu_new
    return _add(norm, fc1, act, DROPOUT, LINEAR, DROPOUT, RESIDUAL)


@lru_cache(maxsize=512)
def block_kernels(family: str, ffn: str, encoder_decoder: bool, grouped_kv: bool, kernels: str,
                  flash: bool) -> tuple[Counts, Counts]:
    """((encoder forward, backward), (decoder / only-stack forward, backward)) kernels launched per block."""
    if encoder_decoder:
        enc = _add(_t5_attention_sublayer(kernels, flash, False), _t5_ffn_sublayer(ffn, kernels))
        dec = _add(enc, _t5_attention_sublayer(kernels, flash, True))
        return enc, dec
    return (0, 0), _decoder_only(family, ffn, grouped_kv, kernels, flash)


def sublayers(model, encoder_blocks: int, decoder_blocks: int) -> int:
    """Attention, cross-attention and FFN sublayers of `encoder_blocks` encoder and `decoder_blocks` decoder (or
    decoder-only) blocks: two per block, three per decoder block of an encoder-decoder model (cross-attention)."""
    return 2 * encoder_blocks + (3 if model.is_encoder_decoder else 2) * decoder_blocks


def attention_core_kernels(kernels: str, flash: bool) -> int:
    """Forward kernels of one attention core: what a selective recompute (Megatron checkpoint_core_attention)
    launches again per attention sublayer."""
    return (FLASH if flash else ATTN_MEGATRON if kernels == "fused" else ATTN_HF)[0]


def model_block_kernels(model, kernels: str, flash: bool) -> tuple[Counts, Counts]:
    """block_kernels for a ModelSpec (cached on the fields that set the count)."""
    return block_kernels(model.family, model.ffn, model.is_encoder_decoder, model.kv_heads < model.num_heads,
                         kernels, flash)
