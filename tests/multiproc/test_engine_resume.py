"""Killed after step 3 and resumed from its checkpoint: the same losses as an uninterrupted run, per engine family
(DeepSpeed's own checkpoints, FSDP2's sharded state dicts; DDP + ZeRO-1-like: tests/e2e/test_cli_train.py)."""

from __future__ import annotations

import pytest

from _torchrun import run_worker

pytestmark = [pytest.mark.dist, pytest.mark.slow]


def assert_resumed_on_the_same_curve(results: dict) -> None:
    for name, r in results.items():
        assert r["resumed_from"] == 3, name
        assert len(r["full"]) == len(r["resumed"]) == 5, name
        # Same weights, optimizer state, schedule, RNG and data position -> the same curve after the restart.
        assert r["resumed"] == pytest.approx(r["full"], rel=1e-5), name


def test_deepspeed_resume_zero_2_and_3(tmp_path, bundled_tokenizer):
    results = run_worker(tmp_path, "resume", ["deepspeed:2", "deepspeed:3"], tokenizer=bundled_tokenizer)
    assert sorted(results) == ["deepspeed:2", "deepspeed:3"]
    assert_resumed_on_the_same_curve(results)


def test_fsdp2_resume(tmp_path, bundled_tokenizer):
    results = run_worker(tmp_path, "resume", ["fsdp:3"], tokenizer=bundled_tokenizer)
    assert_resumed_on_the_same_curve(results)
