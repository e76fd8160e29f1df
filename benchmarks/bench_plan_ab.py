"""Planner speed, before vs after, in one run: strategies per CPU-second of `plan()` for two source trees, each
plan in a fresh process, the trees alternating (A B B A ...), so both see the same machine load.

Per process: the cost model imported first (as the CLI does), then the scenario planned three times -- the first call
(cold caches: what one `scalestudy plan` pays) and the best of the next two (warm). The rate is strategies evaluated
(estimated + pruned, PlanResult.evaluated) per second of the process's CPU time (time.process_time: on a shared
machine wall time also counts the time the process waited for a core), over the whole plan() call. `plan` reports
its own rate over a slightly shorter span: PlanResult.elapsed_s (wall seconds; what `scalestudy plan` prints and
--json holds) runs from plan()'s start to the end of its ranking, before plan() turns the cyclic collector back on
and the collector catches up on what the plan allocated (~10 ms of a 128 x 8 plan here). The first call's rate over
that span in CPU seconds is printed as "first, own span" (the CPU clock read when planner._plan returns).
Prints, per scenario, the medians of each tree and the median of the per-round after/before ratios.

    python benchmarks/bench_plan_ab.py --before /path/to/old/src [--after src] [--rounds 6] [--only llama]

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
from scalestudy.specs.presets import get_model
from scalestudy.specs.strategy import Workload
import scalestudy.plan.planner as planner
ranked_at = []  # the CPU clock when planner._plan returns: the end of the span plan reports (elapsed_s)
_plan = planner._plan
def timed_plan(*args):
    result = _plan(*args)
    ranked_at.append(time.process_time())
    return result
planner._plan = timed_plan
name, device, nodes, batch, seq, target = json.loads(sys.argv[1])
model, cluster, work = get_model(name), make_cluster(device, nodes, 8), Workload(batch, seq, target)
rates, own = [], []
for _ in range(3):
    c0 = time.process_time()
    result = plan(model, cluster, work, Constraints())
    rates.append(result.evaluated / max(time.process_time() - c0, 1e-9))
    own.append(result.evaluated / max(ranked_at[-1] - c0, 1e-9))
print(json.dumps({"evaluated": result.evaluated, "first": rates[0], "warm": max(rates[1:]), "first_own": own[0]}))
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
    ap.add_argument("--only", default="", help="only the scenarios whose name contains this")
    args = ap.parse_args()
    print(f"bench_plan_ab  {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC  {args.rounds} rounds, trees "
          f"alternating; strategies per CPU-second of plan(); load average {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} cores")
    print(f"  before: {args.before}\n  after:  {args.after}")
    print(f"{'scenario':36s} {'evaluated':>9s}   {'first call':>24s}   {'first call, own span':>24s}   "
          f"{'warm (best of 2 more)':>24s}")
    print(f"{'':46s}" + "   before    after  ratio" * 3)
    for label, scenario in SCENARIOS.items():
        if args.only not in label:
            continue
        before, after = [], []
        for r in range(args.rounds):
            pair = (args.before, args.after) if r % 2 == 0 else (args.after, args.before)
            got = {src: run(src, scenario) for src in pair}
            before.append(got[args.before])
            after.append(got[args.after])
        if {b["evaluated"] for b in before} != {a["evaluated"] for a in after}:
            raise SystemExit(f"{label}: the two trees evaluate different spaces")
        cols = []
        for key in ("first", "first_own", "warm"):
            b, a = [x[key] for x in before], [x[key] for x in after]
            ratio = statistics.median(y / x for x, y in zip(b, a))
            cols.append(f"{statistics.median(b):8,.0f} {statistics.median(a):8,.0f} {ratio:6.3f}")
        print(f"{label:36s} {before[0]['evaluated']:9d}   " + "   ".join(cols))
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
