"""Megatron-style tensor parallelism for the Hugging Face Llama, T5 and GPT-2 blocks with DTensor `parallelize_module`.

Per block: the query/key/value (and gate/up, wi, c_fc) projections are split by output columns, the attention output
and down (wo, c_proj) projections by input rows, so each block needs one all-reduce forward and one backward per
sub-layer. Heads are split across ranks (GQA: query and key/value heads alike, each rank keeps whole groups); T5's
relative position bias table is split by head. Embeddings, norms and the head stay replicated.

GPT-2 (Hugging Face `Conv1D`: weight [in, out], the transpose of nn.Linear's) computes query, key and value in one
fused `c_attn` whose output columns are [q | k | v]. Split naively by columns, rank 0 of 2 would get all of q and
half of k. Its weight and bias are therefore re-laid out before sharding (`FusedColumns`): the columns go into
[q_0 k_0 v_0 | q_1 k_1 v_1 | ...] order, q_r being rank r's heads, so an even column split gives each rank the
query, key and value columns of its own heads, and the attention's split size and head count become per-rank.
Checkpoints still hold the Hugging Face [q | k | v] layout: engine/parallel/checkpoint.py maps every local slice
of a re-laid-out tensor back to its canonical columns (`FusedColumns.canonical_pieces`).

Sequence parallelism (Korthikanti et al. 2022): between the projections the residual stream is split along the
sequence; norms run on their sequence shard, the row-parallel outputs are reduce-scattered instead of all-reduced
and an all-gather precedes the column-parallel inputs. Each chunk scatters the sequence at its first block and
gathers it after its last block, so embeddings, masks and the head see whole sequences.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import torch
from torch import nn
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_module, distribute_tensor
from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                               SequenceParallel, parallelize_module)
from transformers.pytorch_utils import Conv1D


@dataclass(frozen=True)
class FusedColumns:
    """`parts` projections fused along `dim` ([q | k | v]: parts 3), re-laid out for `groups` tensor-parallel ranks.

    Canonical order: part-major, [q_0 .. q_{g-1} | k_0 .. | v_0 ..]; blocked order: group-major,
    [q_0 k_0 v_0 | q_1 k_1 v_1 | ...], so an even split into `groups` pieces gives piece r all parts of group r.
    """

    parts: int
    groups: int
    dim: int

    def to_blocks(self, t: torch.Tensor) -> torch.Tensor:
        d = self.dim
        return t.unflatten(d, (self.parts, self.groups, -1)).transpose(d, d + 1).flatten(d, d + 2).contiguous()

    def to_canonical(self, t: torch.Tensor) -> torch.Tensor:
        d = self.dim
        return t.unflatten(d, (self.groups, self.parts, -1)).transpose(d, d + 1).flatten(d, d + 2).contiguous()

    def canonical_pieces(self, size: int, start: int, length: int) -> list[tuple[int, int, int]]:
        """The blocked-order range [start, start + length) of a dimension of `size`, as contiguous canonical runs:
        (offset in the range, canonical start, run length)."""
        width = size // (self.parts * self.groups)  # one part of one group
        pieces, at = [], start
        while at < start + length:
            block, within = divmod(at, width)
            group, part = divmod(block, self.parts)
            run = min(width - within, start + length - at)
            pieces.append((at - start, (part * self.groups + group) * width + within, run))
            at += run
        return pieces


class Conv1DColwise(ColwiseParallel):
    """ColwiseParallel for Hugging Face's Conv1D (y = x @ W + b, W [in, out]): output columns are W's dim 1, so W
    is Shard(1) and b Shard(0) (nn.Linear's W [out, in] would be Shard(0)). `parts` > 1: a fused projection whose
    columns are first re-laid out by `FusedColumns` (recorded on the module as `fused_columns`)."""

    def __init__(self, parts: int = 1, **kwargs) -> None:
        super().__init__(**kwargs)
        self.parts = parts

    def _partition_conv1d_fn(self, _name, module, device_mesh):
        for name, dim in (("weight", 1), ("bias", 0)):
            param = getattr(module, name)
            if self.parts > 1:
                fused = FusedColumns(self.parts, device_mesh.size(), dim)
                param = fused.to_blocks(param.detach())
                module.fused_columns = {**getattr(module, "fused_columns", {}), name: fused}
            module.register_parameter(name, nn.Parameter(
                distribute_tensor(param, device_mesh, [Shard(dim)], src_data_rank=self.src_data_rank)))

    def _apply(self, module: nn.Module, device_mesh) -> nn.Module:
        if not isinstance(module, Conv1D):
            return super()._apply(module, device_mesh)
        return distribute_module(module, device_mesh, self._partition_conv1d_fn,
                                 partial(self._prepare_input_fn, self.input_layouts, self.desired_input_layouts),
                                 partial(self._prepare_output_fn, self.output_layouts, self.use_local_output))


class Conv1DRowwise(RowwiseParallel):
    """RowwiseParallel for Conv1D: input rows are W's dim 0 (Shard(0)); the bias is added once (replicated)."""

    def _partition_conv1d_fn(self, _name, module, device_mesh):
        module.register_parameter("weight", nn.Parameter(
            distribute_tensor(module.weight, device_mesh, [Shard(0)], src_data_rank=self.src_data_rank)))
        module.register_parameter("bias", nn.Parameter(
            distribute_tensor(module.bias, device_mesh, [Replicate()], src_data_rank=self.src_data_rank)))

    def _apply(self, module: nn.Module, device_mesh) -> nn.Module:
        if not isinstance(module, Conv1D):
            return super()._apply(module, device_mesh)
        self.desired_input_layouts = (Shard(-1),)
        return distribute_module(module, device_mesh, self._partition_conv1d_fn,
                                 partial(self._prepare_input_fn, self.input_layouts, self.desired_input_layouts),
                                 partial(self._prepare_output_fn, self.output_layouts, self.use_local_output))


def _row(sp: bool, style=RowwiseParallel) -> RowwiseParallel:
    return style(output_layouts=Shard(1)) if sp else style()


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


def gpt2_plan(sp: bool) -> dict:
    plan = {
        "attn.c_attn": Conv1DColwise(parts=3), "attn.c_proj": _row(sp, Conv1DRowwise),
        "mlp.c_fc": Conv1DColwise(), "mlp.c_proj": _row(sp, Conv1DRowwise),
    }
    if sp:  # the block calls attn(hidden_states, ...) and mlp(hidden_states) positionally
        plan.update({"ln_1": SequenceParallel(), "ln_2": SequenceParallel(), "attn": _gather_input(),
                     "mlp": _gather_input()})
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
    """Per-rank head counts where the Hugging Face forward uses them: T5 shapes its zero position bias from
    `n_heads`; GPT-2 splits c_attn's output into q, k, v at `split_size` (= this rank's heads x head size)."""
    for module in block.modules():
        if hasattr(module, "n_heads") and hasattr(module, "key_value_proj_dim"):
            module.n_heads //= tp
            module.inner_dim //= tp
        if hasattr(module, "split_size") and hasattr(module, "c_attn"):
            module.split_size //= tp
            module.num_heads //= tp
            module.embed_dim //= tp


def fused_layouts(chunk: nn.Module) -> dict[str, FusedColumns]:
    """{parameter name in `chunk`: its re-layout} for every fused projection sharded by `Conv1DColwise`."""
    return {f"{prefix}.{name}" if prefix else name: fused for prefix, module in chunk.named_modules()
            for name, fused in getattr(module, "fused_columns", {}).items()}


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


def apply_tensor_parallel(chunk: nn.Module, family: str, mesh, sequence_parallel: bool,
                          src_data_rank: int | None = 0) -> None:
    """Shard every block of `chunk` over the 1-D tp `mesh` (in place). `src_data_rank=None`: each rank slices its
    own copy (no scatter; what a meta-device model needs)."""
    tp = mesh.size()
    for layers in chunk.layer_lists():
        blocks = list(layers)
        for block in blocks:
            if family == "llama":
                plan = llama_plan(sequence_parallel)
            elif family == "gpt2":
                plan = gpt2_plan(sequence_parallel)
            else:
                plan = t5_plan(block, sequence_parallel)
            parallelize_module(block, mesh, plan, src_data_rank=src_data_rank)
            if family != "llama":
                _localise_heads(block, tp)
        if sequence_parallel and blocks:
            blocks[0].register_forward_pre_hook(_scatter_sequence(mesh), with_kwargs=True)
            blocks[-1].register_forward_hook(_gather_sequence(mesh))
