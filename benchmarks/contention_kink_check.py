"""The ZeRO-3 / FSDP contention term's kink against the held-out bias: where each sharded row's passes sit on it.

terms._exposed prices a pass's exposed collective seconds as max(comm x s/(1+s), comm - compute + i x min(compute,
comm)): s the compute slowdown beside a collective (device YAML compute_slowdown_under_comm, 0.189), i the
collectives' slowdown beside compute (calibration overlap_interference, 0.10). Per second of collective, with r =
compute / comm of the pass, the exposure is e(r) = max(s/(1+s), 1 - r + i x min(r, 1)): flat at s/(1+s) = 0.159 for
r above the kink r* = 1 + i - s/(1+s) (0.94 at i 0.10, 1.60 at i 0.76), rising as r falls below it (slope -1 down to
r = 1, -(1 - i) below). Raising i moves r* and lifts e only between the old and the new kink (at r = 1: 0.159 -> 0.76
with i 0.76), nothing above r*.

This script records, for every fsdp / ZeRO-3 GPU throughput row, the (compute, comm) that _sharded_overlap hands to
terms._exposed for each pass (stored constants), and prints the held-out (leave-one-source-out) bias binned by the
backward pass's r -- all rows, one-node rows, multi-node rows -- beside the step change the same rows get with i 0.6 /
0.76 (stored constants otherwise, no refit) and e(r) stored / at i 0.76: the shape the data ask for against the shape
the constant gives; then the rows whose backward pass lies between the stored and the i 0.76 kink. Reads only; no
constant is changed. ~30 s (one LOSO).

    .venv/bin/python benchmarks/contention_kink_check.py
"""

from __future__ import annotations

import collections
import statistics

from scalestudy.costmodel import published as P
from scalestudy.costmodel import terms
from scalestudy.costmodel.estimate import estimate

INF = float("inf")
EDGES = [0, 0.8, 1.0, 1.2, 1.6, 2, 3, 4, 8, INF]


def exposure(r: float, i: float, s: float) -> float:
    """terms._exposed per second of collective at compute / comm = r."""
    return max(s / (1 + s), 1 - r + i * min(r, 1.0))


def kink(i: float, s: float) -> float:
    """r where the comm-bound branch meets the compute-slowdown floor."""
    return 1 + i - s / (1 + s)


def passes(r: dict, i: float | None = None) -> tuple[list, object]:
    """The (compute, comm, interference, slow) arguments of every terms._exposed call while estimating row `r`
    (stored constants, or the collectives' slowdown `i` in their place), and the estimate."""
    seen = []
    original = terms._exposed

    def spy(compute: float, comm: float, interference: float, slow: float) -> float:
        seen.append((compute, comm, interference, slow))
        return original(compute, comm, interference if i is None else i, slow)
    terms._exposed = spy
    try:
        model, cluster, st, wl = P._setup(r)
        e = estimate(model, cluster, st, wl)
    finally:
        terms._exposed = original
    return seen, e


def rows(held_out: dict) -> list[dict]:
    """Each fsdp / ZeRO-3 GPU throughput row with an overlapped pass: held-out error, r of the backward pass with the
    most collective seconds (under gradient_sync last the synced micro-batch's, which holds the reduce-scatters) and
    the step with i 0.6 / 0.76 over the stored step (same constants otherwise, no refit)."""
    out = []
    for r in P.load()["throughput"]:
        if not (r["engine"] == "fsdp" or int(r.get("zero", 0)) == 3):
            continue
        if P._setup(r)[1].device.kind == "cpu":
            continue
        seen, e = passes(r)
        if len(seen) < 2:  # per-param-sync (in series) or nothing overlapped: terms._exposed not reached
            continue
        # _sharded_overlap's micro_batches calls terms._exposed for the forward, then the backward (the collectives with
        # their latency, then their bytes alone -- never more seconds)
        cb, mb, i, s = max(seen[1::2], key=lambda p: p[1])
        moved = {x: passes(r, x)[1].step_s / e.step_s - 1 for x in (0.6, 0.76)}
        out.append({"id": r["id"], "source": r["source"], "error": held_out[r["id"]], "rb": cb / mb if mb else INF,
                    "nodes": int(r["nodes"]), "i": i, "s": s, "d60": moved[0.6], "d76": moved[0.76]})
    return out


def main() -> None:
    lo = P.leave_one_source_out()
    data = rows({x["id"]: x["error"] for x in lo["rows"]})
    i0, s0 = data[0]["i"], data[0]["s"]
    print(f"{len(data)} sharded GPU rows with an overlapped pass; stored i {i0}, s {s0}; kink r* = "
          f"{kink(i0, s0):.2f} (i 0.6: {kink(0.6, s0):.2f}, i 0.76: {kink(0.76, s0):.2f})")
    print("\nby the backward pass's compute / comm r: rows, sources, held-out bias (mean; each source once), step "
          "change with i 0.6 / 0.76 (mean), e(r) per collective second stored / i 0.76 at the bin's median r")
    for title, keep in (("all", lambda x: True), ("one node (NVLink / PCIe collectives)", lambda x: x["nodes"] == 1),
                        ("several nodes (the collectives cross the network)", lambda x: x["nodes"] > 1)):
        print(f" {title}")
        for lo_, hi in zip(EDGES, EDGES[1:]):
            sel = [x for x in data if lo_ <= x["rb"] < hi and keep(x)]
            if not sel:
                continue
            by = collections.defaultdict(list)
            for x in sel:
                by[x["source"]].append(x["error"])
            rm = statistics.median(x["rb"] for x in sel)
            print(f"  [{lo_:g}, {hi:g}): {len(sel):3d} {len(by):3d}  {statistics.mean(x['error'] for x in sel):+6.1%} "
                  f"{statistics.mean(statistics.mean(v) for v in by.values()):+6.1%}   "
                  f"{statistics.mean(x['d60'] for x in sel):+6.1%} / {statistics.mean(x['d76'] for x in sel):+6.1%}   "
                  f"{exposure(rm, i0, s0):.2f} / {exposure(rm, 0.76, s0):.2f}")
    flips = [x for x in data if kink(x["i"], x["s"]) <= x["rb"] < kink(0.76, x["s"])]
    print(f"\nrows whose backward pass lies between the stored and the i 0.76 kink (on the floor now, on the "
          f"comm-bound branch at 0.76): {len(flips)} rows, {len({x['source'] for x in flips})} sources")
    for x in sorted(flips, key=lambda x: x["rb"]):
        print(f"  r {x['rb']:.2f}  held-out {x['error']:+6.1%}  i 0.76 step {x['d76']:+6.1%}  {x['id']}")


if __name__ == "__main__":
    main()
