"""Killed after step 3 and resumed from its checkpoint: the same losses as an uninterrupted run, per engine family
(DeepSpeed's own checkpoints, FSDP2's sharded state dicts; DDP + ZeRO-1-like: tests/e2e/test_cli_train.py)."""

from __future__ import annotations

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
