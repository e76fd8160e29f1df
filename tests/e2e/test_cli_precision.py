"""`scalestudy train --precision bf16` on a CPU, end to end, with the machine's measurement injected through the
cache the real probe fills: refused in one line on an emulating CPU, trained for real where bf16 is fast."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from _cli import run_cli

from scalestudy.engine import cpu_precision as cp

TRAIN = [sys.executable, "-m", "scalestudy", "train", "--model", "t5-tiny", "--engine", "ddp", "--nproc", "1",
         "--steps", "2", "--warmup", "1", "--seq-len", "32", "--target-len", "8", "--precision", "bf16", "--no-progress"]


def _cache(tmp_path, measured: dict):
    """A cache directory holding `measured` as this CPU's entry (what the real probe would have stored)."""
    cache = tmp_path / "cache"
    cache.mkdir(exist_ok=True)
    (cache / "cpu_precision.json").write_text(json.dumps({cp._cache_key(): measured}))
    return cache


def _run(tmp_path, measured: dict, tokenizer: str) -> subprocess.CompletedProcess:
    cache = _cache(tmp_path, measured)
    env = {**os.environ, "SCALESTUDY_CACHE_DIR": str(cache), "OMP_NUM_THREADS": "1", "DS_ACCELERATOR": "cpu"}
    # the session's tokenizer (tests/conftest.py): the run trains no tokenizer of its own (~3 s), not under test here
    return subprocess.run(TRAIN + ["--tokenizer", tokenizer, "--output", str(tmp_path / "run")], capture_output=True,
                          text=True, env=env, timeout=300)


def test_bf16_on_an_emulating_cpu_is_one_line_naming_the_measurement(tmp_path, capsys, monkeypatch):
    # In this process (the refusal comes before any process starts): the same cache file, read the same way.
    monkeypatch.setenv("SCALESTUDY_CACHE_DIR", str(_cache(tmp_path, {"fp32": 80.0, "bf16": 1.3, "fp16": 1.3})))
    code, out, err = run_cli(capsys, TRAIN[3:] + ["--output", str(tmp_path / "run")])
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --precision bf16 needs a GPU or a CPU")
    assert "bf16 matmul 1.3 GFLOP/s = 0.016x fp32 (80 GFLOP/s)" in lines[0] and "Traceback" not in err
    assert not (tmp_path / "run" / "summary.json").exists()


@pytest.mark.timeout(300)
def test_bf16_trains_where_the_cpu_runs_it_fast(tmp_path, bundled_tokenizer):
    res = _run(tmp_path, {"fp32": 88.0, "bf16": 74.0, "fp16": 1.3}, bundled_tokenizer)
    assert res.returncode == 0, res.stderr[-2000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["strategy"]["precision"] == "bf16" and summary["steps"] == 2
    assert all(loss == loss and loss > 0 for loss in summary["losses"])  # finite
