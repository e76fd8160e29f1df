"""glibc malloc's thresholds pinned for CPU ranks and the CPU profile (scalestudy/host_allocator.py): the demo's ZeRO-3
trials re-faulted their ~13 MB buffers more often than the profile's timing of the same step, because glibc's
dynamic thresholds follow what each process freed before (issue 11: ZeRO-3 trials 9-18% slower than predicted)."""

import os
import platform
import subprocess
import sys

import pytest

from scalestudy.costmodel import cpu_profile
from scalestudy import host_allocator
from scalestudy.errors import ScalestudyError

# three 13 MB buffers held and freed, eight times: the minor page faults per round after the third
PATTERN = """
import resource
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for i in range(8):
    if i == 3:
        f0 = faults()
    held = [b"\\x01" * (13 << 20) for _ in range(3)]
    del held
print((faults() - f0) // 5)
"""
PAGES_PER_BUFFER = (13 << 20) // 4096


def _faults_per_round(extra: dict) -> int:
    env = {k: v for k, v in os.environ.items() if k not in host_allocator.ALLOCATOR_ENV}
    proc = subprocess.run([sys.executable, "-c", PATTERN], env={**env, **extra}, capture_output=True, text=True,
                          timeout=60, check=True)
    return int(proc.stdout)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc thresholds")
def test_pinned_thresholds_stop_freed_buffers_being_faulted_in_again():
    """Dynamic thresholds: the heap's trim threshold is twice the largest buffer freed (26 MB), so 39 MB freed at
    its top goes back to the kernel and is faulted in again next round; pinned, the heap keeps it."""
    assert _faults_per_round({}) > PAGES_PER_BUFFER
    assert _faults_per_round(host_allocator.ALLOCATOR_ENV) < 0.02 * PAGES_PER_BUFFER


def test_the_users_own_thresholds_win():
    env = {"MALLOC_TRIM_THRESHOLD_": "0"}
    host_allocator.pin_host_allocator(env)
    assert env == {"MALLOC_TRIM_THRESHOLD_": "0", "MALLOC_MMAP_THRESHOLD_": str(32 << 20)}
    assert host_allocator.pinned_allocator_env(env) == {}


def test_the_cpu_profile_is_measured_with_the_pinned_thresholds(tmp_path, monkeypatch):
    seen = {}

    popen = subprocess.Popen

    def run(cmd, env, **kw):
        seen.update(env)
        return popen([sys.executable, "-c", "raise SystemExit('boom')"], **kw)

    monkeypatch.setattr(os, "environ", {k: v for k, v in os.environ.items() if k not in host_allocator.ALLOCATOR_ENV})
    monkeypatch.setattr(cpu_profile.subprocess, "Popen", run)
    with pytest.raises(ScalestudyError):
        cpu_profile._run_profile(tmp_path / "p.yaml", 1, 10.0, ())
    assert {k: seen[k] for k in host_allocator.ALLOCATOR_ENV} == host_allocator.ALLOCATOR_ENV


def test_cpu_ranks_start_with_the_pinned_thresholds(monkeypatch):
    """`scalestudy train` on CPUs (a demo trial too): the torchrun workers inherit the launcher's environment."""
    import torch

    from scalestudy.engine import launch

    env = {k: v for k, v in os.environ.items() if k not in host_allocator.ALLOCATOR_ENV}
    monkeypatch.setattr(os, "environ", env)  # worker_env writes into it, not into this process's environment
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(launch, "pin_ninja", lambda: None)
    launch.worker_env(1)
    assert {k: os.environ[k] for k in host_allocator.ALLOCATOR_ENV} == host_allocator.ALLOCATOR_ENV
