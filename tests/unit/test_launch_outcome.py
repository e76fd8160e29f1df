"""Outcome classification of a finished trial process."""

from __future__ import annotations

from scalestudy.launch.outcome import classify_outcome as classify, tail


def test_outcomes():
    assert classify(0, "done", timed_out=False, has_summary=True).status == "OK"
    assert classify(None, "step 3", timed_out=True, has_summary=False).status == "TIMEOUT"
    cuda = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    assert classify(1, cuda, timed_out=False, has_summary=False).status == "OOM"
    cpu = "RuntimeError: [enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory"
    assert classify(1, cpu, timed_out=False, has_summary=False).status == "OOM"
    assert classify(1, "MemoryError", timed_out=False, has_summary=False).status == "OOM"
    # SIGKILL counts as OOM only under a memory cap (the OOM killer prints nothing)
    assert classify(-9, "", timed_out=False, has_summary=False, memory_capped=True).status == "OOM"
    assert classify(-9, "", timed_out=False, has_summary=False).status == "FAILED"
    torchrun = "exitcode  : -9 (pid: 123)"
    assert classify(1, torchrun, timed_out=False, has_summary=False, memory_capped=True).status == "OOM"
    failed = classify(2, "error: unknown model 'x'", timed_out=False, has_summary=False)
    assert failed.status == "FAILED" and "unknown model" in failed.error_tail and "status 2" in failed.reason
    assert classify(0, "", timed_out=False, has_summary=False).reason == "exited 0 but wrote no summary.json"
    # FSDP2 sometimes aborts at exit after a complete run: the summarised measurement stands, with a note
    teardown = classify(-6, "terminate called without an active exception", timed_out=False, has_summary=True)
    assert teardown.status == "OK" and "status -6 after writing summary.json" in teardown.reason


def test_tail_keeps_the_last_lines():
    text = "\n".join(f"line {i}" for i in range(100))
    kept = tail(text, lines=3)
    assert kept == "line 97\nline 98\nline 99"
    assert len(tail("x" * 10000)) == 4000
