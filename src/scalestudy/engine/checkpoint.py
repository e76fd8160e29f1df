"""Atomic checkpoints: engine state + each rank's data-stream position and RNG, under DIR/checkpoints.

A checkpoint is written into `.tmp-step-N`, completed with `meta.json`, renamed to `step-N`, and only then
named in `latest` (itself replaced atomically). A crash at any moment leaves `latest` pointing at the previous
complete checkpoint; leftovers of an interrupted save are ignored and cleaned on the next save.
Resuming requires the same world size and strategy (engine shards are per rank), except for sharded checkpoints
under full-model names (FSDP2 and tp/pp runs, engine/parallel/checkpoint.py), which load under any of their layouts.
"""

from __future__ import annotations

import json
import os
import pickle
import random
import shutil
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from scalestudy.errors import ScalestudyError, is_out_of_memory
from scalestudy.atomicfile import write_text_atomic
# the records' side, torch-free (the launcher checks --resume before importing torch); named here for the engine
from scalestudy.engine.checkpoint_record import (LATEST, check_resumable, checkpoint_root, file_sizes,  # noqa: F401
                                                 latest, loads_any_layout, read_meta)


def _write_json(path: Path, data) -> None:
    write_text_atomic(path, json.dumps(data))


def rng_state() -> dict:
    state = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


def save(out: Path, step: int, backend, stream, meta: dict) -> Path:
    """Collective: every rank calls it after optimizer step `step` (1-based count of completed steps)."""
    root = checkpoint_root(out)
    rank = dist.get_rank()
    final = root / f"step-{step:08d}"
    tmp = root / f".tmp-step-{step:08d}"
    if rank == 0:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    dist.barrier()
    backend.save(tmp)
    _write_json(tmp / f"stream-rank{rank}.json", stream.state_dict())
    torch.save(rng_state(), tmp / f"rng-rank{rank}.pt")
    dist.barrier()
    if rank == 0:
        # the files every rank wrote and their sizes: --resume refuses a copy missing one (check_files_listed)
        _write_json(tmp / "meta.json", {**meta, "step": step, "world_size": dist.get_world_size(),
                                        "any_layout": bool(getattr(backend, "reshardable", False)),
                                        "files": file_sizes(tmp)})
        if final.exists():  # re-saving a step after a resume
            shutil.rmtree(final)
        os.rename(tmp, final)
        _write_json(root / LATEST, {"dir": final.name, "step": step})
        for old in root.iterdir():  # keep only the newest complete checkpoint (and nothing half-written)
            if old.is_dir() and old != final:
                shutil.rmtree(old, ignore_errors=True)
    dist.barrier()
    return final


def restore(out: Path, backend, stream, meta: dict) -> int:
    """Load the latest checkpoint into backend, stream and RNG; return the number of completed steps."""
    path = latest(out)
    if path is None:
        raise ScalestudyError(f"--resume: no complete checkpoint under {checkpoint_root(out)}")
    saved = read_meta(path)
    if loads_any_layout(saved, meta.get("strategy", {})):
        if saved.get("model") != meta.get("model"):
            raise ScalestudyError(f"--resume: checkpoint holds model {saved.get('model')}, this run trains "
                                  f"{meta.get('model')}")
        return _restore_any_layout(path, saved, backend, stream)
    if saved["world_size"] != dist.get_world_size():
        raise ScalestudyError(f"--resume: checkpoint was written by {saved['world_size']} ranks, this run has "
                              f"{dist.get_world_size()} (engine shards are per rank)")
    if saved.get("strategy") != meta.get("strategy"):
        raise ScalestudyError(f"--resume: checkpoint strategy {saved.get('strategy')} differs from this run's "
                              f"{meta.get('strategy')}")
    _load_files(path, backend, stream, dist.get_rank())
    dist.barrier()
    return int(saved["step"])


def _load_files(path: Path, backend, stream, own: int) -> None:
    """The engine state, rank `own`'s data position and RNG from checkpoint `path`. A file cut short or replaced
    (a copy interrupted, a full disk) fails inside torch.load / json with a traceback: one line naming it instead."""
    try:
        backend.load(path)
        stream.load_state_dict(json.loads((path / f"stream-rank{own}.json").read_text(encoding="utf-8")))
        set_rng_state(torch.load(path / f"rng-rank{own}.pt", weights_only=False))
    except (RuntimeError, EOFError, OSError, ValueError, KeyError, TypeError, pickle.UnpicklingError) as exc:
        if is_out_of_memory(exc):  # the worker reports it as OOM (exit 3)
            raise
        why = (str(exc).splitlines() or [""])[0][:160]
        raise ScalestudyError(f"--resume: cannot load checkpoint {path} ({type(exc).__name__}: {why}): a damaged "
                              "or incomplete copy; restore it, or train from scratch in a new --output") from None


def _restore_any_layout(path: Path, saved: dict, backend, stream) -> int:
    """Resharded resume: each rank keeps its own data position and RNG when the world size is unchanged; otherwise
    every rank takes rank 0's (the global data position is the same on every rank; RNG only feeds dropout)."""
    rank = dist.get_rank()
    own = rank if saved["world_size"] == dist.get_world_size() else 0
    _load_files(path, backend, stream, own)
    dist.barrier()
    return int(saved["step"])
