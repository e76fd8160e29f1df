"""attention_kernel triton: flash-attn < 2.0's Triton FlashAttention (flash_attn_triton.py; Megatron-DeepSpeed's
--use-flash-attn-triton, llm-foundry's attn_impl triton) -- FA2's rate on its head dimension padded to a power of two
(alignment.triton_flash_head_dim_factor, step.compute_times)."""
from __future__ import annotations

import dataclasses

import pytest

from scalestudy.costmodel.alignment import triton_flash_head_dim_factor
from scalestudy.costmodel.constants import stored
from scalestudy.costmodel.estimate import estimate
from scalestudy.costmodel.published import _setup, load
from scalestudy.costmodel.step import compute_times
from scalestudy.specs.hardware import get_device
from scalestudy.specs.presets import get_model


def test_the_kernel_tiles_the_head_dimension_as_the_next_power_of_two():
    """BLOCK_HEADDIM = max(triton.next_power_of_2(d), 16): 96 runs 128 columns (4/3 of the work), 80 runs 128,
    64 / 128 as they are, 8 runs 16."""
    assert triton_flash_head_dim_factor(96) == pytest.approx(128 / 96)
    assert triton_flash_head_dim_factor(80) == pytest.approx(128 / 80)
    assert [triton_flash_head_dim_factor(d) for d in (64, 128, 16)] == [1.0, 1.0, 1.0]
    assert triton_flash_head_dim_factor(8) == 2.0


def test_triton_prices_as_fa2_at_a_power_of_two_head_dim():
    """llm-foundry's Triton rows (head dim 64 / 128) keep FA2's pricing: the same times at head dim 128."""
    cal, a100 = stored(), get_device("a100-40gb")
    fa2, triton = (compute_times(get_model("llama-7b"), a100, "bf16", 1, 1, 16384, 0, "full", True, False, cal,
                                 "fused", k) for k in ("fa2", "triton"))
    assert (triton.forward, triton.backward, triton.flops_hw) == (fa2.forward, fa2.backward, fa2.flops_hw)


def test_head_dim_96_pays_a_third_more_attention_core_forward_and_backward_alike():
    """DeepSpeed4Science's GPT 30B (hidden 6144, 64 heads: head dim 96) at 64K context: the Triton kernel's extra
    time is the attention core's third, so its backward share is FA2's 2.5x the forward (no recompute here); the
    hardware FLOPs counted are the model's, unchanged."""
    row = next(r for r in load()["throughput"] if r["id"] == "ds4sci-gpt30b-tp32-a100-32g-s64k")
    model, cluster, _, _ = _setup(row)
    assert model.d_model // model.num_heads == 96
    cal = stored()
    fa2, triton = (compute_times(model, cluster.device, "fp16", 32, 1, 65536, 0, "none", True, True, cal, "fused", k)
                   for k in ("fa2", "triton"))
    extra_f, extra_b = triton.forward - fa2.forward, triton.backward - fa2.backward
    assert 0.15 * fa2.forward < extra_f < fa2.forward / 3  # a third of the core, the core most of the forward
    assert extra_b == pytest.approx(2.5 * extra_f, rel=1e-9)
    assert triton.flops_hw == fa2.flops_hw


def test_the_published_ds4sci_rows_name_the_triton_kernel_and_estimate_slower_than_fa2():
    rows = [r for r in load()["throughput"] if r["source"] == "deepspeed2023ds4sci"]
    assert len(rows) == 8 and all(r["software"]["attention_kernel"] == "triton" for r in rows)
    model, cluster, st, w = _setup(rows[-1])
    assert estimate(model, cluster, st, w).step_s > estimate(
        model, cluster, dataclasses.replace(st, attention_kernel="fa2"), w).step_s
