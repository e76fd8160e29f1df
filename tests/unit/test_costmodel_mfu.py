"""One MFU definition: the engine's measured MFU and the cost model's predicted MFU divide by the same peak."""

from __future__ import annotations

import types

import pytest

from scalestudy.costmodel.estimate import estimate
from scalestudy.costmodel.flops import training_flops
from scalestudy.costmodel.mfu import MFU_CONVENTION, flops_utilization, peak_precision
from scalestudy.engine import probe
from scalestudy.specs.hardware import make_cluster
from scalestudy.specs.presets import get_model
from scalestudy.specs.strategy import Strategy, Workload

A100 = types.SimpleNamespace(type="cuda")  # a torch.device stand-in: probe.peak_flops reads .type only


@pytest.fixture
def on_a100(monkeypatch):
    monkeypatch.setattr(probe, "torch", types.SimpleNamespace(
        cuda=types.SimpleNamespace(get_device_name=lambda device: "NVIDIA A100-SXM4-40GB"),
        backends=types.SimpleNamespace(cuda=types.SimpleNamespace(matmul=types.SimpleNamespace(allow_tf32=False)))))
    return probe.torch.backends.cuda.matmul


@pytest.mark.parametrize("precision, peak", [("fp32", 19.5e12), ("bf16", 312e12)])
def test_measured_and_predicted_mfu_divide_by_the_same_peak(on_a100, precision, peak):
    measured_peak, source = probe.peak_flops(A100, precision)
    model, workload = get_model("t5-small"), Workload(global_batch=8, seq_len=128, target_len=32)
    est = estimate(model, make_cluster("a100-40gb", 1, 1), Strategy(engine="ddp", precision=precision), workload)
    assert measured_peak == est.peak_flops == peak and f"({precision} dense peak)" in source
    flops = training_flops(model, workload, recompute="none")
    assert est.mfu == pytest.approx(flops / (est.step_s * 1 * peak), rel=1e-12)
    assert est.mfu == flops_utilization(flops, est.step_s, 1, measured_peak)  # what the engine logs for that time


def test_fp32_counts_as_tf32_only_when_tf32_matmuls_are_on(on_a100):
    assert peak_precision("fp32") == "fp32" and peak_precision("bf16", tf32_matmul=True) == "bf16"
    on_a100.allow_tf32 = True
    assert probe.peak_flops(A100, "fp32")[0] == 156e12  # 8x the fp32 peak: why the flag must be read, not assumed


def test_the_convention_names_numerator_and_denominator():
    assert "model FLOPs per optimizer step" in MFU_CONVENTION and "dense peak" in MFU_CONVENTION
    assert "no recomputation" in MFU_CONVENTION and "encoder and decoder" in MFU_CONVENTION


def test_an_estimates_convention_names_encoder_and_decoder_lengths_only_for_an_encoder_decoder():
    """gpt2's estimate said 'encoder and decoder at their own lengths' (newcomer3): it has one length."""
    cluster, strategy = make_cluster("a100-40gb", nodes=1, gpus_per_node=8), Strategy(engine="deepspeed", zero=1)
    said = {name: estimate(get_model(name), cluster, strategy, Workload(64, 512, target)).to_dict()["flops"]
            for name, target in (("gpt2", 0), ("t5-small", 114))}
    assert "encoder and decoder" not in said["gpt2"]["convention"]
    assert "encoder and decoder at their own lengths" in said["t5-small"]["convention"]
    assert "no recomputation" in said["gpt2"]["convention"] and "MFU/HFU" in said["gpt2"]["convention"]


def test_a_cpu_run_divides_by_its_machines_profile_peak_as_the_prediction_does(tmp_path, monkeypatch):
    """On CPU the peak was timed at each run's start, under whatever load the machine had: the demo's trials at load
    5-7 divided by 21-47 GFLOP/s (MFU 15.8% for a 0.48 s step beside 20.6% for a 0.164 s one of the same work). With
    a cached profile of this machine, the run divides by the profile's peak, as the prediction for it does."""
    from dataclasses import replace

    from scalestudy.costmodel.calibrate import save_profile
    from scalestudy.costmodel.cpu_profile import measured_cluster, profile_path
    from scalestudy.specs.hardware import get_device

    monkeypatch.setenv("SCALESTUDY_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("SCALESTUDY_CPU_PROFILE", "measured")
    monkeypatch.setattr(probe, "measure_matmul_flops", lambda **kw: pytest.fail("timed under the run's own load"))
    save_profile(replace(get_device("local-cpu"), peak_flops={"fp32": 80e9}), profile_path(), "per-machine CPU profile")
    peak, source = probe.peak_flops(types.SimpleNamespace(type="cpu"), "fp32")
    assert peak == 80e9 and "measured fp32 matmul peak of this CPU's profile (80.0 GFLOP/s per rank" in source
    model, workload = get_model("t5-tiny"), Workload(global_batch=4, seq_len=64, target_len=16)
    est = estimate(model, measured_cluster(make_cluster("local-cpu", 1, 1)), Strategy(engine="ddp", precision="fp32"),
                   workload)
    assert est.peak_flops == peak


def test_without_a_cached_profile_a_cpu_run_times_its_peak(tmp_path, monkeypatch):
    monkeypatch.setenv("SCALESTUDY_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("SCALESTUDY_CPU_PROFILE", "measured")
    monkeypatch.setattr(probe, "measure_matmul_flops", lambda **kw: 20e9)
    peak, source = probe.peak_flops(types.SimpleNamespace(type="cpu"), "fp32")
    assert peak == 20e9 and source.startswith("measured fp32 matmul on this CPU rank (20.0 GFLOP/s")
    assert list(tmp_path.iterdir()) == []  # nothing measured or cached by a run
