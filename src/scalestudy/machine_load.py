"""How much CPU other processes used while this process and its descendants ran something: whether a trial's
timing was shared with the rest of the machine.

A trial's step time is wall-clock time; on a machine where other processes compete for the cores, the trial's ranks
wait on the run queue and every step comes out slower than the strategy runs (issue 11: the demo's median
predicted-vs-measured step error 4% on a quiet machine, 23% beside another engineer's tests; here 2026-12-03 04:10,
others' tests starting mid-demo, the last four trials ran 1.5-2.4x slower than the first six's predictions held).
The cost model and the CPU profile (engine/cpu_wait.py) describe the machine without that wait, so the demo
re-measures a trial that others disturbed (study/demo.py).

`OthersMeter` samples, every `interval_s`, the machine's busy CPU seconds (/proc/stat: user, nice, system, irq,
softirq, steal -- steal is the hypervisor running other guests on our cores) and this process tree's CPU seconds (its
own and every live descendant's user + system time, each with its reaped children's: a rank's seconds move into its
launcher's when it exits, so the sum never drops); their difference is what other processes used.

Busy time saturates at the core count: it cannot say how many other runnable threads queue for the cores, and under a
steady load the scheduler gives each runnable thread a fair share (here 2026-12-03, load ~4.8 on 2 cores: others
kept only 1.0-1.6 cores busy, yet the demo's trials ran 2.2-2.4x slow, as a fair share over ~3.3 others' threads
predicts). So the meter also reads, each sample, the run-queue wait of every thread of this process's descendants
(/proc/<pid>/task/<tid>/schedstat, second field: "time spent waiting on a runqueue", ns;
Documentation/scheduler/sched-stats.rst) -- what a trial's ranks lost to others, however many queued -- and the
machine's runnable threads (/proc/stat procs_running), which say whether the machine is calm before a trial starts.

Where the kernel groups processes by session (CONFIG_SCHED_AUTOGROUP, /proc/sys/kernel/sched_autogroup_enabled = 1,
as here), the CPU is shared fairly between busy sessions first and between a session's threads second, and nice acts
only inside a session (man 7 sched, "The autogroup feature"): a 2-rank demo trial started at nice -10 beside others'
sessions (2026-12-03, load ~7, procs_running 9.3) still waited 0.82-1.02 s per rank-second and stepped 2.5-4x slower
than predicted. So a count of runnable threads is only a rough measure of what a trial will get (one session's many
threads weigh as one), and renicing either side changes nothing across sessions; the ranks' own run-queue wait is
what they lost either way.
"""

from __future__ import annotations

import os
import threading
import time

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def machine_busy_s() -> float | None:
    """CPU seconds all cores have spent busy since boot (/proc/stat's first line), None where unreadable."""
    try:
        with open("/proc/stat", encoding="ascii") as fh:
            fields = fh.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu" or len(fields) < 9:
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[1:9])
    return (user + nice + system + irq + softirq + steal) / _TICK


def _stat_fields(pid: str) -> list[str] | None:
    """/proc/<pid>/stat's fields after the command name (which may hold spaces): [state, ppid, ...]."""
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
    except OSError:
        return None
    try:
        text = os.read(fd, 1024)
    except OSError:
        return None
    finally:
        os.close(fd)
    return text[text.rfind(b")") + 2:].split()


def _process_table() -> tuple[dict[int, list[int]], dict[int, float]]:
    """({parent pid: child pids}, {pid: CPU seconds incl. reaped children's}) of every process in /proc."""
    children: dict[int, list[int]] = {}
    cpu: dict[int, float] = {}
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return children, cpu
    for pid in pids:
        fields = _stat_fields(pid)
        if fields is None or len(fields) < 15:
            continue
        children.setdefault(int(fields[1]), []).append(int(pid))
        cpu[int(pid)] = sum(int(x) for x in fields[11:15]) / _TICK
    return children, cpu


def _descendants(root: int, children: dict[int, list[int]]) -> list[int]:
    found, todo = [], list(children.get(root, []))
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children.get(pid, [])
    return found


def tree_cpu_s(root: int | None = None) -> float:
    """CPU seconds of process `root` (default: this one) and its live descendants, each counting its reaped
    children's (utime + stime + cutime + cstime; /proc/<pid>/stat fields 14-17)."""
    root = os.getpid() if root is None else root
    children, cpu = _process_table()
    return sum(cpu.get(pid, 0.0) for pid in [root, *_descendants(root, children)])


def process_wait_s(pid: int) -> float | None:
    """Seconds all threads of process `pid` have spent runnable but not running (None: gone or not reported)."""
    total, found = 0.0, False
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as fh:
                total += int(fh.read().split()[1]) * 1e-9
            found = True
        except (OSError, ValueError, IndexError):
            continue
    return total if found else None


def runnable_threads() -> int | None:
    """Threads runnable on the machine right now, the reader included (/proc/stat procs_running)."""
    try:
        with open("/proc/stat", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("procs_running "):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


Sample = tuple[float, float, float]  # (time, machine busy CPU s, this process tree's CPU s)
# (time, runnable threads on the machine or None, {descendant pid: its threads' run-queue wait s})
QueueSample = tuple[float, "int | None", dict]


def _sample() -> Sample | None:
    busy = machine_busy_s()
    return None if busy is None else (time.time(), busy, tree_cpu_s())


def _samples() -> tuple[Sample | None, QueueSample]:
    """Both samples from one walk of /proc (a walk is ~4 ms of CPU on this 2-core machine; the meter takes one a
    second)."""
    now, busy, runnable = time.time(), machine_busy_s(), runnable_threads()
    children, cpu = _process_table()
    root = os.getpid()
    tree = _descendants(root, children)
    waits = {pid: w for pid in tree for w in [process_wait_s(pid)] if w is not None}
    ours = sum(cpu.get(pid, 0.0) for pid in [root, *tree])
    return (None if busy is None else (now, busy, ours)), (now, runnable, waits)


def _others_cores_between(a: Sample, b: Sample) -> float:
    """Average cores other processes kept busy between two samples (the machine's busy CPU less this tree's)."""
    (t0, busy0, ours0), (t1, busy1, ours1) = a, b
    return max(0.0, (busy1 - busy0) - (ours1 - ours0)) / (t1 - t0)


class OthersMeter:
    """Samples, in a daemon thread every `interval_s`, (time, machine busy s, this tree's s) into `samples` and
    (time, runnable threads, {descendant pid: run-queue wait s}) into `queue_samples`. `others_cores(t0, t1)`: the
    average number of cores other processes kept busy between two times; `queued_threads(t0, t1)`: the average
    number of this process's descendants' threads waiting for a CPU (None where the kernel does not say or the span
    holds fewer than two samples)."""

    def __init__(self, interval_s: float = 1.0) -> None:
        self.interval_s = interval_s
        self.samples: list[Sample] = []
        self.queue_samples: list[QueueSample] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> None:
        sample, queue_sample = _samples()
        if sample is not None:
            self.samples.append(sample)
        self.queue_samples.append(queue_sample)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval_s)

    def __enter__(self) -> OthersMeter:
        self._thread = threading.Thread(target=self._run, name="others-cpu", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def others_cores(self, t0: float, t1: float) -> float | None:
        inside = [s for s in self.samples if t0 <= s[0] <= t1]
        if len(inside) < 2 or inside[-1][0] <= inside[0][0]:
            return None
        return _others_cores_between(inside[0], inside[-1])

    def queued_threads(self, t0: float, t1: float) -> float | None:
        """Run-queue seconds this tree's descendants' threads gained between t0 and t1, per second: each process
        counted from its first to its last sample inside the span (a rank that exits or starts inside it counts for
        the part it lived; its wait only grows)."""
        inside = [q for q in self.queue_samples if t0 <= q[0] <= t1]
        if len(inside) < 2 or inside[-1][0] <= inside[0][0]:
            return None
        first: dict[int, float] = {}
        last: dict[int, float] = {}
        for _, _, waits in inside:
            for pid, waited in waits.items():
                first.setdefault(pid, waited)
                last[pid] = waited
        seen_twice = [pid for pid in last if sum(pid in q[2] for q in inside) >= 2]
        if not seen_twice:
            return None
        return sum(last[pid] - first[pid] for pid in seen_twice) / (inside[-1][0] - inside[0][0])

    def others_runnable(self, t0: float, t1: float) -> float | None:
        """Average runnable threads on the machine between t0 and t1 less the sampling thread itself: others'
        demand for cores while this tree runs nothing (the wait before a re-measurement)."""
        counts = [q[1] for q in self.queue_samples if t0 <= q[0] <= t1 and q[1] is not None]
        return None if len(counts) < 2 else max(0.0, sum(counts) / len(counts) - 1.0)

    def wait_quiet(self, allowed_cores: float, max_wait_s: float, window_s: float = 2.0) -> bool:
        """Wait (at most `max_wait_s`) until, over the last `window_s`, other processes kept at most
        `allowed_cores` busy and had at most that many threads runnable (busy time alone cannot see a queue);
        whether they did."""
        deadline = time.time() + max_wait_s
        while True:
            now = time.time()
            used = self.others_cores(now - window_s - self.interval_s, now)
            queued = self.others_runnable(now - window_s - self.interval_s, now)
            if used is not None and used <= allowed_cores and (queued is None or queued <= allowed_cores):
                return True
            if now >= deadline:
                return False
            time.sleep(self.interval_s)


def others_cores_now(window_s: float = 2.0) -> float | None:
    """Cores other processes kept busy over the next `window_s` seconds (this process tree's use left out)."""
    first = _sample()
    time.sleep(window_s)
    last = _sample()
    return None if first is None or last is None else _others_cores_between(first, last)


def wait_until_quiet(allowed_cores: float, max_wait_s: float, window_s: float = 2.0) -> bool:
    """Whether other processes kept at most `allowed_cores` busy over some `window_s` within `max_wait_s` (True
    at once where the kernel does not say: nothing to wait for)."""
    deadline = time.time() + max_wait_s
    while True:
        used = others_cores_now(window_s)
        if used is None or used <= allowed_cores:
            return True
        if time.time() >= deadline:
            return False
