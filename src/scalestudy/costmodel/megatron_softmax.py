"""Megatron's fused scale-mask-softmax and its PyTorch fallback: when the fused kernel is skipped, and what the
fallback moves.

Megatron-LM's eager attention (and every fork of it: Megatron-DeepSpeed, NeMo 1.x) runs the softmax over the
attention scores through FusedScaleMaskSoftmax (megatron/model/fused_softmax.py). Its `is_kernel_available` decides
per call, from the scores' shape (b, np, sq, sk) -- micro-batch, heads per tensor-parallel rank, query and key length
-- whether the fused CUDA kernel runs; when it does not, `forward_torch_softmax` runs instead, in fp32 whenever the
query-key layer scaling is on (ParallelAttention sets attention_softmax_in_fp32 then, Megatron's default in 16-bit
training): `input.float()`, `input * scale`, the mask's `masked_fill_`, `torch.nn.Softmax`, `.half()` -- five
kernels each way over every score in fp32 where the fused kernel reads and writes each score once in 16 bits.

For a causal mask the fused kernel needs `b * np` to be a multiple of `batch_per_block`, which the CUDA side
computes from the KEY length (scaled_masked_softmax.h get_batch_per_block: 128 threads per block, a warp per
min(next power of two of the length, 32) elements, two rows per warp up to 128 elements). In BigScience's
Megatron-DeepSpeed from 9f5f5d4c (2021-10-21, 'fused softmax layer bug fix sync') until 1cb76a64 (2022-03-06,
'sync the whole Meg-LM fused_kernels sub-tree') the Python side passed the arguments in another order: the
staticmethod is declared `get_batch_per_block(b, np, sq, sk)`, called as `self.get_batch_per_block(sq, sk, b, np)`
and forwards `(sq, sk, b, np)` of its own names to the CUDA function `(query_seq_len, key_seq_len, batches,
attn_heads)` -- so the CUDA side takes the heads per rank for the key length. With 16 heads per rank that gives 16
(any micro-batch passes), with 8 it gives 32 (b * 8 fails below b = 4), with 20 or 40 it gives 8. Before 9f5f5d4c
(BigScience's tr1-13B of August-September 2021) the check had no batch_per_block; from 1cb76a64 on (and in
Megatron-LM, deepspeedai/Megatron-DeepSpeed's July 2023 rebase) the key length is passed as the key length: at 2048
keys the multiple is 4, which `attn_batches % 4 == 0` already asks.

A run's rows state the outcome as Strategy.attention_kernel "torch-softmax" (attention eager); `fused_softmax_runs`
is the rule, for the tests that check the rows against it.
"""

from __future__ import annotations

TORCH_SOFTMAX = "torch-softmax"  # Strategy.attention_kernel of an eager attention whose softmax fell back to PyTorch

# Rules of FusedScaleMaskSoftmax.is_kernel_available for a causal mask, by the code that ran them (module docstring)
RULES = ("bigscience-2021-10", "megatron")
WARP_SIZE = 32
THREADS_PER_BLOCK = 128


def batch_per_block(key_length: int) -> int:
    """scaled_masked_softmax.h get_batch_per_block for a key length: rows of scores one 128-thread block handles."""
    next_power_of_two = 1 << max(key_length - 1, 0).bit_length()
    warp = min(next_power_of_two, WARP_SIZE)
    rows_per_warp = 2 if next_power_of_two <= 128 else 1
    return THREADS_PER_BLOCK // warp * rows_per_warp


def fused_softmax_runs(rule: str, micro_batch: int, heads_per_rank: int, seq_len: int) -> bool:
    """Whether Megatron's fused causal softmax runs for scores (micro_batch, heads_per_rank, seq_len, seq_len) under
    `rule` (RULES): the shape checks both versions share (fp16/bf16 scores, 16 < length <= 2048, multiples of 4),
    then the batch_per_block multiple -- of the heads per rank taken as the key length in BigScience's
    2021-10..2022-03 code (keys up to 2048), of the key length in Megatron's (up to 4096 in the 2023 rebase)."""
    if rule not in RULES:
        raise ValueError(f"fused softmax rule {rule!r}: one of {', '.join(RULES)}")
    batches = micro_batch * heads_per_rank
    longest = 2048 if rule == "bigscience-2021-10" else 4096  # the kernels' template sizes of each version
    if not (16 < seq_len <= longest and seq_len % 4 == 0 and batches % 4 == 0):
        return False
    key = heads_per_rank if rule == "bigscience-2021-10" else seq_len
    return batches % batch_per_block(key) == 0


def torch_softmax_extra_bytes(act_bytes: int) -> tuple[float, float]:
    """(forward, backward) bytes per score element the fp32 PyTorch fallback moves beyond the fused kernel, whose
    forward reads and writes each `act_bytes`-wide score once and whose backward reads the gradient and the output
    and writes the input gradient. Fallback forward (fused_softmax.py forward_torch_softmax): `.float()` (r a, w 4),
    `* scale` (r 4, w 4), `masked_fill_` (r 4, w 4; the bool (1, 1, s, s) mask is read from cache), Softmax (r 4,
    w 4), `.half()` / `.bfloat16()` (r 4, w a). Backward (autograd's formulas): the cast's gradient up to fp32
    (r a, w 4), softmax_backward (r 8, w 4), masked_fill's `grad.masked_fill(mask, 0)` (r 4, w 4), the scale's
    (r 4, w 4), the cast back (r 4, w a). fp32 scores (a fp32 run: input_in_float16 False) skip both casts --
    forward_torch_softmax casts only 16-bit input -- leaving the scale, the mask and the softmax."""
    a = act_bytes
    cast = (a + 4) if _casts(a) else 0  # each cast, either way
    fallback_forward = cast + 8 + 8 + 8 + cast
    fallback_backward = cast + 12 + 8 + 8 + cast
    return float(fallback_forward - 2 * a), float(fallback_backward - 3 * a)


def _casts(act_bytes: int) -> bool:
    """Whether the fallback casts the scores to fp32 and back: only 16-bit scores are cast (fused_softmax.py
    `if self.input_in_float16 and self.softmax_in_fp32`)."""
    return act_bytes < 4


# Kernels the fallback launches beyond the fused one, (forward, backward): five each way instead of one; three
# for fp32 scores, which skip the two casts (torch_softmax_extra_kernels)
TORCH_SOFTMAX_EXTRA_KERNELS = (4, 4)


def torch_softmax_extra_kernels(act_bytes: int) -> tuple[int, int]:
    """(forward, backward) launches the fallback adds per attention beyond the fused kernel's one."""
    return TORCH_SOFTMAX_EXTRA_KERNELS if _casts(act_bytes) else (2, 2)


def torch_softmax_pass_s(model, device, act_bytes: int, tp: int, micro_batch: int, seq_len: int, target_len: int,
                         kernel_s: float) -> tuple[float, float]:
    """(forward, backward) seconds the fallback adds to one micro-batch on one tensor-parallel rank, all layers:
    its extra bytes over every attention score (the heads of the rank; self-attention s x s, an encoder-decoder's
    decoder t x t and cross-attention t x s) at the device's memory rate, and its extra launches at the fitted
    per-kernel time (calibration kernel_overhead_s, as every block kernel)."""
    heads = micro_batch * model.num_heads / tp
    if model.is_encoder_decoder:
        scores = heads * (model.num_layers * seq_len * seq_len
                          + model.num_decoder_layers * (target_len * target_len + target_len * seq_len))
        attentions = model.num_layers + 2 * model.num_decoder_layers
    else:
        scores, attentions = heads * model.num_layers * seq_len * seq_len, model.num_layers
    extra_f, extra_b = torch_softmax_extra_bytes(act_bytes)
    launch_f, launch_b = (k * attentions * kernel_s for k in torch_softmax_extra_kernels(act_bytes))
    return (scores * extra_f / device.hbm_bytes_per_s + launch_f,
            scores * extra_b / device.hbm_bytes_per_s + launch_b)
