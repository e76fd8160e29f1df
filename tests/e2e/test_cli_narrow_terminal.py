"""The README's commands in an 80-column terminal, as a newcomer runs them: every line fits, no unit is cut where the
terminal would fold a line, and every figure says its unit and convention. In-process CLI, one table of cases."""

from __future__ import annotations

import re

import pytest

from _cli import run_cli

# A 2-rank t5-tiny FSDP run's summary.json on a 2-core CPU (the README's `train` example, engine fsdp), the fields
# `scalestudy train` prints at its end.
TRAIN_SUMMARY = {
    "strategy_label": "fsdp-z2 tp1 pp1 mb4 fp32", "model": "t5-tiny", "world_size": 2, "device": "cpu", "steps": 50,
    "final_loss": 5.1683, "measured_steps": 48, "warmup_steps_excluded": 2, "median_step_s": 1.7259,
    "median_tokens_per_s": 1483.3, "median_samples_per_s": 9.2706, "median_model_tflops": 0.003864,
    "median_mfu": 0.19168,
    "mfu_convention": "MFU = model FLOPs per optimizer step / (devices x dense peak FLOP/s of the precision the "
                      "matmuls run in x seconds per step); model FLOPs = 3 x forward (backward = 2 x forward), 2 "
                      "FLOPs per multiply-add of every matmul: weights, attention scores and values over the full "
                      "square, LM head; encoder and decoder at their own lengths; no recomputation",
    "mfu_peak_source": "measured fp32 matmul on this CPU rank (20.2 GFLOP/s, 1 thread(s))",
    "peak_mem_bytes": 26228944,
    "memory_convention": "bytes of this rank's parameter + gradient + optimizer-state storages (counted tensors; "
                         "max over ranks); rss_bytes = process resident set size (max over ranks)",
    "peak_rss_bytes": 651939840,
}


def test_train_summary_wraps_its_prose_at_spaces_and_keeps_paths_whole(capsys, monkeypatch):
    """The summary was printed unwrapped (lines of 130-420 characters): an 80-column terminal folded them mid-word,
    e.g. 'TFLOP/s' or 'MiB' across two lines."""
    from scalestudy.cli import train as train_cli

    monkeypatch.setenv("COLUMNS", "80")
    output = "runs/a-long-output-directory-name-for-this-fsdp-zero-2-run-on-two-ranks-of-this-cpu"
    train_cli._print_summary(TRAIN_SUMMARY, output)
    lines = capsys.readouterr().out.splitlines()
    wrote = [line for line in lines if line.lstrip().startswith("wrote ")]
    assert len(wrote) == 1 and f"{output}/metrics.jsonl" in wrote[0]  # a path is never split
    assert all(len(line) <= 80 for line in lines if line not in wrote)
    text = " ".join(line.strip() for line in lines)
    for phrase in ("final loss 5.1683 nats/token", "1.726 s/step", "1,483 tokens/s", "0.0039 model TFLOP/s per rank",
                   "MFU 19.2%", "peak memory per rank: 25.0 MiB", "peak RSS 621.7 MiB",
                   "dense peak FLOP/s of the precision", "(20.2 GFLOP/s, 1 thread(s))"):
        assert phrase in text


def test_devices_states_the_convention_of_every_column(capsys, monkeypatch):
    """`scalestudy devices` printed 'intra GB/s' / 'inter GB/s' with no convention: per device or per node, one
    direction or both, nominal link rate or achievable bus rate (specs/hardware.Device: per device, one direction)."""
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = run_cli(capsys, ["devices"])
    assert code == 0
    assert max(len(line) for line in out.splitlines()) <= 80
    text = re.sub(r"\s+", " ", out)
    for phrase in ("memory GiB = 2^30 bytes per device", "TFLOP/s per device without sparsity",
                   "GB/s = 1e9 bytes/s per device, one direction", "achievable collective (bus) rates"):
        assert phrase in text


def test_presets_states_what_each_column_counts(capsys, monkeypatch):
    """`scalestudy presets` printed 'layers 24+24', 'd_ff', 'head untied' with no word on what they count."""
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = run_cli(capsys, ["presets"])
    text = re.sub(r"\s+", " ", out)
    assert code == 0 and " mt5-xxl 12,921,057,280 24+24 " in text
    for phrase in ("layers = encoder + decoder blocks (one number: decoder-only)", "a tied embedding / LM head "
                   "counted once", "head = LM head tied to the input embedding or not"):
        assert phrase in text


def test_validate_figures_keep_one_notation_down_a_column():
    """validate's published / predicted cells were f'{v:,.4g}': 7,598 tokens/s beside 6.874e+05 (from 10,000 up) in
    one column; now 4 significant digits with k / M / G from 1,000, no wider than before (the 80-column tables keep
    their held-out error column whole)."""
    from types import SimpleNamespace

    from rich.console import Console

    from scalestudy.cli.costmodel import _figure, _validation_table

    assert [_figure(v) for v in (7598.0, 687441.2, 1.13e6, 2.5e9, 999.96, 999_999, 15.98, 0.050334)] == [
        "7.598k", "687.4k", "1.13M", "2.5G", "1k", "1M", "15.98", "0.05033"]  # rounded, then its unit: not 1000k
    rows = [SimpleNamespace(id=f"r{i}", config="", published=v, predicted=1.1 * v, error=0.1, fit=True,
                            source_key="s", unit="tokens/s") for i, v in enumerate((7598.0, 687441.0))]
    table, _ = _validation_table("throughput", "tokens_per_s", rows, {"r0": {"predicted": 8000.0, "error": 0.05},
                                                                        "r1": {"predicted": 7e5, "error": 0.02}}, 200)
    console = Console(width=200, record=True)
    console.print(table)
    text = console.export_text()
    assert "687.4k" in text and "756.2k" in text and "700k" in text and "e+0" not in text


@pytest.mark.parametrize("argv", [
    ["presets"],
    ["estimate", "--model", "gpt2-xl", "--gpu", "a100-40gb", "--nodes", "2", "--global-batch", "64",
     "--seq-len", "1024"],
])
def test_cost_model_listings_fit_80_columns(capsys, monkeypatch, argv):
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = run_cli(capsys, argv)
    assert code == 0 and max(len(line) for line in out.splitlines()) <= 80


def test_plan_emit_note_wraps_and_keeps_the_directory_whole(capsys, monkeypatch, tmp_path):
    """`plan --emit` said where it wrote (and why not the winner, when train cannot run it) in one unwrapped line of
    up to ~300 characters; a directory longer than the terminal stays whole on a line of its own."""
    monkeypatch.setenv("COLUMNS", "80")
    out_dir = tmp_path / ("emitted-configs-" * 6)  # > 80 characters whatever pytest's base directory
    code, out, _ = run_cli(capsys, ["plan", "--model", "t5-tiny", "--gpu", "local-cpu", "--gpus-per-node", "2",
                                    "--global-batch", "8", "--seq-len", "128", "--target-len", "32", "--top", "3",
                                    "--emit", str(out_dir)])
    assert code == 0 and (out_dir / "train_config.yaml").is_file()
    lines = out.splitlines()
    assert [line.strip() for line in lines if len(line) > 80] == [str(out_dir)]  # the path, whole, on its own
    assert "configs and launch commands" in re.sub(r"\s+", " ", out)


def test_calibrate_summary_wraps_at_spaces(capsys, monkeypatch):
    """`calibrate` printed its measured profile as one 323-character line (peaks, efficiency curve, link, copy, Adam),
    folded mid-number by an 80-column terminal."""
    from scalestudy.cli.plan import print_profile
    from scalestudy.specs.hardware import get_device

    monkeypatch.setenv("COLUMNS", "80")
    print_profile(get_device("a100-40gb"), 49.2)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) > 1 and max(len(line) for line in lines) <= 80
    text = re.sub(r"\s+", " ", " ".join(lines))
    for phrase in ("peak matmul GFLOP/s per rank (bf16 312000.00", "GB/s per rank one direction", "us per hop",
                   "M params/s per node"):
        assert phrase in text


def test_demo_findings_wrap_under_their_bullets(capsys, monkeypatch, tmp_path):
    """The demo's closing findings were printed as '  - ' + the finding, wrapped by Rich back to column 0: in an
    80-column terminal each bullet's later lines started under the bullets, not beside them."""
    from types import SimpleNamespace

    import scalestudy.report.render
    import scalestudy.study.demo

    finding = ("ZeRO-2 is 44% faster than ZeRO-3 at 1 rank for t5-tiny (0.291 vs 0.419 s/step), and at 2 ranks "
               "for t5-tiny ds-z0 is the fastest (0.181 s/step) and ds-z3 the slowest (0.428 s/step).")
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setattr(scalestudy.study.demo, "run_demo", lambda *a, **k: SimpleNamespace(counts={"OK": 10}))
    monkeypatch.setattr(scalestudy.report.render, "write_report", lambda out: {
        "findings": [finding], "html": tmp_path / "report.html", "md": tmp_path / "report.md", "plots_dir": tmp_path})
    code, out, _ = run_cli(capsys, ["demo", "--output", str(tmp_path / "demo")])
    lines = out.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("  - ZeRO-2"))
    bullet = lines[first:first + 3]
    assert code == 0 and all(len(line) <= 80 for line in bullet)
    assert all(line.startswith("    ") for line in bullet[1:])
    assert " ".join(line.strip() for line in bullet) == f"- {finding}"
