"""The resume rule for the learning rate: the schedule is a function of the resuming run's total --steps, applied
from the resumed step (engine/backends/common.py resume_schedule)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from scalestudy.engine.backends.common import lr_multiplier, make_scheduler, resume_schedule
from scalestudy.specs.run import RunConfig


def _backend(cfg: RunConfig) -> SimpleNamespace:
    param = torch.nn.Parameter(torch.zeros(3))
    optimizer = torch.optim.AdamW([param], lr=cfg.optimizer.lr)
    return SimpleNamespace(optimizer=optimizer, scheduler=make_scheduler(optimizer, cfg), param=param)


def _step(backend) -> float:
    """One optimizer step; the rate it used."""
    lr = backend.scheduler.get_last_lr()[0]
    assert backend.optimizer.param_groups[0]["lr"] == pytest.approx(lr)
    backend.param.grad = torch.ones(3)
    backend.optimizer.step()
    backend.scheduler.step()
    return lr


@pytest.mark.parametrize("decay", ["cosine", "linear"])
def test_resuming_with_more_steps_follows_the_longer_schedule_exactly(decay):
    short = RunConfig().replace(steps=8, warmup_steps=2, lr=1e-3, decay=decay)
    long = short.replace(steps=16)
    first = _backend(short)
    for _ in range(8):
        _step(first)
    saved = {"optimizer": first.optimizer.state_dict(), "scheduler": first.scheduler.state_dict()}

    resumed = _backend(long)
    resumed.optimizer.load_state_dict(saved["optimizer"])
    resumed.scheduler.load_state_dict(saved["scheduler"])
    # what the checkpoint alone would give: the 8-step schedule's final rate, not the 16-step one's rate at step 9
    assert resumed.scheduler.get_last_lr()[0] == pytest.approx(1e-3 * lr_multiplier(8, short))
    assert lr_multiplier(8, short) != pytest.approx(lr_multiplier(8, long))
    resume_schedule(resumed, long, 8)
    rates = [_step(resumed) for _ in range(8)]

    uninterrupted = _backend(long)
    expected = [_step(uninterrupted) for _ in range(16)][8:]
    assert rates == pytest.approx(expected, rel=1e-12)


def test_resuming_with_the_same_steps_changes_nothing():
    cfg = RunConfig().replace(steps=10, warmup_steps=3, lr=2e-3)
    run = _backend(cfg)
    for _ in range(4):
        _step(run)
    before = run.scheduler.get_last_lr()[0]
    resume_schedule(run, cfg, 4)
    assert run.scheduler.get_last_lr()[0] == pytest.approx(before, rel=1e-12)
