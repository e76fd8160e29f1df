"""Study store: atomic upsert per trial, rollback journal, runs_table for the scaling fit, CSV/Parquet export."""

from __future__ import annotations

import csv
import sqlite3

import pytest

from scalestudy.errors import ScalestudyError
from scalestudy.study.store import Store


def _row(tid: str, status: str = "OK", loss: float = 3.0) -> dict:
    return {"trial_id": tid, "status": status, "model": "t5-tiny", "params": 3278592, "tokens": 3200.0,
            "flops": 1.6e10, "loss": loss if status == "OK" else None, "started_at": 1.0, "summary_json": {"a": 1}}


def test_rollback_journal_and_upsert_never_duplicates(tmp_path):
    with Store(tmp_path) as store:  # not WAL: unsafe on the network filesystems Slurm studies live on
        assert store.conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
        store.record_trial(_row("a", "FAILED"), [{"step": 1, "loss": 9.0}])
        store.record_trial(_row("a", "OK", 2.5), [{"step": 1, "loss": 9.0}, {"step": 2, "loss": 8.0}])
        store.record_trial(_row("b"), [{"step": 1, "loss": 7.0, "extra": "kept"}])
        assert store.counts() == {"OK": 2, "OOM": 0, "FAILED": 0, "TIMEOUT": 0}
        assert [m["step"] for m in store.metrics("a")] == [1, 2]
        assert '"extra": "kept"' in store.metrics("b")[0]["data"]
        assert store.trials()[0]["summary_json"] == '{"a": 1}'
    con = sqlite3.connect(tmp_path / "study.sqlite")
    assert con.execute("SELECT COUNT(*) FROM trials").fetchone()[0] == 2


def test_a_failed_write_leaves_nothing(tmp_path):
    with Store(tmp_path) as store:
        # a failure after the trial row and the first metrics row went in: the whole trial rolls back
        store.conn.execute("CREATE TRIGGER boom BEFORE INSERT ON metrics WHEN NEW.step = 99 "
                           "BEGIN SELECT RAISE(ABORT, 'disk full'); END")
        with pytest.raises(sqlite3.IntegrityError, match="disk full"):
            store.record_trial(_row("a"), [{"step": 1, "loss": 1.0}, {"step": 99, "loss": 2.0}])
        assert store.trials() == [] and store.metrics() == []
        store.record_trial(_row("a"), [{"step": 1, "loss": 1.0}])  # the connection is still usable
        assert len(store.trials()) == 1
        with pytest.raises(ScalestudyError, match="status must be one of"):
            store.record_trial(_row("b", "RUNNING"))
        with pytest.raises(ScalestudyError, match="unknown trial column"):
            store.record_trial({**_row("b"), "colour": "red"})


def test_runs_table_has_the_fit_columns(tmp_path):
    with Store(tmp_path) as store:
        store.record_trial(_row("a", "OK", 2.0))
        store.record_trial(_row("b", "OOM"))
        runs = store.runs_table()
    assert len(runs) == 1
    assert {k: runs[0][k] for k in ("params", "tokens", "flops", "loss", "model")} == {
        "params": 3278592, "tokens": 3200.0, "flops": 1.6e10, "loss": 2.0, "model": "t5-tiny"}


def test_export_csv_and_parquet(tmp_path):
    with Store(tmp_path / "s") as store:
        store.record_trial(_row("a"), [{"step": 1, "loss": 9.0}])
        store.record_trial(_row("b", "TIMEOUT"))
        out_csv = store.export(tmp_path / "t.csv")
        out_pq = store.export(tmp_path / "m.parquet", table="metrics")
        with pytest.raises(ScalestudyError, match=r"\.csv or \.parquet"):
            store.export(tmp_path / "t.xlsx")
    rows = list(csv.DictReader(open(out_csv)))
    assert [r["status"] for r in rows] == ["OK", "TIMEOUT"] and rows[0]["params"] == "3278592"
    import pyarrow.parquet as pq

    table = pq.read_table(out_pq)
    assert table.column("loss").to_pylist() == [9.0]


def test_missing_store_is_a_clear_error(tmp_path):
    with pytest.raises(ScalestudyError, match="no study store"):
        Store(tmp_path / "nothing", create=False)


def test_two_studies_parquet_exports_merge_with_one_schema(tmp_path):
    """A study whose columns are all empty (every trial FAILED, no prediction) still exports typed columns, so its
    file merges with a successful study's; booleans, integers and UTC times are what they say."""
    import datetime

    import pyarrow as pa
    import pyarrow.parquet as pq

    good = {**_row("a", "OK", 2.0), "pred_fits": 1, "peak_mem_bytes": 1.5e6, "peak_rss_bytes": 5.0e8,
            "started_at": 1796139239.5, "finished_at": 1796139300.25}
    step = {"step": 1, "loss": 9.0, "grad_norm": 2.5, "rss_bytes": 509222912, "samples_per_s": 16.0,
            "wall_time": 1796139240.0, "peak_mem_bytes": 17968244}
    with Store(tmp_path / "one") as store:
        store.record_trial(good, [step, {**step, "step": 2, "loss": 8.5}])
        store.export(tmp_path / "one.parquet")
        store.export(tmp_path / "one-metrics.parquet", table="metrics")
        store.export(tmp_path / "one.csv")
    with Store(tmp_path / "two") as store:
        store.record_trial({"trial_id": "b", "status": "FAILED", "model": "t5-tiny"})  # almost every column empty
        store.export(tmp_path / "two.parquet")
        store.export(tmp_path / "two-metrics.parquet", table="metrics")
    one, two = pq.read_table(tmp_path / "one.parquet"), pq.read_table(tmp_path / "two.parquet")
    assert one.schema == two.schema and not any(pa.types.is_null(f.type) for f in two.schema)
    types = {f.name: str(f.type) for f in one.schema}
    assert types["pred_fits"] == "bool" and types["tokens"] == types["peak_mem_bytes"] == types["params"] == "int64"
    assert types["started_at"] == "timestamp[us, tz=UTC]" and types["loss"] == "double"
    merged = pa.concat_tables([one, two])
    assert merged.num_rows == 2 and merged.column("status").to_pylist() == ["OK", "FAILED"]
    row = merged.to_pylist()[0]
    assert row["pred_fits"] is True and row["tokens"] == 3200 and row["peak_mem_bytes"] == 1_500_000
    assert row["started_at"] == datetime.datetime(2026, 12, 1, 15, 33, 59, 500000, tzinfo=datetime.timezone.utc)
    metrics = pa.concat_tables([pq.read_table(tmp_path / "one-metrics.parquet"),
                                pq.read_table(tmp_path / "two-metrics.parquet")])
    assert metrics.column("grad_norm").to_pylist() == [2.5, 2.5]
    assert metrics.column("rss_bytes").type == pa.int64() and metrics.column("rss_bytes").to_pylist()[0] == 509222912
    text = list(csv.DictReader(open(tmp_path / "one.csv")))[0]
    assert text["pred_fits"] == "true" and text["tokens"] == "3200"
    assert text["started_at"] == "2026-12-01T15:33:59.500000Z"
