"""Per-step metrics (DIR/metrics.jsonl, TensorBoard DIR/tb, a rich progress bar) and the final summary.

Only rank 0 writes. metrics.jsonl holds one JSON object per optimizer step, flushed as it happens; on resume
the lines after the checkpoint's step are dropped so the file continues one unbroken curve.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from pathlib import Path
from scalestudy.atomicfile import write_text_atomic

METRICS = "metrics.jsonl"
SUMMARY = "summary.json"
# Keys written for every step; `scalestudy` readers (study store, report) rely on these.
STEP_KEYS = ("step", "loss", "lr", "grad_norm", "step_s", "tokens_per_s", "samples_per_s", "model_tflops", "mfu",
             "peak_mem_bytes", "params_bytes", "grads_bytes", "optim_bytes", "rss_bytes")


def read_metrics(out: Path, up_to_step: int | None = None) -> list[dict]:
    path = Path(out) / METRICS
    if not path.is_file():
        return []
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [r for r in rows if up_to_step is None or r["step"] <= up_to_step]


def write_json_atomic(path: Path, data) -> None:
    write_text_atomic(path, json.dumps(data, indent=2) + "\n")


class MetricsLogger:
    """Rank-0 sink for step records; a no-op object on other ranks."""

    def __init__(self, out: Path, enabled: bool, total_steps: int, start_step: int, progress: bool,
                 label: str) -> None:
        self.enabled = enabled
        self.rows: list[dict] = []
        if not enabled:
            return
        self.out = Path(out)
        self.previous = read_metrics(self.out, up_to_step=start_step)
        # Rewrite the kept prefix atomically, then append: a resumed run continues the same file.
        tmp = self.out / (METRICS + ".tmp")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in self.previous), encoding="utf-8")
        os.replace(tmp, self.out / METRICS)
        self.file = open(self.out / METRICS, "a", encoding="utf-8")
        from torch.utils.tensorboard import SummaryWriter

        self.tb = SummaryWriter(str(self.out / "tb"), purge_step=start_step + 1)
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
        for key in ("loss", "lr", "grad_norm", "step_s", "tokens_per_s", "mfu", "peak_mem_bytes", "rss_bytes"):
            if isinstance(row.get(key), (int, float)):
                self.tb.add_scalar(f"train/{key}", row[key], row["step"])
        info = f"loss {row['loss']:.4f}  {row['step_s']:.3f} s/step  {row['tokens_per_s']:.0f} tokens/s"
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
        "median_tokens_per_s": median(measured, "tokens_per_s"),
        "median_samples_per_s": median(measured, "samples_per_s"),
        "median_model_tflops": median(measured, "model_tflops"),
        "median_mfu": median(measured, "mfu"),
    }
