"""The README's main job, exactly as a newcomer runs it: `.venv/bin/scalestudy demo` with its default output
(./scalestudy-demo, a relative path) from a fresh working directory. Real trials (DeepSpeed ZeRO 0-3 and FSDP2 on
1-2 CPU ranks), then the report with its plots. This is also the suite's end-to-end check of real study trials
(measured and predicted columns, per-step metrics, no rank outliving its trial) and of `scalestudy report`."""

from __future__ import annotations

import math
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from _procs import alive_in
from scalestudy.study.demo import DEMO_SPEC

pytestmark = [pytest.mark.slow, pytest.mark.dist]

PLOTS = ("step_time", "throughput", "scaling_efficiency", "memory", "predicted_vs_measured", "loss_curves")




def test_readme_main_command_as_written(tmp_path, suite_builds_finished):
    scalestudy = Path(sys.executable).with_name("scalestudy")  # the console script `scripts/setup.sh` installs
    assert scalestudy.is_file(), f"{scalestudy} missing: install the package into the venv (scripts/setup.sh)"
    cwd = tmp_path / "newcomer"
    cwd.mkdir()
    # The user's environment: tests/conftest.py pins the static CPU profile for the rest of the suite, a newcomer's
    # demo measures this machine first (once; cached in ~/.cache/scalestudy) and predicts with that.
    env = {k: v for k, v in os.environ.items() if k != "SCALESTUDY_CPU_PROFILE"}
    res = subprocess.run([str(scalestudy), "demo"], cwd=cwd, capture_output=True, text=True, timeout=1500,
                         env={**env, "COLUMNS": "120"})
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    out = cwd / "scalestudy-demo"

    con = sqlite3.connect(out / "study.sqlite")
    con.row_factory = sqlite3.Row
    rows = [dict(r) for r in con.execute("SELECT * FROM trials")]
    ok = [r for r in rows if r["status"] == "OK"]
    assert len(rows) == 10 and len(ok) >= 8  # 5 strategies x 1-2 ranks, [(r["label"], r["status"], r["error_tail"]) for r in rows]
    assert {(r["engine"], r["zero"]) for r in ok} >= {("deepspeed", 3), ("fsdp", 3)}
    assert {r["world_size"] for r in ok} == {1, 2}
    for r in ok:  # measured summary, per-step metrics, predictions
        assert r["step_s"] > 0 and r["tokens_per_s"] > 0 and r["peak_mem_bytes"] > 0, r["label"]
        assert math.isfinite(r["loss"]) and r["params"] > 1e6 and r["flops"] > 0, r["label"]
        assert r["pred_step_s"] > 0 and r["pred_per_device_bytes"] > 0, r["pred_error"]
        steps = [s for (s,) in con.execute("SELECT step FROM metrics WHERE trial_id=? ORDER BY step",
                                            (r["trial_id"],))]
        assert steps == list(range(1, DEMO_SPEC["steps"] + 1)), r["label"]
        assert not (out / "trials" / r["trial_id"] / "checkpoints").exists()  # a study keeps measurements only
    con.close()
    from scalestudy.costmodel.cpu_profile import profile_path

    assert profile_path().is_file()  # the measured profile the predictions used
    assert alive_in(out) == []  # no rank outlived its trial

    plots = [p for p in (out / "plots").iterdir() if p.suffix in (".png", ".svg")]
    assert set(PLOTS) <= {p.stem for p in plots}, sorted(p.name for p in plots)
    assert all(p.stat().st_size > 1000 for p in plots)
    md = (out / "report.md").read_text()
    html = (out / "report.html").read_text()
    for name in PLOTS:  # each plot shown in the Markdown report
        assert any(f"(plots/{p.name})" in md for p in plots if p.stem == name), name
    assert html.count("<img") + html.count("<svg") >= len(PLOTS)
    assert "t5-tiny" in md
    assert "Report:" in res.stdout
