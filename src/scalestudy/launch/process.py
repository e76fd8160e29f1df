"""One trial as a process: start it, watch it, stop its whole tree, and say how it ended.

Every measured run (a study trial, a `tune` trial, a hyperparameter-search trial) is a `scalestudy train` process,
or any command that follows its contract: writes DIR/metrics.jsonl (one JSON row per optimizer step) and
DIR/summary.json (at the end), exits non-zero on failure. `start_trial` launches it
- through `python -m scalestudy.launch.capped_exec` (memory cap, parent-death signal: see that module);
- in a session / process group of its own (start_new_session), so stopping it kills its tree with os.killpg
  (SIGTERM: torchrun's agent stops its ranks; SIGKILL after a grace period);
- with two environment markers, the owning directory (study, search or tune output) and the trial id: torchrun
  starts every rank in a session of its own, so ranks are found in /proc/PID/environ by the markers and killed too;
- with its output in DIR/train.log.
`TrialProcess.watch(on_metrics)` follows metrics.jsonl until the process ends, passes its timeout, or
`on_metrics(row)` returns True (a pruner stopping a bad trial). `TrialProcess.stop()` kills what is left and returns
a `TrialResult`: the outcome (OK / OOM / FAILED / TIMEOUT, `outcome.py`), summary, metrics, exit status, times.
`read_result` builds the same from a directory that a process elsewhere (a Slurm job) left behind.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from scalestudy.errors import ScalestudyError
from scalestudy.launch.outcome import classify_outcome

DIR_MARKER = "SCALESTUDY_STUDY_DIR"  # environment marker: the directory of the study / search / tune a trial runs for
TRIAL_MARKER = "SCALESTUDY_TRIAL_ID"  # and the trial (torchrun starts each rank in a session of its own)
LOG_NAME = "train.log"
SUMMARY_NAME = "summary.json"
METRICS_NAME = "metrics.jsonl"
TERM_GRACE_S = 3.0  # after SIGTERM, before SIGKILL, for a trial stopped early (timeout, pruned)
EXIT_GRACE_S = 0.5  # for the leftovers of a trial that ended by itself
POLL_S = 0.2


# ---------------------------------------------------------------------------------------------- environment


def trial_environment(overrides: dict | None = None) -> dict:
    """This process's environment with the defaults a trial needs; `overrides` (a spec's `env:`) win."""
    env = dict(os.environ)
    if not has_gpu():  # GPU trials: `scalestudy train` splits the host's cores between ranks (worker_env)
        env.setdefault("OMP_NUM_THREADS", "1")  # one core per rank: ranks share the machine's cores
        env.setdefault("DS_ACCELERATOR", "cpu")
    env.setdefault("TORCH_EXTENSIONS_DIR", str(Path.home() / ".cache" / "torch_extensions"))
    env.update({k: str(v) for k, v in (overrides or {}).items()})
    env["PYTHONUNBUFFERED"] = "1"  # train.log keeps the last lines of a process that is killed
    return env


CPU_PROFILE_CHOICES = ("static", "measured")  # SCALESTUDY_CPU_PROFILE (costmodel/cpu_profile.py): unset = measured


# Threads per rank: the largest servers have 768 hardware threads (2 x 192 cores x 2). OMP_NUM_THREADS=100000 made
# the measured CPU profile start 32,000+ threads, past Linux's default pid_max (32,768): every fork on the machine
# failed until it was killed
MAX_OMP_THREADS = 1024


def check_environment(environ: dict | None = None, where: str = "environment variable") -> None:
    """The environment variables scalestudy reads, checked before any command runs (a bad one would otherwise fail
    inside the ranks or the CPU-profile measurement, or silently measure a 2-minute profile):
    OMP_NUM_THREADS (threads per rank: one whole number), SCALESTUDY_CPU_PROFILE (static | measured) and
    SCALESTUDY_CACHE_DIR (a directory, or a path one can be made at)."""
    env = os.environ if environ is None else environ
    threads = env.get("OMP_NUM_THREADS")
    # ASCII digits only: str.isdigit() takes '²' (int() then raised a traceback) and '١' (int() reads 1, OpenMP's
    # parser does not: the ranks ran on its default thread count)
    digits = threads.strip() if threads is not None else ""
    if threads is not None and not (digits.isascii() and digits.isdigit() and 1 <= int(digits) <= MAX_OMP_THREADS):
        raise ScalestudyError(f"{where} OMP_NUM_THREADS={threads!r}: scalestudy's ranks and CPU profile "
                              f"read it as one whole number of threads per rank, 1 to {MAX_OMP_THREADS:,} (e.g. 1); "
                              "unset it or fix it")
    profile = env.get("SCALESTUDY_CPU_PROFILE", "")
    if profile and profile.lower() not in CPU_PROFILE_CHOICES:
        raise ScalestudyError(f"{where} SCALESTUDY_CPU_PROFILE={profile!r}: choose "
                              f"{' or '.join(CPU_PROFILE_CHOICES)} (static keeps the built-in local-cpu profile; "
                              "unset = measured)")
    cache = env.get("SCALESTUDY_CACHE_DIR")
    if cache and not cache.strip():  # a folder named ' ' made in whichever directory the command ran from
        raise ScalestudyError(f"{where} SCALESTUDY_CACHE_DIR={cache!r} is blank: set it to a directory or unset it "
                              "(default ~/.cache/scalestudy)")
    if cache:
        blocked = next((p for p in [Path(cache), *Path(cache).absolute().parents] if p.exists()), None)
        if blocked is not None and not blocked.is_dir():
            raise ScalestudyError(f"{where} SCALESTUDY_CACHE_DIR={cache!r}: {blocked} is a file, not a "
                                  "directory (the measured CPU profile and precision are cached there)")


def has_gpu() -> bool:
    return shutil.which("nvidia-smi") is not None and os.environ.get("CUDA_VISIBLE_DEVICES", "x") != ""


# ---------------------------------------------------------------------------------------------- killing


def kill_group(pgid: int, grace_s: float = TERM_GRACE_S, leader: subprocess.Popen | None = None) -> None:
    """SIGTERM the process group, then SIGKILL whatever is left after `grace_s`.

    `leader`: our child that leads the group; it is reaped while waiting (an unreaped zombie keeps the group
    alive to os.killpg, which would make every stop wait the whole grace period)."""
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 0.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        end = time.time() + wait
        while time.time() < end:
            if leader is not None:
                leader.poll()
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)


def kill_marked(owner_dir: Path, trial_id: str | None = None) -> int:
    """SIGKILL the live processes started for `owner_dir` (or for one of its trials); return how many.

    They are leftovers of a killed runner, or ranks that torchrun started in sessions of their own; each carries
    the environment markers that `start_trial` set."""
    markers = [f"{DIR_MARKER}={Path(owner_dir).resolve()}".encode()]
    if trial_id:
        markers.append(f"{TRIAL_MARKER}={trial_id}".encode())
    killed = []
    for pid_dir in Path("/proc").glob("[0-9]*"):
        try:
            if int(pid_dir.name) == os.getpid():
                continue
            environ = (pid_dir / "environ").read_bytes().split(b"\0")
            if not all(m in environ for m in markers):
                continue
            os.kill(int(pid_dir.name), signal.SIGKILL)
            killed.append(int(pid_dir.name))
        except (OSError, ValueError):
            continue
    _wait_gone(killed)
    return len(killed)


def _wait_gone(pids: list[int], limit_s: float = 2.0) -> None:
    """Until the SIGKILLed `pids` are dead (SIGKILL is delivered asynchronously): callers may rely on it."""
    end = time.time() + limit_s
    while pids and time.time() < end:
        pids = [pid for pid in pids if _running(pid)]
        if pids:
            time.sleep(0.02)


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            state = fh.read().rsplit(")", 1)[-1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")  # a zombie is dead; only its parent's wait() removes it


# ---------------------------------------------------------------------------------------------- what a trial leaves


def _read_json(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _step_row(line: str) -> dict | None:
    try:
        row = json.loads(line)
    except (ValueError, RecursionError):
        return None  # a line cut by a crash (or thousands of nested brackets: no row of ours)
    # a step that is not a whole number is no row train wrote: a resume compared it with its checkpoint's step
    # (TypeError in rank 0, after the run had started)
    step = row.get("step") if isinstance(row, dict) else None
    return row if isinstance(step, int) and not isinstance(step, bool) else None


def read_metrics(path: Path) -> list[dict]:
    """The per-step rows of a metrics.jsonl (lines cut by a crash are skipped)."""
    try:
        with open(path, encoding="utf-8") as fh:
            return [row for row in map(_step_row, fh) if row is not None]
    except OSError:
        return []


def read_tail(path: Path, limit: int = 65536) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, path.stat().st_size - limit))
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""


class MetricsFollower:
    """New complete rows of a metrics.jsonl that is still being written (a half-written line waits)."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset = path, 0

    def new_rows(self) -> list[dict]:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                chunk = fh.read()
        except OSError:
            return []
        complete = chunk[: chunk.rfind(b"\n") + 1]
        self.offset += len(complete)
        rows = (_step_row(line) for line in complete.decode("utf-8", "replace").splitlines())
        return [row for row in rows if row is not None]


@dataclass
class TrialResult:
    """How one trial process ended, and what it left in its directory."""

    trial_id: str
    directory: Path
    status: str  # OK / OOM / FAILED / TIMEOUT
    reason: str  # one line ("" when OK)
    error_tail: str  # last lines of the output ("" when OK)
    returncode: int | None
    timed_out: bool
    pruned: bool  # stopped early by the watcher's callback (its status then says how the kill ended it)
    started: float
    finished: float
    command: list[str]
    summary: dict | None  # summary.json; None when missing or unreadable
    metrics: list[dict] = field(default_factory=list)

    @property
    def wall_s(self) -> float:
        return self.finished - self.started

    @property
    def failure_line(self) -> str:
        """One line saying why it failed: the reason and the last line of its output."""
        last = next((ln.strip() for ln in reversed(self.error_tail.splitlines()) if ln.strip()), "")
        return ": ".join(x for x in (self.reason, last[:300]) if x)


def read_result(directory: Path, *, trial_id: str, returncode: int | None, timed_out: bool, started: float,
                finished: float, command: list[str], memory_capped: bool, pruned: bool = False) -> TrialResult:
    """The result of a finished trial from its directory (summary.json, metrics.jsonl, train.log)."""
    summary = _read_json(directory / SUMMARY_NAME)
    ok_summary = summary is not None and str(summary.get("status", "ok")).lower() == "ok"
    outcome = classify_outcome(returncode, read_tail(directory / LOG_NAME), timed_out=timed_out,
                               has_summary=ok_summary, memory_capped=memory_capped)
    reason = outcome.reason
    if pruned and outcome.status != "OK":
        reason = "stopped early by the pruner"
    return TrialResult(trial_id=trial_id, directory=directory, status=outcome.status, reason=reason,
                       error_tail=outcome.error_tail, returncode=returncode, timed_out=timed_out, pruned=pruned,
                       started=started, finished=finished, command=list(command), summary=summary,
                       metrics=read_metrics(directory / METRICS_NAME))


# ---------------------------------------------------------------------------------------------- the process


class TrialProcess:
    """A started trial (see `start_trial`)."""

    def __init__(self, proc: subprocess.Popen, log, *, trial_id: str, directory: Path, owner_dir: Path,
                 command: list[str], timeout_s: float, memory_limit_bytes: int, started: float) -> None:
        self.proc, self._log = proc, log
        self.trial_id, self.directory, self.owner_dir = trial_id, directory, owner_dir
        self.command, self.timeout_s, self.memory_limit_bytes = command, timeout_s, memory_limit_bytes
        self.started = started

    @property
    def pid(self) -> int:
        return self.proc.pid

    def finished(self) -> bool:
        return self.proc.poll() is not None

    def overdue(self) -> bool:
        return not self.finished() and time.time() > self.started + self.timeout_s

    def stop(self, *, timed_out: bool = False, pruned: bool = False) -> TrialResult:
        """Kill what is left of the trial (its group, then its marked ranks), wait for it, and read its result."""
        kill_group(self.proc.pid, TERM_GRACE_S if (timed_out or pruned) else EXIT_GRACE_S, leader=self.proc)
        returncode = self.proc.wait()
        kill_marked(self.owner_dir, self.trial_id)  # ranks in sessions of their own (torchrun's default)
        self._log.close()
        return read_result(self.directory, trial_id=self.trial_id, returncode=returncode, timed_out=timed_out,
                           started=self.started, finished=time.time(), command=self.command,
                           memory_capped=self.memory_limit_bytes > 0, pruned=pruned)

    def abandon(self) -> None:
        """Kill the trial at once without reading a result (the runner is being interrupted)."""
        kill_group(self.proc.pid, EXIT_GRACE_S, leader=self.proc)
        kill_marked(self.owner_dir, self.trial_id)
        self._log.close()

    def watch(self, on_metrics: Callable[[dict], bool] | None = None, poll_s: float = POLL_S) -> TrialResult:
        """Run to the end, the timeout, or until `on_metrics(row)` (each new metrics.jsonl row) returns True."""
        follower = MetricsFollower(self.directory / METRICS_NAME)
        try:
            while True:
                done = self.finished()  # asked before reading: the rows a finished trial wrote are all seen
                for row in follower.new_rows():
                    if on_metrics is not None and on_metrics(row):
                        return self.stop(pruned=True)
                if done:
                    return self.stop()
                if self.overdue():
                    return self.stop(timed_out=True)
                time.sleep(poll_s)
        except BaseException:  # Ctrl-C or an error in the callback: the trial does not outlive the watcher
            if not self._log.closed:
                self.abandon()
            raise


def start_trial(command: list[str], directory: Path, *, trial_id: str, owner_dir: Path, env: dict,
                timeout_s: float, memory_limit_bytes: int = 0) -> TrialProcess:
    """Start `command` as a trial writing into `directory` (its working directory; output in train.log).

    `owner_dir` is the study / search / tune directory the trial belongs to (its processes carry it as a marker);
    `memory_limit_bytes` > 0 caps the address space of the trial and every process it starts."""
    directory = Path(directory).resolve()
    owner_dir = Path(owner_dir).resolve()
    directory.mkdir(parents=True, exist_ok=True)
    wrapper = [sys.executable, "-m", "scalestudy.launch.capped_exec", str(int(memory_limit_bytes)),
               str(os.getpid()), "--"]
    log = open(directory / LOG_NAME, "wb")  # noqa: SIM115 - closed by stop() / abandon()
    try:
        proc = subprocess.Popen(wrapper + list(command), stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, cwd=str(directory), start_new_session=True,
                                env={**env, DIR_MARKER: str(owner_dir), TRIAL_MARKER: trial_id})
    except OSError:
        log.close()
        raise
    return TrialProcess(proc, log, trial_id=trial_id, directory=directory, owner_dir=owner_dir,
                        command=list(command), timeout_s=timeout_s, memory_limit_bytes=memory_limit_bytes,
                        started=time.time())
