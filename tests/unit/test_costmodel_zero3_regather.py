"""FSDP under a reentrant full recompute gathers every block twice in the backward, once exposed (engines.yaml
regather_on_recompute, terms._sharded_dp_comm)."""

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
