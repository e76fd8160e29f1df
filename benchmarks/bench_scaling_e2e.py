"""End-to-end CPU scaling example, timed: hyperparameter search over 3 tiny T5 proxies (real `scalestudy train`
runs, ASHA early stopping) -> scaling-law fit of the best runs -> the report's scaling section.

    python benchmarks/bench_scaling_e2e.py [--output DIR] [--trials-per-model 3] [--spec examples/...yaml]

Target (issue 6): the whole pipeline in under 10 minutes on a 2-core CPU. Prints the time of each stage (wall
seconds, measured in this run), the best setting per proxy, the extrapolated learning rate and batch for the target
model, and the fit. A benchmark, not a test: it trains real models for minutes.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIMIT_S = 600.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=None)
    parser.add_argument("--spec", type=Path, default=ROOT / "examples" / "scaling" / "search-t5-proxies.yaml")
    parser.add_argument("--trials-per-model", type=int, default=3)
    parser.add_argument("--budget-tokens", type=int, default=3200, help="per trial (20 steps at batch 4 x 40 tokens)")
    parser.add_argument("--bootstrap", type=int, default=200)
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(Path.home() / ".cache" / "torch_extensions"))
    out = args.output or Path(tempfile.mkdtemp(prefix="scalestudy-bench-scaling-"))
    from scalestudy.report.scaling_section import report_section
    from scalestudy.scaling import analyze
    from scalestudy.search.hyperparams import load_search, run_search

    stages = {}
    t0 = time.perf_counter()
    spec = load_search(args.spec)
    spec.config = replace(spec.config, trials_per_model=args.trials_per_model, budget_tokens=args.budget_tokens)
    load_before = os.getloadavg()
    result = run_search(spec, out / "search", log=lambda s: print(f"  {s}", flush=True))
    stages["search (real train runs)"] = time.perf_counter() - t0

    t1 = time.perf_counter()
    runs_csv = out / "search" / "best_runs.csv"
    from scalestudy.scaling.runs import load_runs

    budget = 10 * float(load_runs(runs_csv).flops.max())  # extrapolate one decade beyond the largest run
    fit = analyze(runs_csv, "chinchilla", n_boot=args.bootstrap, flops_per_param_token="auto",
                  budget_flops=budget).to_dict()
    stages["fit (chinchilla, bootstrap)"] = time.perf_counter() - t1

    t2 = time.perf_counter()
    md, _html, pngs = report_section(runs_csv, out / "plots", n_boot=args.bootstrap)
    (out / "scaling_section.md").write_text(md, encoding="utf-8")
    stages["report section (both laws, plots)"] = time.perf_counter() - t2
    total = time.perf_counter() - t0

    print(f"\n# bench_scaling_e2e  {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC  "
          f"cores={os.cpu_count()}  python {sys.version.split()[0]}  output {out}")
    print(f"load average (1/5/15 min) at start {load_before[0]:.1f}/{load_before[1]:.1f}/{load_before[2]:.1f}, at end "
          "{:.1f}/{:.1f}/{:.1f} (other processes share the cores: timings scale with it)".format(*os.getloadavg()))
    print(f"{args.trials_per_model} trials per proxy, {args.budget_tokens} tokens per trial")
    print("| stage | wall s |\n|---|---|")
    for name, sec in stages.items():
        print(f"| {name} | {sec:.1f} |")
    print(f"| total | {total:.1f} |  (limit {LIMIT_S:.0f} s: {'PASS' if total < LIMIT_S else 'OVER'})")
    print("\nbest setting per proxy (final training loss, nats/token):")
    for m in result["models"]:
        b = m["best"]
        print(f"  {m['model']:9s} N={m['params']:.3g}  trials {m['trials']}  "
              + ("no finished trial" if b is None else f"lr={b['params']['lr']:.3g} batch={b['params']['global_batch']} "
                 f"warm-up={b['params']['warmup_steps']} {b['params']['precision']} loss={b['loss']:.4g}"))
    for key in ("lr", "global_batch"):
        tr = result["trends"][key]
        print(f"  trend {key}: " + (tr["error"] if "error" in tr else
              f"{tr['coef']:.3g} * N^{tr['exponent']:.3f}; at {result['target_model']} "
              f"(N={tr['target_params']:.3g}): {tr['target_value']:.3g}, 95% PI {tr['target_pi']}"))
    print(f"\nchinchilla fit of the best runs: {json.dumps(fit['coef'])}")
    print(f"  CIs: {json.dumps(fit['ci'])}")
    print(f"  compute-optimal at C={budget:.3g} FLOPs: {json.dumps(fit['prediction'])}")
    print(f"scaling section: {out / 'scaling_section.md'}; plots: {', '.join(p.name for p in pngs)}")
    return 0 if total < LIMIT_S else 1


if __name__ == "__main__":
    sys.exit(main())
