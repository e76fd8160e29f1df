"""An eager attention core (scores = Q K^T, context = P V as batched GEMMs) is no faster than its score traffic:
each GEMM writes or reads every score at HBM speed (step.eager_core_bytes), the roofline its 2 x head-dim FLOPs
per score cannot beat. Flash kernels keep the scores on chip and are not bound so."""

from __future__ import annotations

import dataclasses

import pytest

from scalestudy.costmodel.constants import stored
from scalestudy.costmodel.step import compute_times, eager_core_bytes, elementwise_bytes
from scalestudy.specs.hardware import get_device
from scalestudy.specs.presets import get_model

GPT2 = get_model("gpt2-medium")  # 24 layers, 16 heads of 64


def _forward(device, precision: str) -> float:
    return compute_times(GPT2, device, precision, 1, 4, 1024, 0, "none", False, False, stored(), "eager").forward


def test_core_bytes_are_one_score_pass_per_gemm():
    """Two GEMMs of 2 x 64 FLOPs per score (step._layer_gemms' 4 x b x s^2 x inner) touch every score once each."""
    flops = 4.0 * 4 * 1024 * 1024 * 1024  # b 4, s 1024, 16 heads x 64, one layer
    scores = 4 * 16 * 1024 * 1024
    assert eager_core_bytes(flops, 64, "bf16") == 2 * scores * 2
    assert eager_core_bytes(flops, 64, "fp32") == 2 * scores * 4


@pytest.mark.parametrize("precision", ["bf16", "fp32"])
def test_with_instant_gemms_the_forward_still_streams_the_scores(precision):
    """GEMMs made instant: the forward's seconds beyond its launches are the element-wise bytes (counted per kernel:
    at calibration elementwise_hbm_fraction of the HBM rate) plus the cores' score bytes over HBM; without the bound
    the cores would cost nothing."""
    a100 = get_device("a100-40gb")
    instant = dataclasses.replace(a100, peak_flops={k: 1e40 for k in a100.peak_flops})
    no_hbm = dataclasses.replace(instant, hbm_bytes_per_s=1e40)
    ew_f, _ = elementwise_bytes(GPT2, 4, 1024, 0, precision, False, 1, False, "eager")
    a = 2 if precision == "bf16" else 4
    core = 24 * 2 * (4 * 16 * 1024 * 1024) * a
    ew_rate = a100.hbm_bytes_per_s * stored().elementwise_hbm_fraction
    assert _forward(instant, precision) - _forward(no_hbm, precision) == pytest.approx(
        ew_f / ew_rate + core / a100.hbm_bytes_per_s, rel=1e-9)


def test_bf16_scores_bind_on_an_a100_fp32_does_not():
    """bf16 on an A100: 64 FLOP/B per score against ~126 at the GEMM curve's rate -- the cores take their score
    bytes' time. fp32 without TF32 (19.5 TFLOP/s): 32 FLOP/B against ~8, compute-bound: the bound does not bind."""
    a100 = get_device("a100-40gb")
    slow_hbm = dataclasses.replace(a100, hbm_bytes_per_s=a100.hbm_bytes_per_s / 2)
    ew_bf16, _ = elementwise_bytes(GPT2, 4, 1024, 0, "bf16", False, 1, False, "eager")
    core_bf16 = 24 * 2 * (4 * 16 * 1024 * 1024) * 2
    ew_rate = a100.hbm_bytes_per_s * stored().elementwise_hbm_fraction
    assert _forward(slow_hbm, "bf16") - _forward(a100, "bf16") == pytest.approx(
        ew_bf16 / ew_rate + core_bf16 / a100.hbm_bytes_per_s, rel=1e-9)
    ew_fp32, _ = elementwise_bytes(GPT2, 4, 1024, 0, "fp32", False, 1, False, "eager")
    assert _forward(slow_hbm, "fp32") - _forward(a100, "fp32") == pytest.approx(ew_fp32 / ew_rate, rel=1e-9)
