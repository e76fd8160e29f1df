"""One trial of a study on disk: its directory, its `scalestudy train` config and command, and its store row.

Shared by the executors (local.py runs the command as a trial process, slurm.py renders it into a job array) and by
the hyperparameter search, which runs study trials too. The process itself (start, watch, kill, outcome) is
`scalestudy.launch.process`.

`command_template` (spec) replaces the trial command for any tool that follows the training contract (writes
`{output}/summary.json`, optionally `{output}/metrics.jsonl`, exits non-zero on failure). It is formatted with the
trial's fields plus `{python}`, `{output}`, `{trial_id}` and `{train_args}` (the default `scalestudy train` flags).
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from scalestudy.launch.process import TrialResult
from scalestudy.specs.presets import get_model
from scalestudy.specs.strategy import resolve_layout
from scalestudy.study.predict import predict, run_flops, trial_param_count
from scalestudy.study.spec import StudySpec, Trial, fill_command_template, template_values
from scalestudy.study.store import TRIAL_COLUMNS

TRIAL_CONFIG = "trial.yaml"


def trial_dir(out: Path, trial: Trial) -> Path:
    return out / "trials" / trial.trial_id


def train_config(spec: StudySpec, trial: Trial, output: Path) -> dict:
    """The trial as the one run configuration (`scalestudy.specs.run.RunConfig`), in its nested YAML shape."""
    return trial.run_config(data=spec.data, output=output).to_dict()


def write_train_config(spec: StudySpec, trial: Trial, output: Path) -> Path:
    return trial.run_config(data=spec.data, output=output).write_yaml(output / TRIAL_CONFIG)


def train_args(spec: StudySpec, trial: Trial, output: Path) -> list[str]:
    """Flags of `scalestudy train` for one trial: its config file (written by `write_train_config`)."""
    return ["--config", str(output / TRIAL_CONFIG), "--output", str(output), *spec.extra_args]


def trial_command(spec: StudySpec, trial: Trial, output: Path) -> list[str]:
    """The command that runs one trial on this machine."""
    args = train_args(spec, trial, output)
    if not spec.command_template:
        return [sys.executable, "-m", "scalestudy", "train", *args]
    values = template_values(trial, python=sys.executable, output=str(output), train_args=shlex.join(args))
    return fill_command_template(spec.command_template, values)  # its placeholders were checked when loaded


def _number(summary: dict, *keys: str) -> float | None:
    for key in keys:
        value = summary.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    return None


def trial_row(spec: StudySpec, trial: Trial, result: TrialResult, env: dict) -> tuple[dict, list[dict]]:
    """The store row and metrics of a finished trial: its measurement, the cost model's prediction, its outcome."""
    summary, metrics = result.summary or {}, result.metrics
    layout = resolve_layout(trial.strategy, trial.world_size, trial.global_batch)
    final_loss = _number(summary, "final_loss")
    if final_loss is None and metrics and result.status == "OK":
        final_loss = _number(metrics[-1], "loss")
    row = {
        # the store's trial columns; the strategy execution keys live in trial_json and the strategy label (a
        # column per key would need every existing store migrated)
        **{k: v for k, v in trial.to_dict().items() if k in TRIAL_COLUMNS},
        "trial_id": trial.trial_id, "study": spec.name, "status": result.status, "label": trial.label,
        "family": get_model(trial.model).family,
        "params": trial_param_count(trial) or _number(summary, "params", "num_params"),
        "strategy": trial.strategy.label, "world_size": trial.world_size, "dp": layout.dp,
        "grad_accum": layout.grad_accum, "tokens": float(trial.steps * trial.workload.tokens_per_step),
        "flops": run_flops(trial), "loss": final_loss,
        "step_s": _number(summary, "median_step_s"), "tokens_per_s": _number(summary, "median_tokens_per_s"),
        "samples_per_s": _number(summary, "median_samples_per_s"), "mfu": _number(summary, "median_mfu"),
        "peak_mem_bytes": _number(summary, "peak_mem_bytes"), "peak_rss_bytes": _number(summary, "peak_rss_bytes"),
        "memory_convention": summary.get("memory_convention"),
        **predict(trial, spec.device),
        "returncode": result.returncode, "wall_s": result.wall_s,
        "error_tail": (result.reason + "\n" + result.error_tail).strip() or None,
        "command": shlex.join(result.command), "trial_json": trial.to_dict(), "summary_json": result.summary or None,
        "env_json": {**env, "train_versions": summary.get("versions")}, "started_at": result.started,
        "finished_at": result.finished,
    }
    return row, metrics
