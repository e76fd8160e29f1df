"""Sharded checkpoints (torch.distributed.checkpoint) under canonical parameter names: any layout loads any other.

Parameters and AdamW states are stored under the full model's parameter names (`model.layers.3.mlp.up_proj.weight`,
`optim.<name>.exp_avg`), whatever pipeline chunk, tensor-parallel shard or FSDP shard holds them; each rank writes
its own shards (replicated tensors once), and on load each rank reads exactly the slices its layout needs, so a
checkpoint written under tp2 x pp2 resumes under dp4 (FSDP2 or the hybrid backend). The learning-rate schedule is
a small file written by rank 0.

Tensors re-laid out for tensor parallelism (GPT-2's fused [q | k | v] c_attn, see tensor_parallel.FusedColumns)
are stored in the canonical Hugging Face layout too: each local slice is handed to DCP as the contiguous runs of
canonical columns it holds (`CanonicalSlices`), written from and read straight into the local tensor.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.metadata import ChunkStorageMetadata, MetadataIndex, TensorProperties
from torch.distributed.checkpoint.planner import TensorWriteData, WriteItem, WriteItemType
from torch.distributed.tensor import DTensor
from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

FOLDER = "dcp"
SCHEDULER = "scheduler.pt"


def _init_adamw_state(optimizer: torch.optim.Optimizer) -> None:
    """AdamW creates its state at the first step; a resumed run needs the tensors before loading into them."""
    for group in optimizer.param_groups:
        for p in group["params"]:
            if not optimizer.state.get(p):
                optimizer.state[p] = {"step": torch.tensor(0.0), "exp_avg": torch.zeros_like(p),
                                      "exp_avg_sq": torch.zeros_like(p)}


class CanonicalSlices(torch.Tensor):
    """What DCP sees of a re-laid-out tensor on this rank: the canonical chunks its local slice holds.

    A shape-only tensor of the canonical (global) shape implementing DCP's checkpointable hooks, as DTensor does,
    but with several chunks per rank: `__create_write_items__`/`__create_chunk_list__` list them (global offsets
    in the canonical layout) and `__get_tensor_shard__` hands out their data: contiguous copies to save, views of
    the local tensor to load into.
    """

    @staticmethod
    def __new__(cls, tensor: torch.Tensor, fused, for_save: bool):
        out = torch.Tensor._make_wrapper_subclass(cls, tensor.shape, dtype=tensor.dtype, device=tensor.device)
        if isinstance(tensor, DTensor):
            shape, offset = compute_local_shape_and_global_offset(tensor.shape, tensor.device_mesh,
                                                                  tensor.placements)
            local = tensor._local_tensor
        else:
            shape, offset, local = tensor.shape, (0,) * tensor.dim(), tensor
        d = fused.dim
        out.pieces = []
        for at, start, run in fused.canonical_pieces(tensor.shape[d], offset[d], shape[d]):
            view = local.detach().narrow(d, at, run)
            offsets = list(offset)
            offsets[d] = start
            out.pieces.append((torch.Size(offsets), view.contiguous() if for_save else view))
        return out

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        raise NotImplementedError(f"{func} is not defined on a checkpoint view")

    def __create_chunk_list__(self) -> list[ChunkStorageMetadata]:
        return [ChunkStorageMetadata(offsets=offsets, sizes=view.size()) for offsets, view in self.pieces]

    def __create_write_items__(self, fqn: str, _object) -> list[WriteItem]:
        return [WriteItem(index=MetadataIndex(fqn, offsets), type=WriteItemType.SHARD,
                          tensor_data=TensorWriteData(chunk=ChunkStorageMetadata(offsets=offsets, sizes=view.size()),
                                                      properties=TensorProperties.create_from_tensor(view),
                                                      size=self.size()))
                for offsets, view in self.pieces]

    def __get_tensor_shard__(self, index: MetadataIndex) -> torch.Tensor:
        for offsets, view in self.pieces:
            if offsets == index.offset:
                return view
        raise ValueError(f"{index.fqn}: no local chunk at {index.offset}")


def _state(named: list[tuple[str, torch.nn.Parameter]], optimizer, fused: dict, for_save: bool) -> dict:
    """{"model": {name: param}, "optim": {name.key: state tensor}}, one entry per canonical name on this rank;
    re-laid-out parameters (`fused`: canonical name -> FusedColumns) and their AdamW moments as CanonicalSlices."""
    model, optim = {}, {}
    for name, p in named:
        if name in model:
            continue
        layout = fused.get(name)
        model[name] = CanonicalSlices(p, layout, for_save) if layout else p
        for key, value in optimizer.state.get(p, {}).items():
            if layout and value.shape == p.shape:
                value = CanonicalSlices(value, layout, for_save)
            optim[f"{name}.{key}"] = value
    return {"model": model, "optim": optim}


def save(path: Path, named, optimizer, scheduler, fused: dict | None = None) -> None:
    """Collective. `named`: (canonical name, parameter) pairs of this rank (copies of tied parameters included);
    `fused`: canonical name -> FusedColumns of the parameters held in a re-laid-out order."""
    dcp.save(_state(named, optimizer, fused or {}, for_save=True), checkpoint_id=str(path / FOLDER))
    if dist.get_rank() == 0:
        torch.save(scheduler.state_dict(), path / SCHEDULER)


@torch.no_grad()
def load(path: Path, named, optimizer, scheduler, fused: dict | None = None) -> None:
    _init_adamw_state(optimizer)
    dcp.load(_state(named, optimizer, fused or {}, for_save=False), checkpoint_id=str(path / FOLDER))
    loaded: dict[str, torch.nn.Parameter] = {}
    for name, p in named:  # further copies of a tied parameter on this rank: same values, same AdamW state
        source = loaded.setdefault(name, p)
        if p is not source:
            p.copy_(source)
            for key, value in optimizer.state[source].items():
                optimizer.state[p][key].copy_(value)
    scheduler.load_state_dict(torch.load(path / SCHEDULER, weights_only=False))  # the caller restores the lr


def is_resharding_checkpoint(path: Path) -> bool:
    return (path / FOLDER).is_dir() and (path / SCHEDULER).is_file()
