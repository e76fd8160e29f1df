"""Export store tables to CSV or Parquet, written to a temporary file and renamed (never half-written)."""

from __future__ import annotations

import csv
import os
from pathlib import Path

from scalestudy.errors import ScalestudyError
from scalestudy.outputs import check_output_file

FORMATS = (".csv", ".parquet")


def export_rows(rows: list[dict], columns: list[str], out: Path) -> Path:
    if out.suffix not in FORMATS:
        raise ScalestudyError(f"export file must end in {' or '.join(FORMATS)}, got {out.name!r}")
    check_output_file(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    try:
        _write(rows, columns, out, tmp)
    except OSError as exc:  # e.g. the disk filled up: no temp file left behind
        tmp.unlink(missing_ok=True)
        raise ScalestudyError(f"cannot write {out}: {exc.strerror or exc}") from None
    return out


def _write(rows: list[dict], columns: list[str], out: Path, tmp: Path) -> None:
    if out.suffix == ".csv":
        with open(tmp, "w", newline="", encoding="utf-8") as fh:
            writer = csv.DictWriter(fh, fieldnames=columns, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(rows)
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.table({c: pa.array([r.get(c) for r in rows]) for c in columns})
        pq.write_table(table, tmp)
    os.replace(tmp, out)
