"""Export store tables to CSV or Parquet, written to a temporary file and renamed (never half-written).

Every table has an explicit schema (`SCHEMAS`), the same for every study, so exports of different studies merge
(`pyarrow.concat_tables`, a Parquet dataset, `pandas.concat`) without type clashes: a column that is empty in one
study is still typed, never Arrow `null`. Types: `string`, `int64` (counts, bytes, tokens), `float64`, `bool`
(`pred_fits`), `timestamp` (UTC; Parquet `timestamp[us, tz=UTC]`, CSV ISO 8601 with `Z`). Per-step values that the
store keeps inside the metrics' JSON `data` (grad_norm, samples_per_s, rss_bytes, wall_time) are columns of their own.
"""

from __future__ import annotations

import csv
import json
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from scalestudy.errors import ScalestudyError
from scalestudy.outputs import check_output_file

FORMATS = (".csv", ".parquet")
Schema = list[tuple[str, str]]  # (column, type) with type in string | int64 | float64 | bool | timestamp

# Columns whose SQLite type says too little: counts and bytes are integers, pred_fits a boolean, times UTC.
_TRIAL_TYPES = {"tokens": "int64", "peak_mem_bytes": "int64", "peak_rss_bytes": "int64", "pred_fits": "bool",
                "pred_per_device_bytes": "int64", "pred_model_states_bytes": "int64", "memory_limit_bytes": "int64",
                "started_at": "timestamp", "finished_at": "timestamp"}
_SQL_TYPES = {"TEXT": "string", "INTEGER": "int64", "REAL": "float64"}
METRICS_SCHEMA: Schema = [
    ("trial_id", "string"), ("step", "int64"), ("loss", "float64"), ("lr", "float64"), ("step_s", "float64"),
    ("tokens_per_s", "float64"), ("samples_per_s", "float64"), ("mfu", "float64"), ("grad_norm", "float64"),
    ("peak_mem_bytes", "int64"), ("rss_bytes", "int64"), ("wall_time", "timestamp"), ("data", "string"),
]
RUNS_SCHEMA: Schema = [
    ("trial_id", "string"), ("model", "string"), ("params", "int64"), ("tokens", "int64"), ("flops", "float64"),
    ("loss", "float64"), ("engine", "string"), ("zero", "int64"), ("world_size", "int64"), ("lr", "float64"),
    ("global_batch", "int64"), ("micro_batch", "int64"), ("steps", "int64"), ("step_s", "float64"),
    ("tokens_per_s", "float64"),
]


def trials_schema(trial_columns: dict[str, str]) -> Schema:
    """The trials table's export schema from its SQL columns (store.TRIAL_COLUMNS), refined by `_TRIAL_TYPES`."""
    return [(c, _TRIAL_TYPES.get(c) or _SQL_TYPES[sql.split()[0]]) for c, sql in trial_columns.items()]


def schema_of(table: str, trial_columns: dict[str, str]) -> Schema:
    return {"trials": trials_schema(trial_columns), "metrics": METRICS_SCHEMA, "runs": RUNS_SCHEMA}[table]


def metric_rows(rows: list[dict]) -> list[dict]:
    """Store metrics rows with the per-step values kept in their JSON `data` lifted into columns."""
    out = []
    for row in rows:
        try:
            data = json.loads(row.get("data") or "{}")
        except ValueError:
            data = {}
        extra = {k: data.get(k) for k in ("grad_norm", "samples_per_s", "rss_bytes", "wall_time")}
        out.append({**extra, **row})
    return out


def _typed(value: Any, kind: str) -> Any:
    """A stored value as the schema's type (None stays None; a value that cannot be converted becomes None)."""
    if value is None or value == "":
        return None
    try:
        if kind == "string":
            return value if isinstance(value, str) else json.dumps(value)
        if kind == "int64":
            whole = int(value) if isinstance(value, int) else int(round(float(value)))
            return whole if -2**63 <= whole < 2**63 else None  # beyond int64: not a count the column can hold
        if kind == "float64":
            return float(value)
        if kind == "bool":
            return bool(int(value)) if not isinstance(value, str) else value.lower() in ("1", "true")
        if kind == "timestamp":
            return datetime.fromtimestamp(float(value), tz=timezone.utc)
    except (TypeError, ValueError, OverflowError, OSError):
        return None
    raise ValueError(f"unknown export type {kind!r}")


def _csv_text(value: Any) -> Any:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime):
        return value.isoformat(timespec="microseconds").replace("+00:00", "Z")
    return value


def export_rows(rows: list[dict], schema: Schema, out: Path) -> Path:
    if out.suffix not in FORMATS:
        raise ScalestudyError(f"export file must end in {' or '.join(FORMATS)}, got {out.name!r}")
    check_output_file(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    try:
        _write([{c: _typed(r.get(c), kind) for c, kind in schema} for r in rows], schema, out, tmp)
    except OSError as exc:  # e.g. the disk filled up: no temp file left behind
        tmp.unlink(missing_ok=True)
        raise ScalestudyError(f"cannot write {out}: {exc.strerror or exc}") from None
    return out


def _write(rows: list[dict], schema: Schema, out: Path, tmp: Path) -> None:
    columns = [c for c, _ in schema]
    if out.suffix == ".csv":
        with open(tmp, "w", newline="", encoding="utf-8") as fh:
            writer = csv.DictWriter(fh, fieldnames=columns)
            writer.writeheader()
            writer.writerows({c: _csv_text(r[c]) for c in columns} for r in rows)
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        types = {"string": pa.string(), "int64": pa.int64(), "float64": pa.float64(), "bool": pa.bool_(),
                 "timestamp": pa.timestamp("us", tz="UTC")}
        arrow = pa.schema([(c, types[kind]) for c, kind in schema])
        table = pa.table({c: pa.array([r[c] for r in rows], type=arrow.field(c).type) for c in columns},
                         schema=arrow)
        pq.write_table(table, tmp)
    os.replace(tmp, out)
