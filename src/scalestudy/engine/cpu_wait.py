"""Time CPU work without the time other processes took from it: wall seconds less the seconds the timing thread
waited for a CPU (runnable, not running).

A CPU profile measured on a shared machine is otherwise only as good as the quiet it ran in: with one more busy
process than cores, every rank of a 2-rank timing loses about a third of its wall time to the run queue, and the
profile's rates come out that much slow (issue 11: the demo's prediction error 4-12% quiet, 23% beside another test
run, 49% at load average 3-4). Linux counts each thread's run-queue wait in /proc/<pid>/task/<tid>/schedstat
(Documentation/scheduler/sched-stats.rst: "time spent waiting on a runqueue", ns; kept whenever the kernel has
CONFIG_SCHED_INFO, which /proc/pressure and delay accounting build on too). `clock()` is a clock that stops while the
calling thread waits there, so the difference of two readings is the interval's wall time as a quiet machine
would have run it; where the kernel does not say, it is wall time. What the run queue does not hold -- another
process's traffic through shared caches and memory -- stays in the timings: the profile takes the best of interleaved
repeats for that (engine/cpu_profile.py).

On several synchronised ranks a rank waiting in a collective for a preempted peer is blocked, not queued, so its own
clock does not stop: `peer_wait` subtracts each interval's largest wait over the ranks from every rank's interval.
"""

from __future__ import annotations

import os
import threading
import time

_FDS: dict[int, int] = {}  # native thread id -> its open schedstat file (re-read with pread: ~10 us, not ~90)


def wait_s() -> float:
    """Seconds the calling thread has spent runnable but not running (0 where the kernel does not report it). The
    calling thread is the one that computes: the profile runs torch with one intra-op thread, and a rank waiting in a
    collective on its peer is blocked, not runnable (`peer_wait` adds the peer's wait)."""
    tid = threading.get_native_id()
    fd = _FDS.get(tid)
    try:
        if fd is None:
            fd = _FDS[tid] = os.open(f"/proc/self/task/{tid}/schedstat", os.O_RDONLY)
        return int(os.pread(fd, 128, 0).split()[1]) * 1e-9
    except (OSError, ValueError, IndexError):
        return 0.0


def clock() -> float:
    """perf_counter() less the calling thread's run-queue wait so far (seconds; only differences mean anything)."""
    return time.perf_counter() - wait_s()


class Meter:
    """Sums the wall seconds and the run-queue seconds of the intervals timed with it: `share()` is the fraction of
    the timed wall time other processes took (what the profile reports as the load it was measured under)."""

    def __init__(self) -> None:
        self.wall = 0.0
        self.waited = 0.0

    def add(self, wall: float, waited: float) -> None:
        self.wall += max(0.0, wall)
        self.waited += max(0.0, waited)

    def share(self) -> float:
        return self.waited / self.wall if self.wall > 0 else 0.0


def peer_wait(waits, group=None):
    """Every rank's per-interval run-queue waits (a list of floats, the same length on every rank) -> the largest
    over the ranks, per interval: what a synchronised step lost to its most-preempted rank (a lower bound when
    ranks were preempted at different times). One rank: the list itself."""
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size(group) <= 1 or not waits:
        return list(waits)
    t = torch.tensor(list(waits), dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return t.tolist()
