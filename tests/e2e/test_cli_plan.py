"""`scalestudy plan` end to end (in-process CLI): speed, never an infeasible proposal, constraints, output, errors."""

import contextlib
import io
import json
from pathlib import Path
import time

import pytest

from scalestudy.cli import main
from scalestudy.costmodel import activation_cache_clear
from scalestudy.costmodel.estimate import estimate
from scalestudy.specs.hardware import make_cluster
from scalestudy.specs.presets import get_model
from scalestudy.specs.strategy import ZERO_STAGES, Strategy, Workload
from _cli import run_cli

MT5_XXL = ["plan", "--model", "mt5-xxl", "--gpu", "a100-40gb", "--nodes", "4", "--gpus-per-node", "8",
           "--global-batch", "256", "--seq-len", "512", "--target-len", "128"]


def _estimate_work_cpu_s(rounds: int) -> float:
    """CPU seconds of this process for a fixed amount of cost-model work: `rounds` passes of estimate() over the
    BASELINE strategies (mT5-XXL on 4 x 8 A100-40GB), memoised shapes cleared first as before a plan."""
    model, cluster, work = get_model("mt5-xxl"), make_cluster("a100-40gb", 4, 8), Workload(256, 512, 128)
    activation_cache_clear()
    t0 = time.process_time()
    for _ in range(rounds):
        for strategy in BASELINE:
            estimate(model, cluster, strategy, work)
    return time.process_time() - t0


# Every engine x ZeRO stage x tp x micro-batch x recompute at pp 1: 384 strategies, all valid for mT5-XXL on 4 x 8.
BASELINE = [Strategy(engine=engine, zero=zero, tp=tp, micro_batch=mb, recompute=rc)
            for engine, zeros in ZERO_STAGES.items() for zero in zeros for tp in (1, 2, 4, 8) for mb in (1, 2, 4, 8)
            for rc in ("none", "selective", "full")]
# The limit on the plan's CPU time as a multiple of 2 x 20 rounds of BASELINE (15,360 estimates), run right before
# and right after it in this process. An absolute limit (2 CPU s) flaked: on this 2-vCPU machine the same work's CPU
# time varies 1.5-2x with other jobs' load (cache and host contention count as CPU time); the plan read 2.01 s on a
# loaded CI run and 1.5-2.1 s here at load 3-4. Bracketed like this, load moves both sides: measured here (01:05-01:10
# UTC, load 2.9-3.7, also beside a memory-streaming job) the plan cost 4.7-6.6x the baseline (~90% of it turning
# 5,439 candidates into indented JSON, ~5% estimating 6,162 strategies). 14x is about 2x that: a plan that does twice
# the work per candidate, renders twice as much or searches a space twice the size fails; finer claims are the
# benchmarks' (bench_plan.py: the CLI's seconds; bench_estimate.py: strategies per CPU-second, >= 20,000).
PLAN_OVER_BASELINE_LIMIT = 14.0


@pytest.fixture(scope="module")
def full_plan() -> tuple[int, str, float, float]:
    """(exit code, JSON, CPU s, baseline CPU s) of the whole mT5-XXL plan (`--top 0`), run once for this module."""
    def cli(args: list[str]) -> tuple[int, str]:
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            try:
                main(args)
            except SystemExit as exc:
                return exc.code, out.getvalue()
        return 0, out.getvalue()

    # Warm the imports first (the test measures the planner, not the interpreter's first import of rich/typer).
    cli(["plan", "--model", "t5-tiny", "--gpu", "local-cpu", "--nodes", "1", "--gpus-per-node", "1",
         "--global-batch", "2", "--seq-len", "16", "--json"])
    before = _estimate_work_cpu_s(20)
    activation_cache_clear()  # the plan starts from the same cold memo whichever tests ran before in this process
    t0 = time.process_time()
    code, out = cli(MT5_XXL + ["--json", "--top", "0"])
    elapsed = time.process_time() - t0
    return code, out, elapsed, before + _estimate_work_cpu_s(20)


def test_mt5_xxl_on_4x8_a100_plan_costs_a_bounded_multiple_of_estimate_work_and_every_proposal_fits(full_plan):
    code, out, elapsed, baseline = full_plan
    assert code == 0
    assert elapsed < PLAN_OVER_BASELINE_LIMIT * baseline, \
        f"plan took {elapsed:.2f} CPU s = {elapsed / baseline:.1f}x the baseline's {baseline:.2f} CPU s"
    data = json.loads(out)
    assert data["evaluated"] == data["estimated"] + data["pruned"] > 1000
    assert len(data["candidates"]) == data["feasible"] - data["duplicates"] > 0
    model, cluster, w = get_model("mt5-xxl"), make_cluster("a100-40gb", 4, 8), Workload(256, 512, 128)
    for cand in data["candidates"]:
        est = estimate(model, cluster, Strategy.from_dict(cand["strategy"]), w)
        assert est.fits, cand["label"]
        assert cand["estimate"]["fits"] is True
        assert cand["estimate"]["memory"]["per_device_bytes"] <= cluster.device.memory_bytes
    tps = [c["estimate"]["throughput"]["tokens_per_s"] for c in data["candidates"]]
    assert tps == sorted(tps, reverse=True)


def test_pruning_agrees_with_estimating_everything(capsys, full_plan):
    _, full, _ = run_cli(capsys, MT5_XXL + ["--json", "--top", "0", "--no-prune"])
    a, b = json.loads(full_plan[1]), json.loads(full)
    assert a["pruned"] > 0 and b["pruned"] == 0
    assert [c["label"] for c in a["candidates"]] == [c["label"] for c in b["candidates"]]
    assert a["feasible"] == b["feasible"]


def test_table_pareto_and_explanation(capsys):
    code, out, _ = run_cli(capsys, MT5_XXL + ["--top", "5"])
    assert code == 0
    assert "tokens/s" in out and "GiB/dev" in out and "MFU %" in out
    assert "Pareto front" in out and "Why:" in out and " vs " in out
    assert "Units:" in out


def test_constraints_narrow_the_plan(capsys):
    code, out, _ = run_cli(capsys, MT5_XXL + ["--zero", "2", "--tp", "1", "--json", "--top", "0"])
    assert code == 0
    data = json.loads(out)
    assert data["candidates"]
    assert {(c["strategy"]["zero"], c["strategy"]["tp"]) for c in data["candidates"]} == {(2, 1)}


def test_min_nodes_objective_uses_fewer_nodes(capsys):
    base = ["plan", "--model", "mt5-base", "--gpu", "a100-40gb", "--nodes", "4", "--gpus-per-node", "8",
            "--global-batch", "256", "--seq-len", "512", "--json", "--top", "1"]
    code, out, _ = run_cli(capsys, base)
    best4 = json.loads(out)["candidates"][0]["estimate"]["throughput"]["tokens_per_s"]
    code, out, _ = run_cli(capsys, base + ["--objective", "min-nodes", "--min-throughput", str(0.2 * best4)])
    assert code == 0
    cand = json.loads(out)["candidates"][0]
    assert cand["layout"]["nodes"] < 4
    assert cand["estimate"]["throughput"]["tokens_per_s"] >= 0.2 * best4


def test_emit_for_cluster_plan_writes_consistent_files(capsys, tmp_path):
    code, out, _ = run_cli(capsys, MT5_XXL + ["--engine", "deepspeed", "--top", "3", "--emit", str(tmp_path)])
    assert code == 0 and "wrote configs and launch commands" in out.lower()
    ds = json.loads((tmp_path / "ds_config.json").read_text())
    plan = json.loads((tmp_path / "plan.json").read_text())
    lay = plan["layout"]
    assert ds["train_batch_size"] == 256 == ds["train_micro_batch_size_per_gpu"] * ds["gradient_accumulation_steps"] \
        * lay["dp"]
    assert ds["zero_optimization"]["stage"] == plan["strategy"]["zero"]
    assert ds["bf16"]["enabled"] is True and ds["gradient_clipping"] == 1.0
    slurm = (tmp_path / "launch_slurm.sbatch").read_text()
    assert "#SBATCH --nodes=4" in slurm and "--nproc-per-node 8" in slurm and "scalestudy.engine.train" in slurm
    assert "--nnodes 4" in (tmp_path / "launch_multi_node.sh").read_text()
    assert "scalestudy train --config" in (tmp_path / "launch_single_node.sh").read_text()


@pytest.mark.parametrize("args, message", [
    (["--model", "no-such-model"], "unknown model"),
    (["--objective", "fastest"], "unknown objective"),
    (["--zero", "x"], "--zero takes integers"),
])
def test_bad_input_is_one_line_exit_2(capsys, args, message):
    base = {"--model": "mt5-xxl", "--gpu": "a100-40gb", "--global-batch": "64", "--seq-len": "512"}
    for k, v in zip(args[::2], args[1::2]):
        base[k] = v
    argv = ["plan"] + [x for kv in base.items() for x in kv]
    code, _, err = run_cli(capsys, argv)
    assert code == 2
    assert message in err and "Traceback" not in err


@pytest.mark.dist
@pytest.mark.slow
def test_tune_calibrates_runs_a_real_trial_and_writes_results(capsys, tmp_path):
    # One rank keeps this test short (collective fits: test_plan_calibrate.py, bench_tune.py on 2 ranks).
    from scalestudy.specs.hardware import get_device

    out = tmp_path / "tune"
    code, text, err = run_cli(capsys, ["tune", "--model", "t5-tiny", "--nproc", "1", "--global-batch", "2",
                                       "--seq-len", "32", "--target-len", "8", "--steps", "3", "--warmup", "1",
                                       "--max-trials", "1", "--engine", "ddp", "--micro-batch", "2",
                                       "--recompute", "none", "--output", str(out)])
    assert code == 0, err
    assert "Calibrated in" in text and "Pick: ddp" in text and "reached --max-trials 1" in text
    data = json.loads((out / "tune.json").read_text())
    (trial,) = data["trials"]
    assert trial["status"] == "OK" and trial["measured_step_s"] > 0
    assert Path(trial["run_dir"]).is_dir() and not (Path(trial["run_dir"]) / "checkpoints").exists()  # measurements only
    row = data["table"][0]
    assert row["error_before_pct"] is not None and row["error_final_pct"] is not None
    # One trial: the refit scales the model onto the measurement.
    assert abs(row["error_final_pct"]) < abs(row["error_before_pct"])
    assert data["efficiency"]["trials_fitted"] == 1
    pick = data["pick"]  # the pick's step time carries its uncertainty
    assert pick["label"].startswith("ddp ") and pick["trials"] == 1
    assert pick["step_s"] == pytest.approx(trial["measured_step_s"])
    assert pick["ci95_s"][0] < pick["step_s"] < pick["ci95_s"][1]
    cands = {c["strategy"]: c for c in data["candidates"]}  # every candidate, measured or not, with a prediction
    assert len(cands) == 2 and cands[trial["label"]]["measured"] and cands[trial["label"]]["trials"] == 1
    (other,) = [c for c in cands.values() if not c["measured"]]
    assert other["status"] == "not run" and other["predicted_s"] > 0 and other["measured_step_s"] is None
    profile = get_device(str(out / "hardware_profile.yaml"))
    mb = json.loads((out / "microbench.json").read_text())
    assert mb["world_size"] == 1 and mb["collectives"] == []
    best = max(r["flops_per_s"] for r in mb["matmul"] if r["dtype"] == "fp32")
    assert profile.peak_flops["fp32"] == pytest.approx(best, rel=1e-3)
    assert profile.hbm_bytes_per_s == pytest.approx(mb["copy"]["bytes_per_s"], rel=1e-3)
    md = (out / "tune.md").read_text()
    assert md.split("## Every candidate")[0].count("| 1 |") == 1 and md.count("| not run |") == 1
