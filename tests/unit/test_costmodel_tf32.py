"""fp32 matmuls on TF32 Tensor Cores (Strategy.tf32, `--tf32`): the GEMMs at the device's TF32 peak, the
element-wise work unchanged; no effect where torch's flag has none (a V100, 16-bit precisions)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from scalestudy.cli import main
from scalestudy.costmodel.constants import stored
from scalestudy.costmodel.estimate import estimate
from scalestudy.costmodel.step import compute_times
from scalestudy.errors import ScalestudyError
from scalestudy.specs.hardware import get_device, make_cluster
from scalestudy.specs.presets import get_model
from scalestudy.specs.strategy import Strategy, Workload

GPT2 = get_model("gpt2-medium")
WORKLOAD = Workload(global_batch=4, seq_len=1024)


def _forward(device, tf32: bool) -> tuple[float, float]:
    """(forward seconds, dense-GEMM seconds) of one micro-batch of 4 x 1024 GPT-2 345M tokens, eager attention."""
    ct = compute_times(GPT2, device, "fp32", 1, 4, 1024, 0, "none", False, False, stored(), "eager", tf32=tf32)
    return ct.forward, ct.linear


def test_tf32_prices_fp32_gemms_at_the_tf32_peak_and_leaves_the_rest():
    """A100 datasheet: 156 TFLOP/s TF32 dense, 19.5 fp32 -- the dense GEMMs take 19.5 / 156 of their fp32 time; the
    forward's non-GEMM seconds (element-wise bytes at 4 B per element, launches, the eager attention GEMMs' fp32
    score traffic: step.eager_core_bytes) are those of fp32, read off copies of the device whose GEMMs take no time.
    At the TF32 rate the two score GEMMs (2 x 64 FLOPs per 4-byte score) are bound by that traffic, so the forward
    is the rest plus its dense GEMMs."""
    a100 = get_device("a100-40gb")
    off, on = _forward(a100, False), _forward(a100, True)
    assert on[1] == pytest.approx(off[1] * 19.5 / 156.0, rel=1e-12)
    instant = dataclasses.replace(a100, peak_flops={**a100.peak_flops, "tf32": 1e40, "fp32": 1e40})
    rest = _forward(instant, True)[0]  # every GEMM (projections, eager attention's two) ~0 s but the score traffic
    assert rest > 0 and _forward(instant, False)[0] == pytest.approx(rest, rel=1e-12)
    assert on[0] - rest == pytest.approx(on[1], rel=1e-9)


def test_tf32_on_an_h100_uses_its_tf32_peak_and_mfu_divides_by_it():
    h100 = make_cluster("h100-80gb", 1, 1)
    strategy = Strategy(engine="ddp", precision="fp32", attention="eager")
    off = estimate(GPT2, h100, strategy, WORKLOAD)
    on = estimate(GPT2, h100, strategy.replace(tf32=True), WORKLOAD)
    assert (off.peak_flops, on.peak_flops) == (67.0e12, 494.0e12)
    assert on.step_s < off.step_s


@pytest.mark.parametrize("gpu, precision", [("v100-32gb", "fp32"), ("a100-40gb", "bf16"), ("v100-32gb", "fp16")])
def test_tf32_changes_nothing_where_torch_ignores_it(gpu, precision):
    """A V100 has no TF32 Tensor Cores (its YAML states no tf32 peak) and 16-bit matmuls are not fp32: torch's
    allow_tf32 does nothing there, so neither does the option -- same step, same MFU peak."""
    cluster = make_cluster(gpu, 1, 1)
    strategy = Strategy(engine="ddp", precision=precision, attention="eager")
    off = estimate(GPT2, cluster, strategy, WORKLOAD)
    on = estimate(GPT2, cluster, strategy.replace(tf32=True), WORKLOAD)
    assert (on.step_s, on.peak_flops) == (off.step_s, off.peak_flops)


def test_tf32_is_a_boolean_and_off_by_default():
    assert Strategy(engine="ddp").tf32 is False  # torch >= 1.12's default; scalestudy's train never sets it
    assert Strategy.from_dict({"engine": "ddp", "precision": "fp32", "tf32": True}).tf32 is True  # strategy YAML key
    with pytest.raises(ScalestudyError, match="tf32 must be true or false"):
        Strategy(engine="ddp", tf32="yes")


ARGS = ["--model", "gpt2-medium", "--gpu", "a100-40gb", "--nodes", "1", "--gpus-per-node", "8", "--engine", "ddp",
        "--zero", "0", "--tp", "1", "--pp", "1", "--micro-batch", "4", "--global-batch", "32", "--seq-len", "1024",
        "--precision", "fp32", "--attention", "eager", "--recompute", "none", "--offload-optimizer", "none",
        "--offload-params", "none", "--kernels", "engine", "--cross-entropy", "engine", "--optimizer-loop", "engine",
        "--lm-head", "engine", "--recompute-early-stop", "engine", "--grad-buckets", "engine",
        "--json"]  # plan: the software stated, as a row's


def _tokens(argv, capsys) -> float:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    out = capsys.readouterr().out
    assert not exc.value.code, out
    data = json.loads(out)
    best = data["candidates"][0]["estimate"] if "candidates" in data else data
    return best["throughput"]["tokens_per_s"]


def test_tf32_flag_on_estimate_and_plan(capsys):
    """--tf32 / --no-tf32 on both commands; plan keeps it fixed and predicts what estimate does."""
    off = _tokens(["estimate", *ARGS, "--no-tf32"], capsys)
    on = _tokens(["estimate", *ARGS, "--tf32"], capsys)
    assert on > 1.5 * off
    assert _tokens(["plan", *ARGS, "--tf32", "--top", "1"], capsys) == pytest.approx(on, rel=1e-12)
    assert _tokens(["plan", *ARGS, "--no-tf32", "--top", "1"], capsys) == pytest.approx(off, rel=1e-12)
