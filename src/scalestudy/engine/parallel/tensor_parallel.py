"""Megatron-style tensor parallelism for the Hugging Face Llama and T5 blocks with DTensor `parallelize_module`.

Per block: the query/key/value (and gate/up, wi) projections are split by output columns, the attention output and
down (wo) projections by input rows, so each block needs one all-reduce forward and one backward per sub-layer.
Heads are split across ranks (GQA: query and key/value heads alike, each rank keeps whole groups); T5's relative
position bias table is split by head. Embeddings, norms and the head stay replicated.

Sequence parallelism (Korthikanti et al. 2022): between the projections the residual stream is split along the
sequence; norms run on their sequence shard, the row-parallel outputs are reduce-scattered instead of all-reduced
and an all-gather precedes the column-parallel inputs. Each chunk scatters the sequence at its first block and
gathers it after its last block, so embeddings, masks and the head see whole sequences.
"""

from __future__ import annotations

from torch import nn
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                               SequenceParallel, parallelize_module)


def _row(sp: bool) -> RowwiseParallel:
    return RowwiseParallel(output_layouts=Shard(1)) if sp else RowwiseParallel()


def _gather_input(kwarg: str | None = None) -> PrepareModuleInput:
    """Sequence shards -> whole sequence before a column-parallel sub-layer (all-gather; reduce-scatter back)."""
    if kwarg:
        return PrepareModuleInput(input_kwarg_layouts={kwarg: Shard(1)},
                                  desired_input_kwarg_layouts={kwarg: Replicate()}, use_local_output=True)
    return PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),), use_local_output=True)


def llama_plan(sp: bool) -> dict:
    plan = {
        "self_attn.q_proj": ColwiseParallel(), "self_attn.k_proj": ColwiseParallel(),
        "self_attn.v_proj": ColwiseParallel(), "self_attn.o_proj": _row(sp),
        "mlp.gate_proj": ColwiseParallel(), "mlp.up_proj": ColwiseParallel(), "mlp.down_proj": _row(sp),
    }
    if sp:
        plan.update({"input_layernorm": SequenceParallel(), "post_attention_layernorm": SequenceParallel(),
                     "self_attn": _gather_input("hidden_states"), "mlp": _gather_input()})
    return plan


def t5_plan(block: nn.Module, sp: bool) -> dict:
    plan = {}
    for i, sub in enumerate(block.layer):
        attn = getattr(sub, "SelfAttention", None) or getattr(sub, "EncDecAttention", None)
        if attn is not None:
            name = f"layer.{i}.{'SelfAttention' if hasattr(sub, 'SelfAttention') else 'EncDecAttention'}"
            plan.update({f"{name}.q": ColwiseParallel(), f"{name}.k": ColwiseParallel(),
                         f"{name}.v": ColwiseParallel(), f"{name}.o": _row(sp)})
            if attn.has_relative_attention_bias:  # (buckets, heads) table: each rank keeps its heads' columns
                plan[f"{name}.relative_attention_bias"] = ColwiseParallel()
            if sp:
                plan[name] = _gather_input()
        else:
            ff = sub.DenseReluDense
            for proj in ("wi", "wi_0", "wi_1"):
                if hasattr(ff, proj):
                    plan[f"layer.{i}.DenseReluDense.{proj}"] = ColwiseParallel()
            plan[f"layer.{i}.DenseReluDense.wo"] = _row(sp)
            if sp:
                plan[f"layer.{i}.DenseReluDense"] = _gather_input()
        if sp:
            plan[f"layer.{i}.layer_norm"] = SequenceParallel()
    return plan


def _localise_heads(block: nn.Module, tp: int) -> None:
    """T5 attention shapes its zero position bias from `n_heads`: make it the local head count."""
    for module in block.modules():
        if hasattr(module, "n_heads") and hasattr(module, "key_value_proj_dim"):
            module.n_heads //= tp
            module.inner_dim //= tp


def _scatter_sequence(mesh):
    def hook(_module, args, kwargs):
        local = DTensor.from_local(args[0], mesh, [Replicate()], run_check=False)
        return (local.redistribute(mesh, [Shard(1)]).to_local(), *args[1:]), kwargs
    return hook


def _gather_sequence(mesh):
    def hook(_module, _args, output):
        first = output[0] if isinstance(output, tuple) else output
        whole = DTensor.from_local(first, mesh, [Shard(1)], run_check=False).redistribute(mesh, [Replicate()])
        whole = whole.to_local()
        return (whole, *output[1:]) if isinstance(output, tuple) else whole
    return hook


def apply_tensor_parallel(chunk: nn.Module, family: str, mesh, sequence_parallel: bool) -> None:
    """Shard every block of `chunk` over the 1-D tp `mesh` (in place)."""
    tp = mesh.size()
    for layers in chunk.layer_lists():
        blocks = list(layers)
        for block in blocks:
            if family == "llama":
                parallelize_module(block, mesh, llama_plan(sequence_parallel))
            else:
                parallelize_module(block, mesh, t5_plan(block, sequence_parallel))
                _localise_heads(block, tp)
        if sequence_parallel and blocks:
            blocks[0].register_forward_pre_hook(_scatter_sequence(mesh), with_kwargs=True)
            blocks[-1].register_forward_hook(_gather_sequence(mesh))
