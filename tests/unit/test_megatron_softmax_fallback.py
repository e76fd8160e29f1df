"""Megatron's fused scale-mask-softmax and its PyTorch fp32 fallback (costmodel/megatron_softmax.py): the
kernel-availability rule of each code version, the rows that state the fallback, and what it costs."""

from dataclasses import replace

import pytest

from scalestudy.costmodel.constants import stored
from scalestudy.costmodel.estimate import estimate
from scalestudy.costmodel.megatron_softmax import (TORCH_SOFTMAX, batch_per_block, fused_softmax_runs,
                                                   torch_softmax_extra_bytes, torch_softmax_extra_kernels)
from scalestudy.costmodel.published import _setup, load
from scalestudy.errors import ScalestudyError
from scalestudy.specs.strategy import Strategy

# Sources run on BigScience's Megatron-DeepSpeed between 9f5f5d4c (2021-10-21) and 1cb76a64 (2022-03-06), whose
# get_batch_per_block received the heads per rank as the key length; tr1-13B (August-September 2021) ran before it
BIGSCIENCE_2021_10 = ("bigscience2021tr3m", "bigscience2021tr8", "bigscience2022layouts", "bigscience2022prequel")
# fp32 runs of a copy of Megatron's GPT (FlagPerf's gpt2-pytorch under torch DDP): its FusedScaleMaskSoftmax calls
# forward_torch_softmax unconditionally, and is_kernel_available refuses fp32 input in any case
FP32_MEGATRON_GPT = ("flagperf2023fp32",)


def test_batch_per_block_is_the_cuda_helper():
    """scaled_masked_softmax.h: 128 threads, a warp per min(next power of two, 32) elements, 2 rows per warp up to
    128 elements: 2048 keys -> 4 rows per block; 16 -> 16; 8 -> 32; 20, 40 and 128 -> 8; 129 -> 4."""
    assert [batch_per_block(n) for n in (2048, 1024, 16, 8, 20, 40, 128, 129)] == [4, 4, 16, 32, 8, 8, 8, 4]


def test_bigscience_rule_fails_small_head_counts_where_megatron_passes():
    """The permuted call: with 8 heads per rank the fused kernel needs b x 8 % 32 (only b = 4, 8, ...), with 16 any
    b; Megatron's own rule at 2048 keys asks b x np % 4, which the shape checks already ask."""
    assert not fused_softmax_runs("bigscience-2021-10", 1, 8, 2048)
    assert [fused_softmax_runs("bigscience-2021-10", b, 8, 2048) for b in (1, 2, 4, 6, 8)] == \
        [False, False, True, False, True]
    assert all(fused_softmax_runs("bigscience-2021-10", b, 16, 2048) for b in (1, 2, 4, 8))
    assert not fused_softmax_runs("bigscience-2021-10", 1, 20, 2048) and fused_softmax_runs("bigscience-2021-10", 1,
                                                                                          40, 2048)
    assert all(fused_softmax_runs("megatron", b, np, 2048) for b in (1, 2, 4, 6) for np in (8, 16, 20, 40))
    assert not fused_softmax_runs("bigscience-2021-10", 4, 8, 4096) and fused_softmax_runs("megatron", 4, 8, 4096)
    with pytest.raises(ValueError):
        fused_softmax_runs("apex", 1, 8, 2048)


def test_rows_state_the_fallback_exactly_where_their_code_took_it():
    """Every row of the 2021-10..2022-03 sources says attention_kernel torch-softmax iff that code's rule skipped the
    fused kernel for its (micro-batch, heads / tp, seq); the fp32 Megatron GPT copy's rows always say it; tr1's
    earlier code and the other eager Megatron rows keep the fused kernel."""
    fallbacks = 0
    for r in load()["throughput"]:
        st = r.get("software", {})
        stated = st.get("attention_kernel") == TORCH_SOFTMAX
        if r["source"] in BIGSCIENCE_2021_10:
            fused = fused_softmax_runs("bigscience-2021-10", int(r["micro_batch"]),
                                       r["model"]["heads"] // int(r.get("tp", 1)), r["model"]["seq"])
            assert stated == (not fused), r["id"]
            fallbacks += stated
        elif r["source"] in FP32_MEGATRON_GPT and r["model"].get("family", "gpt") == "gpt":
            assert stated and r["precision"] == "fp32", r["id"]
        else:
            assert not stated, r["id"]
    # tr3m's 2 TP 2 rows, tr8's 2 TP 4 rows, the TP 8 rows at MBS 1 / 2 / 6 of layouts (6) and the prequel (2)
    assert fallbacks == 12


def test_fallback_bytes_and_time():
    """fp16 scores: the fallback moves 36 B forward and 40 B backward per score against the fused kernel's 4 and 6;
    on tr3m's TP 2 row (PP 1, 128 micro-batches per replica) it adds, per micro-batch, those bytes over the V100's
    HBM rate for the scores of 8 heads x 2048 x 2048 x 24 layers -- the forward's twice under full recompute -- and
    its 4 + 4 launches per layer (the forward's again) at the fitted per-kernel time. fp32 scores skip the two casts
    each way: the scale and the mask, 16 B and two launches each way."""
    assert torch_softmax_extra_bytes(2) == (32.0, 34.0)
    assert torch_softmax_extra_bytes(4) == (16.0, 16.0)
    assert torch_softmax_extra_kernels(2) == (4, 4) and torch_softmax_extra_kernels(4) == (2, 2)
    (row,) = [r for r in load()["throughput"] if r["id"] == "bs-tr3m-1b3-v100-2n-tp2pp1dp4-mb1"]
    model, cluster, strategy, workload = _setup(row)
    fused = replace(strategy, attention_kernel="engine")
    slow, fast = estimate(model, cluster, strategy, workload), estimate(model, cluster, fused, workload)
    scores = 8 * 2048 * 2048 * 24
    per_micro_batch = (scores * (2 * 32 + 34) / cluster.device.hbm_bytes_per_s
                       + 24 * (2 * 4 + 4) * stored().kernel_overhead_s)
    assert slow.compute_s - fast.compute_s == pytest.approx(128 * per_micro_batch, rel=1e-6)
    assert 8.0 < slow.step_s - fast.step_s < 13.0  # of the run's 53 s against the fused model's 34 s


def test_torch_softmax_is_refused_outside_megatron_eager_attention():
    with pytest.raises(ScalestudyError, match="torch-softmax"):
        Strategy(engine="deepspeed", attention="flash", attention_kernel=TORCH_SOFTMAX)
    with pytest.raises(ScalestudyError, match="torch-softmax"):
        Strategy(engine="fsdp", zero=3, attention="eager", attention_kernel=TORCH_SOFTMAX)
    Strategy(engine="megatron", attention="eager", attention_kernel=TORCH_SOFTMAX)
    Strategy(engine="ddp", attention="eager", attention_kernel=TORCH_SOFTMAX)  # a Megatron model copy under DDP


def test_plan_refuses_torch_softmax_outside_megatron_eager_attention_up_front():
    from scalestudy.plan.space import Constraints
    for kwargs in ({}, {"attention": "eager"}, {"attention": "eager", "engines": ("deepspeed", "fsdp")}):
        with pytest.raises(ScalestudyError, match="torch-softmax"):
            Constraints(attention_kernel=TORCH_SOFTMAX, **kwargs)
    Constraints(attention_kernel=TORCH_SOFTMAX, attention="eager", engines=("deepspeed", "megatron"))
    Constraints(attention_kernel=TORCH_SOFTMAX, attention="eager", engines=("ddp",))
