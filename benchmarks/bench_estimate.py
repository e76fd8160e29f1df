"""How many strategies per second `estimate` evaluates in one process (requirement: >= 20,000/s).

Enumerates every valid DeepSpeed/FSDP/DDP strategy (engine x ZeRO x offload x tp x pp x micro-batch x recompute)
for mT5-XL and Llama-13B on 4 x 8 A100-40GB, then times `estimate` over all of them: first with empty caches
(cold: each new (model, tp, micro-batch, ...) shape is computed once), then again (warm: a planner re-ranking).
Strategy construction is not timed (the planner builds them once). Rates are strategies per second of this
process's CPU time (`time.process_time`: on a shared machine wall time also counts the time the process waited for
a core) and, beside it, of wall time. Prints a dated table and the warm/cold ratio.

    python benchmarks/bench_estimate.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import os
import time

from scalestudy.costmodel import activation_cache_clear, estimate
from scalestudy.errors import ScalestudyError
from scalestudy.specs.hardware import make_cluster
from scalestudy.specs.presets import get_model
from scalestudy.specs.strategy import ZERO_STAGES, Strategy, Workload


def strategies() -> list[Strategy]:
    out = []
    for engine, zeros in ZERO_STAGES.items():
        for zero, off_o, off_p, tp, pp, mb, rc in itertools.product(
                zeros, ("none", "cpu"), ("none", "cpu"), (1, 2, 4, 8), (1, 2, 4), (1, 2, 4, 8),
                ("none", "selective", "full")):
            try:
                out.append(Strategy(engine=engine, zero=zero, offload_optimizer=off_o, offload_params=off_p, tp=tp,
                                    pp=pp, micro_batch=mb, recompute=rc))
            except ScalestudyError:
                pass
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    cluster = make_cluster("a100-40gb", nodes=4, gpus_per_node=8)
    cases = [(get_model("mt5-xl"), Workload(global_batch=256, seq_len=512, target_len=114)),
             (get_model("llama-13b"), Workload(global_batch=256, seq_len=2048))]
    strats = strategies()
    # keep the combinations the layout accepts (the planner filters the same way)
    valid = []
    for model, work in cases:
        for s in strats:
            try:
                estimate.estimate(model, cluster, s, work)
                valid.append((model, work, s))
            except ScalestudyError:
                pass
    results = {}
    for label, cold in (("cold caches", True), ("warm caches", False)):
        best_cpu = best_wall = 0.0
        for _ in range(args.repeat):
            if cold:
                activation_cache_clear()
            c0, w0 = time.process_time(), time.perf_counter()
            for model, work, s in valid:
                estimate.estimate(model, cluster, s, work)
            cpu, wall = time.process_time() - c0, time.perf_counter() - w0
            best_cpu = max(best_cpu, len(valid) / max(cpu, 1e-9))
            best_wall = max(best_wall, len(valid) / wall)
        results[label] = (best_cpu, best_wall)
    print(f"# bench_estimate  {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}  "
          f"{len(valid)} valid strategies (2 models x 32 A100-40GB), best of {args.repeat}, load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"{'mode':<14}{'strategies/CPU-s':>18}{'strategies/wall-s':>19}")
    for label, (cpu, wall) in results.items():
        print(f"{label:<14}{cpu:>18,.0f}{wall:>19,.0f}")
    cold, warm = results["cold caches"][0], results["warm caches"][0]
    print(f"warm/cold ratio (CPU time): {warm / cold:.2f}x; requirement >= 20,000 strategies per CPU-second in one "
          f"process: {'PASS' if cold >= 20000 else 'FAIL'}")

if __name__ == "__main__":
    main()
