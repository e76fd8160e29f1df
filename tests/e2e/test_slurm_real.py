"""A study on a real one-node Slurm (scripts/slurm-local.sh: munge, slurmdbd, slurmctld, slurmd from Debian).

Job arrays run real `scalestudy train` trials (t5-tiny, 1 rank); results are collected into the store; a trial over
its time limit is TIMEOUT; one cancelled with scancel while running is FAILED with Slurm's reason (from sacct); and
`study status` reports queued/running tasks from squeue. Runs under CI=true (as root: it starts daemons), or with
SCALESTUDY_REAL_SLURM=1; elsewhere it skips and says how to run it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from scalestudy.study import slurm_jobs
from scalestudy.study.runner import run_study
from scalestudy.study.spec import parse_spec
from scalestudy.study.status import status
from scalestudy.study.store import Store

ROOT = Path(__file__).parents[2]
SCRIPT = ROOT / "scripts" / "slurm-local.sh"
WANTED = os.environ.get("CI") == "true" or os.environ.get("SCALESTUDY_REAL_SLURM") == "1"


@pytest.fixture(scope="module")
def slurm():
    if not WANTED:
        pytest.skip("real Slurm: set CI=true or SCALESTUDY_REAL_SLURM=1 (as root) to start a one-node Slurm with "
                    "scripts/slurm-local.sh")
    if os.geteuid() != 0:
        pytest.fail("the real-Slurm test starts munge/slurmdbd/slurmctld/slurmd and needs root")
    was_up = subprocess.run([str(SCRIPT), "status"], capture_output=True, text=True).stdout.startswith(
        "slurmctld: running")
    res = subprocess.run([str(SCRIPT), "start"], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    again = subprocess.run([str(SCRIPT), "start"], capture_output=True, text=True, timeout=60)  # idempotent
    assert again.returncode == 0 and "already running" in again.stderr, again.stderr
    yield
    if was_up:  # leave a cluster someone else started as it was
        return
    for _ in range(2):  # stop is idempotent too
        res = subprocess.run([str(SCRIPT), "stop"], capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stderr
    state = Path(os.environ.get("SCALESTUDY_SLURM_DIR", "/var/tmp/scalestudy-slurm"))
    assert not Path("/etc/slurm/slurm.conf").exists() and not state.exists()


SPEC = {
    "name": "real-slurm", "executor": "slurm", "device": "local-cpu", "model": "t5-tiny", "engine": "ddp",
    "zero": 0, "nproc": 1, "nodes": 1, "micro_batch": 2, "global_batch": 2, "precision": "fp32", "seq_len": 64,
    "target_len": 16, "objective": "span", "steps": 3, "warmup": 1, "seed": 1, "timeout_s": 240,
    "include": [{"seed": 2, "steps": 100000, "timeout_s": 4},  # exceeds its time limit
                {"seed": 3, "steps": 100000},  # cancelled while it runs
                {"seed": 4}],  # cancelled before it starts: Slurm keeps no record of it at all
    "slurm": {"poll_s": 1, "lost_grace_s": 2, "cpus_per_task": 1},
}


def _wait(condition, what: str, limit_s: float = 240.0):
    end = time.time() + limit_s
    while time.time() < end:
        value = condition()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def test_study_on_a_real_slurm(slurm, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}:{os.environ['PATH']}")  # sbatch exports it to jobs
    spec = parse_spec(SPEC)
    ok, slow, cancelled, never = spec.trials
    out = tmp_path / "study"
    run_study(spec, out, progress=False, wait=False)
    with Store(out) as store:
        (job,) = store.get_meta("slurm_jobs")
    assert job["trials"] == [ok.trial_id, slow.trial_id, cancelled.trial_id, never.trial_id]

    info = status(out)  # live state from squeue: nothing finished, four tasks queued or running
    assert info["slurm"]["error"] == "" and info["slurm"]["queued"] + info["slurm"]["running"] == 4
    assert info["counts"] == {"OK": 0, "OOM": 0, "FAILED": 0, "TIMEOUT": 0} and info["interrupted"] == 0
    subprocess.run(["scancel", f"{job['job']}_3"], check=True)  # still pending (one task at a time)
    cli = subprocess.run([sys.executable, "-m", "scalestudy", "study", "status", str(out)], capture_output=True,
                         text=True, env={**os.environ, "COLUMNS": "120"})
    assert cli.returncode == 0 and "in Slurm" in cli.stdout, cli.stdout + cli.stderr

    # cancel the third task once it runs (the array runs one task at a time: --exclusive on a 2-CPU node)
    jobs = {job["job"]: job["trials"]}
    _wait(lambda: slurm_jobs.task_states(jobs)[cancelled.trial_id].state == "RUNNING", "the third task to run")
    time.sleep(2)
    subprocess.run(["scancel", f"{job['job']}_2"], check=True)

    run_study(spec, out, progress=False)  # re-run: submits nothing, waits for the tasks in flight
    with Store(out) as store:
        assert len(store.get_meta("slurm_jobs")) == 1
        rows = {r["trial_id"]: r for r in store.trials()}
        assert sorted(r["status"] for r in rows.values()) == ["FAILED", "FAILED", "OK", "TIMEOUT"], rows
        good = rows[ok.trial_id]
        assert good["status"] == "OK" and good["loss"] > 0 and good["step_s"] > 0 and good["returncode"] == 0
        assert [m["step"] for m in store.metrics(ok.trial_id)] == [1, 2, 3]
        assert rows[slow.trial_id]["status"] == "TIMEOUT" and rows[slow.trial_id]["returncode"] == 124
        lost = rows[cancelled.trial_id]
        assert lost["status"] == "FAILED" and "CANCELLED by 0" in lost["error_tail"], lost["error_tail"]
        assert "no record in squeue or sacct" in rows[never.trial_id]["error_tail"]
    final = slurm_jobs.accounting_states([job["job"]])  # sacct agrees
    assert [final[f"{job['job']}_{i}"].state for i in range(3)] == ["COMPLETED", "FAILED", "CANCELLED"]
    info = status(out)
    assert info["slurm"]["queued"] == info["slurm"]["running"] == 0 and info["total"] == 4
