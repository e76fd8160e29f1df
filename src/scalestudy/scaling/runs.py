"""Runs: the table a scaling-law fit reads (one row per finished training run).

Columns: params N (parameters), tokens D (training tokens), flops C (training FLOPs, as given by the source:
for encoder-decoder studies these come from the cost model, `scalestudy.costmodel.flops.training_flops`),
loss (final training or validation loss, nats/token), optional model name, and any other numeric metrics
(kept for jump detection). Sources: a CSV file, a study directory (DIR/study.sqlite), or a list of dicts.
"""

from __future__ import annotations

import csv
import math
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from scalestudy.errors import ScalestudyError

CORE = ("params", "tokens", "flops", "loss")
# Column names other tools use for the same quantity (the study store's schema is owned elsewhere).
ALIASES = {
    "params": ("params", "params_total", "n_params", "num_params", "param_count", "N"),
    "tokens": ("tokens", "tokens_trained", "train_tokens", "tokens_seen", "n_tokens", "D"),
    "flops": ("flops", "train_flops", "training_flops", "total_flops", "model_flops", "C"),
    "loss": ("loss", "final_loss", "eval_loss", "val_loss", "L"),
    "model": ("model", "model_name", "name"),
}
# Configuration and systems columns of a study's runs: not scaling metrics (kept out of `Runs.metrics`).
BOOKKEEPING = {"trial_id", "engine", "zero", "world_size", "lr", "global_batch", "micro_batch", "steps", "seed",
               "nproc", "nodes", "tp", "pp", "dp", "grad_accum", "seq_len", "target_len", "step_s", "tokens_per_s",
               "samples_per_s", "mfu", "warmup_steps"}


@dataclass
class Runs:
    """Column arrays (float64); a column absent from the source is None."""

    params: np.ndarray | None
    tokens: np.ndarray | None
    flops: np.ndarray | None
    loss: np.ndarray
    model: list[str] = field(default_factory=list)
    metrics: dict[str, np.ndarray] = field(default_factory=dict)  # extra numeric columns
    source: str = "rows"

    def __len__(self) -> int:
        return len(self.loss)

    def take(self, idx: np.ndarray) -> Runs:
        """A subset (or bootstrap resample) of rows."""
        def sub(a):
            return None if a is None else a[idx]
        return Runs(sub(self.params), sub(self.tokens), sub(self.flops), self.loss[idx],
                    [self.model[i] for i in idx] if self.model else [],
                    {k: v[idx] for k, v in self.metrics.items()}, self.source)

    def require(self, *columns: str) -> None:
        """Raise a one-line error naming the first missing, non-finite or non-positive required column."""
        for col in columns:
            values = getattr(self, col)
            if values is None:
                raise ScalestudyError(f"{self.source}: missing column {col!r} (need {', '.join(columns)})")
            bad = ~np.isfinite(values)
            if bad.any():
                row = int(np.argmax(bad)) + 1
                raise ScalestudyError(f"{self.source}: column {col!r} has a NaN or infinite value (row {row})")
            if (values <= 0).any():
                row = int(np.argmax(values <= 0)) + 1
                raise ScalestudyError(
                    f"{self.source}: column {col!r} must be positive, got {values[row - 1]:g} (row {row})")

    def with_flops(self, flops_per_param_token: float) -> Runs:
        """Fill a missing flops column as k*N*D (C = 6ND for decoder-only training, Kaplan et al. 2020)."""
        if self.flops is not None or self.params is None or self.tokens is None:
            return self
        return Runs(self.params, self.tokens, flops_per_param_token * self.params * self.tokens, self.loss,
                    self.model, self.metrics, self.source)


def _number(value, col: str, row: int, source: str) -> float:
    if value is None or (isinstance(value, str) and value.strip() == ""):
        return math.nan
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ScalestudyError(f"{source}: column {col!r} row {row}: {value!r} is not a number") from None


def runs_from_rows(rows: list[dict], source: str = "rows") -> Runs:
    """Build Runs from dicts; keys may use the aliases in ALIASES. Non-core numeric keys become metrics."""
    if not rows:
        raise ScalestudyError(f"{source}: no runs to fit")
    keys = list(dict.fromkeys(k for r in rows for k in r))
    resolved = {}
    for col, names in ALIASES.items():
        hit = next((k for k in names if k in keys), None)
        if hit is not None:
            resolved[col] = hit
    if "loss" not in resolved:
        raise ScalestudyError(f"{source}: missing column 'loss' (columns: {', '.join(map(str, keys)) or 'none'})")
    cols = {}
    for col in CORE:
        if col in resolved:
            cols[col] = np.array([_number(r.get(resolved[col]), col, i + 1, source) for i, r in enumerate(rows)])
        else:
            cols[col] = None
    model = [str(r.get(resolved["model"], "")) for r in rows] if "model" in resolved else []
    metrics = {}
    for k in keys:
        if k in resolved.values() or k in BOOKKEEPING:
            continue
        try:
            metrics[k] = np.array([float(r.get(k)) if r.get(k) not in (None, "") else math.nan for r in rows])
        except (TypeError, ValueError):
            continue  # non-numeric column (strategy label, status, ...)
    return Runs(cols["params"], cols["tokens"], cols["flops"], cols["loss"], model, metrics, source)


def read_csv(path: Path) -> Runs:
    try:  # utf-8-sig: a spreadsheet's CSV starts with a byte-order mark, which would stick to the first column's name
        with path.open(newline="", encoding="utf-8-sig") as f:
            reader = csv.DictReader(f)
            rows = list(reader)
            names = [n.strip() for n in reader.fieldnames or []]  # None for an empty file
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise ScalestudyError(f"cannot read {path}: {exc}") from None
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:  # DictReader keeps the last of a name's columns: the fit would read one of them silently
        raise ScalestudyError(f"{path}: column {twice[0]!r} appears {names.count(twice[0])} times in the header: "
                              "keep one")
    return runs_from_rows(rows, source=str(path))


def read_study(study_dir: Path) -> Runs:
    """Finished (status OK) trials of a study store DIR/study.sqlite, through `Store.runs_table()`."""
    from scalestudy.study.store import Store, store_path

    if not store_path(study_dir).is_file():
        raise ScalestudyError(f"{study_dir}: no study store (expected {store_path(study_dir)})")
    try:
        with Store(study_dir, create=False) as store:
            rows = store.runs_table()
    except sqlite3.Error as exc:
        raise ScalestudyError(f"{store_path(study_dir)}: cannot read the study store: {exc}") from None
    if not rows:
        raise ScalestudyError(f"{store_path(study_dir)}: no finished (status OK) trials with a loss to fit")
    rows = [{k: v for k, v in r.items() if k not in BOOKKEEPING} for r in rows]
    return runs_from_rows(rows, source=str(store_path(study_dir)))


def load_runs(source: str | Path | list[dict] | Runs) -> Runs:
    """Runs from a CSV path, a study directory, a list of row dicts, or Runs (returned as is)."""
    if isinstance(source, Runs):
        return source
    if isinstance(source, list):
        return runs_from_rows(source)
    path = Path(source)
    if path.is_dir():
        return read_study(path)
    if not path.exists():
        from scalestudy.yamlfile import repo_hint

        raise ScalestudyError(f"no such file or study directory: {path}{repo_hint(path)}")
    if path.suffix.lower() != ".csv":
        raise ScalestudyError(f"{path}: expected a runs .csv file or a study directory")
    if not path.is_file():  # a FIFO or /dev/zero: the read never ends
        raise ScalestudyError(f"{path}: not a regular file (a FIFO or a device); a runs CSV is a file")
    return read_csv(path)
