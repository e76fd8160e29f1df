"""Run tests/multiproc/strategies_worker.py under torchrun (2 CPU ranks, gloo, one thread each); what the workers
under torchrun share."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

WORKER = Path(__file__).with_name("strategies_worker.py")


def copy_session_data(tokenizer: str, out: Path) -> None:
    """The session's tokenizer and the bundled corpus's token stream it cached beside it (tests/conftest.py) into a
    worker's OUT. The workers read the corpus with OUT as the data folder: tokens.npz's key is the corpus and the
    tokenizer only (not the objective or lengths), so no rank tokenizes it again -- each rank tokenized it once per
    model otherwise, ~1 CPU-s each, 37 times over the hybrid launches."""
    shutil.copy(tokenizer, out / "tokenizer.json")
    tokens = Path(tokenizer).with_name("tokens.npz")
    if tokens.is_file():
        shutil.copy(tokens, out / "tokens.npz")


def run_worker(out: Path, strategies: list[str], *, tokenizer: str | None = None, nproc: int = 2,
               timeout: int = 900) -> dict:
    """Results of one torchrun launch training `strategies` one after the other (see strategies_worker.py)."""
    if tokenizer:
        copy_session_data(tokenizer, out)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "DS_ACCELERATOR": "cpu", "TOKENIZERS_PARALLELISM": "false"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc),
           str(WORKER), str(out), *strategies]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return json.loads((out / "results.json").read_text())


def measure_peak_once() -> None:
    """In a worker: MFU's peak FLOP/s (engine/probe.py times a matmul for 0.3 s at the start of every run) measured
    by the process's first run and reused by its later ones. The workers train many runs per launch and assert
    losses, gradient norms and memory, never MFU (`scalestudy train`'s MFU: tests/e2e/test_cli_train.py)."""
    from functools import lru_cache

    from scalestudy.engine import probe

    probe.peak_flops = lru_cache(maxsize=None)(probe.peak_flops)  # run_training imports it at each call


COUNTED = ("all_gather_single", "reduce_scatter_single")  # FSDP2's collectives (fsdp/_fully_shard/_fsdp_collectives.py)


def count_calls(calls: dict) -> None:
    """Count every call of the COUNTED torch.distributed functions into `calls` (FSDP2 looks them up on the module
    at each call)."""
    import torch.distributed as dist

    def counting(name, fn):
        def call(*args, **kwargs):
            calls[name] = calls.get(name, 0) + 1
            return fn(*args, **kwargs)
        return call

    for name in COUNTED:
        setattr(dist, name, counting(name, getattr(dist, name)))
