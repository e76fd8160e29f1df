"""GEMM dimension alignment (costmodel/alignment.py): which GEMMs are unaligned, what the device data charges, and
that aligned models do not move."""

from dataclasses import replace

import pytest

from scalestudy.costmodel.alignment import alignment, flash_head_dim_factor, gemm_fraction
from scalestudy.costmodel.constants import stored
from scalestudy.costmodel.step import compute_times
from scalestudy.specs.hardware import get_device
from scalestudy.specs.presets import get_model


@pytest.mark.parametrize("dims, expected", [
    ((50304, 768), 8), ((50257, 768), 1), ((8700, 11600), 4), ((2900, 11600), 4), ((5800, 11600), 8),
    ((114, 64), 2), ((1024, 145), 1), ((32100, 768), 4), ((50257 / 2, 768), 1),  # a width not divisible by tp
])
def test_alignment_is_the_largest_power_of_two_dividing_every_leading_dim(dims, expected):
    assert alignment(*dims) == expected


@pytest.mark.parametrize("device, precision, dims, expected", [
    ("a100-80gb", "bf16", (50304, 768), 1.0),  # aligned: never charged
    ("a100-80gb", "bf16", (50257, 768), 0.35),  # odd vocabulary (HF GPT-2): the PyTorch post's 'nearly 3x' on A100
    ("a100-40gb", "bf16", (50257, 768), 0.35),  # the same die
    ("a100-80gb", "bf16", (114, 64), 0.5),  # 2-element aligned (T5 decoder length 114): not measured, 0.5
    ("v100-32gb", "fp16", (8700, 11600), 0.5),  # tr8's TP4 QKV width
    ("v100-32gb", "fp16", (50257, 768), 0.35),  # odd: the A100 value assumed (no V100 measurement)
    ("v100-16gb", "fp16", (50257, 768), 0.35),
    ("h100-80gb", "bf16", (50257, 768), 0.28),  # Hopper: sm80 fallback kernels
    ("h200", "bf16", (588, 1152), 0.28),
    ("a100-80gb", "fp32", (50257, 768), 1.0),  # only 16-bit GEMMs are priced
])
def test_unaligned_gemm_runs_at_the_device_fraction(device, precision, dims, expected):
    assert gemm_fraction(get_device(device), precision, *dims) == pytest.approx(expected)


def test_a_device_without_alignment_data_charges_nothing():
    dev = replace(get_device("a100-80gb"), unaligned_gemm_fraction=[])
    assert gemm_fraction(dev, "bf16", 50257, 768) == 1.0


def test_flash_pads_the_head_dimension_to_a_multiple_of_8():
    assert flash_head_dim_factor(128) == 1.0
    assert flash_head_dim_factor(145) == pytest.approx(152 / 145)


def _times(model, device, **kw):
    args = dict(precision="bf16", tp=1, micro_batch=8, seq_len=1024, target_len=0, recompute="none", flash=True,
                sp=False, cal=stored())
    args.update(kw)
    return compute_times(model, device, **args)


def test_unaligned_vocabulary_slows_only_the_lm_head_and_aligned_models_do_not_move():
    dev = get_device("a100-80gb")
    bare = replace(dev, unaligned_gemm_fraction=[])
    gpt2 = get_model("gpt2")
    padded = gpt2.with_vocab(50304)
    odd, even = _times(gpt2, dev), _times(padded, dev)
    assert odd.forward == even.forward and odd.backward == even.backward  # blocks: same widths
    assert odd.head > 1.3 * even.head  # the 50257-wide head GEMMs at half the aligned rate (+ the same CE bytes)
    same = _times(padded, bare)
    assert (same.forward, same.backward, same.head) == (even.forward, even.backward, even.head)
    # 50304 / tp 2 = 25152 stays a multiple of 8: the head is unchanged
    assert _times(padded, dev, tp=2).head == _times(padded, bare, tp=2).head


def test_odd_head_dimension_slows_eager_attention_cores():
    dev = get_device("v100-32gb")
    bare = replace(dev, unaligned_gemm_fraction=[])
    model = get_model("gpt2")
    odd_heads = replace(model, d_model=1160, num_heads=8, d_kv=145)  # head dim 145 as BigScience tr8
    kw = dict(precision="fp16", flash=False)
    assert _times(odd_heads, dev, **kw).forward > _times(odd_heads, bare, **kw).forward
    assert _times(model, dev, **kw).forward == _times(model, bare, **kw).forward


def test_estimate_note_names_the_unaligned_gemms():
    from scalestudy.costmodel.alignment import unaligned_gemms

    a100, gpt2 = get_device("a100-80gb"), get_model("gpt2")
    assert [g[0] for g in unaligned_gemms(gpt2, a100, "bf16", 1, 1024, 0, True, "ddp")] == ["LM head"]
    assert unaligned_gemms(gpt2, a100, "bf16", 1, 1024, 0, True, "megatron") == []  # Megatron pads to 128 x tp
    # the head as priced (step._head_s at strategy.vocab_shards): split over tp 2, or whole under lm_head replicated
    assert unaligned_gemms(gpt2, a100, "bf16", 2, 1024, 0, True, "ddp")[-1][1] == (50257 / 2, 768)
    assert unaligned_gemms(gpt2, a100, "bf16", 2, 1024, 0, True, "ddp", head_tp=1)[-1][1] == (50257, 768)
    tr8 = replace(gpt2, d_model=11600, num_heads=80, d_kv=145, d_ff=46400, vocab_size=50688)
    found = {name: (a, f) for name, _, a, f in unaligned_gemms(tr8, get_device("v100-32gb"), "fp16", 4, 2048, 0,
                                                                 False, "deepspeed")}
    assert found == {"QKV": (4, 0.5), "attention output": (4, 0.5), "attention scores": (1, 0.35)}


@pytest.mark.parametrize("dims, expected, cublas_11", [
    ((1024, 100), 15.7 / 125.0, 0.5),  # head dim 100 (DeepSpeed's 2020 1.5B GPT-2): CUDA cores, V100 fp32 / fp16 peaks
    ((50257, 768), 15.7 / 125.0, 0.35),  # an odd vocabulary: the same fallback, whatever the alignment
    ((1024, 128), 1.0, 1.0),  # aligned: Tensor Cores under cuBLAS 10 too
])
def test_cublas_10_runs_unaligned_fp16_gemms_without_tensor_cores(dims, expected, cublas_11):
    v100 = get_device("v100-32gb")
    assert gemm_fraction(v100, "fp16", *dims, cublas="10") == pytest.approx(expected)
    assert gemm_fraction(v100, "fp16", *dims) == cublas_11  # cuBLAS 11: the device table


def test_cublas_10_slows_only_the_unaligned_attention_cores():
    dev, gpt2 = get_device("v100-32gb"), get_model("gpt2")
    hd100 = replace(gpt2, d_model=1600, num_heads=16, d_kv=100, d_ff=6400, vocab_size=50304)
    kw = dict(precision="fp16", flash=False, micro_batch=1)
    old, new = _times(hd100, dev, cublas="10", **kw), _times(hd100, dev, **kw)
    assert old.forward > new.forward and old.linear == new.linear  # projections aligned: unchanged
    assert old.head == new.head
    aligned = replace(hd100, num_heads=25, d_kv=64)
    assert _times(aligned, dev, cublas="10", **kw).forward == _times(aligned, dev, **kw).forward


def test_an_unknown_cublas_version_is_refused_in_one_line():
    from scalestudy.errors import ScalestudyError
    from scalestudy.specs.strategy import Strategy

    with pytest.raises(ScalestudyError, match=r"unknown cublas '9' \(choose from 11, 10\)"):
        Strategy(engine="deepspeed", precision="fp16", cublas="9")
