"""Each pipeline stage's share of the blocks' seconds, where the blocks differ in kind (an encoder-decoder's).

A decoder-only model's blocks are alike, so a stage of n of L blocks runs n / L of their time. A T5's are not: an
encoder block runs its GEMMs over the seq_len-token input, a decoder block over the target_len targets plus the
cross-attention's keys and values over the encoder output, and the two launch different kernels (NeMo's Megatron
path: 15 a forward against 25, costmodel/kernel_counts.py) over different element-wise bytes. Sharing the blocks'
seconds by forward FLOPs (stages.layer_costs) charges an encoder stage the per-FLOP average of everything: at 23B
(tp 4, micro-batch 4, 512 / 128 tokens) a decoder block is 0.49 of an encoder block's FLOPs but 0.75 of its seconds
(its kernels' fixed time and its smaller, less efficient GEMMs), so an encoder-first split (NeMo / Megatron-LM's
pipeline_model_parallel_split_rank = pp // 2) priced its encoder stage 18% slow and its decoder stage fast.

Every term of step.compute_times is a sum over blocks of a per-kind amount (GEMMs per stack at their own dims,
element-wise bytes and kernel counts per block kind), so one more decoder block adds exactly a decoder block's
seconds: the same difference stages.layer_costs takes of the FLOPs. The encoder block's seconds are the rest.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable


def block_seconds(passes: float, passes_one_more_decoder_block: float, encoder_blocks: int,
                  decoder_blocks: int) -> tuple[float, float]:
    """(encoder block, decoder block) forward + backward seconds of one micro-batch, from the whole model's blocks'
    `passes` and those of the same model with one more decoder block (every compute term is linear in each stack's
    block count: module docstring)."""
    decoder = passes_one_more_decoder_block - passes
    encoder = (passes - decoder_blocks * decoder) / encoder_blocks
    return encoder, decoder


def stage_time_shares(split: tuple[int, ...], encoder_blocks: int, encoder_s: float,
                      decoder_s: float) -> tuple[float, ...]:
    """Each stage's share of the blocks' seconds: stages hold blocks in order, the encoder's first (`split`: blocks
    per stage), an encoder block taking `encoder_s` and a decoder block `decoder_s`."""
    out, start = [], 0
    for n in split:
        enc = max(0, min(n, encoder_blocks - start))
        out.append(enc * encoder_s + (n - enc) * decoder_s)
        start += n
    total = sum(out)
    return tuple(x / total for x in out)


_BLOCK_S: dict[int, tuple] = {}


def encoder_decoder_time_shares(model, split: tuple[int, ...], passes_of: Callable,
                                same: object = None) -> tuple[float, ...] | None:
    """stage_time_shares of an encoder-decoder `model` split over pipeline stages (`split`, blocks per stage), with
    `passes_of(m)` the forward + backward seconds of one micro-batch of model m's blocks (step.compute_times at the
    caller's settings); None where the blocks are alike (decoder-only, or one stage): their FLOP shares are their
    time shares. `same`: an object whose identity stands for the caller's settings (its step.ComputeTimes of
    `model`, one per configuration): the two blocks' seconds are memoised by it, as no split enters them (a
    planner's pipeline depths and schedules at one micro-batch share them)."""
    if len(split) < 2 or not model.is_encoder_decoder:
        return None
    le, ld = model.num_layers, model.num_decoder_layers
    hit = _BLOCK_S.get(id(same)) if same is not None else None
    if hit is not None and hit[0] is same and hit[1] is model:
        encoder_s, decoder_s = hit[2]
    else:
        more = dataclasses.replace(model, num_decoder_layers=ld + 1)
        encoder_s, decoder_s = block_seconds(passes_of(model), passes_of(more), le, ld)
        if same is not None:
            if len(_BLOCK_S) > 100_000:
                _BLOCK_S.clear()
            _BLOCK_S[id(same)] = (same, model, (encoder_s, decoder_s))
    return stage_time_shares(split, le, encoder_s, decoder_s)
