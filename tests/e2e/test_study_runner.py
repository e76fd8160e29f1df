"""The sweep runner end to end: kill -9 and resume, OOM / TIMEOUT / FAILED outcomes. The killed runner and one sweep
are real CLI processes (exit status, stderr); the resumes, status and export run in this process through the same
entry point (cli.main), each a fresh `scalestudy` start saved.

Cheap trials use the spec's general `command_template` (any command that follows the training contract); the
real `scalestudy train` trials are in test_study_train.py.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from _cli import run_cli
from _procs import alive_in


FAKE_TRAIN = textwrap.dedent('''
    """Follows the training contract: metrics.jsonl per step, summary.json at the end. Mode chosen by seed."""
    import json, os, sys, time
    out, seed, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    mode = {0: "ok", 1: "oom", 2: "hang", 3: "fail"}[seed]
    if mode == "hang":
        print("waiting for a peer that never comes", flush=True)
        time.sleep(3600)
    if mode == "oom":
        blocks = [bytearray(64 * 2**20) for _ in range(64)]  # 4 GiB: beyond the trial's memory cap
    if mode == "fail":
        sys.exit("RuntimeError: world size does not match the strategy")
    with open(os.path.join(out, "metrics.jsonl"), "w") as fh:
        for s in range(1, steps + 1):
            time.sleep(0.15)
            fh.write(json.dumps({"step": s, "loss": 10.0 / s, "lr": 1e-3, "step_s": 0.15, "tokens_per_s": 500.0}) + "\\n")
            fh.flush()
    summary = {"status": "ok", "median_step_s": 0.15, "median_tokens_per_s": 500.0, "final_loss": 10.0 / steps,
               "peak_mem_bytes": 1.0e6}
    with open(os.path.join(out, "summary.json.tmp"), "w") as fh:
        json.dump(summary, fh)
    os.replace(os.path.join(out, "summary.json.tmp"), os.path.join(out, "summary.json"))
''')


def _cli(*args: str, **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "scalestudy", *args], capture_output=True, text=True, env=env,
                          timeout=120, **kw)


def _write_spec(tmp_path: Path, body: str) -> Path:
    (tmp_path / "fake_train.py").write_text(FAKE_TRAIN)
    spec = tmp_path / "spec.yaml"
    spec.write_text(f'command_template: "{{python}} {tmp_path}/fake_train.py {{output}} {{seed}} {{steps}}"\n'
                    + textwrap.dedent(body))
    return spec


def _rows(db: Path, sql: str) -> list[tuple]:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)  # never creates an empty file the runner would refuse
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def test_sigkill_mid_sweep_then_resume_runs_every_trial_exactly_once(tmp_path, capsys, monkeypatch):
    spec = _write_spec(tmp_path, """
        name: killme
        model: t5-tiny
        strategies:
          - {engine: deepspeed, zero: [0, 1, 2, 3]}
          - {engine: fsdp, zero: [2, 3]}
        global_batch: 4
        steps: 6
        warmup_steps: 1
        timeout_s: 60
    """)
    out = tmp_path / "study"
    db = out / "study.sqlite"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    runner = subprocess.Popen([sys.executable, "-m", "scalestudy", "study", "run", str(spec), "-o", str(out),
                               "--no-progress"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 60
    running = None
    while time.time() < deadline and running is None:  # kill once 2 trials finished and a 3rd wrote metrics
        time.sleep(0.05)
        try:
            done = {r[0] for r in _rows(db, "SELECT trial_id FROM trials")}
            started = {r[0] for r in _rows(db, "SELECT trial_id FROM attempts")}
        except sqlite3.OperationalError:  # not created yet
            continue
        for trial_id in started - done if len(done) >= 2 else ():
            metrics = out / "trials" / trial_id / "metrics.jsonl"
            if metrics.is_file() and metrics.read_text().count("\n") >= 1:
                running = trial_id
    runner.send_signal(signal.SIGKILL)
    runner.wait(timeout=10)
    before = _rows(db, "SELECT trial_id FROM trials")
    assert running is not None and 2 <= len(before) < 6, f"expected a mid-sweep kill, got {len(before)} finished"
    assert (running,) not in before  # killed mid-trial, half its metrics written

    monkeypatch.setenv("COLUMNS", "200")
    code, again, err = run_cli(capsys, ["study", "run", str(spec), "-o", str(out), "--no-progress"])
    assert code == 0, err
    assert f"{len(before)} already finished" in again
    rows = _rows(db, "SELECT trial_id, status FROM trials")
    assert len(rows) == 6 and len({r[0] for r in rows}) == 6
    assert {r[1] for r in rows} == {"OK"}
    assert set(before) <= {(r[0],) for r in rows}  # nothing that finished was lost
    # per-step metrics: exactly `steps` rows per trial, never duplicated by the interrupted attempt
    per_trial = _rows(db, "SELECT trial_id, COUNT(*), COUNT(DISTINCT step) FROM metrics GROUP BY trial_id")
    assert len(per_trial) == 6 and all(n == 6 and d == 6 for _, n, d in per_trial)
    # the interrupted trial was started twice (killed, then from scratch); every other trial once
    attempts = dict(_rows(db, "SELECT trial_id, COUNT(*) FROM attempts GROUP BY trial_id"))
    assert attempts == {r[0]: 2 if r[0] == running else 1 for r in rows}
    assert alive_in(out) == []

    third = run_cli(capsys, ["study", "run", str(spec), "-o", str(out), "--no-progress"])[1]
    assert "6 already finished, 0 run now" in third
    assert len(_rows(db, "SELECT * FROM trials")) == 6

    code, _, err = run_cli(capsys, ["study", "export", str(out), "-o", str(tmp_path / "trials.csv")])
    assert code == 0, err
    lines = (tmp_path / "trials.csv").read_text().splitlines()
    assert len(lines) == 7 and lines[0].startswith("trial_id,study,status")


def test_oom_hang_and_failure_are_recorded_while_the_sweep_completes(tmp_path, capsys, monkeypatch):
    spec = _write_spec(tmp_path, """
        name: outcomes
        model: t5-tiny
        engine: deepspeed
        zero: [0, 2]
        global_batch: 4
        steps: 3
        warmup_steps: 1
        timeout_s: 30
        include:
          - {zero: 1, seed: 1, memory_limit_bytes: 1000000000}   # allocates 4 GiB under a 1 GB cap
          - {zero: 3, seed: 2, timeout_s: 2}                     # hangs
          - {zero: 3, seed: 3}                                   # exits 1
    """)
    out = tmp_path / "study"
    t0 = time.time()
    res = _cli("study", "run", str(spec), "-o", str(out), "--no-progress")
    assert res.returncode == 0, res.stderr
    assert time.time() - t0 < 90  # the hung trial cost its 2 s timeout, not an hour
    rows = {(z, s): (st, tail) for z, s, st, tail in
            _rows(out / "study.sqlite", "SELECT zero, seed, status, error_tail FROM trials")}
    assert len(rows) == 5
    assert rows[(0, 0)][0] == "OK" and rows[(2, 0)][0] == "OK"
    assert rows[(1, 1)][0] == "OOM" and "MemoryError" in rows[(1, 1)][1]
    assert rows[(3, 2)][0] == "TIMEOUT" and "never comes" in rows[(3, 2)][1]
    assert rows[(3, 3)][0] == "FAILED" and "world size does not match" in rows[(3, 3)][1]
    assert alive_in(out) == []

    monkeypatch.setenv("COLUMNS", "200")
    code, status, _ = run_cli(capsys, ["study", "status", str(out)])
    assert code == 0
    for word in ("OOM", "TIMEOUT", "FAILED"):
        assert word in status

    # --retry re-runs only the named outcome, replacing its row (never a duplicate)
    again = run_cli(capsys, ["study", "run", str(spec), "-o", str(out), "--no-progress", "--retry", "FAILED"])[1]
    assert "4 already finished, 1 run now" in again
    assert len(_rows(out / "study.sqlite", "SELECT * FROM trials")) == 5


def test_bad_spec_is_one_line_error(tmp_path, capsys):
    # In this process (cli.main): the spec is refused before any trial process starts.
    spec = tmp_path / "bad.yaml"
    spec.write_text("model: t5-tiny\nzero: two\n")
    code, _, err = run_cli(capsys, ["study", "run", str(spec), "-o", str(tmp_path / "o")])
    assert code == 2
    assert "zero must be an integer" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
