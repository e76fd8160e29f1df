"""Calibration fits (pure): alpha-beta link fit, profile from micro-benchmarks, efficiency refit; tuner logic."""

import math
from dataclasses import replace
from pathlib import Path

import pytest

from scalestudy.costmodel.calibrate import (StepTerms, apply_efficiency, fit_alpha_beta, fit_efficiency,
                                            profile_from_microbench, save_profile)
from scalestudy.errors import ScalestudyError
from scalestudy.launch.process import TrialResult
from scalestudy.plan import tuner
from scalestudy.plan.space import Constraints
from scalestudy.specs.hardware import get_device
from scalestudy.specs.presets import get_model
from scalestudy.specs.strategy import Workload


def ring_time(nbytes, n, alpha, bw):
    return 2 * (n - 1) * alpha + 2 * (n - 1) / n * nbytes / bw


def synthetic_microbench(world=2, alpha=50e-6, bw=0.8e9):
    sizes = [4 << 10, 256 << 10, 4 << 20, 16 << 20]
    return {
        "world_size": world, "device": "cpu", "threads": 1, "torch": "x",
        "matmul": [{"n": 64, "dtype": "fp32", "flops_per_s": 20e9}, {"n": 256, "dtype": "fp32", "flops_per_s": 60e9},
                   {"n": 1024, "dtype": "fp32", "flops_per_s": 40e9}, {"n": 64, "dtype": "bf16", "flops_per_s": 1e9}],
        "copy": {"bytes_per_s": 5e9}, "adam": {"params_per_s": 1e8},
        "copy_curve": [{"bytes": 1 << 20, "bytes_per_s": 40e9}, {"bytes": 256 << 20, "bytes_per_s": 8e9}],
        "optimizer": [{"tensors": 1, "params": 1 << 20, "seconds": 2e-3}, {"tensors": 64, "params": 1 << 20,
                                                                          "seconds": 4e-3}],
        "collectives": [{"op": "all_reduce", "bytes": s, "seconds": ring_time(s, world, alpha, bw)} for s in sizes]
        + [{"op": "all_gather", "bytes": 1 << 20, "seconds": 1.0},
           # reduce_scatter of 16 MB at 4x the time the all_reduce fit gives it ((n-1) alpha + (n-1)/n S/B)
           {"op": "reduce_scatter", "bytes": 16 << 20, "seconds": 4 * ((world - 1) * alpha
                                                                       + (world - 1) / world * (16 << 20) / bw)}],
    }


def test_alpha_beta_fit_recovers_the_ring_model():
    for world in (2, 4):
        pts = [(s, ring_time(s, world, 30e-6, 1.5e9)) for s in (1e3, 1e5, 1e7, 1e8)]
        alpha, bw = fit_alpha_beta(pts, world)
        assert alpha == pytest.approx(30e-6, rel=1e-6) and bw == pytest.approx(1.5e9, rel=1e-6)
    with pytest.raises(ScalestudyError, match="needs all_reduce"):
        fit_alpha_beta([(1e3, 1e-3)], 2)
    with pytest.raises(ScalestudyError, match="does not grow"):
        fit_alpha_beta([(1e3, 2e-3), (1e6, 1e-3)], 2)


def test_profile_from_microbench_and_yaml_round_trip(tmp_path):
    base = get_device("local-cpu")
    dev = profile_from_microbench(synthetic_microbench(), base, "test-profile")
    assert dev.peak_flops == {"fp32": 60e9, "bf16": 1e9}
    assert dev.matmul_efficiency == [[64, pytest.approx(1 / 3, abs=1e-4)], [256, 1.0], [1024, pytest.approx(2 / 3, abs=1e-4)]]
    assert dev.intra_node_bytes_per_s == pytest.approx(0.8e9, rel=1e-3)
    assert dev.intra_node_latency_s == pytest.approx(50e-6, rel=1e-3)
    assert dev.hbm_bytes_per_s == 5e9 and dev.cpu_adam_params_per_s == pytest.approx(2e8)
    assert dev.memory_bytes == base.memory_bytes and dev.kind == "cpu"
    assert dev.copy_bandwidth == [[1 << 20, 40e9], [256 << 20, 8e9]]
    assert dev.optimizer_step_s == [[1, 1 << 20, 2e-3], [64, 1 << 20, 4e-3]]
    # each collective's measured time at its largest message over the all_reduce fit's (tune's refit reads it)
    assert dev.collective_time_ratio["all_reduce"] == pytest.approx(1.0, rel=1e-3)
    assert dev.collective_time_ratio["reduce_scatter"] == pytest.approx(4.0, rel=1e-3)
    assert dev.collective_time_ratio["all_gather"] == 20.0  # 1 s for 1 MB: clipped at 20x
    # CPU: the ratio at every measured size as well (cpu_collectives.rate looks a collective's size up in it)
    assert [b for b, _ in dev.collective_ratio_by_size["all_reduce"]] == [4 << 10, 256 << 10, 4 << 20, 16 << 20]
    assert all(r == pytest.approx(1.0, rel=1e-3) for _, r in dev.collective_ratio_by_size["all_reduce"])
    assert dev.collective_ratio_by_size["reduce_scatter"] == [[16 << 20, pytest.approx(4.0, rel=1e-3)]]
    path = save_profile(dev, tmp_path / "p.yaml")
    assert get_device(str(path)) == dev
    assert not list(Path(tmp_path).glob("*.tmp"))
    with pytest.raises(ScalestudyError, match="no matmul"):
        profile_from_microbench({"matmul": []}, base, "x")


def test_efficiency_fit_recovers_known_terms():
    truth = dict(compute=1.3, comm=2.0, optimizer=1.0, overhead=0.05)
    fams = {"ds-z1": 0.02, "ddp": 0.0}
    obs = []
    for i, (fam, comp, comm, micro) in enumerate([("ds-z1", 0.2, 0.1, 1), ("ds-z1", 0.2, 0.05, 2), ("ddp", 0.4, 0.2, 1),
                                                   ("ddp", 0.1, 0.3, 4), ("ds-z1", 0.5, 0.02, 1), ("ddp", 0.3, 0.1, 2)]):
        t = StepTerms(comp, comm, 0.01, micro, fam, "deepspeed" if fam.startswith("ds") else "ddp")
        m = (truth["compute"] * comp + truth["comm"] * comm + 0.01 + micro * (truth["overhead"] + fams[fam]))
        obs.append((t, m))
    fit = fit_efficiency(obs, prior=1e-6)
    for t, m in obs:
        assert fit.predict(t) == pytest.approx(m, rel=1e-3)
    # more terms than trials: what the six identify is the compute level (every family agrees on it) ...
    assert fit.compute == pytest.approx(1.3, rel=0.15)
    # ... and a new mix of the measured terms of a measured family is predicted, not just the trials themselves
    new = StepTerms(0.35, 0.15, 0.01, 3, "ddp", "ddp")
    assert fit.predict(new) == pytest.approx(1.3 * 0.35 + 2.0 * 0.15 + 0.01 + 3 * 0.05, rel=0.05)
    # One trial: one overall scale (measured / modelled), every factor at it, no overhead invented.
    one = fit_efficiency(obs[:1])
    assert one.predict(obs[0][0]) == pytest.approx(obs[0][1], rel=1e-6)
    assert one.compute == pytest.approx(one.scale) and one.comm == pytest.approx(one.scale)
    assert one.overhead_s == pytest.approx(0.0, abs=1e-9)
    # An unmeasured family of a measured engine inherits that engine's overhead; an unmeasured engine does not.
    ds1 = StepTerms(0.2, 0.1, 0.01, 1, "ds-z1", "deepspeed")
    ddp = StepTerms(0.4, 0.2, 0.01, 1, "ddp", "ddp")
    two = fit_efficiency([(ds1, 0.31 + 0.10), (ddp, 0.61 + 0.02)])  # exact terms + 100 ms vs 20 ms of overhead
    z2 = StepTerms(0.2, 0.1, 0.01, 1, "ds-z2", "deepspeed")
    fsdp = StepTerms(0.2, 0.1, 0.01, 1, "fsdp-z2", "fsdp")
    assert two.engine_overhead_s["deepspeed"] > two.engine_overhead_s["ddp"]
    assert two.predict(z2) > two.predict(fsdp) == pytest.approx(two.predict(StepTerms(0.2, 0.1, 0.01, 1, "x", "y")))
    scaled = apply_efficiency(get_device("local-cpu"), fit)
    assert scaled.intra_node_bytes_per_s == pytest.approx(get_device("local-cpu").intra_node_bytes_per_s / fit.comm)
    measured = replace(get_device("local-cpu"), step_overhead_s=0.05, microstep_overhead_s=0.01,
                       engine_overhead_s={"ddp-0": 0.001})
    folded = apply_efficiency(measured, replace(fit, framework=1.5, hooks=2.0))
    assert (folded.step_overhead_s, folded.microstep_overhead_s) == (pytest.approx(0.075), pytest.approx(0.015))
    assert folded.engine_overhead_s == {"ddp-0": pytest.approx(0.002)}  # the engines' part: x hooks


def test_a_trial_counts_only_with_a_measured_step(tmp_path):
    def result(status, summary):
        return TrialResult("t", tmp_path, status, "" if status == "OK" else "ran out of memory", "x\nMemoryError",
                           1, False, False, 0.0, 2.0, ["train"], summary)

    assert tuner.measured_step(result("OK", {"median_step_s": 0.5})) == ("OK", 0.5, "")
    status, step, reason = tuner.measured_step(result("OK", {"status": "ok"}))  # all steps were warm-up
    assert (status, step) == ("FAILED", None) and "median step time" in reason
    assert tuner.measured_step(result("OOM", None)) == ("OOM", None, "ran out of memory: MemoryError")


def test_search_records_failures_keeps_going_and_stops_when_stable(monkeypatch, tmp_path):
    spec, w = get_model("t5-tiny"), Workload(8, 64, 16)
    cands = tuner.local_candidates(spec, get_device("local-cpu"), 2, w,
                                   Constraints(tp=(1,), pp=(1,), recompute=("none",), precision="fp32",
                                               offload_optimizer=("none",), offload_params=("none",)))
    assert {tuner.family(c) for c in cands} == {"ddp", "ddp-zero1", "ds-z0", "ds-z1", "ds-z2", "ds-z3", "fsdp-z2",
                                                 "fsdp-z3"}
    # "Measured" world: 0.1 s per micro-step of framework overhead, ds-z3 fails (e.g. OOM), ddp has no overhead.
    def fake_run(index, cand, model, workload, nproc, out_dir, **kw):
        fam = tuner.family(cand)
        if fam == "ds-z3":
            return tuner.TuneTrial(index, cand.strategy.label, cand.strategy.to_dict(), cand.point.grad_accum, "OOM",
                                   None, kw["predicted_before_s"], kw["predicted_uncalibrated_s"], 1.0, 3, "", "oom")
        step = cand.estimate.step_s + cand.point.grad_accum * (0.0 if fam == "ddp" else 0.1)
        return tuner.TuneTrial(index, cand.strategy.label, cand.strategy.to_dict(), cand.point.grad_accum, "OK", step,
                               kw["predicted_before_s"], kw["predicted_uncalibrated_s"], 1.0, 3, "")
    monkeypatch.setattr(tuner, "run_trial", fake_run)
    screen = tuner._screen_order(cands, tuner.EfficiencyModel(), 3)
    assert sorted(c.strategy.engine for c in screen) == ["ddp", "deepspeed", "fsdp"]  # one of each engine first
    monkeypatch.setattr(tuner, "_screen_order", lambda cands, eff, k: [
        next(c for c in sorted(cands, key=eff.predict) if tuner.family(c) == f) for f in ("ds-z3", "ds-z1", "ddp")])
    result = tuner.search_strategies(cands, spec, w, 2, tmp_path, tuner.TuneSettings(screen=3, budget_s=1e9),
                                     log=lambda m: None)
    statuses = [t.status for t in result.trials]
    assert statuses[0] == "OOM" and statuses.count("OK") == len(statuses) - 1  # the failure did not stop it
    assert result.best.label.startswith("ddp ")
    assert "stable" in result.stop_reason and len(result.trials) < len(cands)
    for t in result.trials[1:]:
        assert t.predicted_final_s is not None and math.isfinite(t.predicted_final_s)
