"""DeepSpeed runs of the V100 era predicted too fast: the published step split into what runs once per optimizer step
and what runs per micro-batch, beside the model's same parts (docs/costmodel-validation.md, 'DeepSpeed V100 rows:
per step or per micro-batch (dsv100)').

Read-only: stored constants (calibration.yaml), every row as published.yaml states it; nothing is fitted.

1. deepspeed2020zerotut's 10B ZeRO-2 on 32 V100 (2 nodes): the log screenshot's Megatron timers (forward / backward /
   optimizer, three iterations) beside the model's forward, backward (+ exposed gradient reduction) and per-step part
   (optimizer_s + the post-step fp16 all-gather); the bus rate each measured phase implies if it moved the whole
   model's fp16 bytes once (ZeRO-2's dist.reduce of every bucket in the backward, the 20 all_gathers in step()).
2. Rows that vary the micro-batch at a fixed layout and one micro-batch per step (dsautotune2021hf medium / large):
   step = a + b x micro_batch, published and modelled.
3. dlperf2020deepspeed's node sweep (one EDR NIC per 8 V100): the step's growth from 1 to 2 / 4 nodes, published and
   modelled, and the all-reduce bus rate it implies, beside the same publisher's Megatron-LM rows on the same cluster
   (dlperf2021megatron, 0.5B data parallel 8 / 16 / 32).
4. The other named sources' excess per micro-batch slot vs per step (tr1, tr8, rebase).
5. --rates: the 10B row at other inter-node rates (a what-would-fit, not a measurement of that cluster).

    .venv/bin/python benchmarks/dsv100_split_check.py [--rates]
"""

from __future__ import annotations

import argparse
import copy

from scalestudy.costmodel import comm, published as P, terms
from scalestudy.costmodel.estimate import estimate

# deepspeed2020zerotut row 2's log (docs/assets/images/zero2_dp32_10B_log.png at DeepSpeed 2dea61f2), iterations
# 969-971: Megatron-LM timers in ms (pretrain_gpt2.py train_step at DeepSpeedExamples ece5e0e0: 'forward' = the
# model and loss, 'backward' = engine.backward incl. ZeRO-2's reduction epilogue, 'optimizer' = engine.step())
ZT_TIMERS = {"forward": (493.33, 482.36, 560.05), "backward": (2010.52, 2044.73, 1960.20),
             "optimizer": (2077.04, 2109.94, 2082.86)}
ZT_ROW = "dszt-gpt2-10b-z2-v100-32g"


def _rows() -> dict:
    return {r["id"]: r for r in P.load()["throughput"]}


def _run(r: dict):
    """(estimate, the ComputeTimes of its micro-batch, published step seconds) for a row dict."""
    seen = []
    orig = terms.compute_times

    def record(*a, **k):
        seen.append(orig(*a, **k))
        return seen[-1]
    terms.compute_times = record
    try:
        m, c, s, w = P._setup(r)
        e = estimate(m, c, s, w)
    finally:
        terms.compute_times = orig
    return e, (seen[-1] if seen else None), e.step_s * P._metric(e, r["metric"]) / float(r["published"])


def per_mb_s(e) -> float:
    """The model's seconds that scale with micro-batches: compute, pipeline fill, TP and PP sends."""
    return e.compute_s + e.bubble_s + e.tp_comm_s + e.pp_comm_s


def zerotut_timers(rows: dict) -> None:
    r = rows[ZT_ROW]
    e, ct, pub = _run(r)
    psi, n, g = e.params_total, e.layout.dp, e.cluster.gpus_per_node
    lk = comm.links(e.cluster)
    ag = comm.bus_time(1, 2.0 * psi, n, g, lk)  # the post-step fp16 all-gather's bandwidth seconds
    mean = {k: sum(v) / len(v) / 1e3 for k, v in ZT_TIMERS.items()}
    fwd = ct.forward + ct.head / 3
    bwd = ct.backward + 2 * ct.head / 3 + (e.dp_comm_s - ag)
    opt = e.optimizer_s + ag
    print(f"1. {ZT_ROW}: published {pub:.3f} s/step (timers {sum(mean.values()):.3f}), model {e.step_s:.3f}")
    print(f"   {'phase':10s} {'published':>9s} {'model':>7s} {'excess':>7s}")
    for k, mod in (("forward", fwd), ("backward", bwd), ("optimizer", opt)):
        print(f"   {k:10s} {mean[k]:9.3f} {mod:7.3f} {mean[k] - mod:+7.3f}")
    whole = (n - 1) / n * 2.0 * psi
    print(f"   the whole model's fp16 bytes x (n-1)/n = {whole / 1e9:.1f} GB; the model's bus rate "
          f"{min(lk[0], g * lk[2]) / 1e9:.0f} GB/s per node -> all-gather {ag:.3f} s")
    print(f"   implied bus rate if the optimizer phase is local work + that all-gather: "
          f"{whole / (mean['optimizer'] - e.optimizer_s) / 1e9:.1f} GB/s; if the backward is bound by the "
          f"bucket reduces: {whole / mean['backward'] / 1e9:.1f} GB/s")


def _ab(pairs, rows: dict) -> tuple[tuple[float, float], tuple[float, float]]:
    """(published a, b), (model a, b) of step = a + b x micro_batch through two rows of one layout."""
    (x0, i0), (x1, i1) = pairs
    (e0, _, p0), (e1, _, p1) = _run(rows[i0]), _run(rows[i1])
    bp, bm = (p1 - p0) / (x1 - x0), (e1.step_s - e0.step_s) / (x1 - x0)
    return (p0 - bp * x0, bp), (e0.step_s - bm * x0, bm)


def autotune_split(rows: dict) -> None:
    print("\n2. dsautotune2021hf (one DGX-2, DeepSpeed 0.5 ZeRO-1, one micro-batch per step): step = a + b x mb")
    for name, pairs in (("gpt2-medium", ((4, "dsat-hf-gpt2-medium-v100-16g-ds-z1-mb4"),
                                         (6, "dsat-hf-gpt2-medium-v100-16g-ds-z1-tuned-mb6"))),
                        ("gpt2-large", ((2, "dsat-hf-gpt2-large-v100-16g-ds-z1-mb2"),
                                        (3, "dsat-hf-gpt2-large-v100-16g-ds-z1-tuned-mb3")))):
        (pa, pb), (ma, mb) = _ab(pairs, rows)
        e, _, _ = _run(rows[pairs[0][1]])
        print(f"   {name:12s} published a {pa:.3f} b {pb:.4f} | model a {ma:.3f} b {mb:.4f} "
              f"(of a: dp {e.dp_comm_s:.3f} opt {e.optimizer_s:.3f}) | a excess {pa - ma:+.3f} s, "
              f"{(pa - ma) / e.params_total * 1e9:.2f} ns per parameter")
    for i in ("dsat-hf-gpt2-v100-16g-ds-z1-mb8", "dsat-hf-gpt2-xl-v100-16g-ds-z1-mb1"):
        e, _, pub = _run(rows[i])
        print(f"   {i:46s} step excess {pub - e.step_s:+.3f} s, {(pub - e.step_s) / e.params_total * 1e9:.2f} "
              f"ns per parameter")


def _node_sweep(rows: dict, ids: list[str], volume: float) -> None:
    base = None
    for i in ids:
        e, _, pub = _run(rows[i])
        if base is None:
            base = (pub, e.step_s)
            print(f"   {i:52s} published {pub:.3f} model {e.step_s:.3f} (1 node)")
            continue
        n = e.layout.dp
        dp_pub = pub - base[0] + _run(rows[ids[0]])[0].dp_comm_s
        print(f"   {i:52s} published {pub:.3f} model {e.step_s:.3f}: growth {pub - base[0]:+.3f} vs "
              f"{e.step_s - base[1]:+.3f}; all-reduce bus rate implied {2 * (n - 1) / n * volume / dp_pub / 1e9:.1f} GB/s"
              f" per node (model {min(e.cluster.intra_bw, e.cluster.gpus_per_node * e.cluster.inter_bw) / 1e9:.0f})")


def dlperf_sweep(rows: dict) -> None:
    print("\n3. one EDR NIC per 8 V100 (OneFlow DLPerf): DeepSpeed 0.3 (torch 1.6, NCCL 2.7.3) vs Megatron-LM (NCCL 2.8.3)")
    ds = [f"dlperf-ds-gpt2-small-v100-16gb-{k}-z0" for k in ("1n8g", "2n8g", "4n8g")]
    mg = [f"dlperf-megatron-gpt1536x16-v100-16gb-{k}" for k in ("1n8g-dp8tp1pp1", "2n8g-dp16tp1pp1", "4n8g-dp32tp1pp1")]
    for ids in (ds, mg):
        e, _, _ = _run(rows[ids[0]])
        _node_sweep(rows, ids, 2.0 * e.params_total)


def other_sources(rows: dict) -> None:
    print("\n4. excess per micro-batch slot and per step (model's per-step part = dp exposed + optimizer + offload)")
    for i in ("bs-tr1-13b-v100-4n-gb64", "bs-tr1-13b-v100-32n-gb784", "bs-tr1-13b-v100-64n-gb1024",
              "bs-tr1-13b-v100-128n-gb1024", "bs-tr8-104b-v100-32n-tp4pp32", "bs-tr8-104b-v100-32n-tp4pp16dp2-bnb",
              "bs-tr8-104b-v100-32n-tp2pp32dp2-bnb", "ds-rebase-gpt1.3b-v100-16g", "ds-rebase-gpt125m-a100-8g",
              "dlperf-ds-gpt2-small-v100-16gb-1n8g-z0"):
        e, _, pub = _run(rows[i])
        slots = e.layout.grad_accum + e.layout.pp - 1
        step_part = e.step_s - per_mb_s(e)
        print(f"   {i:42s} m {e.layout.grad_accum:4d} dp {e.layout.dp:3d}: published {pub:8.3f} model {e.step_s:8.3f} "
              f"(per step {step_part:6.3f}); excess {pub - e.step_s:+7.3f} s = {(pub - e.step_s) / slots:+.4f} s "
              f"per slot or {(pub - e.step_s) / max(step_part, 1e-9):5.1f}x the per-step part")


def rates(rows: dict) -> None:
    print(f"\n5. {ZT_ROW} at other inter-node rates (what would fit; not adopted)")
    for per_gpu in (6.0e9, 3.0e9, 1.5e9, 0.75e9, 0.6e9):
        r = copy.deepcopy(rows[ZT_ROW])
        r.setdefault("cluster", {})["inter_node_bytes_per_s"] = per_gpu
        e, _, pub = _run(r)
        print(f"   {per_gpu * 16 / 1e9:5.0f} GB/s per node: model {e.step_s:.3f} s (dp exposed {e.dp_comm_s:.3f}), "
              f"published {pub:.3f}: error {pub / e.step_s - 1:+.1%} (validate's sign: tokens/s)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rates", action="store_true", help="also part 5")
    args = ap.parse_args()
    rows = _rows()
    zerotut_timers(rows)
    autotune_split(rows)
    dlperf_sweep(rows)
    other_sources(rows)
    if args.rates:
        rates(rows)


if __name__ == "__main__":
    main()
