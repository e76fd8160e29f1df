"""Killed after step 4 and resumed from its checkpoint at step 3: the same losses as an uninterrupted run, per engine family
(DeepSpeed's own checkpoints, FSDP2's sharded state dicts, DDP with ZeroRedundancyOptimizer's per-rank optimizer
shards); through `scalestudy train` with real kills: tests/multiproc/test_faults.py."""

from __future__ import annotations

import json

import pytest

pytestmark = [pytest.mark.dist, pytest.mark.slow]


def assert_resumed_on_the_same_curve(results: dict, names: list[str]) -> None:
    for name in names:
        r = results[name]
        assert r["resumed_from"] == 3, name
        assert len(r["losses"]) == len(r["resumed"]) == 5, name
        # Same weights, optimizer state, schedule, RNG and data position -> the same curve after the restart.
        assert r["resumed"] == pytest.approx(r["losses"], rel=1e-5), name


def test_deepspeed_resume_zero_2_and_3(two_rank_runs):
    # trained with `+resume` in the shared 2-rank launch (tests/multiproc/conftest.py): the uninterrupted curve is
    # the strategy's own run there
    assert_resumed_on_the_same_curve(two_rank_runs[1], ["deepspeed:2", "deepspeed:3"])


def test_fsdp2_resume(two_rank_runs):
    assert_resumed_on_the_same_curve(two_rank_runs[1], ["fsdp:3"])


def tensorboard_scalars(run_dir, tag: str) -> dict[int, float]:
    """step -> value of one scalar as TensorBoard reads DIR/tb (all event files, purged steps dropped)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir / "tb"), size_guidance={"scalars": 0})
    acc.Reload()
    return {e.step: e.value for e in acc.Scalars(tag)}


def test_ddp_zero1_resume_continues_one_tensorboard_curve(two_rank_runs):
    out, results = two_rank_runs
    assert_resumed_on_the_same_curve(results, ["ddp:1"])
    # one curve in TensorBoard: steps 1-3 from before the kill, 4-5 from the resumed run -- the killed run's own
    # step 4 (past its checkpoint) purged, no step twice
    steps = [json.loads(line)["step"] for line in (out / "ddp-1-killed" / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4, 5]  # metrics.jsonl alike
    curve = tensorboard_scalars(out / "ddp-1-killed", "train/loss")
    assert sorted(curve) == [1, 2, 3, 4, 5]
    assert [curve[s] for s in range(1, 6)] == pytest.approx(results["ddp:1"]["losses"], rel=1e-5)
