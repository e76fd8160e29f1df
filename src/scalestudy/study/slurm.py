"""Slurm executor: one sbatch job array per (nodes, GPUs per node) group, results collected from shared storage.

Each array task runs one trial: `srun torchrun --nnodes $SLURM_NNODES --nproc-per-node G --rdzv-backend c10d
--rdzv-endpoint $MASTER_ADDR:$MASTER_PORT --rdzv-id $SLURM_JOB_ID -m scalestudy.engine.train --config ...`
(one torchrun per node; every array task has its own SLURM_JOB_ID, so rendezvous never mix), wrapped in
`timeout` for the trial's limit. It writes DIR/trials/<id>/{train.log, metrics.jsonl, summary.json} and finally
`exit_code` ("RC START END", renamed into place); `collect` turns finished tasks into store rows. The study
directory must be on a filesystem every node sees.
"""

from __future__ import annotations

import math
import re
import shlex
import shutil
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from scalestudy.errors import ScalestudyError
from scalestudy.launch.process import DIR_MARKER, read_result
from scalestudy.launch.commands import CONFIG_NAME, SLURM_RENDEZVOUS, sbatch_header, torchrun_command
from scalestudy.study import slurm_jobs
from scalestudy.study.slurm_jobs import TaskState
from scalestudy.specs.run import RunConfig
from scalestudy.study.spec import StudySpec, Trial
from scalestudy.study.store import Store
from scalestudy.study.trials import train_config, trial_dir, trial_row

WORKER_CONFIG = CONFIG_NAME  # each trial's resolved RunConfig, read by every rank
EXIT_FILE = "exit_code"
TIMEOUT_RC = 124  # GNU timeout's status when the limit was hit
SUBMITTED = ["sbatch", "(job array)"]  # the command recorded for a trial of a job array


def _hms(seconds: float) -> str:
    s = int(math.ceil(seconds))
    return f"{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"


def groups(trials: list[Trial]) -> dict[tuple[int, int], list[Trial]]:
    """Trials by (nodes, GPUs per node): an array job has one shape for all its tasks."""
    out: dict[tuple[int, int], list[Trial]] = {}
    for t in trials:
        out.setdefault((t.nodes, t.nproc), []).append(t)
    return out


def uses_gpus(spec: StudySpec) -> bool:
    """Whether the job asks Slurm for GPUs: `slurm.gpus_per_node` set, or the study's device is not a CPU."""
    from scalestudy.specs.hardware import get_device

    return "gpus_per_node" in spec.slurm or get_device(spec.device).kind != "cpu"


def render_script(spec: StudySpec, out: Path, nodes: int, gpus: int, trials: list[Trial]) -> str:
    """The sbatch script of one job array (task i runs trials[i])."""
    cfg = spec.slurm
    out = out.resolve()
    limit = max(t.timeout_s for t in trials) + 300  # slack for start-up and the final write
    cuda = uses_gpus(spec)
    per_node = cfg.get("gpus_per_node", gpus) if cuda else gpus
    lines = sbatch_header(job_name=shlex.quote(f"scalestudy-{spec.name}-{nodes}n"), nodes=nodes, nproc=per_node,
                          cuda=cuda, cpus_per_task=cfg.get("cpus_per_task", 8 * gpus if cuda else gpus),
                          output=f"{out}/slurm/logs/%x-%A_%a.out",
                          extra=[f"#SBATCH --array=0-{len(trials) - 1}",
                                 f"#SBATCH --time={cfg.get('time', _hms(limit))}"])
    for key in ("partition", "account", "qos", "constraint"):
        if cfg.get(key):
            lines.append(f"#SBATCH --{key}={cfg[key]}")
    lines += [f"#SBATCH {arg}" for arg in cfg.get("sbatch_args", [])]
    ids = " ".join(t.trial_id for t in trials)
    timeouts = " ".join(str(int(math.ceil(t.timeout_s))) for t in trials)
    env = {"OMP_NUM_THREADS": "1", **spec.env, DIR_MARKER: str(out)}
    lines += [
        "set -uo pipefail",
        *[str(s) for s in cfg.get("setup", [])],
        *[f"export {k}={shlex.quote(str(v))}" for k, v in env.items()],
        f"TRIALS=({ids})",
        f"TIMEOUTS=({timeouts})",
        'TRIAL_ID="${TRIALS[$SLURM_ARRAY_TASK_ID]}"',
        f'TRIAL_DIR={shlex.quote(str(out / "trials"))}/"$TRIAL_ID"',
        'rm -f "$TRIAL_DIR/exit_code" "$TRIAL_DIR/summary.json" "$TRIAL_DIR/metrics.jsonl"',
        *SLURM_RENDEZVOUS,
        'START="$(date +%s.%N)"',
        'timeout --signal=TERM --kill-after=60 "${TIMEOUTS[$SLURM_ARRAY_TASK_ID]}" \\',
        "  srun --kill-on-bad-exit=1 " + torchrun_command('"$SLURM_NNODES"', gpus, f'"$TRIAL_DIR/{WORKER_CONFIG}"')
        + ' > "$TRIAL_DIR/train.log" 2>&1',
        "RC=$?",
        'echo "$RC $START $(date +%s.%N)" > "$TRIAL_DIR/exit_code.tmp" && mv "$TRIAL_DIR/exit_code.tmp" '
        '"$TRIAL_DIR/exit_code"',
        'exit "$RC"',
    ]
    return "\n".join(lines) + "\n"


def write_scripts(spec: StudySpec, out: Path, trials: list[Trial]) -> list[tuple[Path, list[Trial]]]:
    """Write each trial's worker config and one sbatch script per group; return (script, trials) pairs."""
    folder = out / "slurm"
    (folder / "logs").mkdir(parents=True, exist_ok=True)
    scripts = []
    for (nodes, gpus), members in groups(trials).items():
        for t in members:
            tdir = trial_dir(out, t)
            tdir.mkdir(parents=True, exist_ok=True)
            # The workers read it directly (no `scalestudy train` in between): write it resolved.
            RunConfig.from_dict(train_config(spec, t, tdir.resolve())).resolved().write_yaml(tdir / WORKER_CONFIG)
        path = folder / f"array-{nodes}n-{gpus}g.sbatch"
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(render_script(spec, out, nodes, gpus, members), encoding="utf-8")
        tmp.replace(path)
        scripts.append((path, members))
    return scripts


def print_scripts(spec: StudySpec, out: Path, todo: list[Trial], unfit: list[str], console=None) -> None:
    """Write the scripts of `todo` and print them (`study run --dry-run`); submit nothing."""
    from rich.console import Console

    console = console or Console()
    for reason in unfit:
        console.print(f"# filtered (cost model: does not fit) {reason}", highlight=False, soft_wrap=True)
    for path, members in write_scripts(spec, out, todo):
        console.print(f"# {path} ({len(members)} trials; submit with: sbatch {path})", highlight=False,
                      soft_wrap=True)  # a command stays one line (copy-paste); the terminal wraps it visually
        console.print(path.read_text(), highlight=False, markup=False, soft_wrap=True)


def _read_exit(path: Path) -> tuple[int, float, float] | None:
    try:
        rc, start, end = path.read_text().split()[:3]
        return int(rc), float(start), float(end)
    except (OSError, ValueError):
        return None


# Slurm's final states that say more than the trial's own exit code does, as trial statuses.
SLURM_STATUS = {"TIMEOUT": "TIMEOUT", "DEADLINE": "TIMEOUT", "OUT_OF_MEMORY": "OOM", "CANCELLED": "FAILED",
                "NODE_FAIL": "FAILED", "PREEMPTED": "FAILED", "BOOT_FAIL": "FAILED"}
LOST_GRACE_S = 60.0  # how long after Slurm's end time an exit file may take to show on shared storage (NFS caches)


def submitted_tasks(store: Store) -> dict[str, str]:
    """The array task ("<job>_<index>") of each trial's latest submission."""
    latest = {}
    for job in store.get_meta("slurm_jobs", []):
        for index, trial_id in enumerate(job["trials"]):
            latest[trial_id] = f"{job['job']}_{index}"
    return latest


def _task_of(row: dict) -> str:
    """The array task a stored result came from (its command reads "sbatch (job array task 12_3)")."""
    match = re.search(r"task (\d+_\d+)\)", row.get("command") or "")
    return match.group(1) if match else ""


@dataclass
class Refresh:
    """What one look at the study's Slurm jobs found."""

    recorded: set[str] = field(default_factory=set)  # trials whose result was written to the store now
    outstanding: set[str] = field(default_factory=set)  # submitted trials with no result of that submission yet
    states: dict[str, TaskState] = field(default_factory=dict)  # Slurm's state of the outstanding trials
    error: str = ""  # why Slurm could not be asked (then nothing was concluded from its silence)

    def live(self, state: str) -> int:
        return sum(s.state == state for s in self.states.values())


def _lost_result(trial: Trial, tdir: Path, state: TaskState, now: float):
    """The result of a task that ended without writing its exit code, with Slurm's word for why."""
    end = state.end or now
    result = read_result(tdir, trial_id=trial.trial_id, returncode=None, timed_out=False, started=end, finished=end,
                         command=SUBMITTED, memory_capped=trial.memory_limit_bytes > 0)
    status = SLURM_STATUS.get(state.state, "FAILED")
    return replace(result, status=status, reason=f"Slurm job {state.task} {state.detail}; it ended without "
                                                  "writing its exit code")


def _with_slurm_word(result, state: TaskState | None):
    """A failed task that Slurm cancelled, timed out or lost a node under: Slurm's state names the cause."""
    if result.status == "OK" or state is None or state.live or state.state not in SLURM_STATUS:
        return result
    if result.status == "TIMEOUT" and SLURM_STATUS[state.state] != "TIMEOUT":
        return result
    return replace(result, status=SLURM_STATUS[state.state], reason=f"Slurm job {state.task} {state.detail}; "
                                                                    f"{result.reason}")


def refresh(out: Path, store: Store, spec: StudySpec | None = None, *, grace_s: float | None = None,
            now: float | None = None) -> Refresh:
    """Record every finished array task not yet in the store (exit file, or Slurm's final word); see what runs.

    A trial is recorded only when its exit file is there, or when Slurm (squeue/sacct) says its task ended at
    least `grace_s` ago; when Slurm cannot be asked, trials without an exit file are left as they are. Safe to
    call from several processes at once (the runner and `study status`): writes are keyed by trial id.
    """
    from scalestudy.study.spec import parse_spec

    spec = spec or parse_spec(store.get_meta("spec"), "stored spec")
    grace_s = float(spec.slurm.get("lost_grace_s", LOST_GRACE_S)) if grace_s is None else grace_s
    env = store.get_meta("env", {})
    tasks = submitted_tasks(store)
    rows = {r["trial_id"]: r for r in store.trials()}
    # a trial is outstanding when its latest submission has no result yet (a stored row of an older one is stale)
    todo = [t for t in spec.trials if t.trial_id not in rows
            or (t.trial_id in tasks and _task_of(rows[t.trial_id]) not in ("", tasks[t.trial_id]))]
    found = Refresh()
    jobs: dict[str, list[str]] = {}
    submitted: dict[str, float] = {}  # task -> when its job was submitted (the clock for tasks with no end time)
    for job in store.get_meta("slurm_jobs", []):
        submitted.update({f"{job['job']}_{i}": job.get("submitted_at", 0.0) for i in range(len(job["trials"]))})
        if any(tasks.get(t.trial_id, "").startswith(f"{job['job']}_") for t in todo):
            jobs[job["job"]] = job["trials"]
    try:
        states = slurm_jobs.task_states(jobs)
    except slurm_jobs.SlurmUnavailable as exc:
        states, found.error = {}, str(exc)
    now = time.time() if now is None else now
    for trial in todo:
        tdir = trial_dir(out, trial)
        state = states.get(trial.trial_id)
        task = tasks.get(trial.trial_id, "")
        info = _read_exit(tdir / EXIT_FILE)
        if info is not None and info[0] != 0 and state is not None and state.live:
            info = None  # a failure whose task is still ending: wait for Slurm's word on why (cancelled? timed out?)
        if info is not None:
            rc, start, end = info
            result = read_result(tdir, trial_id=trial.trial_id, returncode=rc, timed_out=rc == TIMEOUT_RC,
                                 started=start, finished=end, command=SUBMITTED,
                                 memory_capped=trial.memory_limit_bytes > 0)
            result = _with_slurm_word(result, state)
        elif state is not None and state.final and now - (state.end or submitted.get(task, now)) >= grace_s:
            result = _lost_result(trial, tdir, state, now)
        else:
            if task:
                found.outstanding.add(trial.trial_id)
                if state is not None:
                    found.states[trial.trial_id] = state
            continue
        if task:
            result = replace(result, command=["sbatch", f"(job array task {task})"])
        row, metrics = trial_row(spec, trial, result, env)
        store.record_trial(row, metrics)
        found.recorded.add(trial.trial_id)
    return found


def collect(out: Path, store: Store, spec: StudySpec | None = None) -> int:
    """Record every finished array task not yet in the store; return how many were added."""
    return len(refresh(out, store, spec).recorded)


class SlurmExecutor:
    def __init__(self, spec: StudySpec, out: Path, store: Store, env: dict, console=None) -> None:
        self.spec, self.out, self.store, self.env = spec, out, store, env
        self.poll_s = float(spec.slurm.get("poll_s", 30.0))
        from rich.console import Console

        self.console = console or Console()

    def run(self, trials: list[Trial], wait: bool = True) -> None:
        if shutil.which("sbatch") is None:
            raise ScalestudyError("sbatch not found: run on a Slurm login node, or add --dry-run to write and "
                                  "print the scripts without submitting")
        self.store.set_meta("executor", "slurm")
        seen = refresh(self.out, self.store, self.spec)  # results of earlier submissions; what still runs
        if seen.error:
            raise ScalestudyError(f"cannot ask Slurm which trials still run ({seen.error}); nothing submitted")
        # queued, running, or ended so recently that its exit file may still be on its way: never submitted twice
        in_flight = seen.outstanding
        todo = [t for t in trials if t.trial_id not in in_flight and t.trial_id not in seen.recorded]
        jobs = self.store.get_meta("slurm_jobs", [])
        for script, members in write_scripts(self.spec, self.out, todo):
            for t in members:  # an exit file of an earlier submission must not pass for this one's
                (trial_dir(self.out, t) / EXIT_FILE).unlink(missing_ok=True)
            job = slurm_jobs.submit(str(script))
            jobs.append({"job": job, "script": str(script), "trials": [t.trial_id for t in members],
                         "submitted_at": time.time()})
            self.store.set_meta("slurm_jobs", jobs)
            self.console.print(f"submitted {script.name}: job array {job} ({len(members)} trials)", soft_wrap=True)
        if in_flight:
            self.console.print(f"{len(in_flight)} trial(s) of earlier submissions still queued or running: waiting")
        wanted = {t.trial_id for t in todo} | (in_flight & {t.trial_id for t in trials})
        while wait and wanted:
            time.sleep(self.poll_s)
            seen = refresh(self.out, self.store, self.spec)
            if seen.recorded:
                self.console.print(f"collected: {self.store.counts()}")
            if seen.error:
                self.console.print(f"Slurm did not answer ({seen.error}); asking again in {self.poll_s:g} s")
            wanted &= seen.outstanding
