"""Local executor: trial processes on this machine, one at a time or several at once when cores allow.

Each trial runs in its own session / process group (start_new_session) so that a timeout kills its tree with
os.killpg (SIGTERM: torchrun's agent stops its ranks; SIGKILL after a grace period). torchrun starts every rank in a
session of its own, so the ranks are also found and killed by the trial's environment marker. The loop polls, so a
hung trial never blocks the others.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from scalestudy.study.progress import SweepProgress
from scalestudy.study.runner import (TRIAL_MARKER, kill_leftovers, trial_command, trial_dir, trial_env, trial_row,
                                     write_train_config)
from scalestudy.study.spec import StudySpec, Trial
from scalestudy.study.store import Store

POLL_S = 0.2
TERM_GRACE_S = 3.0


@dataclass
class _Running:
    trial: Trial
    proc: subprocess.Popen
    log: object
    tdir: Path
    command: list[str]
    started: float

    @property
    def deadline(self) -> float:
        return self.started + self.trial.timeout_s


def kill_group(pgid: int, grace_s: float = TERM_GRACE_S) -> None:
    """SIGTERM the process group, then SIGKILL whatever is left after `grace_s`."""
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 0.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        end = time.time() + wait
        while time.time() < end:
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)


class LocalExecutor:
    def __init__(self, spec: StudySpec, out: Path, store: Store, env: dict, *, concurrency: int = 1,
                 progress: bool = True, console=None) -> None:
        self.spec, self.out, self.store, self.env = spec, out, store, env
        self.concurrency = max(1, concurrency)
        self.max_ranks = spec.max_ranks or os.cpu_count() or 1
        self.progress_enabled = progress
        self.console = console
        self.proc_env = trial_env(spec, out)

    def _start(self, trial: Trial) -> _Running:
        tdir = trial_dir(self.out, trial)
        if tdir.exists():  # an interrupted attempt: start clean
            shutil.rmtree(tdir)
        tdir.mkdir(parents=True)
        write_train_config(self.spec, trial, tdir)
        command = trial_command(self.spec, trial, tdir)
        launcher = [sys.executable, "-m", "scalestudy.launch.capped_exec", str(trial.memory_limit_bytes),
                    str(os.getpid()), "--"]
        log = open(tdir / "train.log", "wb")  # noqa: SIM115 - closed in _finish
        proc = subprocess.Popen(launcher + command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env={**self.proc_env, TRIAL_MARKER: trial.trial_id}, cwd=str(tdir),
                                start_new_session=True)
        self.store.record_attempt(trial.trial_id, proc.pid, socket.gethostname())
        return _Running(trial, proc, log, tdir, command, time.time())

    def _finish(self, run: _Running, timed_out: bool) -> dict:
        kill_group(run.proc.pid, grace_s=TERM_GRACE_S if timed_out else 0.5)  # leftover ranks, if any
        returncode = run.proc.wait()
        kill_leftovers(self.out, run.trial.trial_id)  # ranks in sessions of their own (torchrun's default)
        run.log.close()
        row, metrics = trial_row(self.spec, run.trial, run.tdir, returncode=returncode, timed_out=timed_out,
                                 started=run.started, finished=time.time(), command=run.command, env=self.env)
        self.store.record_trial(row, metrics)
        if not self.spec.keep_checkpoints:  # a study measures; checkpoints of every trial would fill the disk
            shutil.rmtree(run.tdir / "checkpoints", ignore_errors=True)
        return row

    def _can_start(self, trial: Trial, running: list[_Running]) -> bool:
        if not running:
            return True  # a trial wider than the machine still runs, alone
        ranks = sum(r.trial.world_size for r in running)
        return len(running) < self.concurrency and ranks + trial.world_size <= self.max_ranks

    def run(self, trials: list[Trial]) -> None:
        pending = list(trials)
        running: list[_Running] = []
        with SweepProgress(len(trials), enabled=self.progress_enabled, console=self.console) as display:
            try:
                while pending or running:
                    while pending and self._can_start(pending[0], running):
                        running.append(self._start(pending.pop(0)))
                        display.running([r.trial.label for r in running])
                    time.sleep(POLL_S)
                    for run in list(running):
                        timed_out = run.proc.poll() is None and time.time() > run.deadline
                        if run.proc.poll() is not None or timed_out:
                            running.remove(run)
                            row = self._finish(run, timed_out)
                            display.finished(row, [r.trial.label for r in running])
            finally:  # Ctrl-C or an error in the runner: no trial outlives it
                for run in running:
                    kill_group(run.proc.pid, grace_s=0.5)
                    kill_leftovers(self.out, run.trial.trial_id)
