"""precision fp8 (costmodel/fp8.py): the blocks' linear GEMMs at the FP8 peak with their casts, all else bf16."""

from __future__ import annotations

import dataclasses

import pytest

from scalestudy.costmodel import fp8
from scalestudy.costmodel.constants import stored
from scalestudy.costmodel.estimate import estimate
from scalestudy.costmodel.step import compute_times
from scalestudy.errors import ScalestudyError
from scalestudy.specs.hardware import get_device, make_cluster
from scalestudy.specs.presets import get_model
from scalestudy.specs.run import check_cost_model_only
from scalestudy.specs.strategy import Strategy, Workload

WORKLOAD = Workload(global_batch=64, seq_len=4096)


def _times(precision: str, recipe: str = "", device: str = "h100-80gb", mb: int = 2):
    model = get_model("llama2-7b")
    return compute_times(model, get_device(device), precision, 1, mb, 4096, 0, "none", True, False, stored(),
                         fp8_recipe=recipe)


@pytest.mark.parametrize("recipe", ["te-delayed", "torchao-tensorwise"])
def test_fp8_speeds_up_only_the_linear_gemms(recipe):
    """Linear GEMM time halves (twice the peak, the same curve); the LM head and the attention core keep their bf16
    time, and the casts add element-wise time: the step gains less than 2x."""
    bf16, f8 = _times("bf16"), _times("fp8", recipe)
    assert f8.linear == pytest.approx(bf16.linear / 2.0, rel=1e-2)  # alignment: 16 FP8 elements a vector
    assert f8.head == bf16.head
    assert 1.2 < (bf16.forward + bf16.backward) / (f8.forward + f8.backward) < 2.0
    casts = (f8.forward + f8.backward) - (bf16.forward + bf16.backward) + 1.5 * bf16.linear  # 3 passes, half each
    assert casts > 0.0


def test_torchao_casts_the_weights_every_micro_batch_te_caches_them():
    """torchao tensorwise: an amax pass and a cast of every block weight per forward (roofline_utils), more kernels;
    Transformer Engine delayed scaling: the FP8 weights cached across micro-batches, the scale from the history."""
    te, ao = _times("fp8", "te-delayed"), _times("fp8", "torchao-tensorwise")
    assert ao.forward > te.forward and ao.backward > te.backward
    model = get_model("llama2-7b")
    f_te, b_te, kf_te, kb_te = fp8.per_micro_batch(model, 1, "te-delayed")
    f_ao, b_ao, kf_ao, kb_ao = fp8.per_micro_batch(model, 1, "torchao-tensorwise")
    assert f_ao - f_te > 6.0 * 6.0e9 and (kf_ao, kb_ao) == (5 * 4 * 32, 2 * 4 * 32) and kf_te == 4 * 32


def test_cast_bytes_per_linear():
    """An M x K input and its M x N output gradient, 2 B read + 1 B FP8 + 1 B FP8 transpose each."""
    m, n, k = 8192.0, 11008.0, 4096.0
    fwd, bwd = fp8.linear_cast_bytes(2.0 * m * n * k, n, k, "te-delayed")
    assert (fwd, bwd) == (4.0 * m * k, 4.0 * m * n)


def test_fp8_needs_an_fp8_peak_and_a_fp8_engine():
    model = get_model("llama2-7b")
    st = Strategy(engine="megatron", zero=1, precision="fp8")
    est = estimate(model, make_cluster("h100-80gb", 1, 8), st, WORKLOAD)
    assert est.peak_flops == 1979e12  # MFU divides by the FP8 peak (costmodel/mfu.py), the DGX Cloud convention
    bf16 = estimate(model, make_cluster("h100-80gb", 1, 8), dataclasses.replace(st, precision="bf16"), WORKLOAD)
    assert est.step_s < 0.75 * bf16.step_s
    # Transformer Engine's cached FP8 weights and their transposes: 2 B per block matmul weight, in `buffers`
    cached = est.memory.buffers - bf16.memory.buffers
    assert cached == pytest.approx(2.0 * 32 * (4 * 4096 * 4096 + 3 * 4096 * 11008), rel=0.01)  # Llama 2 7B: MHA
    assert (est.memory.params, est.memory.activations) == (bf16.memory.params, bf16.memory.activations)
    fsdp = dataclasses.replace(st, engine="fsdp", zero=3)  # torchao float8: weights cast per use, none kept
    ao, ao16 = (estimate(model, make_cluster("h100-80gb", 1, 8), dataclasses.replace(fsdp, precision=p), WORKLOAD)
                for p in ("fp8", "bf16"))
    assert ao.memory.buffers == ao16.memory.buffers
    with pytest.raises(ScalestudyError, match="device a100-80gb does not support fp8"):
        estimate(model, make_cluster("a100-80gb", 1, 8), st, WORKLOAD)
    for engine, zero in (("deepspeed", 1), ("ddp", 0)):
        with pytest.raises(ScalestudyError, match="precision fp8 is modelled as Transformer Engine"):
            Strategy(engine=engine, zero=zero, precision="fp8")
    with pytest.raises(ScalestudyError, match="precision fp8 is a cost-model option"):
        check_cost_model_only(Strategy(engine="fsdp", zero=3, precision="fp8"))


def test_fp8_refusals_name_what_the_user_can_do():
    """plan --precision fp8 without --engine said 'not deepspeed' (its first candidate), an engine the user never
    named; train --precision fp8 --engine ddp suggested fsdp, which train then refused as cost-model only."""
    from scalestudy.plan.space import Constraints

    with pytest.raises(ScalestudyError, match="it needs --engine fsdp and/or megatron"):
        Constraints(precision="fp8")
    with pytest.raises(ScalestudyError, match="it needs --engine fsdp and/or megatron"):
        Constraints(precision="fp8", engines=("fsdp", "deepspeed"))
    Constraints(precision="fp8", engines=("fsdp",))
    with pytest.raises(ScalestudyError, match="cost model only: train runs bf16, fp16 or fp32"):
        Strategy(engine="ddp", precision="fp8")


def test_torchtitan_float8_memory_rows_are_priced_as_their_bf16_runs():
    """torchao float8 keeps no FP8 weights (fp8.weight_cache_bytes): the Float8 runs' peak reserved memory is priced
    as the bf16 compile runs' -- published 76.8 / 61.8 vs 77.0 / 62.0 GiB; arrival +2.9 / +5.1% (bound + ~30%)."""
    from scalestudy.costmodel.published import load, memory_row
    data = load()
    rows = {r["id"]: memory_row(r, data["sources"]) for r in data["memory"] if r["id"].startswith("tt-llama3-8b-h100")}
    for gpus in (8, 128):
        f8 = rows[f"tt-llama3-8b-h100-{gpus}-compile-fp8-memory"]
        bf16 = rows[f"tt-llama3-8b-h100-{gpus}-compile-memory"]
        assert f8.predicted == bf16.predicted and abs(f8.error) < 0.07


def test_te_amax_all_reduce_per_chunk_pass_grows_with_the_stage_ranks():
    """Transformer Engine delayed scaling all-reduces (MAX) each fp8_autocast region's amaxes across Megatron-Core's
    amax group (every tp x cp x dp rank of a pipeline stage) at the forward's exit and the backward's end: 2 blocking
    latency-bound all-reduces per model chunk and micro-batch, a cost no bf16 step has, growing with the group (NCCL
    tree: log2(nodes) network hops each way). torchao's dynamic scaling reduces nothing across ranks."""
    from scalestudy.costmodel.comm import links, tree_latency

    lk = links(make_cluster("h100-80gb", 32, 8))
    assert fp8.amax_reduction_s(1, 1, lk) == 0.0
    assert fp8.amax_reduction_s(256, 8, lk) == 2.0 * tree_latency(256, 8, lk) > fp8.amax_reduction_s(16, 8, lk)
    assert (fp8.amax_reductions("te-delayed", 12), fp8.amax_reductions("te-delayed", 1)) == (24.0, 2.0)
    assert fp8.amax_reductions("torchao-tensorwise", 12) == 0.0
    # weak scaling (per-rank work fixed): what fp8 adds over bf16 grows with dp, the interleaved chunks multiplying it
    model = get_model("llama2-7b")
    st = Strategy(engine="megatron", zero=1, precision="fp8", tp=4, pp=2, micro_batch=1, pp_schedule="interleaved",
                  virtual_stages=2, sequence_parallel=True)

    def gap(nodes: int) -> float:
        wl = Workload(global_batch=16 * nodes, seq_len=4096)
        steps = [estimate(model, make_cluster("h100-80gb", nodes, 8), dataclasses.replace(st, precision=p), wl).step_s
                 for p in ("bf16", "fp8")]
        return steps[0] - steps[1]  # the time fp8 saves

    # tp 4 x dp 2 = 8 ranks a stage in one node (ring) -> tp 4 x dp 64 = 256 ranks over 32 nodes (tree)
    assert fp8.amax_reduction_s(8, 8, lk) == 2.0 * 7 * lk[1]
    per_mb = 2 * 2 * (fp8.amax_reduction_s(256, 8, lk) - fp8.amax_reduction_s(8, 8, lk))
    assert gap(2) - gap(64) == pytest.approx(16 * per_mb, rel=0.1)  # 16 micro-batches a step


def test_te_amax_update_kernel_per_autocast_region_and_pass():
    """Transformer Engine runs its fused amax-history / scale update (fused_amax_and_scale_update_after_reduction)
    once per fp8_autocast region and pass, after that region's amax reduction: Megatron-Core's regions are a rank's
    model chunks, so 2 x 12 update kernels a micro-batch on a 12-chunk interleaved rank, 2 without interleaving --
    not one per pass of the whole model shared out over the stages. The history's bytes are the same however the
    blocks are split into regions, so they stay in the blocks' element-wise time."""
    from scalestudy.costmodel.comm import links
    from scalestudy.costmodel.options import CostOptions
    from scalestudy.costmodel.stage_terms import _fp8_amax_s, setting
    from scalestudy.specs.strategy import resolve_layout

    model, cluster, cal = get_model("llama2-7b"), make_cluster("h100-80gb", 1, 8), stored()
    linears = fp8.linear_layers(model)
    assert fp8.per_micro_batch(model, 1, "te-delayed")[2:] == (linears, linears)  # the cast kernels only
    reduce_s = fp8.amax_reduction_s(4, 4, links(cluster))  # tp 4 x dp 1: the stage's ranks

    def amax_s(**kw) -> float:
        st = Strategy(**{"engine": "megatron", "zero": 1, "precision": "fp8", "tp": 4, "pp": 2, "micro_batch": 1, **kw})
        cfg = setting(model, cluster, st, resolve_layout(st, 8, 16), 4096, 0, cal, CostOptions())
        return _fp8_amax_s(cfg, cluster)

    assert amax_s() == pytest.approx(2 * (reduce_s + cal.kernel_overhead_s))
    assert amax_s(pp_schedule="interleaved", virtual_stages=4) == pytest.approx(8 * (reduce_s + cal.kernel_overhead_s))
    assert amax_s(pp_schedule="interleaved", virtual_stages=4, precision="bf16") == 0.0


def test_fp8_params_hold_and_gather_the_block_weights_in_one_byte():
    """NeMo / Megatron-Core fp8_params (Transformer Engine FP8 model parameters): the blocks' linear weights are FP8
    tensors -- 1 B in the weights instead of bf16's 2, only the transpose cached (1 B instead of the FP8 copy and its
    transpose) -- and the distributed optimizer all-gathers them in 1 byte; the optimizer's fp32 master, the
    gradients and the activations are untouched. Only precision fp8 under engine megatron; train refuses fp8."""
    model = get_model("llama2-7b")
    cluster = make_cluster("h100-80gb", 4, 8)
    wl = Workload(global_batch=256, seq_len=4096)
    st = Strategy(engine="megatron", zero=1, precision="fp8", tp=4, micro_batch=1, sequence_parallel=True)
    plain, held = (estimate(model, cluster, dataclasses.replace(st, fp8_params=f), wl) for f in (False, True))
    matmul = 32 * (4 * 4096 * 4096 + 3 * 4096 * 11008) / 4  # Llama 2 7B's block linear weights on a tp-4 rank
    assert plain.memory.params - held.memory.params == pytest.approx(matmul, rel=0.01)
    assert plain.memory.buffers - held.memory.buffers == pytest.approx(matmul, rel=0.01)
    assert (held.memory.grads, held.memory.optimizer, held.memory.activations) == (
        plain.memory.grads, plain.memory.optimizer, plain.memory.activations)
    # the distributed optimizer's parameter all-gather carries 1 B per block weight instead of 2
    assert held.dp_comm_total_s < plain.dp_comm_total_s and held.step_s <= plain.step_s
    assert fp8.param_bytes_saved(matmul) == matmul
    assert fp8.block_matmul_elems(model, 32, 4) == pytest.approx(matmul)
    for bad in (dict(precision="bf16"), dict(engine="fsdp", zero=3)):
        with pytest.raises(ScalestudyError, match="fp8_params describes Transformer Engine's FP8 model parameters"):
            dataclasses.replace(st, fp8_params=True, **bad)
    with pytest.raises(ScalestudyError, match="fp8_params must be true or false"):
        dataclasses.replace(st, fp8_params="yes")
    with pytest.raises(ScalestudyError, match="engine megatron describes published runs for the cost model only"):
        check_cost_model_only(dataclasses.replace(st, fp8_params=True))
