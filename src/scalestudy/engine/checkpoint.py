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
import random
import shutil
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from scalestudy.errors import ScalestudyError
from scalestudy.atomicfile import write_text_atomic
from scalestudy.launch.commands import CHECKPOINTS_NAME

LATEST = "latest"


def checkpoint_root(out: Path) -> Path:
    return Path(out) / CHECKPOINTS_NAME


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
        _write_json(tmp / "meta.json", {**meta, "step": step, "world_size": dist.get_world_size(),
                                        "any_layout": bool(getattr(backend, "reshardable", False))})
        if final.exists():  # re-saving a step after a resume
            shutil.rmtree(final)
        os.rename(tmp, final)
        _write_json(root / LATEST, {"dir": final.name, "step": step})
        for old in root.iterdir():  # keep only the newest complete checkpoint (and nothing half-written)
            if old.is_dir() and old != final:
                shutil.rmtree(old, ignore_errors=True)
    dist.barrier()
    return final


def latest(out: Path) -> Path | None:
    """The newest complete checkpoint directory, or None."""
    pointer = checkpoint_root(out) / LATEST
    if not pointer.is_file():
        return None
    try:
        name = json.loads(pointer.read_text(encoding="utf-8"))["dir"]
    except (ValueError, KeyError, TypeError):  # not the JSON `save` writes: no complete checkpoint is named
        return None
    if not isinstance(name, str) or not name.startswith("step-") or "/" in name or "\\" in name:
        return None  # only a checkpoint directory of this run, never a path elsewhere
    path = checkpoint_root(out) / name
    return path if (path / "meta.json").is_file() else None


def read_meta(path: Path) -> dict:
    """A checkpoint's meta.json as `save` writes it (step, world_size, strategy, ...); a one-line error for
    anything else (written by another program, damaged), before any worker starts."""
    where = path / "meta.json"
    try:
        saved = json.loads(where.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ScalestudyError(f"--resume: cannot read {where} ({type(exc).__name__}): not a checkpoint this run "
                              "wrote, or a damaged one") from None
    ok = isinstance(saved, dict) and all(isinstance(saved.get(k), int) and not isinstance(saved.get(k), bool)
                                         for k in ("step", "world_size"))
    if not ok or saved["step"] < 0 or saved["world_size"] < 1:
        raise ScalestudyError(f"--resume: {where} does not hold a checkpoint record (whole step and world_size): "
                              "not a checkpoint this run wrote, or a damaged one")
    return saved


def _with_defaults(saved: dict | None) -> dict | None:
    """A saved strategy with the Strategy fields added since it was written at their defaults (so adding a field
    does not make older checkpoints unresumable)."""
    from scalestudy.specs.strategy import Strategy

    if not isinstance(saved, dict):
        return saved
    known = set(Strategy.__dataclass_fields__)
    defaults = {k: v for k, v in Strategy().to_dict().items() if k not in saved}
    return {**defaults, **saved} if set(saved) <= known else saved


def check_resumable(out: Path, steps: int, world_size: int, strategy: dict, model: str | None = None) -> int:
    """The launcher's check, before any worker starts, that --resume can continue DIR; the step it resumes from."""
    path = latest(out)
    if path is None:
        raise ScalestudyError(f"--resume: no complete checkpoint under {checkpoint_root(out)}")
    saved = read_meta(path)
    if model is not None and saved.get("model") not in (None, model):  # weights of another shape: refuse here
        raise ScalestudyError(f"--resume: checkpoint holds model {saved.get('model')}, this run trains {model}")
    if loads_any_layout(saved, strategy):  # resharded on load: any world size and tp/pp/dp layout
        pass
    elif saved["world_size"] != world_size:
        raise ScalestudyError(f"--resume: checkpoint was written by {saved['world_size']} ranks, this run has "
                              f"{world_size} (engine shards are per rank; FSDP and tp/pp checkpoints reshard)")
    elif _with_defaults(saved.get("strategy")) != strategy:
        raise ScalestudyError(f"--resume: checkpoint strategy {saved.get('strategy')} differs from this run's "
                              f"{strategy}")
    # A run killed after its last checkpoint but before its summary is finished by --resume (no step is left to
    # train: the summary is written from the recorded metrics); a finished run is left as it is.
    if int(saved["step"]) > steps or int(saved["step"]) == steps and (out / "summary.json").exists():
        raise ScalestudyError(f"--resume: the checkpoint is at step {saved['step']}; raise --steps above it to "
                              "continue")
    return int(saved["step"])


def loads_any_layout(saved: dict, strategy: dict) -> bool:
    """Sharded checkpoints under full-model names (engine/parallel/checkpoint.py: FSDP2 and the tp/pp hybrid
    backend) load into any layout of those backends, e.g. one written under tp2 x pp2 resumes under dp4."""
    resharding_engine = strategy.get("engine") == "fsdp" or strategy.get("tp", 1) > 1 or strategy.get("pp", 1) > 1
    return bool(saved.get("any_layout")) and resharding_engine


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
    rank = dist.get_rank()
    backend.load(path)
    stream.load_state_dict(json.loads((path / f"stream-rank{rank}.json").read_text(encoding="utf-8")))
    set_rng_state(torch.load(path / f"rng-rank{rank}.pt", weights_only=False))
    dist.barrier()
    return int(saved["step"])


def _restore_any_layout(path: Path, saved: dict, backend, stream) -> int:
    """Resharded resume: each rank keeps its own data position and RNG when the world size is unchanged; otherwise
    every rank takes rank 0's (the global data position is the same on every rank; RNG only feeds dropout)."""
    rank = dist.get_rank()
    own = rank if saved["world_size"] == dist.get_world_size() else 0
    backend.load(path)
    stream.load_state_dict(json.loads((path / f"stream-rank{own}.json").read_text(encoding="utf-8")))
    set_rng_state(torch.load(path / f"rng-rank{own}.pt", weights_only=False))
    dist.barrier()
    return int(saved["step"])
