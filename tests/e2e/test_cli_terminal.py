"""What a person sees in a terminal: `plan` fits 80/120/200 columns without cutting a key cell; help texts show flags
and defaults properly; commands print whole. In-process CLI, one table of cases."""

from __future__ import annotations

import json
import re

from pathlib import Path

import pytest

from _cli import run_cli

EXAMPLES = Path(__file__).parents[2] / "examples"

PLAN = ["plan", "--model", "mt5-xxl", "--gpu", "a100-40gb", "--nodes", "4", "--gpus-per-node", "8",
        "--global-batch", "256", "--seq-len", "512", "--target-len", "128", "--top", "5"]


@pytest.mark.parametrize("columns, shown, hidden", [
    (80, ["strategy", "GiB/dev", "step s", "tokens/s", "MFU %"], ["free GiB", "largest step-time terms"]),
    (120, ["#", "strategy", "nodes", "dp", "GiB/dev", "step s", "tokens/s", "MFU %", "s/1M tok"],
     ["largest step-time terms"]),
    (200, ["#", "strategy", "free GiB", "tokens/s", "largest step-time terms (s)"], []),
])
def test_plan_table_fits_the_terminal_without_cutting_key_cells(capsys, monkeypatch, columns, shown, hidden):
    code, out, _ = run_cli(capsys, PLAN + ["--json"])
    plan_json = json.loads(out)
    monkeypatch.setenv("COLUMNS", str(columns))
    code, out, _ = run_cli(capsys, PLAN)
    assert code == 0
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= columns
    table = [line for line in lines if line.startswith(("┃", "│"))]
    header = table[0]
    for col in shown:
        assert col in header
    for col in hidden:
        assert col not in header
    assert "…" not in out and "..." not in "".join(table)  # nothing cut
    for cand in plan_json["candidates"]:  # every key cell whole, on one line
        row = next(line for line in table[1:] if f" {cand['label']} " in line)
        assert f"{cand['estimate']['throughput']['tokens_per_s']:,.0f}" in row and f"{100 * cand['estimate']['mfu']:.1f}" in row
    if hidden:
        assert re.search(rf"\({columns}-column terminal: left out .*{hidden[0]}", " ".join(lines))


def test_plan_mixed_cluster_labels_wrap_instead_of_cutting(capsys, monkeypatch):
    """'fsdp-z2 tp1 pp4 mb1 fp16 stages 19/19/7/3' made the key columns 84 wide: label and headers were cut."""
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = run_cli(capsys, ["plan", "--model", "gpt2-xl", "--cluster", str(EXAMPLES / "cluster-a100-v100.yaml"),
                                    "--global-batch", "64", "--seq-len", "1024", "--top", "3", "--pp", "2,4"])
    table = [line for line in out.splitlines() if line.startswith(("┃", "│"))]
    assert code == 0 and max(len(line) for line in out.splitlines()) <= 80
    assert "step s" in table[0] and "MFU %" in table[0]
    # every shown label is whole: its stage split (which one wins depends on the calibration) survives wrapping
    first_column = " ".join(line.split("│")[1].strip() for line in table[1:])
    splits = re.findall(r"stages (\d+(?:/\d+)+)", first_column)
    # --pp 2,4: every shown strategy has a split, whichever wins (the ranking moves with each refit)
    assert first_column.count("stages") == len(splits) == 3
    assert all(sum(map(int, split.split("/"))) == 48 for split in splits)


@pytest.mark.parametrize("command, present, absent", [
    (["plan"], ["--no-prune", "--json", "--offload-optimizer"], ["--no-no-prune", "<bool>", "--offload "]),
    (["train"], ["(default: t5-tiny)", "(default: deepspeed)", "(default: 100)", "(default: 0.001)",
                 "not --warmup", "the learning-rate warm-up is --warmup-steps", "--resume"], ["<bool>"]),
    (["estimate"], ["Print the estimate as JSON", "--offload-optimizer"], ["JSON schema", "<bool>"]),
    (["calibrate"], ["--full"], ["<bool>"]),
    (["study", "run"], ["--dry-run", "--no-wait"], ["<bool>", "--no-no-"]),
    ([], ["Predict memory per device, step time, throughput and MFU of one training configuration",
          "Run a small real scaling study on this CPU (tiny T5, ZeRO 0-3 and FSDP, 1-2 ranks) and write its report"],
     ["of...", "ZeRO..."]),  # command summaries whole, not cut to one line
])
def test_help_shows_flags_defaults_and_meanings(capsys, monkeypatch, command, present, absent):
    monkeypatch.setenv("COLUMNS", "80")  # wrapped phrases still match: whitespace is normalised below
    code, out, _ = run_cli(capsys, command + ["--help"])
    assert code == 0
    text = re.sub(r"\s+", " ", re.sub(r"[│╭╮╰╯─]", " ", out))
    for phrase in present:
        assert phrase in text, phrase
    for phrase in absent:
        assert phrase not in text, phrase


def test_old_offload_name_is_still_accepted(capsys):
    base = ["plan", "--model", "t5-tiny", "--gpu", "local-cpu", "--nodes", "1", "--gpus-per-node", "2",
            "--global-batch", "4", "--seq-len", "64", "--top", "0", "--json"]
    runs = [json.loads(run_cli(capsys, base + [flag, "cpu"])[1]) for flag in ("--offload", "--offload-optimizer")]
    assert runs[0]["candidates"] and runs[0]["candidates"] == runs[1]["candidates"]
    assert {c["estimate"]["strategy"]["offload_optimizer"] for c in runs[0]["candidates"]} == {"cpu"}


@pytest.mark.parametrize("columns", [80, 120])
def test_study_status_shows_each_trial_with_its_numbers_and_reason(capsys, monkeypatch, tmp_path, columns):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parents[1] / "unit" / "test_report_findings.py"
    spec = importlib.util.spec_from_file_location("report_fixture", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.build_store(tmp_path).close()  # 5 OK trials with known step times, 1 OOM
    monkeypatch.setenv("COLUMNS", str(columns))
    code, out, _ = run_cli(capsys, ["study", "status", str(tmp_path)])
    assert code == 0 and max(len(line) for line in out.splitlines()) <= columns and "…" not in out
    assert "6 finished trial(s)" in out
    oom = next(line for line in out.splitlines() if "│ OOM     │" in line)
    assert "ran out of memory" in oom
    assert re.search(r"│ OK +│ +0\.354 │ +1,808 │", out)  # ds-z3 at 2 ranks: 0.354 s/step, 640 tokens / 0.354 s
    caption = next(line for line in out.splitlines() if line.startswith("s/step: median"))
    assert columns - 20 < len(caption) <= columns  # the caption wraps at the table's width, not Rich's default 80


def test_printed_commands_are_never_split(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("COLUMNS", "80")
    out_dir = tmp_path / "a-rather-long-directory-name" / "for-the-study-output"
    spec = __import__("pathlib").Path(__file__).parents[2] / "examples" / "study-cluster-mt5.yaml"
    code, out, _ = run_cli(capsys, ["study", "run", str(spec), "--output", str(out_dir), "--executor", "slurm",
                                    "--dry-run"])
    assert code == 0
    submits = [line for line in out.splitlines() if "submit with: sbatch" in line]
    assert submits and all(re.search(r"submit with: sbatch \S+\.sbatch\)$", line) for line in submits)
    filtered = [line for line in out.splitlines() if "filtered (cost model" in line]
    assert filtered and all(re.search(r"lr[\d.e-]+: predicted [\d.]+ GiB per device does not fit a100-40gb$", line)
                            for line in filtered)  # the reason stays on its line


@pytest.mark.parametrize("columns", [80, 120, 200])
def test_tune_table_fits_the_terminal(capsys, monkeypatch, columns):
    from types import SimpleNamespace

    from scalestudy.cli import plan as cli_plan
    from scalestudy.plan import tune_report

    rows = [{"trial": i, "strategy": f"ds-z{i}+optcpu tp1 pp1 mb4 rc-full fp32", "status": "OK",
             "measured_step_s": 1.234 + i, "predicted_before_s": 1.1, "error_before_pct": -10.9,
             "predicted_final_s": 1.2, "error_final_pct": -2.75, "wall_s": 33.3} for i in range(3)]
    monkeypatch.setattr(tune_report, "report_rows", lambda result: rows)
    from scalestudy.costmodel.calibrate import EfficiencyFit

    fit = EfficiencyFit(step_overhead_s=0.01, overhead_s=0.001, comm_engine={"deepspeed": 2.0})
    result = SimpleNamespace(trials=rows, calibration_s=12.0, trials_s=99.0, stop_reason="budget",
                             model=SimpleNamespace(fit_=fit), best=None)
    monkeypatch.setenv("COLUMNS", str(columns))
    cli_plan.print_tune(result, "OUT")
    out = capsys.readouterr().out
    table = [line for line in out.splitlines() if line.startswith(("┃", "│"))]
    assert table and max(len(line) for line in table) <= columns and "…" not in out
    assert all(re.search(rf"│ OK +│ +{1.234 + i:.3f} │", "".join(table)) for i in range(3))
    assert "-2.8" in "".join(table)  # the refit model's error is a key column
    assert "communication x1.00 (per engine: deepspeed x3.00" in out  # the refit's terms, one line


def test_validate_fits_80_columns_and_keeps_the_headline_column(capsys, monkeypatch, validate_refits_once):
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = run_cli(capsys, ["validate"])
    # what a table leaves out depends on its longest row id; the headline column always stays, the rest is named
    assert code == 0 and "held-out error" in out and "80-column terminal: left out" in out
    assert "held out, source" in out.replace("\n", " ")
    assert max(len(line) for line in out.splitlines()) <= 80
    lines = out.splitlines()  # every throughput table keeps its held-out error column whole, and states its unit
    assert sum(line.startswith("throughput: ") for line in lines) == sum(" held-out error" in line for line in lines)
    assert "tokens per second, whole cluster [tokens/s (global batch x seq / step)]" in " ".join(out.split())
    titles = [line for line in lines if line.startswith("throughput: ")]  # the metrics in words, not --json keys
    assert len(titles) >= 4 and not any("_per_" in line or "mfu" in line for line in titles)
    assert re.search(r"^  bigscience2022: 1 row, mean", out, re.M) and ": 1 rows," not in out  # a one-row source
    by_source = next(i for i, line in enumerate(lines) if line.startswith("leave-one-source-out error by source"))
    sources = lines[lines.index("Sources:") + 1:by_source - 1]  # each source's text hangs under its key
    # the summary comes last, after the sources' notes: a terminal's last screen and `validate | tail` show it
    assert "headline (leave-one-source-out)" in " ".join(lines[-4:]) and "Sources:" not in lines[by_source:]
    assert sources[0].startswith("  ") and all(line.startswith("  ") for line in sources if line.strip())
    assert sum(line.startswith("    ") for line in sources) > sum(not line.startswith("    ") for line in sources)
    monkeypatch.setenv("COLUMNS", "200")
    code, out, _ = run_cli(capsys, ["validate"])
    assert code == 0 and " held out " in out and "-column terminal: left out" not in out  # (a source says "left out")
