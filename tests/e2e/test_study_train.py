"""A real study run as a user types it: a relative spec path and a relative --output, from a directory other than
the spec's, with a corpus named relative to the spec. Real `scalestudy train` trials (torchrun, gloo, CPU): one OK,
one killed at its timeout with both its ranks. (Real trials + report: tests/e2e/test_demo.py; a real run out of
memory: tests/e2e/test_cli_train.py; OOM classification under a study's memory cap: tests/e2e/test_study_runner.py.)"""

from __future__ import annotations

import gzip
import json
import math
import os
import sqlite3
import subprocess
import sys
import textwrap

import pytest

from scalestudy.engine.data.bundled import corpus_path
from _procs import alive_in

pytestmark = [pytest.mark.slow, pytest.mark.dist]


def test_relative_spec_and_output_from_another_cwd_ok_and_timeout(tmp_path):
    project = tmp_path / "project"
    (project / "specs").mkdir(parents=True)
    chapters = [c for c in gzip.open(corpus_path(), "rt", encoding="utf-8").read().splitlines() if c.strip()][:120]
    corpus = project / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"body": c}) + "\n" for c in chapters))
    spec = project / "specs" / "spec.yaml"
    spec.write_text(textwrap.dedent("""
        name: real
        model: t5-tiny
        engine: ddp
        nproc: 1
        micro_batch: 2
        global_batch: 4
        seq_len: 32
        target_len: 8
        steps: 4
        warmup: 1
        warmup_steps: 1
        timeout_s: 300
        data: ../corpus.jsonl             # relative to this file
        train_options: {text_field: body, vocab_size: 1000}
        include:
          # 2 ranks training far longer than their timeout: killed (launcher and both ranks) and recorded TIMEOUT
          - {nproc: 2, steps: 100000, timeout_s: 15}
    """))
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "200"}
    res = subprocess.run([sys.executable, "-m", "scalestudy", "study", "run", "../project/specs/spec.yaml",
                          "-o", "results/study", "--no-progress"], cwd=cwd, capture_output=True, text=True, env=env,
                         timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    out = cwd / "results" / "study"  # the relative --output, taken against the cwd
    con = sqlite3.connect(out / "study.sqlite")
    con.row_factory = sqlite3.Row
    rows = {r["nproc"]: dict(r) for r in con.execute("SELECT * FROM trials")}
    assert len(rows) == 2
    ok, hung = rows[1], rows[2]
    assert hung["status"] == "TIMEOUT" and 15 <= hung["wall_s"] < 50
    assert ok["status"] == "OK", ok["error_tail"]
    # measured summary, per-step metrics, prediction and scaling-fit columns
    assert ok["step_s"] > 0 and ok["tokens_per_s"] > 0 and ok["peak_mem_bytes"] > 0
    assert math.isfinite(ok["loss"]) and ok["params"] > 1e6
    assert ok["tokens"] == 4 * 4 * (32 + 8) and ok["flops"] > 0
    assert ok["pred_step_s"] > 0 and ok["pred_per_device_bytes"] > 0, ok["pred_error"]
    steps = [r[0] for r in con.execute("SELECT step FROM metrics WHERE trial_id=? ORDER BY step", (ok["trial_id"],))]
    assert steps == [1, 2, 3, 4]
    assert '"torch"' in ok["env_json"]
    data = json.loads((out / "trials" / ok["trial_id"] / "data.json").read_text())
    assert data["corpora"] == {str(corpus): len(chapters)}  # the spec-relative corpus, every chapter
    con.close()
    assert alive_in(out) == []  # no rank outlived its trial
    assert not (out / "trials" / ok["trial_id"] / "checkpoints").exists()  # a study keeps measurements only

