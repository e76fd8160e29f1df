"""The one trial process: real child processes that finish, get pruned, hang, or run out of a memory cap."""

from __future__ import annotations

import os
import sys
import textwrap

from scalestudy.launch.process import read_metrics, start_trial, trial_environment

# Follows the training contract (metrics.jsonl per step, summary.json at the end); the mode is argv[1].
CHILD = textwrap.dedent('''
    import json, os, subprocess, sys, time
    mode, steps = sys.argv[1], 6
    if mode == "rank":  # what torchrun does: a rank in a session of its own, outside the trial's process group
        rank = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
        open("rank.pid", "w").write(str(rank.pid))
        time.sleep(600)
    if mode == "oom":
        blocks = [bytearray(64 * 2**20) for _ in range(64)]  # 4 GiB: beyond the cap
    with open("metrics.jsonl", "w") as fh:
        for s in range(1, steps + 1):
            fh.write(json.dumps({"step": s, "loss": 10.0 / s}) + "\\n")
            fh.flush()
            time.sleep(0.3 if mode == "slow" else 0.0)
    json.dump({"status": "ok", "median_step_s": 0.1, "final_loss": 10.0 / steps}, open("summary.json", "w"))
''')


def _start(tmp_path, mode: str, **kw):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    return start_trial([sys.executable, str(script), mode], tmp_path / mode, trial_id=f"t-{mode}",
                       owner_dir=tmp_path, env=trial_environment(), **{"timeout_s": 60.0, **kw})


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as fh:  # a zombie (dead, not yet reaped by its parent) counts as gone
        return fh.read().split(")")[-1].split()[0] != "Z"


def test_a_finished_trial_is_ok_with_its_summary_and_every_metrics_row(tmp_path):
    seen = []
    result = _start(tmp_path, "ok").watch(lambda row: seen.append(row["step"]) or False, poll_s=0.05)
    assert result.status == "OK" and result.returncode == 0 and not result.pruned
    assert result.summary["final_loss"] == 10.0 / 6 and [r["step"] for r in result.metrics] == [1, 2, 3, 4, 5, 6]
    assert seen == [1, 2, 3, 4, 5, 6]  # the watcher saw every row, the last ones written just before exit too


def test_the_pruning_callback_stops_the_trial_early(tmp_path):
    result = _start(tmp_path, "slow").watch(lambda row: row["step"] >= 2, poll_s=0.05)
    assert result.pruned and result.status == "FAILED" and result.reason == "stopped early by the pruner"
    # stopped, not finished: no summary and not all of its 6 steps (0.3 s apart) written -- counted in the trial's own
    # rows, not in wall time, which also holds the child's start-up (longer on a loaded machine)
    steps = [row["step"] for row in read_metrics(tmp_path / "slow" / "metrics.jsonl")]
    assert result.summary is None and 2 <= max(steps) < 6, steps


def test_a_timeout_kills_the_group_and_the_ranks_in_sessions_of_their_own(tmp_path):
    result = _start(tmp_path, "rank", timeout_s=1.5).watch(poll_s=0.05)
    assert result.status == "TIMEOUT" and result.timed_out
    rank = int((tmp_path / "rank" / "rank.pid").read_text())
    assert not _alive(rank)  # found by the environment markers, although outside the killed process group


def test_the_memory_cap_turns_a_big_allocation_into_oom(tmp_path):
    result = _start(tmp_path, "oom", memory_limit_bytes=1 << 30).watch(poll_s=0.05)
    assert result.status == "OOM" and "MemoryError" in result.error_tail
    assert result.failure_line.startswith("ran out of memory: ")


def test_gpu_ranks_share_the_hosts_cores_cpu_ranks_get_one_thread():
    """DeepSpeed CPU Adam (optimizer offload) runs on the rank's OpenMP threads: one thread per GPU rank would price
    the optimizer at 1/cores of the host rate the cost model assumes."""
    from scalestudy.engine.launch import threads_per_rank

    assert [threads_per_rank(n, True, 112) for n in (1, 8, 200)] == [112, 14, 1]
    assert [threads_per_rank(n, False, 112) for n in (1, 8)] == [1, 1]


def test_trials_leave_gpu_ranks_their_threads(monkeypatch):
    """CPU trials: one thread per rank (as the CPU profile is measured); GPU trials: no default here, `scalestudy
    train` splits the host's cores between its ranks (engine/launch.threads_per_rank)."""
    from scalestudy.launch import process

    for name in ("OMP_NUM_THREADS", "DS_ACCELERATOR"):  # set by other tests / the conftest in the same process
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(process, "has_gpu", lambda: False)
    assert trial_environment()["OMP_NUM_THREADS"] == "1"
    monkeypatch.setattr(process, "has_gpu", lambda: True)
    assert "OMP_NUM_THREADS" not in trial_environment() and "DS_ACCELERATOR" not in trial_environment()


def test_read_metrics_skips_rows_train_never_writes(tmp_path):
    """Only objects whose step is a whole number are rows: a cut line, a list, a text or boolean step and thousands of
    nested brackets are skipped -- a resume compared a text step with its checkpoint's (TypeError in rank 0)."""
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1, "loss": 5.0}\n[1, 2]\n{"step": "a", "loss": 4.0}\n{"step": true}\n'
                    + "[" * 5000 + "]" * 5000 + '\n{"step": 2.5}\n{"step": 2, "loss": 4.5}\n{"step": 3, "lo')
    assert [row["step"] for row in read_metrics(path)] == [1, 2]
