"""Operator-level selective activation checkpointing (`recompute: op`), as torchtitan implements it.

torchtitan (torchtitan/parallelisms/parallelize_llama.py at 9dec370a, `_apply_ac_to_transformer_block` with
`selective_ac_option = "op"`) wraps every transformer block in a checkpoint whose policy, counted afresh for each
block's forward, MUST_SAVEs the outputs of the ops in its save list -- the SDPA (flash / efficient) kernels and
`aten.mm` -- except every second `aten.mm` (the 2nd, 4th, ... of the block), and PREFER_RECOMPUTEs everything
else. So a block keeps: its input (the checkpoint's argument), the attention output and its log-sum-exp, and the
outputs of the 1st, 3rd, ... bias-free linear projection in forward order; its backward first re-runs the block's
forward except those ops: the other projections (the 2nd, 4th, ... mm), the norms, RoPE, the activation function.

Forward order of a decoder block's projections: q, k, v, o, then gate (w1), up (w3), down (w2) -- or fc1, fc2
without a gate. A projection with a bias runs as `aten.addmm`, which is not in the save list and does not advance
the count (GPT-2's Conv1D layers: nothing saved but the block input and the attention output).
"""

from __future__ import annotations

from functools import lru_cache

from scalestudy.errors import ScalestudyError
from scalestudy.specs.model import ModelSpec


@lru_cache(maxsize=1024)
def projections(model: ModelSpec) -> tuple[tuple[str, int, int, bool, bool], ...]:
    """(name, output width, input width, column-parallel, saved) of each linear projection of one decoder block, in
    forward order; `saved`: the op-level policy keeps its output."""
    if model.is_encoder_decoder:
        raise ScalestudyError("recompute op (torchtitan's operator-level selective checkpointing) is modelled for "
                              "decoder-only models; use none, selective or full")
    d, i, f = model.d_model, model.inner_dim, model.d_ff
    kv = model.kv_heads * model.d_kv
    gpt2 = model.family == "gpt2"  # HF Conv1D: every projection has a bias
    attn_bias = gpt2 or model.attention_bias != "none"
    o_bias = gpt2 or model.attention_bias == "all"
    mlp_bias = gpt2 or model.mlp_bias
    layers = [("q", i, d, True, attn_bias), ("k", kv, d, True, attn_bias), ("v", kv, d, True, attn_bias),
              ("o", d, i, False, o_bias)]
    if model.gated_ffn:
        layers += [("gate", f, d, True, mlp_bias), ("up", f, d, True, mlp_bias), ("down", d, f, False, mlp_bias)]
    else:
        layers += [("fc1", f, d, True, mlp_bias), ("fc2", d, f, False, mlp_bias)]
    out, mm = [], 0
    for name, width, width_in, column, bias in layers:
        saved = False
        if not bias:  # aten.mm: the policy counts it and saves the odd ones
            mm += 1
            saved = mm % 2 == 1
        out.append((name, width, width_in, column, saved))
    return tuple(out)


def layer_bytes(model: ModelSpec, tokens: int, act_bytes: int, tp: int, sp: bool) -> float:
    """Bytes one block keeps for its backward on one tensor-parallel rank: the block input, the attention output
    (+ fp32 log-sum-exp per head) and the saved projections' outputs. Column-parallel outputs and the attention
    are split over tp; the block input and row-parallel outputs are replicated (split too under sequence
    parallelism)."""
    rep = model.d_model * act_bytes  # block input
    shard = model.inner_dim * act_bytes + model.num_heads * 4  # attention output, log-sum-exp
    for _, width, _, column, saved in projections(model):
        if saved:
            if column:
                shard += width * act_bytes
            else:
                rep += width * act_bytes
    return tokens * ((rep + shard) / tp if sp else rep + shard / tp)


def recomputed_gemms(model: ModelSpec, tokens: int, tp: int):
    """Yield (forward FLOPs, m, n, k) of each projection the backward re-runs (not saved), one block."""
    for _, width, width_in, column, saved in projections(model):
        if not saved:
            n, k = (width / tp, width_in) if column else (width, width_in / tp)
            yield 2.0 * tokens * n * k, tokens, n, k


# ---------------------------------------------------------------------------------------------- checkpoint early stop
# A full recompute (`recompute: full`, one checkpoint per block) re-runs the block's forward in its backward. PyTorch's
# non-reentrant torch.utils.checkpoint (use_reentrant=False) stops that re-run as soon as it has re-created as many
# saved tensors as the original forward saved (`set_checkpoint_early_stop`, on by default since PyTorch 2.1: pytorch
# PR #96866 "Make early stop the default for checkpoint", merged 2023-03; _recomputation_hook raises
# _StopRecomputationError from the pack hook of the last one). Autograd saves an op's inputs before it runs, so the
# last op that saves anything -- a block's FFN output projection (MPT down_proj, Llama w2, GPT-2 c_proj, T5 wo), which
# saves its input -- is never executed again, nor what follows it (the residual add; a dropout of p > 0 there would
# save its mask and end the re-run after the projection instead: the stacks below train without one).
# Which stacks use it: PyTorch FSDP runs checkpoint each block with checkpoint_wrapper(CheckpointImpl.NO_REENTRANT)
# -- Composer 0.16 (composer/trainer/dist_strategy.py, llm-foundry's MPT yamls set activation_checkpointing_reentrant:
# false), torchtitan, OLMo-core, fms-fsdp. Megatron-LM / NeMo / Megatron-DeepSpeed re-run whole chunks with their own
# reentrant CheckpointFunction. Evidence of size: llm-foundry's A100 80GB benchmark rows, same model, micro-batch and
# GPUs, torch 1.13.1 (commit a7d6a447) -> 2.1.0 (b2a43a14), checkpointed runs only: MFU 53.66 -> 58.01 (7b, seq 1024),
# 55.23 -> 59.48 (13b), 51.69 -> 55.82 (30b): +8%, as skipping a third of each block's recomputed GEMM FLOPs gives.
EARLY_STOP_ENGINES = ("fsdp",)  # `recompute_early_stop: engine` resolves to "on" for these engines


def early_stop(strategy) -> bool:
    """Whether the strategy's full recompute stops before each block's FFN output projection (see above)."""
    if strategy.recompute != "full":
        return False
    if strategy.recompute_early_stop == "engine":
        return strategy.engine in EARLY_STOP_ENGINES
    return strategy.recompute_early_stop == "on"


def early_stop_tail(model: ModelSpec, micro_batch: int, seq_len: int, target_len: int, tp: int):
    """Yield (forward FLOPs, m, n, k) of the GEMMs an early-stopped full recompute does not re-run, one micro-batch,
    all layers, on one tensor-parallel rank: every block's FFN output projection (row-parallel: d_ff / tp -> d), over
    the encoder's source tokens and the decoder's target tokens of an encoder-decoder model."""
    d, f = model.d_model, model.d_ff
    if model.is_encoder_decoder:
        stacks = ((micro_batch * seq_len, model.num_layers), (micro_batch * target_len, model.num_decoder_layers))
    else:
        stacks = ((micro_batch * seq_len, model.num_layers),)
    for tokens, layers in stacks:
        yield layers * 2.0 * tokens * d * f / tp, tokens, d, f / tp
