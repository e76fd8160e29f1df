"""FSDP / ZeRO-3 rows predicted too fast: what the >20% rows share, and the overlap-contention readings A/B'd.

Part 1 (default): every published GPU throughput row on engine fsdp or deepspeed zero 3, with validate's held-out
(leave-one-source-out) error beside the candidate quantities the rows could share: the modelled compute over the
modelled ZeRO-3 / FSDP traffic per step (`ratio`), the exposed traffic's share of the step, the modelled memory over
capacity (allocator pressure near capacity), micro-batches per step (FSDP re-gathers every micro-batch), tensor
parallel size (TP x FSDP 2D), node count; then the held-out bias binned by each (mean over rows and with each source
weighted once).

Part 2 (--ab): validate's leave-one-source-out headline and issue-flags-only error with terms._exposed's two
contention constants replaced -- `s`, the compute slowdown while a collective runs beside it (device YAML
compute_slowdown_under_comm, 0.189 from Lee et al. 2025), and `i`, the collectives' slowdown beside compute
(calibration overlap_interference, 0.10) -- and optionally the exact two-sided overlap (both sides slowed while both
run, the pass ends when both are done) instead of terms._exposed's max of the two one-sided forms. Per source:
which sources get better / worse. ~20 s per variant (one LOSO refit each).

    .venv/bin/python benchmarks/fsdp_tail_check.py                      # the table and bins, ~25 s (one LOSO)
    .venv/bin/python benchmarks/fsdp_tail_check.py --ab s=0.61 i=0.76 s=0.45,i=0.76,exact

Result of 2026-12-04 (docs/costmodel-validation.md, 'FSDP / ZeRO-3 rows too fast: the tail (fsdptail)'): the
>20% rows share a compute / traffic ratio near or below 1 (bias +29 / +23 / +14 / +8 / +2% in the bins < 0.8, 0.8-1.2,
1.2-2, 2-4, 4-8), not memory pressure, micro-batch count, TP or node count; the measured contention readings move
the balanced rows the right way but the compute-bound single-node FSDP rows the wrong way: not adopted.
"""

from __future__ import annotations

import argparse
import collections
import statistics

from scalestudy.costmodel import published as P
from scalestudy.costmodel import terms
from scalestudy.costmodel.estimate import estimate

INF = float("inf")
BINS = {
    "compute / traffic": ("ratio", [0, 0.8, 1.2, 2, 4, 8, 16, INF]),
    "exposed traffic / step": ("exposed", [0, 0.01, 0.03, 0.1, 0.2, 0.4, 1.01]),
    "memory / capacity": ("memory", [0, 0.4, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 2]),
    "micro-batches per step": ("ga", [1, 2, 3, 5, 9, 17, 10_000]),
    "tensor parallel": ("tp", [1, 2, 4, 8, 100]),
    "nodes": ("nodes", [1, 2, 5, 9, 17, 33, 65, 10_000]),
}


def sharded_rows(held_out: dict) -> list[dict]:
    """Each fsdp / ZeRO-3 GPU throughput row: its held-out error and the candidate quantities (stored constants)."""
    out = []
    for r in P.load()["throughput"]:
        if not (r["engine"] == "fsdp" or int(r.get("zero", 0)) == 3):
            continue
        model, cluster, st, wl = P._setup(r)
        if cluster.device.kind == "cpu":
            continue
        e = estimate(model, cluster, st, wl)
        dp = e.layout.dp
        out.append({"id": r["id"], "source": r["source"], "error": held_out[r["id"]],
                    "ratio": e.compute_s / e.dp_comm_total_s if e.dp_comm_total_s else INF,
                    "exposed": e.dp_comm_s / e.step_s, "memory": e.per_device_bytes / e.capacity_bytes,
                    "ga": wl.global_batch // (st.micro_batch * dp), "tp": st.tp, "nodes": cluster.nodes, "dp": dp})
    return out


def print_table(rows: list[dict]) -> None:
    print(f"{'held-out':>8}  {'row':52s} {'ratio':>6} {'exp/step':>8} {'mem':>5} {'ga':>4} {'tp':>3} {'nodes':>5}")
    for r in sorted(rows, key=lambda r: -r["error"]):
        print(f"{r['error']:+8.1%}  {r['id'][:52]:52s} {r['ratio']:6.2f} {r['exposed']:8.1%} {r['memory']:5.0%} "
              f"{r['ga']:4d} {r['tp']:3d} {r['nodes']:5d}")
    for title, (key, edges) in BINS.items():
        print(f"\nheld-out bias by {title} (rows, sources, mean, median, each source once, rows > +20%)")
        for lo, hi in zip(edges, edges[1:]):
            sel = [r for r in rows if lo <= r[key] < hi]
            if not sel:
                continue
            by = collections.defaultdict(list)
            for r in sel:
                by[r["source"]].append(r["error"])
            errs = [r["error"] for r in sel]
            print(f"  [{lo:g}, {hi:g}): {len(sel):3d} {len(by):3d}  {statistics.mean(errs):+6.1%} "
                  f"{statistics.median(errs):+6.1%}  {statistics.mean(statistics.mean(v) for v in by.values()):+6.1%}"
                  f"  {sum(e > 0.2 for e in errs)}")


def exact_two_sided(compute: float, comm: float, i: float, s: float) -> float:
    """Seconds a pass exceeds `compute` when the compute runs `s` slower and the collectives `i` slower while both
    run, the pass ending when both are done (the alternative to terms._exposed's max of the one-sided forms)."""
    if comm * (1 + i) <= compute * (1 + s):
        return comm * (1 + i) * s / (1 + s)
    return comm - compute + compute * (1 + s) * i / (1 + i)


def variant(spec: str):
    """terms._exposed with 's=..', 'i=..' and/or 'exact' (comma-separated) replacing its inputs / form."""
    parts = dict(p.split("=") if "=" in p else (p, "1") for p in spec.split(",") if p)
    original = terms._exposed

    def exposed(compute: float, comm: float, interference: float, slow: float) -> float:
        i = float(parts.get("i", interference))
        s = float(parts.get("s", slow))
        return exact_two_sided(compute, comm, i, s) if "exact" in parts else original(compute, comm, i, s)
    return exposed


def headline() -> tuple[dict, dict]:
    lo = P.leave_one_source_out()
    return lo, P.issue_flags_only()


def print_ab(specs: list[str]) -> None:
    original = terms._exposed
    base, base_flags = headline()
    base_by = base["by_source"]
    print(f"{'variant':28s} {'LOSO mean':>9} {'max':>7} {'per-source':>10} {'>20%':>5} {'flags-only':>10} {'>20%':>5}")

    def line(name: str, lo: dict, flags: dict) -> None:
        per_src = statistics.mean(v["mean_abs_error"] for v in lo["by_source"].values())
        over = sum(abs(r["error"]) > 0.2 for r in lo["rows"])
        print(f"{name:28s} {lo['mean_abs_error']:9.3%} {lo['max_abs_error']:7.1%} {per_src:10.2%} {over:5d} "
              f"{flags['mean_abs_error']:10.2%} {flags['rows_over_20pct']:5d}")
    line("stored (s 0.189, i 0.10)", base, base_flags)
    for spec in specs:
        terms._exposed = variant(spec)
        try:
            lo, flags = headline()
        finally:
            terms._exposed = original
        line(spec, lo, flags)
        moved = sorted((lo["by_source"][s]["mean_abs_error"] - base_by[s]["mean_abs_error"], s) for s in base_by)
        worse = [f"{s} {base_by[s]['mean_abs_error']:.1%}->{lo['by_source'][s]['mean_abs_error']:.1%}"
                 for d, s in moved[::-1] if d > 0.005][:6]
        better = [f"{s} {base_by[s]['mean_abs_error']:.1%}->{lo['by_source'][s]['mean_abs_error']:.1%}"
                  for d, s in moved if d < -0.005][:6]
        print(f"    better {sum(d < -0.002 for d, _ in moved)} sources ({'; '.join(better)})")
        print(f"    worse  {sum(d > 0.002 for d, _ in moved)} sources ({'; '.join(worse)})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ab", nargs="*", metavar="SPEC", help="variants: s=X, i=X, exact, comma-joined")
    args = ap.parse_args()
    if args.ab is not None:
        print_ab(args.ab)
        return
    lo = P.leave_one_source_out()
    print_table(sharded_rows({r["id"]: r["error"] for r in lo["rows"]}))


if __name__ == "__main__":
    main()
