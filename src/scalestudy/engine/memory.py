"""Memory per rank on CPU: count the bytes of the tensors this rank holds, with process RSS beside it.

RSS hides ZeRO's savings at small sizes (allocator caches, ~350 MB of imports: FACTS.md), so each backend names
the tensors it keeps (parameter shard, gradient shard or buffer, optimizer-state shard) and we add up their
storages. Storages, not tensors: views into one flat buffer (DDP buckets, ZeRO flat groups) count once, and a
storage that FSDP has freed (resized to zero after resharding) counts nothing.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

import torch


class StorageCounter:
    """Adds up distinct tensor storages; a storage seen once (in any category) is never counted again."""

    def __init__(self) -> None:
        self._seen: set[int] = set()

    def add(self, tensors: Iterable[torch.Tensor | None]) -> int:
        total = 0
        for t in tensors:
            if t is None:
                continue
            t = local_tensor(t)
            storage = t.untyped_storage()
            key = storage.data_ptr()
            if key == 0 or key in self._seen:
                continue
            self._seen.add(key)
            total += storage.nbytes()
        return total


def local_tensor(t: torch.Tensor) -> torch.Tensor:
    """The local shard of a DTensor (FSDP2), the tensor itself otherwise."""
    to_local = getattr(t, "to_local", None)
    return to_local() if callable(to_local) else t


def tensors_in(obj, depth: int = 4) -> Iterable[torch.Tensor]:
    """Every tensor inside nested lists, tuples and dicts (optimizer states, ZeRO's gradient partitions)."""
    if isinstance(obj, torch.Tensor):
        yield obj
    elif depth > 0 and isinstance(obj, dict):
        for value in obj.values():
            yield from tensors_in(value, depth - 1)
    elif depth > 0 and isinstance(obj, (list, tuple)):
        for value in obj:
            yield from tensors_in(value, depth - 1)


def optimizer_state_tensors(optimizer: torch.optim.Optimizer) -> Iterable[torch.Tensor]:
    for state in optimizer.state.values():
        yield from tensors_in(state)


def rss_bytes() -> int:
    """Resident set size of this process, from /proc (Linux); 0 where unavailable."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def peak_rss_bytes() -> int:
    """High-water mark of RSS (VmHWM) of this process; 0 where unavailable."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0
