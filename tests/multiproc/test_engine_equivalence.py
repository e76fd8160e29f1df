"""Same seed, same data, fp32, 2 CPU ranks: every engine and ZeRO stage gives plain DDP's first five losses.

Every strategy trains in one shared torchrun launch (tests/multiproc/conftest.py: start-up, imports and the DDP
baseline paid once for all engines). Also with activation checkpointing (recomputation must not change the maths)
and with ZeRO-Offload (DeepSpeed's CPU Adam, which differs from torch AdamW only by rounding, ~1e-6 relative:
FACTS.md). Counted bytes per rank must follow what each strategy shards.
"""

from __future__ import annotations

import json

import pytest

pytestmark = [pytest.mark.dist, pytest.mark.slow]

BASELINE = "ddp:0"
REL = 1e-4  # rounding differences between optimizers are ~5e-6 (FACTS.md); a wrong gradient moves step 2 by far more


def train_family(two_rank_runs, strategies: list[str]) -> dict:
    _, results = two_rank_runs
    reference = results[BASELINE]["losses"]
    assert len(reference) == 5 and reference[-1] < reference[0]  # it trains
    assert len(set(reference)) == 5  # every step moved the weights
    for name in strategies:
        assert results[name]["losses"] == pytest.approx(reference, rel=REL), name
        assert results[name]["engine_backend"] == name.split(":")[0], name
    return {name: results[name]["peak_mem_bytes"] for name in (BASELINE, *strategies)}


def test_ddp_and_zero1_like_sharded_optimizer(two_rank_runs):
    mem = train_family(two_rank_runs, ["ddp:1"])
    # ZeroRedundancyOptimizer keeps half the Adam states on each of 2 ranks: 2 x 4 bytes per parameter less x 1/2
    assert mem["ddp:1"] < 0.85 * mem[BASELINE]


def setup_param_bytes(two_rank_runs, name: str) -> int:
    """The most parameter bytes a rank held as the engine placed the model, relative to DDP's (the whole model)."""
    results = two_rank_runs[1]
    return results[name]["setup_param_bytes"] / results[BASELINE]["setup_param_bytes"]


def test_deepspeed_zero_0_to_3(two_rank_runs):
    mem = train_family(two_rank_runs, ["deepspeed:0", "deepspeed:1", "deepspeed:2", "deepspeed:3"])
    # optimizer states sharded (1), then gradients (2), then parameters (3): each stage holds less per rank
    assert mem["deepspeed:3"] < mem["deepspeed:2"] <= mem["deepspeed:1"] < mem["deepspeed:0"]
    # ZeRO-3 is partitioned from the host before deepspeed.initialize: no rank ever holds the whole model (the
    # cost model's assumption); ZeRO 0-2 hold it whole (fp32 here, as DDP)
    assert setup_param_bytes(two_rank_runs, "deepspeed:3") == pytest.approx(0.5, abs=0.02)
    assert setup_param_bytes(two_rank_runs, "deepspeed:2") == 1.0


def test_deepspeed_offload_and_activation_checkpointing(two_rank_runs):
    strategies = ["deepspeed:2:offload", "deepspeed:3:offload:params", "deepspeed:3:full"]
    train_family(two_rank_runs, strategies)
    # the settings DeepSpeed was initialised with (written by the run) really offload
    out = two_rank_runs[0]
    z2 = json.loads((out / "deepspeed-2-offload" / "ds_config.json").read_text())["zero_optimization"]
    z3 = json.loads((out / "deepspeed-3-offload-params" / "ds_config.json").read_text())["zero_optimization"]
    assert z2["offload_optimizer"]["device"] == "cpu" and z2["stage"] == 2
    assert z3["offload_optimizer"]["device"] == "cpu" and z3["offload_param"]["device"] == "cpu"


def test_fsdp2_with_and_without_resharding(two_rank_runs):
    mem = train_family(two_rank_runs, ["fsdp:2", "fsdp:3"])
    # parameters, gradients and Adam states all sharded over 2 ranks: about half of DDP's bytes
    assert mem["fsdp:3"] < 0.6 * mem[BASELINE] and mem["fsdp:2"] < 0.75 * mem[BASELINE]
    # built sharded on the meta device: each rank only ever held its own half of the parameters
    for name in ("fsdp:2", "fsdp:3"):
        assert setup_param_bytes(two_rank_runs, name) == pytest.approx(0.5, abs=0.02), name
    out = two_rank_runs[0]
    fsdp = {z: json.loads((out / f"fsdp-{z}" / "fsdp_config.json").read_text()) for z in (2, 3)}
    assert fsdp[3] != fsdp[2]  # the two modes really hand fully_shard different settings


def test_fsdp2_collectives_per_step_are_the_cost_models(two_rank_runs):
    """With gradient accumulation (2 micro-batches a step here) train's FSDP2 reduce-scatters every unit's
    gradients in every micro-batch's backward and gathers every unit per pass: the calls the gloo cost path prices
    (cpu_collectives.fsdp_calls_per_step; the GPU terms price the same per micro-batch), counted in the run."""
    from scalestudy.costmodel.cpu_collectives import fsdp_calls_per_step
    from scalestudy.specs.presets import get_model

    tiny = get_model("t5-tiny")
    units = tiny.num_layers + tiny.num_decoder_layers + 1  # fully_shard per block, then the root
    results = two_rank_runs[1]
    for zero in (2, 3):
        run = results[f"fsdp:{zero}"]
        steps, accumulation = len(run["losses"]), 4 // 2  # global batch 4, micro-batch 1, 2 ranks
        per_step = fsdp_calls_per_step(zero, units, accumulation)
        assert run["calls"] == {f"{op}_single": steps * n for op, n in per_step.items()}, zero
    assert results[BASELINE]["calls"] == {}  # DDP runs none of them
