"""Per-step metrics (DIR/metrics.jsonl, TensorBoard DIR/tb, a rich progress bar) and the final summary.

Only rank 0 writes. metrics.jsonl holds one JSON object per optimizer step, flushed as it happens; on resume
the lines after the checkpoint's step are dropped so the file continues one unbroken curve.

TensorBoard gets, besides the per-step scalars (TB_SCALARS, tags train/<key>, units as in metrics.jsonl), the
resolved run configuration as text (run/config, YAML) and, at the end, the hyperparameters with the run's results
(HPARAMS tab: one row per run, so runs of a study or search compare side by side).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from pathlib import Path
from scalestudy.atomicfile import write_text_atomic
from scalestudy.launch.process import read_metrics

METRICS = "metrics.jsonl"
SUMMARY = "summary.json"
# Keys written for every step; `scalestudy` readers (study store, report) rely on these.
STEP_KEYS = ("step", "loss", "lr", "grad_norm", "step_s", "queued_s", "tokens_per_s", "samples_per_s", "model_tflops",
             "mfu", "peak_mem_bytes", "params_bytes", "grads_bytes", "optim_bytes", "rss_bytes")
# loss nats/token, lr, grad_norm (L2), step_s and queued_s s (train.train_step), tokens/s and samples/s whole job,
# model_tflops = model TFLOP/s per rank, mfu fraction, bytes
TB_SCALARS = ("loss", "lr", "grad_norm", "step_s", "tokens_per_s", "samples_per_s", "model_tflops", "mfu",
              "peak_mem_bytes", "rss_bytes")
# summary.json keys shown as the results of a run in TensorBoard's HPARAMS tab
HPARAM_RESULTS = ("final_loss", "median_step_s", "median_tokens_per_s", "median_samples_per_s", "median_model_tflops",
                  "median_mfu", "peak_mem_bytes")


def write_json_atomic(path: Path, data) -> None:
    write_text_atomic(path, json.dumps(data, indent=2) + "\n")


class MetricsLogger:
    """Rank-0 sink for step records; a no-op object on other ranks."""

    def __init__(self, out: Path, enabled: bool, total_steps: int, start_step: int, progress: bool,
                 label: str, config: dict | None = None) -> None:
        self.enabled = enabled
        self.rows: list[dict] = []
        if not enabled:
            return
        self.out = Path(out)
        self.previous = [r for r in read_metrics(self.out / METRICS) if r["step"] <= start_step]
        # Rewrite the kept prefix atomically, then append: a resumed run continues the same file.
        tmp = self.out / (METRICS + ".tmp")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in self.previous), encoding="utf-8")
        os.replace(tmp, self.out / METRICS)
        self.file = open(self.out / METRICS, "a", encoding="utf-8")
        from torch.utils.tensorboard import SummaryWriter

        self.tb = SummaryWriter(str(self.out / "tb"), purge_step=start_step + 1)
        if config is not None:  # the resolved configuration, readable beside the curves
            self.tb.add_text("run/config", config_markdown(config), start_step)
        self.total = total_steps
        self._progress = None
        self._every = max(1, (total_steps - start_step) // 10)
        if progress and sys.stdout.isatty():
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self._progress = Progress(TextColumn(f"[bold]{label}"), BarColumn(), MofNCompleteColumn(),
                                      TextColumn("{task.fields[info]}"), TimeRemainingColumn())
            self._task = self._progress.add_task("train", total=total_steps, completed=start_step, info="")
            self._progress.start()

    def log(self, row: dict) -> None:
        if not self.enabled:
            return
        self.rows.append(row)
        self.file.write(json.dumps(row) + "\n")
        self.file.flush()
        for key in TB_SCALARS:
            if isinstance(row.get(key), (int, float)):
                self.tb.add_scalar(f"train/{key}", row[key], row["step"])
        info = f"loss {row['loss']:.4f} nats/token  {row['step_s']:.3f} s/step  {row['tokens_per_s']:.0f} tokens/s"
        if self._progress is not None:
            self._progress.update(self._task, completed=row["step"], info=info)
        elif row["step"] % self._every == 0 or row["step"] == self.total:
            print(f"step {row['step']}/{self.total}  {info}", flush=True)

    def close(self) -> None:
        if not self.enabled:
            return
        if self._progress is not None:
            self._progress.stop()
        self.file.close()
        self.tb.close()

    @property
    def all_rows(self) -> list[dict]:
        return (self.previous + self.rows) if self.enabled else []


def config_markdown(config: dict) -> str:
    """The config as a YAML block (TensorBoard renders text as Markdown; indenting by 4 keeps it verbatim)."""
    import yaml

    text = yaml.safe_dump(config, sort_keys=False, default_flow_style=False)
    return "\n".join("    " + line for line in text.splitlines())


def flat_hparams(config: dict, prefix: str = "") -> dict:
    """{'strategy/engine': 'deepspeed', 'optimizer/lr': 0.001, ...}: TensorBoard takes numbers, strings and bools
    only, so lists become text and None becomes 'none'."""
    out = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flat_hparams(value, name + "/"))
        elif isinstance(value, (bool, int, float, str)):
            out[name] = value
        else:
            out[name] = "none" if value is None else json.dumps(value)
    return out


def write_hparams(out: Path, config: dict, summary: dict) -> None:
    """The run's hyperparameters (flattened resolved config) and results (HPARAM_RESULTS, tags hparam/<key>) into
    DIR/tb, as a separate event file of the same run (the step writer is closed by then)."""
    from torch.utils.tensorboard import SummaryWriter
    from torch.utils.tensorboard.summary import hparams

    results = {f"hparam/{k}": float(summary[k]) for k in HPARAM_RESULTS if isinstance(summary.get(k), (int, float))}
    writer = SummaryWriter(str(Path(out) / "tb"))
    try:
        for summ in hparams(flat_hparams(config), results):
            writer.file_writer.add_summary(summ)
        for tag, value in results.items():
            writer.add_scalar(tag, value, summary.get("steps", 0))
    finally:
        writer.close()


def median(rows: list[dict], key: str) -> float | None:
    values = [r[key] for r in rows if isinstance(r.get(key), (int, float))]
    return statistics.median(values) if values else None


def summarize(rows: list[dict], warmup: int) -> dict:
    """Medians over this process's steps after the first `warmup` (all steps if there are no more)."""
    measured = rows[warmup:] if len(rows) > warmup else rows
    return {
        "warmup_steps_excluded": len(rows) - len(measured),
        "measured_steps": len(measured),
        "median_step_s": median(measured, "step_s"),
        # each step less its `queued_s` (run-queue wait of the most-preempted rank): the step on a machine to itself,
        # the convention of the CPU profile the cost model predicts with (engine/cpu_wait.py); None before it was kept.
        # The wait is clipped to the step: the most-preempted rank's window can start before this rank's clock does
        "median_unqueued_step_s": median([{"s": r["step_s"] - min(r["queued_s"], r["step_s"])} for r in measured
                                          if isinstance(r.get("queued_s"), (int, float))], "s"),
        "median_tokens_per_s": median(measured, "tokens_per_s"),
        "median_samples_per_s": median(measured, "samples_per_s"),
        "median_model_tflops": median(measured, "model_tflops"),
        "median_mfu": median(measured, "mfu"),
    }
