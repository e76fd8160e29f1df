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
