"""Fault injection: kill -9 / SIGTERM of the `scalestudy train` launcher, of one rank, of the study runner and of a
store writer, at seeded random points (during a step, during a checkpoint write, during a store commit).

After every injection: no process of the run survives 10 s, no finished checkpoint or trial is lost or changed,
the store passes `PRAGMA integrity_check`; at the end, the resumed run reproduces the uninterrupted loss curve.
Tiny model, 1-2 ranks, few steps: ~2-3 min on a quiet 2-core machine. Counts go to benchmarks/RESULTS.md.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.dist, pytest.mark.slow]

SEED = 20261201
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "DS_ACCELERATOR": "cpu", "TOKENIZERS_PARALLELISM": "false"}
TRAIN = ["--model", "t5-tiny", "--seq-len", "64", "--target-len", "16", "--engine", "ddp", "--nproc", "2",
         "--micro-batch", "1", "--global-batch", "2", "--seed", "5", "--save-every", "1", "--warmup", "1",
         "--no-progress"]
STEPS = 14
ORPHAN_GRACE_S = 10.0


def _marked(marker: str) -> list[int]:
    """Live processes whose environment holds `marker` (NAME=VALUE)."""
    needle = marker.encode() + b"\0"
    pids = []
    for pid_dir in Path("/proc").glob("[0-9]*"):
        try:
            env = (pid_dir / "environ").read_bytes()
            state = (pid_dir / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if needle in env and state != "Z":
            pids.append(int(pid_dir.name))
    return pids


def _assert_no_survivor(marker: str) -> float:
    """Seconds until every process carrying `marker` is gone; fails if any survives ORPHAN_GRACE_S."""
    start = time.monotonic()
    while time.monotonic() - start < ORPHAN_GRACE_S:
        if not _marked(marker):
            return time.monotonic() - start
        time.sleep(0.1)
    left = _marked(marker)
    for pid in left:  # do not leave them to the next test
        os.kill(pid, signal.SIGKILL)
    pytest.fail(f"processes {left} ({marker}) survived {ORPHAN_GRACE_S:.0f} s")


def _train(out: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "scalestudy", "train", *TRAIN, "--output", str(out), *extra],
                            env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def _rows(out: Path) -> list[dict]:
    from scalestudy.launch.process import read_metrics

    return read_metrics(out / "metrics.jsonl")


def _latest_checkpoint(out: Path) -> int:
    """Step of the checkpoint `latest` names; it must be complete (meta.json, a stream state and RNG per rank)."""
    root = out / "checkpoints"
    if not (root / "latest").is_file():
        return 0
    pointer = json.loads((root / "latest").read_text())
    folder = root / pointer["dir"]
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["step"] == pointer["step"]
    for rank in range(meta["world_size"]):
        assert (folder / f"stream-rank{rank}.json").is_file() and (folder / f"rng-rank{rank}.pt").is_file()
    return meta["step"]


def _wait_for_step(proc: subprocess.Popen, out: Path, step: int, timeout: float = 240.0) -> None:
    deadline = time.monotonic() + timeout
    while len(_rows(out)) < step:
        assert proc.poll() is None, f"run ended before step {step}: {proc.stderr.read()[-2000:]}"
        assert time.monotonic() < deadline, f"step {step} not reached in {timeout} s"
        time.sleep(0.02)


def _wait_for_checkpoint_write(proc: subprocess.Popen, out: Path, timeout: float = 60.0) -> None:
    """Return as soon as a checkpoint is being written (its `.tmp-step-N` folder exists)."""
    root = out / "checkpoints"
    deadline = time.monotonic() + timeout
    while not any(root.glob(".tmp-step-*")):
        assert proc.poll() is None, "run ended before a checkpoint write was caught"
        assert time.monotonic() < deadline
        time.sleep(0.002)


def _rank_pid(launcher: int, rank: int) -> int:
    marker = f"SCALESTUDY_LAUNCHER_PID={launcher}".encode()
    for pid in _marked(f"SCALESTUDY_LAUNCHER_PID={launcher}"):
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        if marker in env and f"RANK={rank}".encode() in env:
            return pid
    raise AssertionError(f"rank {rank} of launcher {launcher} not found")


@pytest.fixture(scope="module")
def reference(tmp_path_factory, bundled_tokenizer) -> list[dict]:
    out = tmp_path_factory.mktemp("faults") / "reference"
    proc = _train(out, "--steps", str(STEPS), "--tokenizer", bundled_tokenizer)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    return _rows(out)


# Injection plan of the training run: (whom, signal, where). Points within the run are drawn from SEED.
TRAIN_FAULTS = [("launcher", signal.SIGKILL, "step"), ("launcher", signal.SIGTERM, "checkpoint"),
                ("rank", signal.SIGKILL, "step"), ("launcher", signal.SIGKILL, "checkpoint"),
                ("rank", signal.SIGKILL, "checkpoint"), ("launcher", signal.SIGTERM, "step"),
                ("rank", signal.SIGTERM, "step")]


def test_killed_training_resumes_to_the_uninterrupted_curve(tmp_path, bundled_tokenizer, reference, record_property):
    rng = random.Random(SEED)
    out = tmp_path / "run"
    common = ("--steps", str(STEPS), "--tokenizer", bundled_tokenizer)
    kept, caught_in_write = 0, 0
    for i, (whom, sig, where) in enumerate(TRAIN_FAULTS):
        done = len(_rows(out))  # rows of the killed segment beyond its checkpoint stay until the resume starts
        target = rng.randint(2, 4) if i == 0 else done + 1  # the first step this segment computes itself
        assert target < STEPS, "the faults left no step to interrupt"
        proc = _train(out, *common, *(("--resume",) if i else ()))
        _wait_for_step(proc, out, target)
        if where == "checkpoint":
            _wait_for_checkpoint_write(proc, out)
        else:
            time.sleep(rng.uniform(0.0, 0.2))
        victim = proc.pid if whom == "launcher" else _rank_pid(proc.pid, rng.randint(0, 1))
        os.kill(victim, sig)
        caught_in_write += where == "checkpoint" and any((out / "checkpoints").glob(".tmp-step-*"))
        proc.communicate(timeout=120)
        assert proc.returncode != 0, f"fault {i} ({whom} {sig.name}) did not stop the run"
        if whom == "launcher" and sig == signal.SIGTERM:  # one line, no traceback
            assert proc.returncode == 143
        _assert_no_survivor(f"SCALESTUDY_LAUNCHER_PID={proc.pid}")
        step = _latest_checkpoint(out)
        assert step >= kept, f"fault {i}: checkpoint went back from step {kept} to {step}"
        kept = step
        assert not (out / "summary.json").exists()
    final = _train(out, *common, "--resume")
    _, err = final.communicate(timeout=600)
    assert final.returncode == 0, err[-3000:]
    rows = _rows(out)
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    assert [r["loss"] for r in rows] == pytest.approx([r["loss"] for r in reference], rel=1e-6)
    assert [r["lr"] for r in rows] == pytest.approx([r["lr"] for r in reference], rel=1e-9)

    # A refused resume (nothing left to train) must not touch the finished run ...
    summary = (out / "summary.json").read_bytes()
    again = _train(out, *common, "--resume")
    _, err = again.communicate(timeout=300)
    assert again.returncode == 2 and "raise --steps" in err and "Traceback" not in err, err
    assert (out / "summary.json").read_bytes() == summary
    # ... and resuming with more steps follows the longer schedule from the resumed step (engine resume rule).
    more = _train(out, "--steps", str(STEPS + 2), "--tokenizer", bundled_tokenizer, "--resume")
    _, err = more.communicate(timeout=600)
    assert more.returncode == 0, err[-3000:]
    from scalestudy.engine.backends.common import lr_multiplier
    from scalestudy.specs.run import RunConfig

    longer = RunConfig.from_yaml(out / "train_config.yaml")
    assert longer.workload.steps == STEPS + 2
    rows = _rows(out)
    assert [r["lr"] for r in rows[STEPS:]] == pytest.approx(
        [longer.optimizer.lr * lr_multiplier(s, longer) for s in (STEPS, STEPS + 1)], rel=1e-9)
    record_property("train_injections", len(TRAIN_FAULTS))
    record_property("caught_in_checkpoint_write", caught_in_write)
    print(f"\ntraining: {len(TRAIN_FAULTS)} injections, {caught_in_write} inside a checkpoint write")


STUDY_SPEC = """\
name: faults
model: t5-tiny
engine: ddp
nproc: 1
micro_batch: 1
global_batch: 2
seq_len: 64
target_len: 16
steps: [3, 4]
warmup: 1
seed: 0
timeout_s: 300
train_options: {{tokenizer: {tokenizer}}}
"""
# Two trials (~9-12 s each here): the runner kills, 3-12 s after each start, land in the first trial, its store
# commit or the start of the second; a third and fourth trial were only ever run by the final, uninterrupted runner.
RUNNER_FAULTS = [signal.SIGKILL, signal.SIGTERM, signal.SIGKILL, signal.SIGKILL]


def _finished(store: Path) -> dict[str, tuple]:
    """The stored trials (status, loss, finished_at, metric rows), read as `study status` reads: read-only Store."""
    from scalestudy.study.store import Store

    with Store(store, create=False) as opened:  # a commit cut by the kill is rolled back first
        conn = opened.conn
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        rows = [tuple(r) for r in conn.execute("SELECT trial_id, status, loss, finished_at FROM trials")]
        counts = {r[0]: r[1] for r in conn.execute("SELECT trial_id, COUNT(*) FROM metrics GROUP BY trial_id")}
    return {r[0]: (*r[1:], counts.get(r[0], 0)) for r in rows}


def _wait_for_a_finished_trial(runner: subprocess.Popen, store: Path, limit_s: float = 180.0) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if store.exists() and _finished(store):
            return
        assert runner.poll() is None, "the runner ended without storing a finished trial"
        time.sleep(0.2)
    raise AssertionError("the runner stored no finished trial in time")


def test_killed_study_runner_loses_no_trial(tmp_path, bundled_tokenizer):
    rng = random.Random(SEED + 1)
    spec = tmp_path / "faults.yaml"
    spec.write_text(STUDY_SPEC.format(tokenizer=bundled_tokenizer))
    out = (tmp_path / "study").resolve()
    marker = f"SCALESTUDY_STUDY_DIR={out}"
    cmd = [sys.executable, "-m", "scalestudy", "study", "run", str(spec), "-o", str(out), "--no-progress"]
    before: dict[str, tuple] = {}
    for fault, sig in enumerate(RUNNER_FAULTS):
        last = fault == len(RUNNER_FAULTS) - 1
        runner = subprocess.Popen(cmd, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                  start_new_session=True)
        if last and not before:  # no kill has yet come after a finished trial: the last one does
            _wait_for_a_finished_trial(runner, out / "study.sqlite")
            time.sleep(rng.uniform(0.0, 2.0))
        else:
            time.sleep(rng.uniform(3.0, 12.0))
        runner.send_signal(sig)
        runner.communicate(timeout=120)
        _assert_no_survivor(marker)
        after = _finished(out / "study.sqlite")
        assert {k: after[k] for k in before} == before, "a finished trial was lost or changed"
        assert all(v[3] > 0 for v in after.values())
        before = after
    assert before, "no kill came after a finished trial: the check above never had anything to lose"
    final = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=900)
    assert final.returncode == 0, final.stderr[-3000:]
    after = _finished(out / "study.sqlite")
    assert {k: after[k] for k in before} == before
    assert len(after) == 2 and {v[0] for v in after.values()} == {"OK"}
    _assert_no_survivor(marker)


STORE_WRITER = """
import sys
from scalestudy.study.store import Store
store = Store(sys.argv[1])
i = int(sys.argv[2])
while True:
    store.record_trial({"trial_id": f"t{i:05d}", "status": "OK", "loss": float(i), "label": "x" * 2000},
                       [{"step": s, "loss": float(s), "payload": "y" * 500} for s in range(1, 201)])
    print(i, flush=True)
    i += 1
"""
STORE_FAULTS = 12


def test_store_killed_during_commits_keeps_every_acknowledged_trial(tmp_path):
    rng = random.Random(SEED + 2)
    path = tmp_path / "study.sqlite"
    acknowledged: list[int] = []
    cut_mid_commit = 0
    for _ in range(STORE_FAULTS):
        writer = subprocess.Popen([sys.executable, "-c", STORE_WRITER, str(path), str(len(acknowledged))],
                                  env=ENV, stdout=subprocess.PIPE, text=True)
        first = writer.stdout.readline()  # at least one commit of this writer, then a random point among commits
        assert first.strip(), "the writer committed nothing"
        time.sleep(rng.uniform(0.0, 0.3))
        writer.kill()
        rest, _ = writer.communicate()
        cut_mid_commit += Path(f"{path}-journal").exists()  # the kill landed inside a transaction
        acknowledged += [int(line) for line in (first + rest).split()]
        stored = _finished(path)
        assert {f"t{i:05d}" for i in acknowledged} <= set(stored)  # acknowledged = committed, kept
        assert all(v[3] == 200 for v in stored.values()), "a trial without all its metrics (half a commit)"
        acknowledged = sorted(int(k[1:]) for k in stored)
    assert len(acknowledged) >= STORE_FAULTS
    print(f"\nstore: {STORE_FAULTS} injections, {cut_mid_commit} inside a commit (rolled back on the next open)")
