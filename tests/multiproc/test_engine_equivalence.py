"""Same seed, same data, fp32, 2 CPU ranks: every engine and ZeRO stage gives plain DDP's first five losses.

One torchrun launch per strategy family (start-up paid once per family, each test well under 2 minutes on 2 cores),
each with the DDP baseline beside it. Also with activation checkpointing (recomputation must not change the maths)
and with ZeRO-Offload (DeepSpeed's CPU Adam, which differs from torch AdamW only by rounding, ~1e-6 relative:
FACTS.md). Counted bytes per rank must follow what each strategy shards.
"""

from __future__ import annotations

import json

import pytest

from _torchrun import run_worker

pytestmark = [pytest.mark.dist, pytest.mark.slow]

BASELINE = "ddp:0"
REL = 1e-4  # rounding differences between optimizers are ~5e-6 (FACTS.md); a wrong gradient moves step 2 by far more


def train_family(tmp_path, tokenizer: str, strategies: list[str]) -> dict:
    results = run_worker(tmp_path, "losses", [BASELINE, *strategies], tokenizer=tokenizer)
    reference = results[BASELINE]["losses"]
    assert len(reference) == 5 and reference[-1] < reference[0]  # it trains
    assert len(set(reference)) == 5  # every step moved the weights
    for name in strategies:
        assert results[name]["losses"] == pytest.approx(reference, rel=REL), name
        assert results[name]["engine_backend"] == name.split(":")[0], name
    return {name: r["peak_mem_bytes"] for name, r in results.items()}


def test_ddp_and_zero1_like_sharded_optimizer(tmp_path, bundled_tokenizer):
    mem = train_family(tmp_path, bundled_tokenizer, ["ddp:1"])
    # ZeroRedundancyOptimizer keeps half the Adam states on each of 2 ranks: 2 x 4 bytes per parameter less x 1/2
    assert mem["ddp:1"] < 0.85 * mem[BASELINE]


def test_deepspeed_zero_0_to_3(tmp_path, bundled_tokenizer):
    mem = train_family(tmp_path, bundled_tokenizer, ["deepspeed:0", "deepspeed:1", "deepspeed:2", "deepspeed:3"])
    # optimizer states sharded (1), then gradients (2), then parameters (3): each stage holds less per rank
    assert mem["deepspeed:3"] < mem["deepspeed:2"] <= mem["deepspeed:1"] < mem["deepspeed:0"]


def test_deepspeed_offload_and_activation_checkpointing(tmp_path, bundled_tokenizer):
    strategies = ["deepspeed:2:offload", "deepspeed:3:offload:params", "deepspeed:3:full"]
    train_family(tmp_path, bundled_tokenizer, strategies)
    # the settings DeepSpeed was initialised with (written by the run) really offload
    z2 = json.loads((tmp_path / "deepspeed-2-offload" / "ds_config.json").read_text())["zero_optimization"]
    z3 = json.loads((tmp_path / "deepspeed-3-offload-params" / "ds_config.json").read_text())["zero_optimization"]
    assert z2["offload_optimizer"]["device"] == "cpu" and z2["stage"] == 2
    assert z3["offload_optimizer"]["device"] == "cpu" and z3["offload_param"]["device"] == "cpu"


def test_fsdp2_with_and_without_resharding(tmp_path, bundled_tokenizer):
    mem = train_family(tmp_path, bundled_tokenizer, ["fsdp:2", "fsdp:3"])
    # parameters, gradients and Adam states all sharded over 2 ranks: about half of DDP's bytes
    assert mem["fsdp:3"] < 0.6 * mem[BASELINE] and mem["fsdp:2"] < 0.75 * mem[BASELINE]
    fsdp = {z: json.loads((tmp_path / f"fsdp-{z}" / "fsdp_config.json").read_text()) for z in (2, 3)}
    assert fsdp[3] != fsdp[2]  # the two modes really hand fully_shard different settings
