"""FlashAttention-1's key-block loop (costmodel/flash_v1.py): its fp32 partial-output traffic, the roofline that
prices it (step.compute_times), and attention_kernel fa1 as a Strategy option."""
from __future__ import annotations

import pytest

from scalestudy.costmodel.constants import stored
from scalestudy.costmodel.estimate import estimate
from scalestudy.costmodel.flash_v1 import fa1_key_block, fa1_loop_bytes, fa1_passes_per_row
from scalestudy.costmodel.step import compute_times
from scalestudy.specs.hardware import get_device, make_cluster
from scalestudy.specs.presets import get_model
from scalestudy.specs.strategy import Strategy, Workload


def test_key_block_is_the_kernel_traits_of_each_head_dim():
    """flash-attn v0.2.2 fmha_fwd_hdim{32,64,128}.cu: 256 keys per block up to head dim 64, 128 at 96-128."""
    assert [fa1_key_block(d) for d in (32, 64, 80, 96, 128)] == [256, 256, 128, 128, 128]


def test_rows_are_revisited_once_per_key_block_and_a_causal_mask_skips_the_upper_blocks():
    """Head dim 128, 16,384 keys: 128 blocks; causal, block j runs rows 128 j .. 16383, sum_j (16384 - 128 j) / 16384
    = 64.5 passes per row; keys that fit one block run no loop (no fp32 buffer: mha_fwd allocates o_tmp only then)."""
    assert fa1_passes_per_row(16384, 128, causal=False) == 128
    assert fa1_passes_per_row(16384, 128, causal=True) == 64.5
    assert fa1_passes_per_row(128, 128, causal=True) == 0.0 and fa1_passes_per_row(256, 64, causal=False) == 0.0
    assert fa1_passes_per_row(2048, 64, causal=False) == 8


def test_loop_bytes_per_row_pass_and_the_intensity_under_an_a100_ridge():
    """One (batch, head) of 16,384 causal rows at head dim 128: 16,384 x 64.5 row-passes x (10 x 128 + 16) B forward,
    x (12 x 128 + 8) B backward. Forward FLOPs per byte of a pass, 4 x 128 x 128 / 1296 = 50.6, is under the A100's
    312 TFLOP/s over 2.04 TB/s (153), so the loop bounds FA1 at head dim 128; at 64 (256 keys) the ratio doubles."""
    flops = 4.0 * 16384 * 16384 * 128
    fwd, bwd = fa1_loop_bytes(flops, 16384, 128, causal=True)
    assert fwd == 16384 * 64.5 * 1296 == 1_369_571_328
    assert bwd == 16384 * 64.5 * (12 * 128 + 8)
    a100 = get_device("a100-80gb")
    ridge = a100.peak("bf16") / a100.hbm_bytes_per_s
    full_square = fa1_loop_bytes(flops, 16384, 128, causal=False)[0]
    assert flops / full_square == pytest.approx(50.57, abs=0.01) and ridge == pytest.approx(153, abs=1)
    flops64 = 4.0 * 16384 * 16384 * 64
    assert flops64 / fa1_loop_bytes(flops64, 16384, 64, causal=False)[0] == pytest.approx(99.9, abs=0.1)


def test_fa1_is_fa2_where_the_loop_does_not_bind_and_slower_where_it_does():
    """On an A100 40GB (1.56 TB/s) a head-dim-128 model at 16K keys pays the loop over FA2's rate, more than on the
    80GB (2.04 TB/s); a head-dim-64 model (key block 256) at 2K does not: FA1 prices as FA2 there. The hardware
    FLOPs do not change (the same attention)."""
    cal = stored()
    big, small = get_model("llama-7b"), get_model("gpt2")  # head dims 128 and 64
    a40, a80 = get_device("a100-40gb"), get_device("a100-80gb")
    times = {(m.name, d.name, s, k): compute_times(m, d, "bf16", 1, 1, s, 0, "full", True, False, cal, "fused", k)
             for m, s in ((big, 16384), (small, 2048)) for d in (a40, a80) for k in ("fa1", "fa2")}
    slow40 = times[big.name, a40.name, 16384, "fa1"].forward / times[big.name, a40.name, 16384, "fa2"].forward
    slow80 = times[big.name, a80.name, 16384, "fa1"].forward / times[big.name, a80.name, 16384, "fa2"].forward
    assert slow40 > slow80 > 1.0
    assert times[big.name, a40.name, 16384, "fa1"].backward > times[big.name, a40.name, 16384, "fa2"].backward
    assert times[big.name, a40.name, 16384, "fa1"].flops_hw == times[big.name, a40.name, 16384, "fa2"].flops_hw
    for d in (a40, a80):
        assert times[small.name, d.name, 2048, "fa1"] == times[small.name, d.name, 2048, "fa2"]


def test_attention_kernel_fa1_is_a_strategy_option_of_the_estimate():
    """Strategy(attention_kernel='fa1') estimates (it was refused before), slower than fa2 at 16K on an A100 40GB."""
    w, cluster = Workload(global_batch=8, seq_len=16384), make_cluster("a100-40gb", 1, 8)
    fa1, fa2 = (estimate(get_model("llama-7b"), cluster, Strategy(engine="fsdp", zero=3, micro_batch=1,
                                                                   recompute="full", attention_kernel=k), w)
                for k in ("fa1", "fa2"))
    assert fa1.compute_s > fa2.compute_s
