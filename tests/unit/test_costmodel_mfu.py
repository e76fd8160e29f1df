"""One MFU definition: the engine's measured MFU and the cost model's predicted MFU divide by the same peak."""

from __future__ import annotations

import types

import pytest

from scalestudy.costmodel.estimate import estimate
from scalestudy.costmodel.flops import training_flops
from scalestudy.costmodel.mfu import MFU_CONVENTION, flops_utilization, peak_precision
from scalestudy.engine import probe
from scalestudy.specs.hardware import make_cluster
from scalestudy.specs.model import get_model
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
