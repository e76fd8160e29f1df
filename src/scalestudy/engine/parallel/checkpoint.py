"""Sharded checkpoints (torch.distributed.checkpoint) under canonical parameter names: any layout loads any other.

Parameters and AdamW states are stored under the full model's parameter names (`model.layers.3.mlp.up_proj.weight`,
`optim.<name>.exp_avg`), whatever pipeline chunk, tensor-parallel shard or FSDP shard holds them; each rank writes
its own shards (replicated tensors once), and on load each rank reads exactly the slices its layout needs, so a
checkpoint written under tp2 x pp2 resumes under dp4 (FSDP2 or the hybrid backend). The learning-rate schedule is
a small file written by rank 0.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

FOLDER = "dcp"
SCHEDULER = "scheduler.pt"


def _init_adamw_state(optimizer: torch.optim.Optimizer) -> None:
    """AdamW creates its state at the first step; a resumed run needs the tensors before loading into them."""
    for group in optimizer.param_groups:
        for p in group["params"]:
            if not optimizer.state.get(p):
                optimizer.state[p] = {"step": torch.tensor(0.0), "exp_avg": torch.zeros_like(p),
                                      "exp_avg_sq": torch.zeros_like(p)}


def _state(named: list[tuple[str, torch.nn.Parameter]], optimizer) -> dict:
    """{"model": {name: param}, "optim": {name.key: state tensor}}, one entry per canonical name on this rank."""
    model, optim = {}, {}
    for name, p in named:
        if name in model:
            continue
        model[name] = p
        for key, value in optimizer.state.get(p, {}).items():
            optim[f"{name}.{key}"] = value
    return {"model": model, "optim": optim}


def save(path: Path, named, optimizer, scheduler) -> None:
    """Collective. `named`: (canonical name, parameter) pairs of this rank (copies of tied parameters included)."""
    dcp.save(_state(named, optimizer), checkpoint_id=str(path / FOLDER))
    if dist.get_rank() == 0:
        torch.save(scheduler.state_dict(), path / SCHEDULER)


@torch.no_grad()
def load(path: Path, named, optimizer, scheduler) -> None:
    _init_adamw_state(optimizer)
    state = _state(named, optimizer)
    dcp.load(state, checkpoint_id=str(path / FOLDER))
    loaded = state["model"]
    for name, p in named:  # further copies of a tied parameter on this rank: same values, same AdamW state
        source = loaded[name]
        if p is not source:
            p.copy_(source)
            for key, value in optimizer.state[source].items():
                optimizer.state[p][key].copy_(value)
    scheduler.load_state_dict(torch.load(path / SCHEDULER, weights_only=False))  # the caller restores the lr


def is_resharding_checkpoint(path: Path) -> bool:
    return (path / FOLDER).is_dir() and (path / SCHEDULER).is_file()
