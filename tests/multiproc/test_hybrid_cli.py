"""`scalestudy train --tp/--pp ...` end to end: a pipeline run, resumed under tensor parallelism, and bad layouts
refused in one line before any process starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from scalestudy.cli import main

LLAMA = ["--model", "llama-tiny", "--objective", "causal", "--seq-len", "32", "--micro-batch", "1",
         "--global-batch", "4", "--nproc", "2", "--no-progress", "--warmup", "0", "--seed", "5"]


def scalestudy(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    return subprocess.run([sys.executable, "-m", "scalestudy", *args], capture_output=True, text=True, env=env,
                          timeout=400)


@pytest.mark.dist
@pytest.mark.slow
def test_pipeline_run_resumes_under_tensor_parallelism(tmp_path):
    out = str(tmp_path / "run")
    first = scalestudy("train", *LLAMA, "--engine", "ddp", "--zero", "0", "--pp", "2", "--pp-schedule", "gpipe",
                       "--stage-layers", "1,1", "--steps", "2", "-o", out)
    assert first.returncode == 0, first.stderr[-3000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["strategy"]["pp"] == 2 and summary["strategy"]["pp_schedule"] == "gpipe"
    assert summary["engine_backend"] == "hybrid" and summary["dp"] == 1 and summary["grad_accum"] == 4
    # The sharded checkpoint (full-model names) loads under another layout: tp2, FSDP2 ZeRO-3 style, dp 1.
    second = scalestudy("train", *LLAMA, "--engine", "fsdp", "--zero", "3", "--tp", "2", "--steps", "4",
                        "--resume", "-o", out)
    assert second.returncode == 0, second.stderr[-3000:]
    resumed = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert resumed["resumed_from_step"] == 2 and resumed["strategy"]["tp"] == 2
    assert resumed["losses"][:2] == summary["losses"] and resumed["losses"][-1] < resumed["losses"][0]


@pytest.mark.parametrize("args, message", [
    (["--tp", "4", "--nproc", "4"], "--tp 4 does not divide the 2 key/value heads of llama-tiny"),
    (["--pp", "4", "--nproc", "4"], "--pp 4 exceeds the 2 layers of llama-tiny"),
    (["--tp", "2", "--nproc", "3"], "the mesh --tp 2 x pp 1 does not divide the world size 3"),
    (["--pp", "2", "--stage-layers", "1,x"], "--stage-layers takes comma-separated layer counts"),
])
def test_bad_layouts_fail_before_any_process_starts(tmp_path, capsys, args, message):
    with pytest.raises(SystemExit) as exc:
        main(["train", "--model", "llama-tiny", "--objective", "causal", "--engine", "fsdp", "--zero", "3",
              "-o", str(tmp_path / "run"), *args])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and message in err and "\n" not in err, err
    assert not (tmp_path / "run").exists()  # nothing half-written
