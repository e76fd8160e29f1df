"""estimate on CPU ranks prints a memory table in a CPU's terms: a newcomer's first `--gpu local-cpu` estimate
showed 'max_memory_reserved (tensors + allocator cache)', 'nvidia-smi (+ context, cache, NCCL, cuBLAS)' and a note on
CUDA contexts and NCCL communicators -- none of which a gloo rank has (memory.py prices them 0 there, so both rows
only repeated the total)."""

from __future__ import annotations

import pytest

from scalestudy.cli import main

COMMON = ["estimate", "--model", "t5-tiny", "--engine", "deepspeed", "--zero", "2", "--micro-batch", "2",
          "--global-batch", "8", "--seq-len", "128"]


def _out(argv, capsys, monkeypatch) -> str:
    monkeypatch.setenv("COLUMNS", "100")
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code in (0, None)
    return " ".join(capsys.readouterr().out.split())


def test_cpu_ranks_get_a_host_ram_table_without_the_gpu_rows(capsys, monkeypatch):
    out = _out([*COMMON, "--gpu", "local-cpu", "--gpus-per-node", "2"], capsys, monkeypatch)
    assert "Memory per rank (host RAM)" in out and "capacity (RAM / ranks per node)" in out
    assert "nvidia-smi" not in out and "max_memory_reserved" not in out and "CUDA context" not in out
    assert "peak_mem_bytes" in out  # what train reports for the same rank


def test_gpus_keep_the_device_rows(capsys, monkeypatch):
    out = _out([*COMMON, "--gpu", "a100-80gb", "--gpus-per-node", "2"], capsys, monkeypatch)
    assert "Memory per device" in out and "nvidia-smi (+ context, cache, NCCL, cuBLAS)" in out
    assert "max_memory_reserved" in out and "host RAM" not in out
