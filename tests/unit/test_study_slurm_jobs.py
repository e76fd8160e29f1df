"""The Slurm executor against a scripted squeue/sacct/sbatch: retries, "no such job", sacct's final word, and no
trial marked FAILED while its job may still run (cases a real Slurm cannot stage on demand)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from scalestudy.study import slurm_jobs
from scalestudy.study.slurm import EXIT_FILE, SlurmExecutor, refresh
from scalestudy.study.spec import parse_spec
from scalestudy.study.status import status
from scalestudy.study.store import Store
from scalestudy.study.trials import trial_dir

# Each fake fails while its counter file holds a positive number (decremented per call), printing $FAKE/<cmd>.err;
# otherwise it prints $FAKE/<cmd>.out. Every call is logged to $FAKE/calls.
FAKE = """#!/bin/bash
name=$(basename "$0")
echo "$name $*" >> "$FAKE/calls"
n=$(cat "$FAKE/$name.fail" 2>/dev/null || echo 0)
if [ "$n" -gt 0 ]; then
  echo $((n - 1)) > "$FAKE/$name.fail"
  cat "$FAKE/$name.err" >&2
  exit 1
fi
cat "$FAKE/$name.out" 2>/dev/null
exit 0
"""
TRANSIENT = "squeue: error: slurm_load_jobs error: Socket timed out on send/recv operation\n"


@pytest.fixture
def fake(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("squeue", "sacct", "sbatch"):
        (bin_dir / name).write_text(FAKE)
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE", str(tmp_path))
    monkeypatch.setattr(slurm_jobs, "BACKOFF_S", 0.01)

    def set_(name: str, out: str = "", fail: int = 0, err: str = TRANSIENT) -> None:
        (tmp_path / f"{name}.out").write_text(out)
        (tmp_path / f"{name}.fail").write_text(str(fail))
        (tmp_path / f"{name}.err").write_text(err)

    set_("squeue")
    set_("sacct")
    set_.calls = lambda name: [c for c in (tmp_path / "calls").read_text().splitlines() if c.startswith(name)] \
        if (tmp_path / "calls").exists() else []
    return set_


def test_transient_failures_are_retried_with_backoff(fake):
    fake("squeue", "41_0|RUNNING|N/A|None|NONE\n", fail=2)
    waits = []
    out = slurm_jobs.call(["squeue", "-j", "41"], backoff_s=0.5, sleep=waits.append)
    assert out.startswith("41_0|RUNNING") and waits == [0.5, 1.0] and len(fake.calls("squeue")) == 3


def test_no_such_job_is_told_apart_and_not_retried(fake):
    fake("squeue", fail=9, err="slurm_load_jobs error: Invalid job id specified\n")
    with pytest.raises(slurm_jobs.NoSuchJob):
        slurm_jobs.call(["squeue", "-j", "41"], sleep=lambda s: None)
    assert len(fake.calls("squeue")) == 1
    assert slurm_jobs.queue_states(["41"]) == {}  # every job asked about is gone: nothing in the queue


def test_persistent_failure_raises_unavailable(fake):
    fake("squeue", fail=99)
    with pytest.raises(slurm_jobs.SlurmUnavailable, match="5 tries.*Socket timed out"):
        slurm_jobs.call(["squeue", "-j", "41"], sleep=lambda s: None)


def test_task_states_prefer_sacct_once_the_queue_is_done(fake):
    fake("squeue", "41_0|RUNNING|N/A|None|NONE\n41_1|COMPLETED|N/A|None|2026-12-01T10:00:00\n41_[2-3]|PENDING|N/A|"
                   "Resources|NONE\n")
    fake("sacct", "41_0|RUNNING|0:0|None|Unknown\n41_1|CANCELLED by 0|0:15|None|2026-12-01T10:00:05\n")
    states = slurm_jobs.task_states({"41": ["a", "b", "c", "d", "e"]})
    assert states["a"].state == "RUNNING" and states["a"].live
    assert states["b"].state == "CANCELLED" and states["b"].source == "sacct" and "CANCELLED by 0" in states["b"].detail
    assert states["b"].end == time.mktime(time.strptime("2026-12-01T10:00:05", "%Y-%m-%dT%H:%M:%S"))
    # pending ranges are not expanded by this fake: such tasks (and e, beyond any record) are unknown -> vanished
    assert states["e"].state == slurm_jobs.VANISHED and states["e"].final


SPEC = {"name": "fake", "executor": "slurm", "device": "a100-80gb", "model": "mt5-base", "engine": "deepspeed",
        "zero": [1, 2], "nodes": 1, "nproc": 8, "micro_batch": 2, "global_batch": 64, "precision": "bf16",
        "seq_len": 512, "target_len": 114, "steps": 3, "warmup": 1, "timeout_s": 60,
        "slurm": {"poll_s": 0.05, "lost_grace_s": 30}}


def _study(tmp_path: Path, submitted_at: float | None = None):
    spec = parse_spec(SPEC)
    out = tmp_path / "study"
    store = Store(out)
    store.set_meta("spec", spec.source)
    store.set_meta("executor", "slurm")
    store.set_meta("trial_ids", [t.trial_id for t in spec.trials])
    store.set_meta("slurm_jobs", [{"job": "41", "trials": [t.trial_id for t in spec.trials],
                                   "submitted_at": submitted_at or time.time() - 3600}])
    for t in spec.trials:
        trial_dir(out, t).mkdir(parents=True)
    return spec, out, store


def _finish_ok(out: Path, trial) -> None:
    tdir = trial_dir(out, trial)
    (tdir / "summary.json").write_text(json.dumps({"status": "ok", "median_step_s": 0.5, "final_loss": 7.0}))
    (tdir / EXIT_FILE).write_text(f"0 {time.time() - 10} {time.time()}\n")


def _slurm_time(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t))


def test_squeue_failing_never_fails_a_running_trial_and_status_repairs(fake, tmp_path):
    """The issue's reproduction: squeue fails while a trial runs; its exit code is 0; nothing is marked FAILED."""
    spec, out, store = _study(tmp_path)
    a, b = spec.trials
    fake("squeue", fail=99)
    fake("sacct", fail=99)
    seen = refresh(out, store, spec)
    assert "Socket timed out" in seen.error and not seen.recorded and seen.outstanding == {a.trial_id, b.trial_id}
    assert store.trials() == []
    _finish_ok(out, a)  # the job went on and finished fine
    store.close()
    info = status(out)  # Slurm still silent: the exit file alone is enough to collect
    assert info["counts"]["OK"] == 1 and info["counts"]["FAILED"] == 0
    assert info["slurm"]["error"] and info["slurm"]["submitted"] == 1 and info["interrupted"] == 0
    fake("squeue", "41_1|RUNNING|N/A|None|NONE\n")
    fake("sacct", f"41_0|COMPLETED|0:0|None|{_slurm_time(time.time() - 5)}\n41_1|RUNNING|0:0|None|Unknown\n")
    info = status(out)
    assert info["slurm"] == {"queued": 0, "running": 1, "submitted": 1, "error": ""}
    assert info["counts"] == {"OK": 1, "OOM": 0, "FAILED": 0, "TIMEOUT": 0}


@pytest.mark.parametrize("state,status_,words", [
    ("CANCELLED by 0", "FAILED", "Slurm job 41_0 CANCELLED by 0"),
    ("TIMEOUT", "TIMEOUT", "Slurm job 41_0 TIMEOUT"),
    ("OUT_OF_MEMORY", "OOM", "OUT_OF_MEMORY, exit code 0:125"),
    ("NODE_FAIL", "FAILED", "NODE_FAIL"),
])
def test_final_state_comes_from_sacct(fake, tmp_path, state, status_, words):
    spec, out, store = _study(tmp_path)
    code = "0:125" if state == "OUT_OF_MEMORY" else "0:15"
    fake("sacct", f"41_0|{state}|{code}|None|{_slurm_time(time.time() - 120)}\n"
                  f"41_1|{state}|{code}|None|{_slurm_time(time.time() - 2)}\n")
    seen = refresh(out, store, spec)
    (row,) = store.trials()  # 41_1 ended 2 s ago: inside the grace period its exit file may still be on its way
    assert row["status"] == status_ and words in row["error_tail"]
    assert "without writing its exit code" in row["error_tail"]
    assert seen.outstanding == {spec.trials[1].trial_id}


def test_queue_done_but_accounting_lagging_is_still_running(fake, tmp_path):
    spec, out, store = _study(tmp_path)
    fake("squeue", f"41_0|COMPLETED|N/A|None|{_slurm_time(time.time() - 300)}\n")
    fake("sacct", "41_0|RUNNING|0:0|None|Unknown\n41_1|PENDING|0:0|None|Unknown\n")
    seen = refresh(out, store, spec)
    assert store.trials() == [] and seen.states[spec.trials[0].trial_id].live


def test_exit_code_of_a_cancelled_task_gets_slurms_reason(fake, tmp_path):
    spec, out, store = _study(tmp_path)
    tdir = trial_dir(out, spec.trials[0])
    (tdir / "train.log").write_text("Terminated\n")
    (tdir / EXIT_FILE).write_text(f"143 {time.time() - 10} {time.time()}\n")
    fake("sacct", f"41_0|CANCELLED by 0|0:15|None|{_slurm_time(time.time())}\n")
    fake("squeue", "41_1|RUNNING|N/A|None|NONE\n")
    refresh(out, store, spec)
    (row,) = store.trials()
    assert row["status"] == "FAILED" and row["error_tail"].startswith("Slurm job 41_0 CANCELLED by 0")


def test_rerun_waits_for_in_flight_tasks_instead_of_resubmitting(fake, tmp_path):
    spec = parse_spec(SPEC)
    out = tmp_path / "study"
    fake("sbatch", "41\n")
    with Store(out) as store:
        store.set_meta("spec", spec.source)
        SlurmExecutor(spec, out, store, {}).run(list(spec.trials), wait=False)
        assert [j["job"] for j in store.get_meta("slurm_jobs")] == ["41"]
        fake("squeue", "41_0|RUNNING|N/A|None|NONE\n41_1|PENDING|N/A|Priority|NONE\n")
        fake("sbatch", "42\n")
        SlurmExecutor(spec, out, store, {}).run(list(spec.trials), wait=False)
        assert [j["job"] for j in store.get_meta("slurm_jobs")] == ["41"]  # nothing submitted twice
        fake("squeue", fail=99)  # Slurm unreachable: refuse to submit rather than risk duplicates
        with pytest.raises(Exception, match="cannot ask Slurm"):
            SlurmExecutor(spec, out, store, {}).run(list(spec.trials), wait=False)
    assert len(fake.calls("sbatch")) == 1


WRITER = """
import sys, time
from pathlib import Path
from scalestudy.study.slurm import refresh
from scalestudy.study.store import Store
out, n = Path(sys.argv[1]), int(sys.argv[2])
with Store(out, create=False, readonly=False) as store:
    print("ready", flush=True)
    while len(store.finished_ids()) < n:
        refresh(out, store)
        time.sleep(0.01)
"""


def test_two_writers_record_every_result_once(fake, tmp_path):
    """Two collectors (say the runner and `study status` on another node) record the same finishing tasks through
    the Slurm path at once, one of them killed -9 midway: every result lands exactly once, in a rollback-journal
    store (no -wal file: safe on NFS)."""
    import signal
    import sqlite3
    import subprocess
    import sys

    spec = parse_spec({**SPEC, "lr": [1e-4, 2e-4, 3e-4, 4e-4, 5e-4, 6e-4, 7e-4, 8e-4, 9e-4, 1e-3], "zero": [1, 2]})
    n = len(spec.trials)
    out = tmp_path / "study"
    with Store(out) as store:
        store.set_meta("spec", spec.source)
        store.set_meta("executor", "slurm")
        store.set_meta("slurm_jobs", [{"job": "41", "trials": [t.trial_id for t in spec.trials],
                                       "submitted_at": time.time()}])
    fake("squeue", "".join(f"41_{i}|RUNNING|N/A|None|NONE\n" for i in range(n)))
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(out), str(n)], stdout=subprocess.PIPE, text=True)
               for _ in range(2)]
    for w in writers:
        assert w.stdout.readline().strip() == "ready"
    for i, trial in enumerate(spec.trials):
        tdir = trial_dir(out, trial)
        tdir.mkdir(parents=True, exist_ok=True)
        (tdir / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "loss": 9.0 - s}) + "\n" for s in (1, 2, 3)))
        _finish_ok(out, trial)
        if i == n // 2:
            writers[0].send_signal(signal.SIGKILL)  # one collector dies mid-run (perhaps mid-commit)
        if i % 4 == 0:
            assert status(out)["counts"]["FAILED"] == 0  # a third writer/reader meanwhile
        time.sleep(0.02)
    assert writers[1].wait(timeout=120) == 0
    writers[0].wait()
    con = sqlite3.connect(out / "study.sqlite")
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert con.execute("SELECT COUNT(*), COUNT(DISTINCT trial_id) FROM trials").fetchone() == (n, n)
    assert con.execute("SELECT COUNT(*) FROM metrics").fetchone()[0] == 3 * n
    assert {r[0] for r in con.execute("SELECT status FROM trials")} == {"OK"}
    assert not (out / "study.sqlite-wal").exists()


def test_sbatch_is_retried_without_submitting_twice(fake, tmp_path):
    bin_dir = tmp_path / "bin"
    # this sbatch takes the job, then times out answering; squeue lists jobs with their comment
    (bin_dir / "sbatch").write_text("#!/bin/bash\necho \"sbatch $*\" >> \"$FAKE/calls\"\n"
                                    "for a in \"$@\"; do case $a in --comment=*) echo \"77|${a#--comment=}\" "
                                    ">> \"$FAKE/queue\";; esac; done\n"
                                    "echo 'sbatch: error: Batch job submission failed: Socket timed out on send/recv "
                                    "operation' >&2\nexit 1\n")
    (bin_dir / "squeue").write_text("#!/bin/bash\ncat \"$FAKE/queue\" 2>/dev/null\n")
    assert slurm_jobs.submit("job.sbatch") == "77"
    assert len(fake.calls("sbatch")) == 1  # the second try found the first one in the queue


def test_sbatch_refusal_is_one_line_and_not_retried(fake):
    fake("sbatch", fail=1, err="sbatch: error: Batch job submission failed: Invalid partition name specified\n")
    with pytest.raises(Exception, match=r"^sbatch job.sbatch: .*Invalid partition name specified$"):
        slurm_jobs.submit("job.sbatch")
    assert len(fake.calls("sbatch")) == 1
    fake("sbatch", "42\n", fail=2, err="sbatch: error: Unable to contact slurm controller (connect failure)\n")
    assert slurm_jobs.submit("job.sbatch") == "42" and len(fake.calls("sbatch")) == 4


def test_a_task_that_just_ended_is_waited_for_not_resubmitted(fake, tmp_path):
    """Ended 5 s ago without an exit file yet (NFS may still be delivering it): the re-run must not submit again."""
    spec = parse_spec(SPEC)
    out = tmp_path / "study"
    fake("sbatch", "41\n")
    with Store(out) as store:
        store.set_meta("spec", spec.source)
        SlurmExecutor(spec, out, store, {}).run(list(spec.trials), wait=False)
        fake("sacct", f"41_0|COMPLETED|0:0|None|{_slurm_time(time.time() - 5)}\n41_1|RUNNING|0:0|None|Unknown\n")
        fake("squeue", "41_1|RUNNING|N/A|None|NONE\n")
        SlurmExecutor(spec, out, store, {}).run(list(spec.trials), wait=False)
        assert store.trials() == [] and len(store.get_meta("slurm_jobs")) == 1
    assert len(fake.calls("sbatch")) == 1
