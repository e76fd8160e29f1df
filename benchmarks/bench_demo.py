"""Time `scalestudy demo` end to end (the README's main job); it must finish in under 10 minutes on 2 CPU cores.

    python benchmarks/bench_demo.py [--output DIR] [--keep]

Prints the wall time beside the 600 s budget (ratio), the CPU time the demo's processes used (on a machine shared
with other work the wall time stretches; the CPU time barely does, and on an idle 2-core machine the wall time is
at most about the CPU time since the demo keeps at most 2 processes busy), how the wall time splits between the
trials (sum of their wall times, from the store) and the rest (tokenizer, report, start-up), and the load average
at the start, the report's cost-model step-time error and the trials the demo measured again because other
processes disturbed them. Each run starts from an empty study directory; the
DeepSpeed JIT op cache (~/.cache/torch_extensions) is kept as it is (a fresh machine pays ~53 s once more).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BUDGET_S = 600.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=None)
    parser.add_argument("--keep", action="store_true", help="keep the study directory")
    args = parser.parse_args()
    out = args.output or Path(tempfile.mkdtemp(prefix="bench-demo-")) / "demo"
    shutil.rmtree(out, ignore_errors=True)
    load = os.getloadavg()
    jit_cached = (Path.home() / ".cache" / "torch_extensions").is_dir()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    res = subprocess.run([sys.executable, "-m", "scalestudy", "demo", "--output", str(out), "--no-progress"],
                         env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    if res.returncode:
        sys.exit(f"demo failed ({res.returncode}):\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}")
    con = sqlite3.connect(out / "study.sqlite")
    rows = con.execute("SELECT status, wall_s, label FROM trials ORDER BY started_at").fetchall()
    con.close()
    trials_s = sum(r[1] for r in rows)
    statuses = {s: sum(1 for r in rows if r[0] == s) for s in sorted({r[0] for r in rows})}
    print(f"# bench_demo {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores, "
          f"load average at start {load[0]:.1f}, DeepSpeed JIT cache {'present' if jit_cached else 'absent'}")
    print("| what | seconds | share of budget (600 s) |")
    print("|---|---|---|")
    print(f"| `scalestudy demo` end to end | {wall:.1f} | {wall / BUDGET_S:.2f} |")
    print(f"| CPU time of the demo and all its processes (user + sys) | {cpu:.1f} | {cpu / BUDGET_S:.2f} |")
    print(f"| sum of {len(rows)} trial wall times | {trials_s:.1f} | {trials_s / BUDGET_S:.2f} |")
    print(f"| everything else (tokenizer, report, start-up) | {wall - trials_s:.1f} | "
          f"{(wall - trials_s) / BUDGET_S:.2f} |")
    print(f"outcomes: {statuses}; per trial: " + ", ".join(f"{r[2].split(' lr')[0]} {r[1]:.0f} s" for r in rows))
    # the issue 11 CPU criterion (median predicted-vs-measured step error <= 15%), and which trials the demo measured
    # again because other processes disturbed them (study/demo.py remeasure_disturbed)
    report = out / "report.md"
    for line in report.read_text(encoding="utf-8").splitlines() if report.is_file() else ():
        if line.startswith("- Cost model step time"):
            print(line[2:])
    for line in res.stdout.splitlines():
        if "other processes disturbed" in line or "s/step disturbed by" in line or "stayed as busy" in line:
            print(line.strip())
    print(f"verdict: {'PASS' if wall < BUDGET_S else 'FAIL'} ({wall / 60:.1f} min vs 10 min budget)")
    if not args.keep and args.output is None:
        shutil.rmtree(out.parent, ignore_errors=True)


if __name__ == "__main__":
    main()
