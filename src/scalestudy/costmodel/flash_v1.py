"""FlashAttention-1's key-block loop: the HBM traffic of its fp32 partial outputs (attention_kernel "fa1").

flash-attn before 2.0 (read at tag v0.2.2, 2022-11-25; v1.0.9 keeps the same loop) runs the attention core over
blocks of keys in an outer loop (csrc/flash_attn/src/fmha_fprop_kernel_1xN.h device_1xN_loop): for each key block
every query row of the thread block is read again, and its running output is loaded from and stored back to an
fp32 buffer in HBM (fmha_api.cpp mha_fwd: o_tmp, at::kFloat) with its softmax max / sum; a causal mask skips the
rows above the block's diagonal (`begin = loop_step_idx * N / M`). The backward does the same for dQ
(fmha_dgrad_kernel_1xN_loop.h: dq_tmp fp32, loaded and stored, or atomically added when split over the keys).
FlashAttention-2 (Dao 2023, arXiv 2307.08691, Sec. 3.1-3.2) swapped the loops -- each thread block owns its query
rows and keeps their output on chip -- so this traffic is FA1's alone. Per (query row, key block) it moves about
10 d + 16 bytes forward and 12 d + 8 backward against 4 d x block FLOPs forward and 10 d x block backward: at head
dim 128 (key block 128) 51 FLOP/byte forward, under an A100's ridge (312 TFLOP/s over 2.04 TB/s = 153, the 40GB's
1.56 TB/s: 200), so the loop, not the tensor cores, can bound it; at head dim 64 (key block 256) twice that.
step.compute_times prices the kernel at the larger of its FLOP time and this traffic's time (a roofline).
"""
from __future__ import annotations

import math

# Key block of the kernel by head dimension (csrc/flash_attn/src/fmha_{fwd,bwd}_hdim{32,64,128}.cu at v0.2.2:
# FMHA_kernel_traits<256, 32 | 64, ...> for seqlen_k >= 256 and <128, 128, ...>; the hdim-64 backward's 256 is
# A100's, sm86 / sm89 keep it, Turing runs 128). Head dims are rounded up to the next kernel (mha_fwd: d <= 32, 64,
# 128; FA1 takes no head dim above 128).
FA1_KEY_BLOCK = ((64, 256), (128, 128))
FA1_FWD_ROW_BYTES = (2 + 8, 16)  # per head-dim element: 16-bit Q read + fp32 output read and write; + max/sum fp32
FA1_BWD_ROW_BYTES = (2 + 2 + 8, 8)  # 16-bit Q and dO read + fp32 dQ read and write; + log-sum-exp, rowsum(dO o O)


def fa1_key_block(head_dim: int) -> int:
    """Keys per block of FA1's outer loop for `head_dim` (FA1_KEY_BLOCK)."""
    for largest, block in FA1_KEY_BLOCK:
        if head_dim <= largest:
            return block
    return FA1_KEY_BLOCK[-1][1]


def fa1_passes_per_row(key_len: int, head_dim: int, causal: bool) -> float:
    """Mean number of key blocks each query row is revisited for (0 when the keys fit one block: no loop); under a
    causal mask (query length = key length) block j visits only the rows from j x block on."""
    block = fa1_key_block(head_dim)
    blocks = math.ceil(key_len / block)
    if blocks <= 1:
        return 0.0
    if not causal:
        return float(blocks)
    return sum(key_len - j * block for j in range(blocks)) / key_len


def fa1_loop_bytes(core_flops: float, key_len: int, head_dim: int, causal: bool) -> tuple[float, float]:
    """(forward, backward) HBM bytes of FA1's key-block loop for an attention core of `core_flops` forward FLOPs
    counted on the full square (4 x query rows x key_len x head_dim, step._layer_gemms)."""
    passes = fa1_passes_per_row(key_len, head_dim, causal)
    if passes == 0.0:
        return 0.0, 0.0
    row_passes = core_flops / (4.0 * key_len * head_dim) * passes  # query rows over batch, heads and layers
    fwd = row_passes * (FA1_FWD_ROW_BYTES[0] * head_dim + FA1_FWD_ROW_BYTES[1])
    bwd = row_passes * (FA1_BWD_ROW_BYTES[0] * head_dim + FA1_BWD_ROW_BYTES[1])
    return fwd, bwd
