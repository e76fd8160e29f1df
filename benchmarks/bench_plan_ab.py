"""Planner speed, before vs after, in one run: strategies per CPU-second of `plan()` for two source trees, each
plan in a fresh process, the trees alternating (A B B A ...), so both see the same machine load.

Per process: the cost model imported first (as the CLI does), then the scenario planned three times -- the first call
(cold caches: what one `scalestudy plan` pays) and the best of the next two (warm). The rate is strategies evaluated
(estimated + pruned, PlanResult.evaluated) per second of the process's CPU time (time.process_time: on a shared
machine wall time also counts the time the process waited for a core). Prints, per scenario, the medians of each
tree and the median of the per-round after/before ratios.

    python benchmarks/bench_plan_ab.py --before /path/to/old/src [--after src] [--rounds 6]

`--before`: a `src` directory of the other version (e.g. `git archive <commit> | tar -x -C /tmp/old`).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

# name: (model, device, nodes, global batch, seq len, target len)
SCENARIOS = {
    "mt5-xxl 4x8 A100-40GB gb 256": ("mt5-xxl", "a100-40gb", 4, 256, 512, 128),
    "mt5-xxl 128x8 A100-40GB gb 2048": ("mt5-xxl", "a100-40gb", 128, 2048, 512, 128),
    "llama-7b 128x8 H100 gb 1024 s 4096": ("llama-7b", "h100-80gb", 128, 1024, 4096, 0),
    "gpt2 2x8 A100-40GB gb 256 s 1024": ("gpt2", "a100-40gb", 2, 256, 1024, 0),
}

CHILD = """
import json, sys, time
import scalestudy.costmodel.estimate  # noqa: F401  (the CLI imports the cost model before planning)
from scalestudy.plan.planner import plan
from scalestudy.plan.space import Constraints
from scalestudy.specs.hardware import make_cluster
from scalestudy.specs.model import get_model
from scalestudy.specs.strategy import Workload
name, device, nodes, batch, seq, target = json.loads(sys.argv[1])
model, cluster, work = get_model(name), make_cluster(device, nodes, 8), Workload(batch, seq, target)
rates = []
for _ in range(3):
    c0 = time.process_time()
    result = plan(model, cluster, work, Constraints())
    rates.append(result.evaluated / max(time.process_time() - c0, 1e-9))
print(json.dumps({"evaluated": result.evaluated, "first": rates[0], "warm": max(rates[1:])}))
"""


def run(src: str, scenario: tuple) -> dict:
    env = {**os.environ, "PYTHONPATH": str(Path(src).resolve())}
    out = subprocess.run([sys.executable, "-c", CHILD, json.dumps(scenario)], env=env, check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True, help="src directory of the version to compare against")
    ap.add_argument("--after", default=str(Path(__file__).resolve().parent.parent / "src"))
    ap.add_argument("--rounds", type=int, default=6)
    args = ap.parse_args()
    print(f"bench_plan_ab  {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC  {args.rounds} rounds, trees "
          f"alternating; strategies per CPU-second of plan(); load average {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} cores")
    print(f"  before: {args.before}\n  after:  {args.after}")
    print(f"{'scenario':36s} {'evaluated':>9s} {'first before':>12s} {'first after':>11s} {'ratio':>6s} "
          f"{'warm before':>11s} {'warm after':>10s} {'ratio':>6s}")
    for label, scenario in SCENARIOS.items():
        before, after = [], []
        for r in range(args.rounds):
            pair = (args.before, args.after) if r % 2 == 0 else (args.after, args.before)
            got = {src: run(src, scenario) for src in pair}
            before.append(got[args.before])
            after.append(got[args.after])
        if {b["evaluated"] for b in before} != {a["evaluated"] for a in after}:
            raise SystemExit(f"{label}: the two trees evaluate different spaces")
        cols = []
        for key in ("first", "warm"):
            b, a = [x[key] for x in before], [x[key] for x in after]
            ratio = statistics.median(y / x for x, y in zip(b, a))
            cols.append(f"{statistics.median(b):12,.0f} {statistics.median(a):11,.0f} {ratio:6.3f}")
        print(f"{label:36s} {before[0]['evaluated']:9d} {cols[0]} {cols[1].replace('  ', ' ', 1)}")
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
