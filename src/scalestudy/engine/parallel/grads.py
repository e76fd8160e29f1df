"""Gradient bookkeeping on the (pp, dp, tp) mesh: data-parallel mean, tied copies, global-norm clipping.

Every gradient is handled through its local tensor (a DTensor's shard). The global norm counts each distinct
element once: a shard replicated on r ranks of its pipeline stage contributes its square sum divided by r, a
parameter tied across k chunks divided by k, and one all-reduce over the world adds the rest.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors
from torch.distributed.tensor import DTensor


def local(t: torch.Tensor) -> torch.Tensor:
    return t._local_tensor if isinstance(t, DTensor) else t


def distinct_pieces(p: torch.Tensor) -> int:
    """How many different shards of `p` exist among the ranks of one pipeline stage."""
    if not isinstance(p, DTensor):
        return 1
    # Any non-replicated placement splits the tensor (FSDP over a tp-sharded parameter is a strided shard).
    return math.prod(p.device_mesh.size(i) for i, pl in enumerate(p.placements) if not pl.is_replicate())


@torch.no_grad()
def reduce_partial(params: list[torch.Tensor]) -> None:
    """Sum pending partial gradients (sequence-parallel norm weights: each tp rank saw part of the sequence), so
    every gradient is in its parameter's own placement before norms, reductions and the update."""
    for p in params:
        g = p.grad
        if isinstance(g, DTensor) and any(pl.is_partial() for pl in g.placements):
            p.grad = g.redistribute(g.device_mesh, p.placements)


@torch.no_grad()
def mean_over(params: list[torch.Tensor], group, size: int) -> None:
    """Average gradients over a process group in one flat all-reduce (the data-parallel replicas)."""
    grads = [local(p.grad) for p in params if p.grad is not None]
    if size == 1 or not grads:
        return
    flat = _flatten_dense_tensors(grads)
    dist.all_reduce(flat, group=group)
    flat.div_(size)
    for g, synced in zip(grads, _unflatten_dense_tensors(flat, grads)):
        g.copy_(synced)


@torch.no_grad()
def sum_tied(copies: list[torch.Tensor], group) -> None:
    """Copies of one parameter (chunks on this rank, and on the ranks of `group`) all get the summed gradient."""
    grads = [local(p.grad) for p in copies if p.grad is not None]
    if not grads:
        return
    total = torch.stack(grads).sum(0) if len(grads) > 1 else grads[0].clone()
    if group is not None:
        dist.all_reduce(total, group=group)
    for p in copies:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        local(p.grad).copy_(total)


@torch.no_grad()
def global_norm(params: list[torch.Tensor], stage_ranks: int, tie_count: dict[int, int]) -> torch.Tensor:
    """The L2 norm of the whole model's gradient (every rank gets the same value)."""
    total = torch.zeros((), dtype=torch.float64, device=local(params[0]).device)  # where the collective runs
    for p in params:
        if p.grad is None:
            continue
        replicas = stage_ranks / distinct_pieces(p) * tie_count.get(id(p), 1)
        total += local(p.grad).double().pow(2).sum() / replicas
    dist.all_reduce(total)
    return total.sqrt()


@torch.no_grad()
def clip_(params: list[torch.Tensor], norm: torch.Tensor, max_norm: float) -> None:
    """torch.nn.utils.clip_grad_norm_'s rule: scale by min(1, max_norm / (norm + 1e-6))."""
    coef = min(1.0, max_norm / (float(norm) + 1e-6))
    if coef < 1.0:
        for p in params:
            if p.grad is not None:
                local(p.grad).mul_(coef)
