"""Counting per-rank bytes by storage, and finding the last complete checkpoint after an interrupted save."""

from __future__ import annotations

import json

import torch

from scalestudy.engine import checkpoint
from scalestudy.engine.memory import StorageCounter, peak_rss_bytes, rss_bytes, tensors_in


def test_views_into_one_flat_buffer_count_once():
    flat = torch.zeros(1000)  # like a DDP bucket or a ZeRO flat group
    views = [flat[:400].view(20, 20), flat[400:]]
    counter = StorageCounter()
    assert counter.add(views) == 4000
    assert counter.add([flat]) == 0  # already counted in another category
    assert counter.add([torch.zeros(10, dtype=torch.float64), None]) == 80


def test_optimizer_state_tensors_are_found_in_nested_containers():
    p = torch.nn.Parameter(torch.ones(5))
    opt = torch.optim.AdamW([p])
    p.grad = torch.ones(5)
    opt.step()
    state = [t for s in opt.state.values() for t in tensors_in(s)]
    assert StorageCounter().add(state) == 5 * 4 * 2 + 4  # exp_avg, exp_avg_sq (fp32) and the step counter


def _vm_status_bytes(field: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(field + ":"))


def test_rss_follows_the_memory_the_process_touches():
    before = rss_bytes()
    assert abs(before - _vm_status_bytes("VmRSS")) < 4 * 2**20  # agrees with the kernel's own figure
    block = torch.ones(64 * 2**20 // 4)  # 64 MiB, every page written
    grown = rss_bytes() - before
    assert 56 * 2**20 < grown < 80 * 2**20, grown / 2**20
    assert peak_rss_bytes() == _vm_status_bytes("VmHWM") >= rss_bytes()
    del block


def test_latest_skips_an_interrupted_save(tmp_path):
    root = checkpoint.checkpoint_root(tmp_path)
    good = root / "step-00000003"
    good.mkdir(parents=True)
    (good / "meta.json").write_text(json.dumps({"step": 3, "world_size": 2}))
    (root / "latest").write_text(json.dumps({"dir": good.name, "step": 3}))
    (root / ".tmp-step-00000006").mkdir()  # a save that crashed before its rename
    assert checkpoint.latest(tmp_path) == good
    (root / "latest").write_text(json.dumps({"dir": "step-00000006", "step": 6}))  # pointer to an incomplete dir
    assert checkpoint.latest(tmp_path) is None
    assert checkpoint.latest(tmp_path / "nothing") is None


def test_resume_reads_checkpoints_written_before_a_strategy_field_existed(tmp_path):
    import pytest

    from scalestudy.errors import ScalestudyError
    from scalestudy.specs.strategy import Strategy

    now = Strategy(engine="ddp").to_dict()
    older = {k: v for k, v in now.items() if k not in ("overlap_param_gather", "tp_comm_overlap")}
    root = checkpoint.checkpoint_root(tmp_path)
    good = root / "step-00000003"
    good.mkdir(parents=True)
    (good / "meta.json").write_text(json.dumps({"step": 3, "world_size": 2, "strategy": older}))
    (root / "latest").write_text(json.dumps({"dir": good.name, "step": 3}))
    assert checkpoint.check_resumable(tmp_path, 5, 2, now) == 3  # the missing fields take their defaults
    with pytest.raises(ScalestudyError) as err:  # only the keys that differ, not the ~30-key dict
        checkpoint.check_resumable(tmp_path, 5, 2, {**now, "micro_batch": 2, "zero": 1})
    assert str(err.value) == ("--resume: checkpoint strategy differs from this run's: micro_batch: checkpoint 1 vs "
                              "this run 2; zero: checkpoint 0 vs this run 1")


def test_worker_failures_become_one_line_reasons(tmp_path):
    from types import SimpleNamespace

    from scalestudy.engine.launch import failure_reason
    from scalestudy.engine.train import report_failure
    from scalestudy.errors import is_out_of_memory

    assert is_out_of_memory(RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 9 GB"))
    assert is_out_of_memory(MemoryError())
    assert not is_out_of_memory(RuntimeError("shape mismatch"))
    killed = {0: SimpleNamespace(exitcode=-9)}
    assert failure_reason(tmp_path, killed).startswith("out of memory")  # SIGKILL, OOM count unknown: the OOM killer
    from scalestudy.engine.launch import oom_kills

    now = oom_kills()
    if now is not None:  # the kernel's count: unchanged -> someone else's SIGKILL; risen -> the OOM killer
        assert "not the OOM killer" in failure_reason(tmp_path, killed, now)
        assert failure_reason(tmp_path, killed, now - 1).startswith("out of memory")
    report_failure(tmp_path, 1, "out of memory:\n  tried to allocate 4 GiB")
    assert failure_reason(tmp_path, killed) == "out of memory: tried to allocate 4 GiB"
