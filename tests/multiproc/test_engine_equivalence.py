"""Same seed, same data, fp32: every engine and ZeRO stage gives the same first losses on 2 CPU ranks.

Also with activation checkpointing (recomputation must not change the maths) and with ZeRO-Offload (DeepSpeed's
CPU Adam, which differs from torch AdamW only by rounding, ~1e-6 relative: FACTS.md).
"""

from __future__ import annotations

import pytest

from _torchrun import run_worker

STRATEGIES = ["ddp:0", "ddp:1", "deepspeed:0", "deepspeed:1", "deepspeed:2", "deepspeed:3", "fsdp:2", "fsdp:3",
              "deepspeed:3:full", "deepspeed:2:offload"]  # + activation checkpointing; + CPU-Adam offload


@pytest.mark.dist
@pytest.mark.slow
def test_all_strategies_give_the_same_first_five_losses(tmp_path):
    results = run_worker(tmp_path, "losses", STRATEGIES)
    reference = results["ddp:0"]["losses"]
    assert len(reference) == 5
    assert reference[-1] < reference[0]  # it trains
    for name in STRATEGIES:
        losses = results[name]["losses"]
        assert losses == pytest.approx(reference, rel=1e-4), name
    # Counted bytes per rank follow ZeRO: optimizer sharding (1) < DDP, full sharding (3 / FSDP) smaller still.
    mem = {name: results[name]["peak_mem_bytes"] for name in STRATEGIES}
    assert mem["ddp:1"] < mem["ddp:0"]
    assert mem["deepspeed:3"] < mem["deepspeed:1"] < mem["deepspeed:0"]
    assert mem["fsdp:3"] < mem["ddp:1"]
