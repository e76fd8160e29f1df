"""Planner speed: the whole strategy space of mt5-xxl on 1024 A100s (128 nodes x 8), and the issue's 4 x 8 case.

Prints, measured side by side in one run: wall time of the planner with and without memory-bound pruning,
strategies evaluated per second of wall time and per CPU-second of this process (on a shared machine wall time also
counts the time the process waited for a core), and the end-to-end CLI time (`scalestudy plan`, a fresh process)
for 4 x 8.
Usage: python benchmarks/bench_plan.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import resource
import statistics
import subprocess
import sys
import time

from scalestudy.plan.planner import plan
from scalestudy.plan.space import Constraints
from scalestudy.specs.hardware import make_cluster
from scalestudy.specs.presets import get_model
from scalestudy.specs.strategy import Workload


def timed_plan(nodes: int, batch: int, prune: bool, repeat: int):
    model, cluster = get_model("mt5-xxl"), make_cluster("a100-40gb", nodes, 8)
    w = Workload(batch, 512, 128)
    times, cpu, result = [], [], None
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        result = plan(model, cluster, w, Constraints(), prune=prune)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return statistics.median(times), result, statistics.median(cpu)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    print(f"bench_plan  {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC  (median of {args.repeat}; wall seconds)")
    print(f"{'case':34s} {'prune':>5s} {'evaluated':>9s} {'estimated':>9s} {'feasible':>8s} {'time s':>8s} "
          f"{'strategies/s':>12s} {'per CPU-s':>10s}")
    rows = {}
    for name, nodes, batch in (("mt5-xxl 128x8 A100-40GB gb=2048", 128, 2048), ("mt5-xxl 4x8 A100-40GB gb=256", 4, 256)):
        for prune in (True, False):
            secs, r, cpu = timed_plan(nodes, batch, prune, args.repeat)
            rows[(name, prune)] = (secs, r)
            print(f"{name:34s} {str(prune):>5s} {r.evaluated:9d} {r.estimated:9d} {r.feasible:8d} {secs:8.3f} "
                  f"{r.evaluated / secs:12,.0f} {r.evaluated / max(cpu, 1e-9):10,.0f}")
        a, b = rows[(name, True)][0], rows[(name, False)][0]
        same = [c.strategy for c in rows[(name, True)][1].candidates] == \
            [c.strategy for c in rows[(name, False)][1].candidates]
        print(f"  pruning speed-up {b / a:.2f}x; identical ranking: {same}; winner "
              f"{rows[(name, True)][1].best.strategy.label}")
    cmd = [sys.executable, "-m", "scalestudy", "plan", "--model", "mt5-xxl", "--gpu", "a100-40gb", "--nodes", "4",
           "--gpus-per-node", "8", "--global-batch", "256", "--seq-len", "512", "--target-len", "128", "--json"]
    walls, cpus = [], []
    for _ in range(args.repeat):
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        walls.append(time.perf_counter() - t0)
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)
    print(f"CLI `scalestudy plan` mt5-xxl 4x8 (fresh process incl. Python start-up and imports): wall "
          f"median {statistics.median(walls):.2f} s, min {min(walls):.2f} s (target < 2 s); CPU time (user+sys) "
          f"median {statistics.median(cpus):.2f} s; load average now {os.getloadavg()[0]:.1f} on {os.cpu_count()} "
          "cores (other jobs inflate wall time)")


if __name__ == "__main__":
    main()
