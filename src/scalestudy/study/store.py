"""The study store: one SQLite file per study (DIR/study.sqlite), crash-proof.

- Rollback journal (`journal_mode=DELETE`), `synchronous=FULL`: a committed trial survives kill -9 of the runner
  and power loss of the writer (an interrupted commit is rolled back from its journal by the next writer). Not
  WAL: SQLite documents WAL as unsafe on network filesystems (its index lives in shared memory, which NFS does
  not share between hosts), and Slurm studies live on shared storage by design. The rollback journal relies only
  on POSIX file locks (NFSv4, Lustre/GPFS with locking enabled); writers wait up to `BUSY_TIMEOUT_S` for each
  other, so the runner and `study status` on another node can both record results (keyed by trial id: the
  same result twice replaces, never duplicates). Stores written by older versions in WAL mode are converted
  when a writer opens them.
- A trial is written only when it has finished, in ONE transaction (its `trials` row and all its `metrics` rows),
  keyed by `trial_id` (PRIMARY KEY): a kill at any moment leaves either the whole result or nothing, and a re-run
  replaces instead of duplicating. Started-but-unfinished trials live only in `attempts`; they re-run.

Tables:
- `trials`: one row per finished trial. status in OK / OOM / FAILED / TIMEOUT. Columns: the trial's parameters
  (model, engine, zero, ..., world_size), `params` (parameter count), `tokens` (tokens trained = steps x global
  batch x (seq_len + target_len)), `flops` (model FLOPs of the run = costmodel training_flops x steps), `loss`
  (final), measured medians (step_s, tokens_per_s, samples_per_s, mfu), peak memory, the cost model's prediction
  (pred_*), error tail, environment, timestamps.
- `metrics`: per optimizer step (trial_id, step, loss, lr, step_s, tokens_per_s, mfu, peak_mem_bytes, data JSON).
- `meta`: key/value (spec, environment, name).
- `attempts`: one row per trial start (for `study status`: interrupted trials).

The scaling-law fit reads `Store.runs_table()`: the OK trials with `params`, `tokens`, `flops`, `loss`, `model`.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path
from typing import Any, Iterable
from urllib.parse import quote

from scalestudy.errors import ScalestudyError

STATUSES = ("OK", "OOM", "FAILED", "TIMEOUT")
STORE_NAME = "study.sqlite"
JOURNAL_MODE = "DELETE"  # shared-filesystem safe (module docstring)
BUSY_TIMEOUT_S = 120.0  # a writer waits this long for another (NFS lock round trips, a long export read)

TRIAL_COLUMNS: dict[str, str] = {
    "trial_id": "TEXT PRIMARY KEY",
    "study": "TEXT",
    "status": "TEXT NOT NULL CHECK (status IN ('OK','OOM','FAILED','TIMEOUT'))",
    "label": "TEXT",
    "model": "TEXT",
    "family": "TEXT",
    "params": "INTEGER",  # parameter count (cost model's param_count)
    "engine": "TEXT",
    "zero": "INTEGER",
    "offload_optimizer": "TEXT",
    "offload_params": "TEXT",
    "tp": "INTEGER",
    "pp": "INTEGER",
    "recompute": "TEXT",
    "precision": "TEXT",
    "strategy": "TEXT",  # Strategy.label
    "micro_batch": "INTEGER",
    "global_batch": "INTEGER",
    "nodes": "INTEGER",
    "nproc": "INTEGER",
    "world_size": "INTEGER",
    "dp": "INTEGER",
    "grad_accum": "INTEGER",
    "seq_len": "INTEGER",
    "target_len": "INTEGER",
    "objective": "TEXT",
    "lr": "REAL",
    "warmup_steps": "INTEGER",  # learning-rate warm-up
    "warmup": "INTEGER",  # timed steps excluded from the medians
    "train_options": "TEXT",  # extra `scalestudy train` options (JSON)
    "steps": "INTEGER",
    "seed": "INTEGER",
    "timeout_s": "REAL",
    "memory_limit_bytes": "INTEGER",
    "tokens": "REAL",  # tokens trained (encoder + decoder)
    "flops": "REAL",  # model FLOPs of the whole run (training_flops per step x steps)
    "loss": "REAL",  # final loss
    "step_s": "REAL",  # median seconds per optimizer step after warm-up
    "tokens_per_s": "REAL",
    "samples_per_s": "REAL",
    "mfu": "REAL",
    "peak_mem_bytes": "REAL",  # per rank, as `scalestudy train` measures it (shard bytes on CPU)
    "peak_rss_bytes": "REAL",  # process resident set size, max over ranks (CPU)
    "memory_convention": "TEXT",  # what peak_mem_bytes counts (from summary.json)
    "pred_step_s": "REAL",
    "pred_tokens_per_s": "REAL",
    "pred_per_device_bytes": "REAL",
    "pred_model_states_bytes": "REAL",  # parameters + gradients + optimizer states per device
    "pred_mfu": "REAL",
    "pred_fits": "INTEGER",
    "pred_error": "TEXT",  # why there is no prediction, if none
    "returncode": "INTEGER",
    "wall_s": "REAL",
    "error_tail": "TEXT",
    "command": "TEXT",
    "trial_json": "TEXT",  # the resolved trial
    "summary_json": "TEXT",  # train's summary.json as written
    "prediction_json": "TEXT",  # Estimate.to_dict()
    "env_json": "TEXT",  # versions, hardware
    "started_at": "REAL",  # unix seconds
    "finished_at": "REAL",
}
METRIC_COLUMNS = ("step", "loss", "lr", "step_s", "tokens_per_s", "mfu", "peak_mem_bytes")

_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS trials ({', '.join(f'{k} {v}' for k, v in TRIAL_COLUMNS.items())});
CREATE TABLE IF NOT EXISTS metrics (
  trial_id TEXT NOT NULL, step INTEGER NOT NULL, loss REAL, lr REAL, step_s REAL, tokens_per_s REAL, mfu REAL,
  peak_mem_bytes REAL, data TEXT, PRIMARY KEY (trial_id, step));
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS attempts (trial_id TEXT NOT NULL, started_at REAL NOT NULL, pid INTEGER, host TEXT);
"""


def store_path(study_dir: str | Path) -> Path:
    return Path(study_dir) / STORE_NAME


class Store:
    """A study's SQLite store. `Store(path)` takes the .sqlite file or the study directory."""

    def __init__(self, path: str | Path, *, create: bool = True, readonly: bool | None = None) -> None:
        """`create=False`: the store must exist and is opened read-only (unless `readonly=False`), so readers
        work on studies they cannot write and never modify them. An existing file that is not an intact study
        store (empty, not SQLite, corrupt, another program's database, missing columns) is refused, never written."""
        path = Path(path)
        if path.is_dir() or path.suffix != ".sqlite":
            path = store_path(path)
        readonly = not create if readonly is None else readonly
        if path.exists() and not path.is_file():
            raise ScalestudyError(f"{path} is not a file, so not a study store")
        if (readonly or not create) and not path.is_file():
            raise ScalestudyError(f"no study store at {path} (run `scalestudy study run SPEC --output DIR` first)")
        self.path = path
        new = not path.is_file()
        if not new:
            self.conn = _open_existing(path, readonly)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            # isolation_level=None: we issue BEGIN/COMMIT ourselves, so each trial is one explicit transaction.
            self.conn = sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_S, isolation_level=None)
        self.conn.row_factory = sqlite3.Row
        if not readonly:
            try:
                self.conn.execute(f"PRAGMA journal_mode={JOURNAL_MODE}")
                self.conn.execute("PRAGMA synchronous=FULL")
                self.conn.executescript(_SCHEMA)
            except sqlite3.OperationalError as exc:  # a full disk while the store is made: was a traceback
                self.conn.close()
                if new:  # no half-made store (nor its -wal / -shm / -journal) left for the next run to refuse
                    for suffix in ("", "-wal", "-shm", "-journal"):
                        path.with_name(path.name + suffix).unlink(missing_ok=True)
                raise ScalestudyError(f"cannot write the study store {path}: {exc}") from None

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- meta ---------------------------------------------------------------------------------------------------
    def set_meta(self, key: str, value: Any) -> None:
        self.conn.execute("INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value=excluded.value",
                          (key, json.dumps(value)))

    def get_meta(self, key: str, default: Any = None) -> Any:
        row = self.conn.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        if not row:
            return default
        try:
            return json.loads(row["value"])
        except (TypeError, ValueError):  # written by another program, or damaged: one line, not a traceback
            raise ScalestudyError(f"{self.path}: the store's meta value {key!r} is not JSON ({row['value']!r:.60}); "
                                  "not a store `scalestudy` wrote, or a damaged one") from None

    # -- writes -------------------------------------------------------------------------------------------------
    def record_attempt(self, trial_id: str, pid: int, host: str) -> None:
        self.conn.execute("INSERT INTO attempts(trial_id, started_at, pid, host) VALUES (?, ?, ?, ?)",
                          (trial_id, time.time(), pid, host))

    def record_trial(self, row: dict, metrics: Iterable[dict] = ()) -> None:
        """Write one finished trial and its per-step metrics atomically (replacing an earlier result)."""
        if row.get("status") not in STATUSES:
            raise ScalestudyError(f"trial status must be one of {', '.join(STATUSES)}, got {row.get('status')!r}")
        unknown = set(row) - set(TRIAL_COLUMNS)
        if unknown:
            raise ScalestudyError(f"unknown trial column(s): {', '.join(sorted(unknown))}")
        cols = list(row)
        sql = (f"INSERT INTO trials ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))}) "
               f"ON CONFLICT(trial_id) DO UPDATE SET {', '.join(f'{c}=excluded.{c}' for c in cols if c != 'trial_id')}")
        mrows = [(row["trial_id"], int(m["step"]), *(_num(m.get(c)) for c in METRIC_COLUMNS[1:]), json.dumps(m))
                 for m in metrics if "step" in m]
        cur = self.conn.cursor()
        cur.execute("BEGIN IMMEDIATE")
        try:
            cur.execute(sql, [_sql_value(row[c]) for c in cols])
            cur.execute("DELETE FROM metrics WHERE trial_id=?", (row["trial_id"],))
            cur.executemany("INSERT OR REPLACE INTO metrics VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", mrows)
            cur.execute("COMMIT")
        except BaseException:
            cur.execute("ROLLBACK")
            raise

    # -- reads --------------------------------------------------------------------------------------------------
    def finished_ids(self) -> set[str]:
        return {r[0] for r in self.conn.execute("SELECT trial_id FROM trials")}

    def trials(self, status: str | None = None) -> list[dict]:
        sql, args = "SELECT * FROM trials", ()
        if status:
            sql, args = sql + " WHERE status=?", (status,)
        return [dict(r) for r in self.conn.execute(sql + " ORDER BY started_at, trial_id", args)]

    def metrics(self, trial_id: str | None = None) -> list[dict]:
        sql, args = "SELECT * FROM metrics", ()
        if trial_id:
            sql, args = sql + " WHERE trial_id=?", (trial_id,)
        return self._rows_of_optional_table("metrics", sql + " ORDER BY trial_id, step", args)

    def attempts(self) -> list[dict]:
        return self._rows_of_optional_table("attempts", "SELECT * FROM attempts ORDER BY started_at")

    def _rows_of_optional_table(self, table: str, sql: str, args: tuple = ()) -> list[dict]:
        """Rows of a table a store opened read-only may lack (a writer creates it): none then, not a traceback."""
        if not self.conn.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (table,)).fetchone():
            return []
        return [dict(r) for r in self.conn.execute(sql, args)]

    def counts(self) -> dict[str, int]:
        counts = {s: 0 for s in STATUSES}
        for r in self.conn.execute("SELECT status, COUNT(*) FROM trials GROUP BY status"):
            counts[r[0]] = r[1]
        return counts

    def runs_table(self) -> list[dict]:
        """OK trials as rows with `params`, `tokens`, `flops`, `loss` (final), `model` (+ strategy columns).

        The scaling-law fit (`scalestudy fit STUDY_DIR`) reads this.
        """
        cols = ("trial_id", "model", "params", "tokens", "flops", "loss", "engine", "zero", "world_size", "lr",
                "global_batch", "micro_batch", "steps", "step_s", "tokens_per_s")
        rows = self.conn.execute(f"SELECT {', '.join(cols)} FROM trials WHERE status='OK' AND loss IS NOT NULL "
                                 "ORDER BY params, flops")
        return [dict(r) for r in rows]

    def export(self, out: str | Path, *, table: str = "trials") -> Path:
        """Write a table to CSV or Parquet (by suffix), atomically, with the table's fixed schema (export.py)."""
        from scalestudy.study.export import export_rows, metric_rows, schema_of

        if table not in ("trials", "metrics", "runs"):
            raise ScalestudyError(f"unknown table {table!r} (trials, metrics, runs)")
        read = {"trials": self.trials, "metrics": lambda: metric_rows(self.metrics()), "runs": self.runs_table}
        rows = read[table]()
        return export_rows(rows, schema_of(table, TRIAL_COLUMNS), Path(out))


SQLITE_HEADER = b"SQLite format 3\x00"
# Columns the readers (status, export, report, fit) and the runner rely on: a store without them is refused.
REQUIRED_TRIAL_COLUMNS = ("trial_id", "status", "label", "model", "params", "tokens", "flops", "loss", "engine",
                          "zero", "world_size", "steps", "step_s", "tokens_per_s", "error_tail", "started_at")


def _is_wal(path: Path) -> bool:
    with open(path, "rb") as fh:
        fh.seek(18)
        return fh.read(1) == b"\x02"


def _wal_has_frames(wal: Path) -> bool:
    """Whether a -wal file holds at least one frame SQLite would replay: a header whose magic and checksum hold and a
    first frame of the same salts whose cumulative checksum holds (sqlite.org/fileformat2.html#walformat). A -wal
    without one (empty, torn, another program's bytes) adds nothing to the database: reading it as immutable gives
    what SQLite's recovery would, without making the -shm a read-only reader cannot remove."""
    import struct

    try:
        with open(wal, "rb") as fh:
            head = fh.read(32)
            if len(head) < 32:
                return False
            magic, _version, page_size = struct.unpack(">III", head[:12])
            if magic not in (0x377F0682, 0x377F0683):
                return False
            order = ">" if magic & 1 else "<"
            sums = _wal_checksum(head[:24], order, (0, 0))
            if sums != struct.unpack(">II", head[24:32]):
                return False
            frame = fh.read(24 + page_size)
    except OSError:
        return False
    if len(frame) < 24 + page_size or frame[8:16] != head[16:24]:
        return False
    sums = _wal_checksum(frame[24:], order, _wal_checksum(frame[:8], order, sums))
    return sums == struct.unpack(">II", frame[16:24])


def _wal_checksum(data: bytes, order: str, sums: tuple[int, int]) -> tuple[int, int]:
    """SQLite's WAL checksum: 32-bit words in pairs, s0 += x0 + s1, s1 += x1 + s0 (mod 2^32)."""
    import struct

    s0, s1 = sums
    words = struct.unpack(f"{order}{len(data) // 4}I", data)
    for x0, x1 in zip(words[0::2], words[1::2]):
        s0 = (s0 + x0 + s1) & 0xFFFFFFFF
        s1 = (s1 + x1 + s0) & 0xFFFFFFFF
    return s0, s1


def _roll_back_interrupted_commit(path: Path) -> None:
    """A writer killed mid-commit leaves a hot rollback journal (DIR/study.sqlite-journal), which a read-only
    connection cannot roll back ("attempt to write a readonly database"). Roll it back first where we may: that only
    restores the last committed state, all any reader sees anyway. SQLite decides whether the journal is hot (a live
    writer's journal is not: it holds the lock), so this never undoes a commit in progress."""
    journal = Path(f"{path}-journal")
    if not journal.is_file() or journal.stat().st_size == 0:
        return
    if not (os.access(path, os.W_OK) and os.access(path.parent, os.W_OK | os.X_OK)):
        raise ScalestudyError(f"{path}: a commit was interrupted ({journal.name} is left) and rolling it back needs "
                              "write access; run this once with write access (or resume with `study run`)")
    conn = sqlite3.connect(f"file:{quote(str(path.resolve()))}?mode=rw", uri=True, timeout=BUSY_TIMEOUT_S)
    try:
        conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()  # the first read rolls a hot journal back
    except sqlite3.DatabaseError:
        pass  # reported, in one line, by the checks of the read-only open that follows
    finally:
        conn.close()


def _open_existing(path: Path, readonly: bool) -> sqlite3.Connection:
    """Connect to an existing store after checking it is one; ScalestudyError (one line) otherwise."""
    with open(path, "rb") as fh:
        head = fh.read(len(SQLITE_HEADER))
    if not head:
        raise ScalestudyError(f"{path} is an empty file, not a study store")
    if head != SQLITE_HEADER:
        raise ScalestudyError(f"{path} is not a study store (not an SQLite database)")
    if readonly:
        _roll_back_interrupted_commit(path)
    uri = f"file:{quote(str(path.resolve()))}?mode={'ro' if readonly else 'rw'}"
    # Byte 18 of the header is 2 for a WAL-mode database; rollback-journal stores (this version's) are read with
    # plain shared locks, never as immutable: a writer may commit while we read.
    wal, shm = Path(f"{path}-wal"), Path(f"{path}-shm")
    # SQLite opens any store with a -wal beside it in WAL mode, whatever byte 18 says: a stray -wal beside a
    # rollback-journal store made `study status` / `report` leave a -shm there
    if readonly and (_is_wal(path) or wal.exists()) and (not wal.exists() or not shm.exists()
                                                          and not _wal_has_frames(wal)):
        # No -wal file: no writer has the store open (WAL keeps it while any connection is open). Reading it as
        # immutable creates no -wal/-shm beside it (a plain read-only WAL open would) and works in a directory the
        # user cannot write. A runner starting meanwhile only appends to its WAL; it checkpoints into this file
        # after ~1000 pages or at exit, far beyond the milliseconds a read takes. Likewise a -wal without a -shm
        # (no live writer: WAL writers share the -shm) that holds no frame SQLite would replay.
        uri += "&immutable=1"
    made_shm = readonly and not shm.exists()
    conn = None
    try:
        conn = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        check = conn.execute("PRAGMA quick_check").fetchone()[0]
        if check != "ok":
            raise sqlite3.DatabaseError(check)
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        columns = {r[1] for r in conn.execute("PRAGMA table_info(trials)")}
    except sqlite3.DatabaseError as exc:
        _refused(conn, shm if made_shm else None)
        raise ScalestudyError(f"{path} is corrupt or unreadable, not a usable study store "
                              f"({str(exc).splitlines()[0]})") from None
    if "trials" not in tables or "meta" not in tables:
        _refused(conn, shm if made_shm else None)
        found = f"its tables: {', '.join(sorted(tables))}" if tables else "it holds no tables"
        raise ScalestudyError(f"{path} is not a study store ({found})")
    missing = [c for c in REQUIRED_TRIAL_COLUMNS if c not in columns]
    if missing:
        _refused(conn, shm if made_shm else None)
        raise ScalestudyError(f"{path}: the trials table lacks column(s) {', '.join(missing)}; not a study store "
                              "this version can use")
    return conn


def _refused(conn: sqlite3.Connection | None, made_shm: Path | None) -> None:
    """Close a refused store's connection and remove the -shm its read-only WAL open made (a -wal of replayable
    frames, no -shm: no live writer had the store open), so that the one-line refusal leaves nothing behind."""
    if conn is not None:
        conn.close()
    if made_shm is not None:
        made_shm.unlink(missing_ok=True)


def _num(v: Any) -> float | None:
    try:
        return None if v is None else float(v)
    except (TypeError, ValueError):
        return None


def _sql_value(v: Any) -> Any:
    if isinstance(v, (dict, list, tuple)):
        return json.dumps(v)
    if isinstance(v, bool):
        return int(v)
    return v
