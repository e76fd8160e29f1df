"""Talking to Slurm: sbatch, squeue and sacct with retries, and the state of every array task.

A busy controller answers "Socket timed out" or "Unable to contact slurm controller" now and then; one such answer
must never end a trial. So:
- every call is retried with exponential backoff (`RETRIES` tries) unless Slurm said "Invalid job id" (the job is
  gone: `NoSuchJob`, not retried); after the last try it raises `SlurmUnavailable` (callers then decide nothing);
- a task's live state comes from `squeue -t all` (pending, running, and for MinJobAge, default 300 s, recently
  finished), its final state from `sacct` (accounting: the authority once a job has ended). A task that neither
  knows while both answered is `VANISHED` (cancelled before it started leaves no record; or purged long ago);
- sbatch is retried only after a transient failure, and only once squeue shows that the failed attempt did not
  submit the job after all (`submit`: each submission carries a unique --comment).
"""

from __future__ import annotations

import re
import subprocess
import time
import uuid
from dataclasses import dataclass
from typing import Callable

from scalestudy.errors import ScalestudyError

RETRIES = 5
BACKOFF_S = 1.0  # first wait; doubles each try (1, 2, 4, 8 s: ~15 s of controller trouble ridden out)
CALL_TIMEOUT_S = 60.0
NO_SUCH_JOB = re.compile(r"Invalid job id|Invalid job array", re.IGNORECASE)
# Failures worth submitting again for (anything else is the cluster refusing the job).
TRANSIENT = re.compile(r"timed out|Unable to contact|Connection refused|temporarily|try again|Zero Bytes|"
                       r"not responding|communication|no answer", re.IGNORECASE)
NO_ACCOUNTING = re.compile(r"accounting storage is disabled", re.IGNORECASE)
# Slurm states in which a task may still run (or run again): never conclude anything from these.
LIVE = frozenset({"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "REQUEUED", "REQUEUE_HOLD",
                  "REQUEUE_FED", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED", "RESV_DEL_HOLD"})
VANISHED = "VANISHED"


class SlurmUnavailable(ScalestudyError):
    """A Slurm command kept failing (controller down or overloaded): nothing can be concluded."""


class NoSuchJob(ScalestudyError):
    """Slurm does not know the job (any more)."""


@dataclass(frozen=True)
class TaskState:
    """One array task as Slurm reports it. `state` is Slurm's base state ("CANCELLED by 0" -> "CANCELLED")."""

    task: str  # "<job>_<index>"
    state: str
    detail: str = ""  # Slurm's full state text, exit code and reason, for the error line
    end: float | None = None  # unix seconds when the task ended (None: running, or unknown)
    source: str = ""  # "squeue" or "sacct"

    @property
    def live(self) -> bool:
        return self.state in LIVE

    @property
    def final(self) -> bool:
        return not self.live


def call(args: list[str], *, retries: int | None = None, backoff_s: float | None = None,
         sleep: Callable[[float], None] = time.sleep) -> str:
    """Run a Slurm command; its stdout. Retries transient failures; `NoSuchJob` / `SlurmUnavailable` otherwise."""
    retries = RETRIES if retries is None else retries
    backoff_s = BACKOFF_S if backoff_s is None else backoff_s
    error, tries = "", 0
    for attempt in range(retries):
        tries += 1
        if attempt:
            sleep(backoff_s * 2 ** (attempt - 1))
        try:
            res = subprocess.run(args, capture_output=True, text=True, timeout=CALL_TIMEOUT_S)
        except FileNotFoundError:
            raise SlurmUnavailable(f"{args[0]} not found: run on a Slurm login node") from None
        except subprocess.TimeoutExpired:
            error = f"no answer in {CALL_TIMEOUT_S:.0f} s"
            continue
        if res.returncode == 0:
            return res.stdout
        error = (res.stderr.strip().splitlines() or [f"exit status {res.returncode}"])[-1]
        if NO_SUCH_JOB.search(error):
            raise NoSuchJob(f"{args[0]}: {error}")
        if NO_ACCOUNTING.search(error):  # permanent: asking again changes nothing
            break
    raise SlurmUnavailable(f"{' '.join(args[:2])} failed ({tries} tries): {error}")


def submit(script: str, *, retries: int | None = None, backoff_s: float | None = None,
           sleep: Callable[[float], None] = time.sleep) -> str:
    """sbatch the script once; the job id.

    sbatch is not idempotent: a "Socket timed out" may come after the controller accepted the job. So each
    submission carries a unique `--comment`, and before trying again we ask squeue whether a job with it exists.
    """
    token = f"scalestudy-{uuid.uuid4().hex[:12]}"
    retries = RETRIES if retries is None else retries
    backoff_s = BACKOFF_S if backoff_s is None else backoff_s
    error: Exception | None = None
    for attempt in range(retries):
        if attempt:
            sleep(backoff_s * 2 ** (attempt - 1))
            try:
                found = call(["squeue", "--me", "-h", "-o", "%A|%k"], retries=1).splitlines()
            except ScalestudyError:
                continue  # cannot tell whether it went in: do not risk a second copy, ask again later
            ids = [line.split("|")[0] for line in found if line.endswith(f"|{token}")]
            if ids:
                return ids[0]
        try:
            out = call(["sbatch", "--parsable", f"--comment={token}", script], retries=1)
        except NoSuchJob as exc:
            raise ScalestudyError(f"sbatch {script}: {exc}") from None
        except SlurmUnavailable as exc:
            if not TRANSIENT.search(str(exc)):  # a refusal (bad partition, no such account...): say it once
                raise ScalestudyError(f"sbatch {script}: {str(exc).split(': ', 1)[-1]}") from None
            error = exc
            continue
        job = out.strip().split(";")[0]
        if not job.isdigit():
            raise ScalestudyError(f"sbatch {script}: unexpected answer {out.strip()!r}")
        return job
    raise SlurmUnavailable(f"sbatch {script}: Slurm did not answer ({retries} tries): {error or 'squeue failing'}")


def _end_time(text: str) -> float | None:
    try:  # Slurm prints local time, e.g. 2026-12-01T15:09:31
        return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None  # "Unknown", "NONE", "N/A"


def _parse(text: str, source: str) -> dict[str, TaskState]:
    """Lines "TASK|STATE|EXITCODE|REASON|END" -> task states (pending ranges like 12_[3-5] are skipped)."""
    states = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) < 5 or "[" in parts[0] or "." in parts[0]:
            continue
        task, state, code, reason, end = parts[:5]
        detail = state + (f", exit code {code}" if code and code not in ("0:0", "N/A") else "")
        detail += f", reason {reason}" if reason and reason not in ("None", "") else ""
        states[task] = TaskState(task, state.split()[0] if state else "UNKNOWN", detail, _end_time(end), source)
    return states


def queue_states(job_ids: list[str], **kw) -> dict[str, TaskState]:
    """squeue's view: pending/running tasks, and recently finished ones (MinJobAge)."""
    try:
        out = call(["squeue", "-h", "-r", "-t", "all", "-o", "%i|%T|N/A|%r|%e", "-j", ",".join(job_ids)], **kw)
    except NoSuchJob:  # every job it was asked about is gone
        return {}
    return _parse(out, "squeue")


def accounting_states(job_ids: list[str], **kw) -> dict[str, TaskState]:
    """sacct's view (needs accounting): the final state of tasks that ran, or were cancelled once started."""
    try:
        out = call(["sacct", "-n", "-P", "-X", "-j", ",".join(job_ids), "-o", "JobID,State,ExitCode,Reason,End"],
                   **kw)
    except NoSuchJob:
        return {}
    except SlurmUnavailable as exc:
        if NO_ACCOUNTING.search(str(exc)):  # a cluster without slurmdbd: squeue's view is all there is
            return {}
        raise
    return _parse(out, "sacct")


def task_states(jobs: dict[str, list[str]], **kw) -> dict[str, TaskState]:
    """State of every trial in `jobs` ({job id: trial ids in array order}), by trial id.

    Raises `SlurmUnavailable` when Slurm cannot be asked: then nothing may be concluded about any trial.
    """
    if not jobs:
        return {}
    ids = list(jobs)
    queue = queue_states(ids, **kw)
    accounting = accounting_states(ids, **kw)
    out = {}
    for job, trial_ids in jobs.items():
        for index, trial_id in enumerate(trial_ids):
            task = f"{job}_{index}"
            seen = queue.get(task)
            if seen is None or seen.final:  # sacct is the authority once the task left the queue
                seen = accounting.get(task) or seen
            out[trial_id] = seen or TaskState(task, VANISHED, "no record in squeue or sacct (cancelled before it "
                                                              "started, or purged)")
    return out
