"""Killed after step 3 and resumed: the same losses as an uninterrupted run, for each engine family."""

from __future__ import annotations

import pytest

from _torchrun import run_worker


@pytest.mark.dist
@pytest.mark.slow
def test_resume_continues_the_same_loss_curve(tmp_path):
    results = run_worker(tmp_path, "resume", ["ddp:1", "deepspeed:2", "fsdp:3"])
    for name, r in results.items():
        assert r["resumed_from"] == 3, name
        assert len(r["full"]) == len(r["resumed"]) == 5, name
        # Same weights, optimizer state, schedule, RNG and data position -> the same curve after the restart.
        assert r["resumed"] == pytest.approx(r["full"], rel=1e-5), name
