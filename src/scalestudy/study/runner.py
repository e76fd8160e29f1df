"""Run a study: expand the spec, skip finished trials, run the rest, record each result as it finishes.

Each trial is a real `scalestudy train` process (which launches its ranks through torchrun) in its own process
group, with a timeout. The outcome is classified OK / OOM / FAILED / TIMEOUT (`classify.py`) and written to the
store in one transaction (`store.py`). A hung or dead trial never stops the sweep. Re-running resumes: finished
trials are skipped (unless `retry` names their status), interrupted ones re-run from scratch.

`command_template` (spec) replaces the trial command for any tool that follows the training contract (writes
`{output}/summary.json`, optionally `{output}/metrics.jsonl`, exits non-zero on failure). It is formatted with the
trial's fields plus `{python}`, `{output}`, `{trial_id}` and `{train_args}` (the default `scalestudy train` flags).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from scalestudy.errors import ScalestudyError
from scalestudy.specs.strategy import resolve_layout
from scalestudy.study import env as envinfo
from scalestudy.launch.outcome import classify_outcome
from scalestudy.study.predict import param_count, predict, run_flops
from scalestudy.study.spec import StudySpec, Trial, load_spec
from scalestudy.study.store import STATUSES, Store
from scalestudy.atomicfile import write_text_atomic

MARKER = "SCALESTUDY_STUDY_DIR"  # environment marker of every trial process (finds leftovers of a killed runner)
TRIAL_MARKER = "SCALESTUDY_TRIAL_ID"  # and of one trial (torchrun starts each rank in a session of its own)


@dataclass
class StudyRun:
    """What one `run_study` call did."""

    out: Path
    total: int
    skipped_finished: int
    ran: int = 0
    counts: dict = field(default_factory=lambda: {s: 0 for s in STATUSES})
    filtered: tuple[str, ...] = ()
    wall_s: float = 0.0


def trial_dir(out: Path, trial: Trial) -> Path:
    return out / "trials" / trial.trial_id


TRIAL_CONFIG = "trial.yaml"


def train_config(spec: StudySpec, trial: Trial, output: Path) -> dict:
    """The trial as a `scalestudy train --config` YAML mapping (TrainConfig's option names)."""
    cfg = {k: getattr(trial, k) for k in ("model", "objective", "engine", "zero", "offload_optimizer",
                                          "offload_params", "tp", "pp", "precision", "recompute", "nproc",
                                          "micro_batch", "global_batch", "seq_len", "target_len", "steps", "lr",
                                          "warmup_steps", "warmup", "seed")}
    cfg.update(nnodes=trial.nodes, data=list(spec.data), output=str(output), progress=False)
    cfg.update(trial.options())
    return cfg


def write_train_config(spec: StudySpec, trial: Trial, output: Path) -> Path:
    path = output / TRIAL_CONFIG
    return write_text_atomic(path, yaml.safe_dump(train_config(spec, trial, output), sort_keys=False))


def train_args(spec: StudySpec, trial: Trial, output: Path) -> list[str]:
    """Flags of `scalestudy train` for one trial: its config file (written by `write_train_config`)."""
    return ["--config", str(output / TRIAL_CONFIG), "--output", str(output), *spec.extra_args]


def trial_command(spec: StudySpec, trial: Trial, output: Path) -> list[str]:
    """The command that runs one trial on this machine."""
    args = train_args(spec, trial, output)
    if not spec.command_template:
        return [sys.executable, "-m", "scalestudy", "train", *args]
    values = {**trial.to_dict(), "python": sys.executable, "output": str(output), "trial_id": trial.trial_id,
              "train_args": shlex.join(args)}
    try:
        return shlex.split(spec.command_template.format(**values))
    except (KeyError, IndexError, ValueError) as exc:
        raise ScalestudyError(f"command_template: cannot fill {exc} (fields: {', '.join(sorted(values))})") from None


def _read_json(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _read_metrics(path: Path) -> list[dict]:
    rows = []
    try:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                try:
                    row = json.loads(line)
                except ValueError:
                    continue  # a line cut by a crash
                if isinstance(row, dict) and "step" in row:
                    rows.append(row)
    except OSError:
        pass
    return rows


def _read_tail(path: Path, limit: int = 65536) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, path.stat().st_size - limit))
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _f(summary: dict, *keys: str) -> float | None:
    for key in keys:
        value = summary.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    return None


def trial_row(spec: StudySpec, trial: Trial, tdir: Path, *, returncode: int | None, timed_out: bool,
              started: float, finished: float, command: list[str], env: dict) -> tuple[dict, list[dict]]:
    """The store row and metrics of a finished trial, from its directory (summary.json, metrics.jsonl, train.log)."""
    summary = _read_json(tdir / "summary.json")
    ok_summary = summary is not None and str(summary.get("status", "ok")).lower() == "ok"
    output = _read_tail(tdir / "train.log")
    outcome = classify_outcome(returncode, output, timed_out=timed_out, has_summary=ok_summary,
                       memory_capped=trial.memory_limit_bytes > 0)
    summary = summary or {}
    metrics = _read_metrics(tdir / "metrics.jsonl")
    layout = resolve_layout(trial.strategy, trial.world_size, trial.global_batch)
    from scalestudy.specs.model import get_model

    model = get_model(trial.model)
    final_loss = _f(summary, "final_loss")
    if final_loss is None and metrics and outcome.status == "OK":
        final_loss = _f(metrics[-1], "loss")
    row = {
        **trial.to_dict(),
        "trial_id": trial.trial_id, "study": spec.name, "status": outcome.status, "label": trial.label,
        "family": model.family, "params": param_count(trial) or _f(summary, "params", "num_params"),
        "strategy": trial.strategy.label, "world_size": trial.world_size, "dp": layout.dp,
        "grad_accum": layout.grad_accum, "tokens": float(trial.steps * trial.workload.tokens_per_step),
        "flops": run_flops(trial), "loss": final_loss,
        "step_s": _f(summary, "median_step_s"), "tokens_per_s": _f(summary, "median_tokens_per_s"),
        "samples_per_s": _f(summary, "median_samples_per_s"), "mfu": _f(summary, "median_mfu"),
        "peak_mem_bytes": _f(summary, "peak_mem_bytes"), "peak_rss_bytes": _f(summary, "peak_rss_bytes"),
        "memory_convention": summary.get("memory_convention"),
        **predict(trial, spec.device),
        "returncode": returncode, "wall_s": finished - started,
        "error_tail": (outcome.reason + "\n" + outcome.error_tail).strip() or None,
        "command": shlex.join(command), "trial_json": trial.to_dict(), "summary_json": summary or None,
        "env_json": {**env, "train_versions": summary.get("versions")}, "started_at": started,
        "finished_at": finished,
    }
    return row, metrics


def kill_leftovers(out: Path, trial_id: str | None = None) -> int:
    """SIGKILL the processes of this study (or of one of its trials) that are still alive: leftovers of a killed
    runner, or ranks that torchrun started in sessions of their own. They carry our environment markers."""
    markers = [f"{MARKER}={out.resolve()}".encode()]
    if trial_id:
        markers.append(f"{TRIAL_MARKER}={trial_id}".encode())
    killed = 0
    for pid_dir in Path("/proc").glob("[0-9]*"):
        try:
            if int(pid_dir.name) == os.getpid():
                continue
            environ = (pid_dir / "environ").read_bytes().split(b"\0")
            if not all(m in environ for m in markers):
                continue
            os.kill(int(pid_dir.name), signal.SIGKILL)
            killed += 1
        except (OSError, ValueError):
            continue
    return killed


def trial_env(spec: StudySpec, out: Path) -> dict:
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")  # one core per rank: ranks share the machine's cores
    if not _has_gpu():
        env.setdefault("DS_ACCELERATOR", "cpu")
    env.setdefault("TORCH_EXTENSIONS_DIR", str(Path.home() / ".cache" / "torch_extensions"))
    env.update(spec.env)
    env[MARKER] = str(out.resolve())
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _has_gpu() -> bool:
    return shutil.which("nvidia-smi") is not None and os.environ.get("CUDA_VISIBLE_DEVICES", "x") != ""


class _Lock:
    """One runner per study directory (flock: released by the kernel even when the runner is killed)."""

    def __init__(self, out: Path) -> None:
        import fcntl

        self.fh = open(out / ".runner.lock", "a+")  # noqa: SIM115 - held for the run's lifetime
        try:
            fcntl.flock(self.fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.fh.close()
            raise ScalestudyError(f"another runner is working on {out} (wait for it or kill it)") from None

    def release(self) -> None:
        self.fh.close()


def plan(spec: StudySpec, store: Store, retry: tuple[str, ...] = ()) -> tuple[list[Trial], int]:
    """Trials still to run (never finished, or finished with a status in `retry`) and how many are skipped."""
    done = {t["trial_id"]: t["status"] for t in store.trials()}
    todo = [t for t in spec.trials if t.trial_id not in done or done[t.trial_id] in retry]
    return todo, len(spec.trials) - len(todo)


def filter_unfit(spec: StudySpec, trials: list[Trial]) -> tuple[list[Trial], list[str]]:
    """With `skip_unfit`, drop trials the cost model predicts will not fit in device memory."""
    if not spec.skip_unfit:
        return trials, []
    kept, dropped = [], []
    for t in trials:
        pred = predict(t, spec.device)
        if pred.get("pred_fits") == 0:
            dropped.append(f"{t.label}: predicted {pred['pred_per_device_bytes'] / 2**30:.1f} GiB per device "
                           f"does not fit {spec.device}")
        else:
            kept.append(t)
    return kept, dropped


def open_study(spec: StudySpec, out: Path) -> Store:
    out.mkdir(parents=True, exist_ok=True)
    store = Store(out)
    previous = store.get_meta("name")
    if previous is not None and previous != spec.name:
        store.close()
        raise ScalestudyError(f"{out} holds study {previous!r}, not {spec.name!r}: choose another --output")
    store.set_meta("name", spec.name)
    store.set_meta("spec", spec.source)
    store.set_meta("device", spec.device)
    store.set_meta("trial_ids", [t.trial_id for t in spec.trials])
    return store


def run_study(spec: StudySpec | str | Path, out: str | Path, *, executor: str | None = None,
              concurrency: int | None = None, retry: tuple[str, ...] = (), dry_run: bool = False,
              progress: bool = True, console=None, wait: bool = True) -> StudyRun:
    """Run (or resume) a study into `out` (DIR/study.sqlite, DIR/trials/<trial_id>/)."""
    if not isinstance(spec, StudySpec):
        spec = load_spec(spec)
    out = Path(out).resolve()  # trial processes run in their own directory: a relative path would miss
    kind = executor or spec.executor
    bad = set(retry) - set(STATUSES)
    if bad:
        raise ScalestudyError(f"--retry takes statuses among {', '.join(STATUSES)}, got {', '.join(sorted(bad))}")
    if dry_run and kind == "slurm":
        from scalestudy.study.slurm import dry_run as slurm_dry_run

        return slurm_dry_run(spec, out, console=console)
    if dry_run:
        raise ScalestudyError("--dry-run prints the Slurm scripts: use it with --executor slurm")
    multi = [t for t in spec.trials if t.nodes > 1]
    if kind == "local" and multi:
        raise ScalestudyError(f"{len(multi)} trials need {max(t.nodes for t in multi)} nodes: the local executor runs "
                              "on one machine (use --executor slurm)")
    out.mkdir(parents=True, exist_ok=True)
    lock = _Lock(out)
    try:
        kill_leftovers(out)
        store = open_study(spec, out)
        env = envinfo.capture()
        store.set_meta("env", env)
        try:
            todo, skipped = plan(spec, store, retry)
            todo, unfit = filter_unfit(spec, todo)
            result = StudyRun(out=out, total=len(spec.trials), skipped_finished=skipped,
                              filtered=tuple(spec.skipped) + tuple(unfit))
            start = time.time()
            if kind == "slurm":
                from scalestudy.study.slurm import SlurmExecutor

                SlurmExecutor(spec, out, store, env, console=console).run(todo, wait=wait)
            else:
                from scalestudy.study.local import LocalExecutor

                LocalExecutor(spec, out, store, env, concurrency=concurrency or spec.concurrency,
                              progress=progress, console=console).run(todo)
            result.ran = len(todo)
            result.wall_s = time.time() - start
            result.counts = store.counts()
            return result
        finally:
            store.close()
    finally:
        lock.release()
