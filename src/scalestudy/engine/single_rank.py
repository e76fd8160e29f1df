"""A one-rank gloo process group in this process, for measurements that drive scalestudy's backends outside torchrun
(engine/cpu_profile.py, engine/parallel_profile.py)."""

from __future__ import annotations

import os
from pathlib import Path


def init_single_rank_group() -> None:
    """A one-rank gloo process group (the backends expect one, as under torchrun); nothing if one exists."""
    import socket

    import torch.distributed as dist

    if dist.is_initialized():
        return
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(Path.home() / ".cache" / "torch_extensions"))
    dist.init_process_group("gloo")
