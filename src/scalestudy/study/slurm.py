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
import shlex
import shutil
import subprocess
import time
from pathlib import Path

from scalestudy.errors import ScalestudyError
from scalestudy.launch.process import DIR_MARKER, read_result
from scalestudy.study.spec import StudySpec, Trial
from scalestudy.study.store import Store
from scalestudy.study.trials import train_config, trial_dir, trial_row

WORKER_MODULE = "scalestudy.engine.train"  # the per-rank entry of `scalestudy train` (engine/launch.py)
WORKER_CONFIG = "train_config.yaml"
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


def render_script(spec: StudySpec, out: Path, nodes: int, gpus: int, trials: list[Trial]) -> str:
    """The sbatch script of one job array (task i runs trials[i])."""
    cfg = spec.slurm
    out = out.resolve()
    limit = max(t.timeout_s for t in trials) + 300  # slack for start-up and the final write
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name={shlex.quote(f'scalestudy-{spec.name}-{nodes}n')}",
        f"#SBATCH --nodes={nodes}",
        "#SBATCH --ntasks-per-node=1",
        f"#SBATCH --gpus-per-node={cfg.get('gpus_per_node', gpus)}",
        f"#SBATCH --cpus-per-task={cfg.get('cpus_per_task', 8 * gpus)}",
        f"#SBATCH --array=0-{len(trials) - 1}",
        f"#SBATCH --time={cfg.get('time', _hms(limit))}",
        f"#SBATCH --output={out}/slurm/logs/%x-%A_%a.out",
        "#SBATCH --exclusive",
    ]
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
        'TRIAL_ID=${TRIALS[$SLURM_ARRAY_TASK_ID]}',
        f'TRIAL_DIR={shlex.quote(str(out / "trials"))}/$TRIAL_ID',
        'rm -f "$TRIAL_DIR/exit_code" "$TRIAL_DIR/summary.json" "$TRIAL_DIR/metrics.jsonl"',
        'export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        'export MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000))',
        'START=$(date +%s.%N)',
        'timeout --signal=TERM --kill-after=60 "${TIMEOUTS[$SLURM_ARRAY_TASK_ID]}" \\',
        f"  srun --kill-on-bad-exit=1 torchrun --nnodes $SLURM_NNODES --nproc-per-node {gpus} \\",
        '    --rdzv-backend c10d --rdzv-endpoint $MASTER_ADDR:$MASTER_PORT --rdzv-id $SLURM_JOB_ID \\',
        f'    -m {WORKER_MODULE} --config "$TRIAL_DIR/{WORKER_CONFIG}" > "$TRIAL_DIR/train.log" 2>&1',
        "RC=$?",
        'echo "$RC $START $(date +%s.%N)" > "$TRIAL_DIR/exit_code.tmp" && mv "$TRIAL_DIR/exit_code.tmp" '
        '"$TRIAL_DIR/exit_code"',
        'exit "$RC"',
    ]
    return "\n".join(lines) + "\n"


def write_scripts(spec: StudySpec, out: Path, trials: list[Trial]) -> list[tuple[Path, list[Trial]]]:
    """Write each trial's worker config and one sbatch script per group; return (script, trials) pairs."""
    import yaml

    folder = out / "slurm"
    (folder / "logs").mkdir(parents=True, exist_ok=True)
    scripts = []
    for (nodes, gpus), members in groups(trials).items():
        for t in members:
            tdir = trial_dir(out, t)
            tdir.mkdir(parents=True, exist_ok=True)
            cfg = train_config(spec, t, tdir.resolve())
            (tdir / WORKER_CONFIG).write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
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
        console.print(f"# filtered (cost model: does not fit) {reason}", highlight=False)
    for path, members in write_scripts(spec, out, todo):
        console.print(f"# {path} ({len(members)} trials; submit with: sbatch {path})", highlight=False)
        console.print(path.read_text(), highlight=False, markup=False, soft_wrap=True)


def _read_exit(path: Path) -> tuple[int, float, float] | None:
    try:
        rc, start, end = path.read_text().split()
        return int(rc), float(start), float(end)
    except (OSError, ValueError):
        return None


def collect(out: Path, store: Store, spec: StudySpec | None = None) -> int:
    """Record every finished array task not yet in the store; return how many were added."""
    from scalestudy.study.spec import parse_spec

    spec = spec or parse_spec(store.get_meta("spec"), "stored spec")
    env = store.get_meta("env", {})
    done = store.finished_ids()
    added = 0
    for trial in spec.trials:
        tdir = trial_dir(out, trial)
        info = _read_exit(tdir / EXIT_FILE)
        if trial.trial_id in done or info is None:
            continue
        rc, start, end = info
        result = read_result(tdir, trial_id=trial.trial_id, returncode=rc, timed_out=rc == TIMEOUT_RC,
                             started=start, finished=end, command=SUBMITTED,
                             memory_capped=trial.memory_limit_bytes > 0)
        row, metrics = trial_row(spec, trial, result, env)
        store.record_trial(row, metrics)
        added += 1
    return added


def jobs_alive(job_ids: list[str]) -> bool | None:
    """Whether any of these jobs is still queued or running (None when squeue is not available)."""
    if not job_ids or shutil.which("squeue") is None:
        return None
    res = subprocess.run(["squeue", "-h", "-o", "%i", "-j", ",".join(job_ids)], capture_output=True, text=True)
    if res.returncode:  # squeue errors for ids it no longer knows
        return False
    return bool(res.stdout.strip())


def record_lost(out: Path, store: Store, spec: StudySpec, trial_ids: set[str]) -> int:
    """Trials whose job ended without writing an exit code (cancelled, node failure, Slurm time limit)."""
    lost = 0
    for trial in spec.trials:
        if trial.trial_id not in trial_ids or trial.trial_id in store.finished_ids():
            continue
        now = time.time()
        result = read_result(trial_dir(out, trial), trial_id=trial.trial_id, returncode=None, timed_out=False,
                             started=now, finished=now, command=SUBMITTED, memory_capped=trial.memory_limit_bytes > 0)
        row, metrics = trial_row(spec, trial, result, store.get_meta("env", {}))
        row["error_tail"] = ("the Slurm job ended without an exit code (cancelled, node failure or time limit)\n"
                             + (row.get("error_tail") or ""))
        row["status"] = "FAILED" if row["status"] == "OK" else row["status"]
        store.record_trial(row, metrics)
        lost += 1
    return lost


class SlurmExecutor:
    def __init__(self, spec: StudySpec, out: Path, store: Store, env: dict, console=None) -> None:
        self.spec, self.out, self.store, self.env = spec, out, store, env
        self.poll_s = float(spec.slurm.get("poll_s", 30.0))
        from rich.console import Console

        self.console = console or Console()

    def submit(self, script: Path) -> str:
        res = subprocess.run(["sbatch", "--parsable", str(script)], capture_output=True, text=True)
        if res.returncode:
            raise ScalestudyError(f"sbatch {script} failed: {res.stderr.strip().splitlines()[-1:]}")
        return res.stdout.strip().split(";")[0]

    def run(self, trials: list[Trial], wait: bool = True) -> None:
        if shutil.which("sbatch") is None:
            raise ScalestudyError("sbatch not found: run on a Slurm login node, or add --dry-run to write and "
                                  "print the scripts without submitting")
        self.store.set_meta("executor", "slurm")
        collect(self.out, self.store, self.spec)  # results of earlier submissions
        todo = [t for t in trials if t.trial_id not in self.store.finished_ids()]
        jobs = self.store.get_meta("slurm_jobs", [])
        for script, members in write_scripts(self.spec, self.out, todo):
            job = self.submit(script)
            jobs.append({"job": job, "script": str(script), "trials": [t.trial_id for t in members]})
            self.console.print(f"submitted {script.name}: job array {job} ({len(members)} trials)")
        self.store.set_meta("slurm_jobs", jobs)
        wanted = {t.trial_id for t in todo}
        submitted = [j["job"] for j in jobs if set(j["trials"]) & wanted]
        while wait and not wanted <= self.store.finished_ids():
            time.sleep(self.poll_s)
            alive = jobs_alive(submitted)  # asked before collecting: a task that ends in between is collected
            if collect(self.out, self.store, self.spec):
                self.console.print(f"collected: {self.store.counts()}")
            if alive is False:
                collect(self.out, self.store, self.spec)
                record_lost(self.out, self.store, self.spec, wanted)
