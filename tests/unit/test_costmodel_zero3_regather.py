"""FSDP under a reentrant full recompute gathers every block twice in the backward, once exposed (engines.yaml
regather_on_recompute, terms._sharded_dp_comm); DeepSpeed's recompute gathers are held into the backward by the reuse
distance (zero3.zero3_reuse)."""

import dataclasses

import pytest

from scalestudy.costmodel.comm import gather_parts, links
from scalestudy.costmodel.engines import engine_comm
from scalestudy.costmodel.estimate import estimate
from scalestudy.costmodel.params import params_per_device
from scalestudy.costmodel.published import _setup, load


def _row(row_id: str) -> dict:
    return next(r for r in load()["throughput"] if r["id"] == row_id)


def test_fsdp_reentrant_recompute_regathers_each_block_and_exposes_it():
    # DeepCompile's FSDP1 baseline (HF gradient checkpointing, use_reentrant True) at 1 x 512 tokens per GPU on 4 x 8
    # A100: the backward gathers each block for the recompute and again for its own pass, right after the recompute
    model, cluster, st, work = _setup(_row("deepcompile-llama3-70b-fsdp-a100-32g-b1-s512"))
    assert st.recompute_early_stop == "off"
    reentrant = estimate(model, cluster, st, work)
    nested = estimate(model, cluster, dataclasses.replace(st, recompute_early_stop="on"), work)
    eng, dp = engine_comm("fsdp"), 32
    bandwidth, latency = gather_parts(params_per_device(model, 1, 1) * 2, dp, 8, links(cluster),
                                      eng.collective_efficiency, eng.gather_rails, model.num_layers)
    one_pass = bandwidth + latency  # every block's bf16 all-gather once, 4 nodes' pooled NICs
    assert 0.5 < one_pass < 1.2  # 141 GB over 8 x 23 GB/s per node: ~0.8 s
    # one more gather pass in the step's traffic, and about all of it exposed (nothing runs while it is in flight;
    # the early-stopped recompute also runs less compute for the other collectives to hide behind)
    assert reentrant.dp_comm_total_s - nested.dp_comm_total_s == pytest.approx(one_pass, rel=0.05)
    assert reentrant.dp_comm_s - nested.dp_comm_s >= 0.85 * one_pass
    # torchtitan-style non-reentrant checkpointing (early stop on, fsdp's default) is unchanged: no extra gather
    default = estimate(model, cluster, dataclasses.replace(st, recompute_early_stop="engine"), work)
    assert default.dp_comm_total_s == pytest.approx(nested.dp_comm_total_s)


def test_fsdp_cpu_offload_copies_the_regathered_shard_up_again():
    # CPU offload: each unshard copies the block's fp32 host shard to the device before its all-gather (FSDP1
    # _use_low_precision_shard / FSDP2 CPUOffloadPolicy), each reduce-scatter copies the gradient shard back. Under
    # the reentrant recompute the re-gather is one more unshard, so one more copy per micro-batch: (3 + 1) against
    # (2 + 1) shard-sized PCIe transfers, with the same host Adam step
    model, cluster, st, work = _setup(_row("deepcompile-llama3-70b-fsdp-a100-32g-b1-s512"))
    offloaded = dataclasses.replace(st, offload_optimizer="cpu", offload_params="cpu")
    reentrant = estimate(model, cluster, offloaded, work)
    nested = estimate(model, cluster, dataclasses.replace(offloaded, recompute_early_stop="on"), work)
    assert nested.offload_s > 0
    assert reentrant.offload_s == pytest.approx(nested.offload_s * 4 / 3)
    assert reentrant.optimizer_s == pytest.approx(nested.optimizer_s)
    # without a recompute nothing is gathered again, whatever the checkpoint flag says
    plain = dataclasses.replace(offloaded, recompute="none")
    assert estimate(model, cluster, plain, work).offload_s == pytest.approx(nested.offload_s)


def test_deepspeed_recompute_gather_is_held_into_the_backward_by_the_span_after_it_in_its_block():
    # DeepSpeed ZeRO-3 under a full recompute: each block's recompute runs just before its backward, so a module's
    # recompute gather is held into the backward when the elements after it in its block, twice (the rest of the
    # recompute, then the backward back to it), stay under stage3_max_reuse_distance (__params_to_release; the same
    # rule in v0.4.0's _keep_for_later). GPT-3 175B at tp 1 (a 1.8e9 block: qkv 4.5e8, dense 1.5e8, fc1 / fc2
    # 6.0e8): at the 1e9 default only fc2 is held, so the backward gathers (2 (qkv + dense + fc1) + fc2) / block =
    # 5/3 of every block; the Megatron-DeepSpeed Azure recipes' 3e9, or tp 8 (2.3e8 per rank), hold every module
    from scalestudy.costmodel.zero3 import zero3_reuse

    model = _setup(_row("narayanan-zero3-175b-384"))[0]
    h = model.d_model
    qkv, dense, fc = 3 * h * h + 3 * h, h * h + h, 4 * h * h + 4 * h
    blocks = model.num_layers * (qkv + dense + 2 * fc)
    default = zero3_reuse(model, 1, "full", 1e9)
    assert default.backward_elems / blocks == pytest.approx((2 * (qkv + dense + fc) + fc) / (qkv + dense + 2 * fc),
                                                            rel=0.01)
    for tp, reuse in ((1, 3e9), (8, 1e9)):
        held = zero3_reuse(model, tp, "full", reuse)
        assert held.backward_elems == pytest.approx(held.forward_elems - held.kept_elems)
        assert held.backward_elems < 0.62 * default.backward_elems / tp
    # without the recompute the backward gathers each released module once: the distance changes only the tail
    plain = zero3_reuse(model, 1, "none", 1e9)
    assert plain.backward_elems == pytest.approx(plain.forward_elems - plain.kept_elems)
