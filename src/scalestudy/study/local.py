"""Local executor: trial processes on this machine, one at a time or several at once when cores allow.

Each trial is a `scalestudy.launch.process` trial process (its own process group, memory cap, parent-death signal;
a timeout kills its whole tree, torchrun's ranks included). The loop polls, so a hung trial never blocks the others.
"""

from __future__ import annotations

import os
import shutil
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from scalestudy.launch.commands import drop_checkpoints
from scalestudy.launch.process import POLL_S, TrialProcess, start_trial, trial_environment
from scalestudy.study.progress import SweepProgress
from scalestudy.study.spec import StudySpec, Trial
from scalestudy.study.store import Store
from scalestudy.study.trials import trial_command, trial_dir, trial_row, write_train_config


@dataclass
class _Running:
    trial: Trial
    process: TrialProcess


class LocalExecutor:
    def __init__(self, spec: StudySpec, out: Path, store: Store, env: dict, *, concurrency: int = 1,
                 progress: bool = True, console=None) -> None:
        self.spec, self.out, self.store, self.env = spec, out, store, env
        self.concurrency = max(1, concurrency)
        self.max_ranks = spec.max_ranks or os.cpu_count() or 1
        self.progress_enabled = progress
        self.console = console
        self.proc_env = trial_environment(spec.env)

    def _start(self, trial: Trial) -> _Running:
        tdir = trial_dir(self.out, trial)
        if tdir.exists():  # an interrupted attempt: start clean
            shutil.rmtree(tdir)
        tdir.mkdir(parents=True)
        write_train_config(self.spec, trial, tdir)
        process = start_trial(trial_command(self.spec, trial, tdir), tdir, trial_id=trial.trial_id,
                              owner_dir=self.out, env=self.proc_env, timeout_s=trial.timeout_s,
                              memory_limit_bytes=trial.memory_limit_bytes)
        self.store.record_attempt(trial.trial_id, process.pid, socket.gethostname())
        return _Running(trial, process)

    def _finish(self, run: _Running, timed_out: bool) -> dict:
        result = run.process.stop(timed_out=timed_out)
        row, metrics = trial_row(self.spec, run.trial, result, self.env)
        self.store.record_trial(row, metrics)
        if not self.spec.keep_checkpoints:
            drop_checkpoints(result.directory)
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
                        timed_out = run.process.overdue()
                        if timed_out or run.process.finished():
                            running.remove(run)
                            row = self._finish(run, timed_out)
                            display.finished(row, [r.trial.label for r in running])
            finally:  # Ctrl-C or an error in the runner: no trial outlives it
                for run in running:
                    run.process.abandon()
