"""`validate`: predicted vs published. Bounds asserted are the ones the calibrated model reaches."""

from scalestudy.costmodel.published import load, summary, validation_rows


def test_published_throughput_within_bounds():
    rows = validation_rows()
    s = summary(rows)
    data = {r["id"]: r for r in load()["throughput"]}
    thr = [r for r in rows if r.kind == "throughput"]
    assert len(thr) >= 8
    # both tensor/pipeline-parallel runs and ZeRO-3 runs are covered
    assert any(data[r.id].get("tp", 1) > 1 and data[r.id].get("pp", 1) > 1 for r in thr)
    assert any(data[r.id].get("zero") == 3 for r in thr)
    assert s["throughput_mean_abs_error"] < 0.06  # requirement: < 10%
    assert s["throughput_max_abs_error"] < 0.12  # requirement: no row worse than 20%


def test_published_memory_rows_match():
    rows = [r for r in validation_rows() if r.kind == "memory"]
    assert len(rows) >= 8
    assert all(abs(r.error) < 0.005 for r in rows)  # ZeRO Table 1 is rounded to 3 significant digits


def test_every_row_names_its_source():
    sources = load()["sources"]
    for r in validation_rows():
        assert r.source and any(k in r.source for k in sources)
