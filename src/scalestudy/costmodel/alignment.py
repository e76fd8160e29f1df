"""GEMM dimension alignment: which matmuls of a block and of the LM head have operands whose leading dimensions are
not multiples of 16 bytes, and what that costs.

Mechanism (NVIDIA, Matrix Multiplication Background User's Guide, Table 1 "Tensor Core Requirements"): with cuBLAS
>= 11, fp16/bf16 GEMMs run on Tensor Cores "always but most efficient with multiples of 8" elements. A GEMM's
kernels load their operand tiles in 16-byte vectors (sm80 cp.async, sm90 TMA whose global strides must be multiples
of 16 bytes); a leading dimension of 4, 2 or 1 elements forces narrower loads (and on Hopper an Ampere fallback
kernel), at a fraction of the aligned rate that each device YAML states as data (`unaligned_gemm_fraction`, with
its measurement). Devices without the key (CPU profiles, custom files) and fp32 GEMMs are not priced here.

Which dimensions are leading dimensions: with row-major activations [tokens, features] and nn.Linear weights
[out, in], the forward Y = X W^T, the input gradient dX = dY W and the weight gradient dW = dY^T X each read or write
a matrix whose rows are `in` (K) long and one whose rows are `out` (N) long; the token count M is never a row length.
So a linear layer's three GEMMs share one alignment: that of gcd(N, K) -- the LM head's N is the vocabulary held by
the rank (vocab / tp), the attention projections' are heads x head_dim / tp, the FFN's d_ff / tp. The attention core
of an eager (unfused) attention is two batched GEMMs over [sequence, head_dim] slices: their alignment is that of
gcd(sequence, head_dim) (Megatron's Q/K/V are views into one [s, b, 3 x heads x head_dim] tensor, so an odd head_dim
also misaligns the K and V base pointers). A fused flash kernel instead pads the head dimension to a multiple of 8
(flash-attention flash_attn_interface.py: `if head_size_og % 8 != 0: q = pad(q, ...)`, k and v likewise): its
time grows by padded / head_dim (`flash_head_dim_factor`).

Before cuBLAS 11 (CUDA 10.x and older, Strategy.cublas "10") the same Table 1 gives "multiples of 8" as a
requirement, not a preference: an fp16 GEMM with any leading dimension off the 8-element grid runs without Tensor
Cores, on the CUDA cores at fp32 accumulate (PyTorch calls cublasGemmEx / cublasGemmStridedBatchedEx with an fp32
compute type for half operands) -- the device's fp32 peak over its fp16 Tensor Core peak (V100: 15.7 / 125), the
GEMM efficiency curve taken as it is (`no_tensor_core_fraction`).
"""

from __future__ import annotations

import math

from scalestudy.specs.hardware import DeviceSpec
from scalestudy.specs.model import ModelSpec

# Elements of one 16-byte vector load, by the precision whose alignment the device data describes (fp16 / bf16; fp8:
# an fp8 run's linear GEMMs take 1-byte operands, 16 to a vector -- cuBLASLt FP8 needs 16-byte aligned leading dims)
VECTOR_ELEMENTS = {"fp16": 8, "bf16": 8, "fp8": 16}
FLASH_HEAD_DIM_MULTIPLE = 8  # flash-attention pads the head dimension to a multiple of 8


def alignment(*dims: float, vector: int = 8) -> int:
    """Largest power of two <= `vector` that divides every one of `dims` (a dimension that is not a whole number
    -- a width not divisible by tp -- has alignment 1)."""
    out = vector
    for d in dims:
        n = round(d)
        if abs(d - n) > 1e-9 or n <= 0:
            return 1
        out = math.gcd(out, n)
    return 1 << (out.bit_length() - 1)  # gcd with a power of two is a power of two


def no_tensor_core_fraction(device: DeviceSpec, precision: str) -> float:
    """Fraction of the Tensor Core GEMM rate a 16-bit GEMM keeps on the CUDA cores (fp32 accumulate): the device's
    fp32 peak over its `precision` peak; 1 where either peak is not stated."""
    fp32, half = device.peak_flops.get("fp32"), device.peak_flops.get(precision)
    return min(1.0, fp32 / half) if fp32 and half else 1.0


def gemm_fraction(device: DeviceSpec, precision: str, *dims: float, cublas: str = "11") -> float:
    """Fraction of the aligned GEMM rate a GEMM whose leading dimensions are `dims` (its N and K) reaches on
    `device` in `precision`: 1 when they are multiples of one 16-byte vector, when the device states no
    `unaligned_gemm_fraction`, or for a precision without an entry in VECTOR_ELEMENTS. Under cuBLAS "10" an
    unaligned GEMM runs without Tensor Cores (no_tensor_core_fraction; module docstring)."""
    vector = VECTOR_ELEMENTS.get(precision)
    table = device.unaligned_gemm_fraction
    if vector is None or not table:
        return 1.0
    a = alignment(*dims, vector=vector)
    if a >= vector:
        return 1.0
    if cublas == "10":
        return no_tensor_core_fraction(device, precision)
    return next((f for rows_a, f in table if rows_a == a), 1.0)


def flash_head_dim_factor(head_dim: int) -> float:
    """Time of a fused flash-attention core over that at `head_dim`: the kernel runs the padded head dimension."""
    padded = -(-head_dim // FLASH_HEAD_DIM_MULTIPLE) * FLASH_HEAD_DIM_MULTIPLE
    return padded / head_dim


def triton_flash_head_dim_factor(head_dim: int) -> float:
    """Time of the Triton FlashAttention core (attention_kernel "triton") over that at `head_dim`: its kernels tile
    the head dimension as one block of the next power of two, at least 16 (flash-attn's flash_attn_triton.py,
    _flash_attn_forward / _flash_attn_backward: BLOCK_HEADDIM = max(triton.next_power_of_2(d), 16), the columns past
    d masked to zero but multiplied): head dim 96 runs 128 columns, 4/3 of the work; 64 and 128 run as they are."""
    padded = max(16, 1 << max(0, math.ceil(math.log2(max(1, head_dim)))))
    return padded / head_dim


# Engines that pad the vocabulary themselves, by the multiple they pad to per tensor-parallel rank: Megatron-LM
# (and NeMo, Megatron-DeepSpeed, which inherit it) pads to --make-vocab-size-divisible-by (default 128) x tp
# (megatron/training/tokenizer `_vocab_size_with_padding`: "Pad vocab size so it is divisible by model parallel size
# and still having GPU friendly size"), so its LM-head GEMM is aligned whatever the tokenizer's size. Hugging Face
# models (engines deepspeed / fsdp / ddp here) use config.json's vocab_size as it is; nanoGPT (50304), llm-foundry
# MPT (50368) and torchtitan (the tokenizer's size) pad, or not, in their configs -- the model's vocab says it.
# Megatron-DeepSpeed and GPT-NeoX pad like Megatron-LM but run as engine deepspeed, which also means Hugging Face +
# DeepSpeed (and scalestudy's own train, which does not pad): their runs state the padded vocabulary in the model
# (as costmodel/published.yaml's rows do: tr1 50432, tr8 50257 -> 50432 at tp 2, 50688 at tp 4).
VOCAB_PAD_MULTIPLE = {"megatron": 128}


def pads_vocab(engine: str) -> bool:
    """Whether `engine` pads the vocabulary to a multiple of 128 x tp (its LM-head GEMMs then always aligned)."""
    return engine in VOCAB_PAD_MULTIPLE


def unaligned_gemms(model: ModelSpec, device: DeviceSpec, precision: str, tp: int, seq_len: int, target_len: int,
                    flash: bool, engine: str, cublas: str = "11",
                    head_tp: int = 0) -> list[tuple[str, tuple[float, float], int, float]]:
    """(name, leading dims, alignment in elements, fraction of the aligned rate) of each GEMM kind of the run that
    is priced unaligned (step.compute_times applies the same rule per GEMM): for estimate's note. `head_tp`: the
    ranks the LM head's vocabulary is split over (strategy.vocab_shards: 1 under lm_head replicated; 0 = tp), as
    step._head_s prices it."""
    i, d, kv = model.inner_dim, model.d_model, model.kv_heads * model.d_kv
    qkv = 3 * i if model.is_encoder_decoder else i + 2 * kv
    kinds = [("QKV", (qkv / tp, d)), ("attention output", (d, i / tp)),
             ("FFN in", (model.d_ff * (2 if model.gated_ffn else 1) / tp, d)), ("FFN out", (d, model.d_ff / tp))]
    if not pads_vocab(engine):
        kinds.append(("LM head", (model.vocab_size / (head_tp or tp), d)))
    if not flash:  # eager attention's batched GEMMs over [sequence, head_dim] slices
        lengths = (seq_len, target_len) if model.is_encoder_decoder else (seq_len,)
        kinds += [("attention scores", (length, model.d_kv)) for length in sorted(set(lengths))]
    out = []
    for name, dims in kinds:
        frac = gemm_fraction(device, precision, *dims, cublas=cublas)
        if frac < 1.0:
            out.append((name, dims, alignment(*dims, vector=VECTOR_ELEMENTS[precision]), frac))
    return out
