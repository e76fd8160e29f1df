"""Report from a store with known numbers: findings state the right percentages; plots and files are written."""

from __future__ import annotations

import json
import re

import pytest

from scalestudy.errors import ScalestudyError
from scalestudy.report.findings import findings
from scalestudy.report.render import write_report
from scalestudy.report.table import load
from scalestudy.study.spec import parse_spec
from scalestudy.study.store import Store

# t5-tiny; seconds per step by (strategy, ranks) and measured shard bytes
STEP_S = {("deepspeed", 2, 1): 0.40, ("deepspeed", 3, 1): 0.50, ("deepspeed", 2, 2): 0.30, ("deepspeed", 3, 2): 0.354,
          ("fsdp", 3, 1): 0.45, ("fsdp", 3, 2): 0.60}
MEM = {2: 40e6, 3: 20e6}


def build_store(directory, *, with_failures: bool = True) -> Store:
    spec = parse_spec({"name": "synthetic", "model": "t5-tiny", "nproc": [1, 2], "global_batch": 8, "steps": 4,
                       "warmup": 1, "strategies": [{"engine": "deepspeed", "zero": [2, 3]},
                                                   {"engine": "fsdp", "zero": 3}]})
    store = Store(directory)
    store.set_meta("name", spec.name)
    store.set_meta("trial_ids", [t.trial_id for t in spec.trials])
    tokens_per_step = 8 * (64 + 16)
    for i, t in enumerate(spec.trials):
        step_s = STEP_S[(t.engine, t.zero, t.nproc)]
        failed = with_failures and t.engine == "fsdp" and t.nproc == 2
        row = {**t.to_dict(), "trial_id": t.trial_id, "study": spec.name, "label": t.label, "params": 3278592,
               "strategy": t.strategy.label, "world_size": t.world_size, "tokens": 4.0 * tokens_per_step,
               "flops": 1e12, "started_at": float(i), "finished_at": i + 1.0, "wall_s": 1.0,
               "trial_json": t.to_dict()}
        if failed:
            row.update(status="OOM", error_tail="ran out of memory\nRuntimeError: out of memory: DefaultCPUAllocator")
            store.record_trial(row)
            continue
        row.update(status="OK", step_s=step_s, tokens_per_s=tokens_per_step / step_s, loss=7.0 - t.nproc * 0.1,
                   peak_mem_bytes=MEM[t.zero] / t.nproc, pred_step_s=step_s * 1.1,
                   pred_model_states_bytes=MEM[t.zero] / t.nproc * 0.9, pred_per_device_bytes=5e8,
                   memory_convention="bytes of this rank's parameter + gradient + optimizer-state storages")
        store.record_trial(row, [{"step": s, "loss": 9.0 - s, "lr": 1e-3, "step_s": step_s} for s in range(1, 5)])
    return store


def test_findings_carry_the_numbers(tmp_path):
    build_store(tmp_path).close()
    lines = findings(load(tmp_path))
    text = "\n".join(lines)
    # 0.50 / 0.40 - 1 = 25% at 1 rank; 0.354 / 0.30 - 1 = 18% at 2 ranks
    assert "ZeRO-2 is 25% faster than ZeRO-3 at 1 rank for t5-tiny (0.4 vs 0.5 s/step)" in text
    assert "ZeRO-2 is 18% faster than ZeRO-3 at 2 ranks for t5-tiny (0.3 vs 0.354 s/step)" in text
    # throughput 1 -> 2 ranks for ds-z2: 0.40/0.30 = 1.33x, efficiency 1.33/2 = 67%
    assert re.search(r"ds-z2: 1 rank -> 2 ranks changes throughput 1\.33x .* scaling efficiency 67%", text)
    # rates as the trials table prints them (640 / 0.40 = 1,600 tokens/s), not .4g's '1600' beside '989.3'
    assert "changes throughput 1.33x (1,600 -> 2,133 tokens/s)" in text
    # memory: ZeRO-3 10 MB vs ZeRO-2 20 MB at 2 ranks -> 50% less
    assert "ds-z3 needs 50% less memory per rank than ds-z2" in text
    # predictions were 10% high (time) and 10% low (memory): median errors say so
    assert "step time: median |error| 10%" in text and "median signed error +10%" in text
    assert "memory per rank: median |error| 10%" in text
    # identical synthetic curves for every strategy at a world size
    assert "Loss curves of 3 strategies (ds-z2, ds-z3, fsdp-z3) for t5-tiny at 1 rank (same data" in text
    assert "differ by at most 0 nats/token over 4 steps" in text
    assert "after 4 steps (2,560 tokens)." in text  # a count as a plain number, not .3g's '2.56e+03'
    assert "OOM: t5-tiny fsdp-z3 ws2" in text and "6 of 6 planned trials finished (OK 5, OOM 1)" in text


def test_report_files_and_units(tmp_path):
    build_store(tmp_path).close()
    paths = write_report(tmp_path)
    names = sorted(p.name for p in paths["plots"])
    assert names == sorted(["step_time.png", "throughput.png", "scaling_efficiency.png", "memory.png",
                            "predicted_vs_measured.png", "loss_curves.png"])
    for p in paths["plots"]:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 5000
        import matplotlib.image

        assert matplotlib.image.imread(p).shape[1] >= 1000  # 2x: 5-inch panels at 200 dpi
    for svg in paths["svgs"]:
        assert svg.read_text().lstrip().startswith("<?xml") and "<svg" in svg.read_text()
    page = paths["html"].read_text()
    assert page.count('src="data:image/svg+xml;base64,') == 6  # self-contained, vector
    # alt text says what each plot shows, with its numbers (not a file name)
    alts = re.findall(r'<img alt="([^"]+)"', page)
    assert len(alts) == 6 and not any(a.endswith((".png", ".svg")) for a in alts)
    assert any(a.startswith("Line chart of seconds per optimizer step against world size") and "ds-z2" in a
               for a in alts)
    assert any("Scatter plots, log axes" in a and "median error 10%" in a for a in alts)
    # numeric columns right-aligned in both formats; text columns not
    assert '<td class="num">' in page and "<td>t5-tiny</td>" in page
    assert "|---|---|---:|---:|" in paths["md"].read_text()
    assert "<h2>Failures</h2>" in page and "DefaultCPUAllocator" in page
    md = paths["md"].read_text()
    assert re.search(r"!\[Bar chart of peak memory per rank \(MiB\)[^\]]*\]\(plots/memory\.png\)", md)
    assert "s/step (median)" in md and "(MiB)" in md and "nats/token" in md
    # one model size, one compute budget: one line saying why, no empty "Scaling laws" heading
    assert "## Scaling laws" not in md and "<h2>Scaling laws</h2>" not in page
    assert re.search(r"No scaling-law section: compute law needs runs at 3 or more distinct compute budgets", md)


def test_report_of_empty_study_is_a_clear_error(tmp_path):
    Store(tmp_path).close()
    with pytest.raises(ScalestudyError, match="no finished trial"):
        write_report(tmp_path)
    with pytest.raises(ScalestudyError, match="no study store"):
        write_report(tmp_path / "missing")


def test_scaling_section_says_why_it_is_missing(tmp_path, monkeypatch):
    import scalestudy.report.render as render
    from scalestudy.report.render import scaling_section

    def refuses(source, plots_dir=None):
        raise ScalestudyError("chinchilla law needs runs at 2 or more model sizes")

    monkeypatch.setattr(render, "report_section", refuses)
    md, page = scaling_section(tmp_path)
    assert md == "_No scaling-law section: chinchilla law needs runs at 2 or more model sizes._"
    assert "No scaling-law section: chinchilla law" in page


def test_large_speed_ratios_read_as_multiples():
    from scalestudy.report.findings import _faster, _slower

    assert _faster(0.1, 0.342) == "3.4x faster"  # not "242% faster"
    assert _faster(0.4, 0.5) == "25% faster" and _faster(1.0, 2.0) == "2x faster"
    assert _slower(0.1, 0.25) == "2.5x slower"


def test_coinciding_loss_curves_are_drawn_once_and_named_together():
    from scalestudy.report.plots import _loss_label, coinciding, style

    same = {s: 9.0 - s * 0.3 for s in range(1, 11)}
    curves = {f"ds-z{z} ws1": dict(same) for z in range(4)}
    curves["ddp ws1"] = {s: v + 0.5 for s, v in same.items()}
    groups = coinciding(curves, tol=1e-3)
    assert groups == [["ds-z0 ws1", "ds-z1 ws1", "ds-z2 ws1", "ds-z3 ws1"], ["ddp ws1"]]
    assert _loss_label(groups[0]) == "ws1: ds-z0, ds-z1, ds-z2, ds-z3 (4 coincide)"
    # every series differs in colour, marker and dash from its neighbour
    a, b = style(0, 5), style(1, 5)
    assert a["color"] != b["color"] and a["marker"] != b["marker"] and a["linestyle"] != b["linestyle"]
    assert a["markersize"] > b["markersize"]  # the one drawn later, on top, is smaller: both stay visible


def test_log_axis_labels_do_not_run_together():
    from scalestudy.report.plots import _plt, log_ticks

    plt = _plt()
    fig, ax = plt.subplots(figsize=(5, 4.5))
    ax.set_xscale("log")
    ax.set_xlim(0.035, 0.6)  # 1.2 decades: matplotlib's default labels many minor ticks here
    log_ticks(ax.xaxis, 0.035, 0.6)
    fig.canvas.draw()
    labels = [t for t in ax.get_xticklabels(which="both") if t.get_text() and 0.035 <= t.get_position()[0] <= 0.6]
    boxes = sorted((t.get_window_extent().x0, t.get_window_extent().x1) for t in labels)
    assert [t.get_text() for t in sorted(labels, key=lambda t: t.get_position()[0])] == ["0.05", "0.1", "0.2", "0.5"]
    assert all(right < next_left for (_, right), (next_left, _) in zip(boxes, boxes[1:]))  # no overlap
    plt.close(fig)


# Damage a whole store's rows the way other tools, hand edits or a half-written row leave them: (column, value).
DAMAGE = [("strategy", None), ("step_s", "fast"), ("tokens_per_s", 0), ("peak_mem_bytes", -5.0),
          ("step_s", float("inf")), ("lr", "high"), ("world_size", "two"), ("label", None), ("steps", None),
          ("tokens", None), ("model", 5), ("wall_s", None), ("pred_step_s", b"\x00"), ("loss", None)]


def test_a_store_whose_rows_lack_fields_is_reported_with_its_gaps_said(tmp_path, capsys):
    """No traceback: unusable values show as '-', trials that cannot be placed are left out and named, both said
    in the report and on the terminal; a store with nothing placeable is one line, exit 2."""
    import sqlite3

    from scalestudy.cli import main

    build_store(tmp_path).close()
    with sqlite3.connect(tmp_path / "study.sqlite") as conn:
        ids = [r[0] for r in conn.execute("SELECT trial_id FROM trials ORDER BY trial_id")]
        for i, trial in enumerate(ids):  # two damages per row, every damage somewhere
            for column, value in (DAMAGE[i % len(DAMAGE)], DAMAGE[(i + len(ids)) % len(DAMAGE)]):
                conn.execute(f"UPDATE trials SET {column}=? WHERE trial_id=?", (value, trial))
        conn.execute("UPDATE metrics SET loss='nan?' WHERE step=2")
        conn.execute("INSERT OR REPLACE INTO meta VALUES ('env', '\"not a mapping\"'), ('trial_ids', '7')")
    with pytest.raises(SystemExit) as exc:
        main(["report", str(tmp_path)])
    out, err = capsys.readouterr()
    assert exc.value.code in (0, None) and "Traceback" not in out + err, err
    text = (tmp_path / "report.md").read_text()
    assert "left out of the tables and plots: the store gives no strategy/world_size" in text
    with pytest.raises(SystemExit) as exc:  # `study status` lists the same rows: '-' where a value is unusable
        main(["study", "status", str(tmp_path)])
    status_out, status_err = capsys.readouterr()
    assert exc.value.code in (0, None) and "Traceback" not in status_out + status_err, status_err
    assert "not usable numbers and show as '-'" in text and "step_s of" in text and "note: " in out
    # finite but absurd values (1e308 s/step): the plots matplotlib cannot draw are left out and named
    with sqlite3.connect(tmp_path / "study.sqlite") as conn:
        conn.execute("UPDATE trials SET step_s=1e308, tokens_per_s=1e-308, peak_mem_bytes=1e308")
    with pytest.raises(SystemExit) as exc:
        main(["report", str(tmp_path)])
    out, err = capsys.readouterr()
    assert exc.value.code in (0, None) and "Traceback" not in out + err, err
    assert "Plots left out (the stored values could not be drawn): step_time" in (tmp_path / "report.md").read_text()
    # nothing placeable (every OK trial without a strategy, no failure to show): one line naming the field
    (tmp_path / "bare").mkdir()
    build_store(tmp_path / "bare", with_failures=False).close()
    with sqlite3.connect(tmp_path / "bare" / "study.sqlite") as conn:
        conn.execute("UPDATE trials SET strategy=NULL")
    with pytest.raises(SystemExit) as exc:
        main(["report", str(tmp_path / "bare")])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and len(err.strip().splitlines()) == 1 and "lacks strategy" in err, err
    # a meta value that is not JSON (another program's row): one line too
    with sqlite3.connect(tmp_path / "bare" / "study.sqlite") as conn:
        conn.execute("INSERT OR REPLACE INTO meta VALUES ('name', 'not json')")
    with pytest.raises(SystemExit) as exc:
        main(["report", str(tmp_path / "bare")])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "meta value 'name' is not JSON" in err and "Traceback" not in err, err


def test_plot_extremes_count_ranks_in_the_singular_at_one_rank():
    from scalestudy.report.plots import _extremes

    one = _extremes("t5-tiny", {"ds-z0": {1: 1390.0}, "fsdp-z3": {1: 941.0}})
    assert one == "t5-tiny at 1 rank: highest ds-z0 (1,390), lowest fsdp-z3 (941)"  # not 1.39e+03: read aloud
    assert _extremes("t5-tiny", {"ds-z0": {1: 5.0, 2: 9.0}}).startswith("t5-tiny at 2 ranks:")


def test_step_time_error_against_the_steps_less_their_run_queue_wait(tmp_path):
    # predictions 10% above the wall-clock steps; each trial's summary says its steps less their run-queue wait were
    # 0.8x the wall-clock ones: the prediction is 1.1 / 0.8 - 1 = 37.5% above those
    store = build_store(tmp_path, with_failures=False)
    for t in store.trials():
        summary = {"median_step_s": t["step_s"], "median_unqueued_step_s": 0.8 * t["step_s"]}
        store.record_trial({**t, "summary_json": summary},
                           [json.loads(m["data"]) for m in store.metrics(t["trial_id"])])
    store.close()
    text = "\n".join(findings(load(tmp_path)))
    assert "Cost model step time: median |error| 10%" in text
    assert "Cost model step time less the steps' run-queue wait: median |error| 38% over 6 trials" in text
    # a store of trials without the measure (older versions) says nothing about it
    build_store(tmp_path / "old").close()
    assert "run-queue wait" not in "\n".join(findings(load(tmp_path / "old")))


def test_report_shows_the_step_time_less_run_queue_wait(tmp_path):
    """The findings state the step-time error against wall-clock steps and against the steps less their run-queue
    wait (the like-for-like one on a busy machine); the table and the scatter showed the first only."""
    import sqlite3

    build_store(tmp_path).close()
    with sqlite3.connect(tmp_path / "study.sqlite") as conn:
        conn.execute("UPDATE trials SET summary_json = json_object('median_unqueued_step_s', step_s / 2) "
                     "WHERE status = 'OK'")
    paths = write_report(tmp_path)
    md = paths["md"].read_text()
    assert "| s/step (median) | s/step less run-queue wait |" in md
    assert "| 0.4 | 0.2 |" in md  # ds-z2 on 1 rank: 0.40 s wall clock, half of it waiting
    alts = re.findall(r'<img alt="([^"]+)"', paths["html"].read_text())
    # predicted 1.1 x wall clock = 2.2 x the unqueued step: +120%
    assert any("median error 10%; less run-queue wait 120% over 5 trials" in a for a in alts)


def test_the_report_command_names_each_file_on_its_own_line(tmp_path, monkeypatch, capsys):
    """On one line the three paths ran past 80 columns and the terminal cut one mid-name ('/tmp/nc_zlH|5/...')."""
    from scalestudy.cli import main

    monkeypatch.setenv("COLUMNS", "80")
    build_store(tmp_path).close()
    with pytest.raises(SystemExit) as done:
        main(["report", str(tmp_path)])
    assert done.value.code == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"report: {tmp_path / 'report.html'} (HTML)"
    assert lines[1].strip() == f"{tmp_path / 'report.md'} (Markdown)"
    assert lines[2].strip() == f"6 plots in {tmp_path / 'plots'}"


def test_the_report_names_the_peak_its_mfu_divides_by_and_shows_commands_as_code(tmp_path):
    """The trials table's MFU footnote gave the formula but not the peak: on a CPU it is this machine's measured
    matmul peak (summary.json `mfu_peak_source`), which a reader cannot infer. The HTML showed `backticks` raw."""
    import sqlite3

    source = "measured fp32 matmul peak of this CPU's profile (77.2 GFLOP/s per rank, 1 thread(s); p.yaml)"
    build_store(tmp_path).close()
    with sqlite3.connect(tmp_path / "study.sqlite") as conn:
        conn.execute("UPDATE trials SET summary_json = json_object('mfu_peak_source', ?) WHERE status = 'OK'",
                     (source,))
    paths = write_report(tmp_path)
    md, page = paths["md"].read_text(), paths["html"].read_text()
    assert md.count(f"; peak: {source}.") == 1  # once, however many trials share it
    assert page.count("; peak: measured fp32 matmul peak of this CPU&#x27;s profile (77.2 GFLOP/s") == 1
    assert "<code>scalestudy train</code>" in page and "`" not in page.split("<body>", 1)[1].split("<img")[0]
    assert "`scalestudy train`" in md  # Markdown keeps its own markup


def test_a_final_loss_every_trial_shares_names_no_winner(tmp_path):
    """'ranges 6.369-6.369 nats/token; lowest for <trial>' named one of equal runs the lowest."""
    import sqlite3

    build_store(tmp_path).close()
    with sqlite3.connect(tmp_path / "study.sqlite") as conn:
        conn.execute("UPDATE trials SET loss = 6.3686 WHERE status = 'OK'")
    text = "\n".join(findings(load(tmp_path)))
    assert "Final training loss 6.369 nats/token in every OK trial (5) after 4 steps (2,560 tokens)." in text
    assert "ranges" not in text
    build_store(tmp_path / "spread").close()
    assert "Final training loss ranges 6.800-6.900 nats/token; lowest for" in "\n".join(
        findings(load(tmp_path / "spread")))


def test_no_legend_covers_a_plotted_point():
    """A legend inside the panel ('best' placement) covered points of a 7-strategy study it had no room to avoid."""
    import matplotlib

    matplotlib.use("Agg")
    from scalestudy.report.plots import _series_lines

    corners = [{1: 0.1, 2: 1.0}, {1: 1.0, 2: 0.1}, {1: 0.55, 2: 0.55}, {1: 0.9, 2: 0.95}, {1: 0.2, 2: 0.15},
               {1: 0.95, 2: 0.9}, {1: 0.15, 2: 0.2}]
    fig, _ = _series_lines(["t5-tiny"], lambda m: {f"s{i}": pts for i, pts in enumerate(corners)},
                           "time per optimizer step (s, median after warm-up)")  # step_time.png's label
    fig.tight_layout()
    fig.canvas.draw()
    ax = fig.axes[0]
    box = ax.get_legend().get_window_extent()
    points = [xy for line in ax.get_lines() for xy in ax.transData.transform(line.get_xydata())]
    assert not [p for p in points if box.contains(*p)]
    assert box.y1 < ax.get_window_extent().y0  # below the panel, not beside the data
    assert box.y0 >= 0  # and inside the figure tight_layout sized
    label, whole = ax.yaxis.label.get_window_extent(), fig.bbox
    assert whole.y0 <= label.y0 and label.y1 <= whole.y1  # the y label (its unit) is not cut off by the legend's room
