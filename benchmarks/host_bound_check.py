"""Could host-bound kernel launching after a sync explain the short-step misses? The cost model's own counts, per row.

After a host sync (loss / grad-norm .item(), a timer's cuda.synchronize) the GPU queue is empty and the host launches
the next kernels one by one: a sync-bounded segment takes max(kernels x host time per launch, device time). The
segment can only be host-bound where the host's time per launch exceeds the device's time per kernel. This script
prints, for every published GPU throughput row of the given engines (stored constants, no refit):

- K: kernels one micro-batch launches on the busiest stage (costmodel/kernel_counts.py, the rows' kernel path; a
  full recompute counts its forward again), the LM head and loss not counted (a few kernels);
- the modelled device seconds of one micro-batch (compute_s / slots: GEMMs, element-wise bytes, K x the fitted
  kernel_overhead_s) and their ratio: the host time per launch above which the micro-batch turns host-bound;
- the published step's gap to the model and the host time per launch that would explain all of it;
- the parameter tensors on a rank (zero3._block_tensors: one per weight / bias / norm), for the per-tensor host
  loops of the optimizer segment after the grad-norm .item() (Megatron clip_grad_norm_fp32, FusedAdam's list
  building, _copy_main_params_to_model_params), and the gap per tensor at one micro-batch per step;
- the in-sample signed error binned by device time per kernel (host-bound launching would make the rows with the
  shortest kernels the most over-predicted in throughput).

- with --loso-host-us H [H ...]: validate's leave-one-source-out headline with every GPU pass priced as
  max(device seconds, kernels launched x H us) -- per pass (forward; backward with a full recompute's forward
  kernels), the most host-bound any sync segmentation can be (a coarser segment's max is <= the sum of per-pass
  maxima) -- beside H = 0 (today's model), in one process (step.compute_times wrapped where stages / terms call it).

    .venv/bin/python benchmarks/host_bound_check.py [--engines megatron,ddp,fsdp,deepspeed] [--rows REGEX]
    .venv/bin/python benchmarks/host_bound_check.py --loso-host-us 40 100      # ~20 s per value

Result of 2026-12-04 (docs/costmodel-validation.md, 'Host-bound launching after sync points'): no row reaches the
threshold at a physical host time per launch.
"""

from __future__ import annotations

import argparse
import dataclasses
import re

from scalestudy.costmodel import published as P
from scalestudy.costmodel import stages, step, terms
from scalestudy.costmodel.estimate import estimate
from scalestudy.costmodel.kernel_counts import model_block_kernels
from scalestudy.costmodel.zero3 import _block_tensors


def row_numbers(r: dict) -> dict | None:
    model, cluster, st, wl = P._setup(r)
    if cluster.device.kind == "cpu":
        return None
    est = estimate(model, cluster, st, wl)
    s, lay = est.strategy, est.layout
    (ef, eb), (df, db) = model_block_kernels(model, s.kernels, s.attention == "flash")
    le = model.num_layers if model.is_encoder_decoder else 0
    ld = model.num_decoder_layers if model.is_encoder_decoder else model.num_layers
    kernels = (le * (ef + eb) + ld * (df + db) + (le * ef + ld * df if s.recompute == "full" else 0)) / lay.pp
    slots = lay.grad_accum + (lay.pp - 1 if lay.pp > 1 else 0)
    per_mb = est.compute_s / slots
    tensors = (le * len(_block_tensors(model, False, lay.tp)) + ld * len(_block_tensors(model, True, lay.tp))) / lay.pp
    pred = P._metric(est, r["metric"], r.get("counted_batch"))
    published_step = est.step_s * pred / float(r["published"])
    gap = published_step - est.step_s
    return {"id": r["id"], "source": r["source"], "ga": lay.grad_accum, "kernels": kernels, "per_mb": per_mb,
            "dev_per_kernel": per_mb / kernels, "gap": gap, "need": (per_mb + gap / lay.grad_accum) / kernels,
            "tensors": tensors, "error": pred / float(r["published"]) - 1.0}


def host_bound_compute_times(host_s: float):
    """step.compute_times with each pass no shorter than its kernels x `host_s` (GPU devices only)."""
    def wrapped(model, device, precision, tp, micro_batch, seq_len, target_len, recompute, flash, sp, cal,
                kernels="fused", *args, **kwargs):
        ct = step.compute_times(model, device, precision, tp, micro_batch, seq_len, target_len, recompute, flash, sp,
                                cal, kernels, *args, **kwargs)
        if device.kind == "cpu" or host_s <= 0:
            return ct
        (ef, eb), (df, db) = model_block_kernels(model, kernels, flash)
        le = model.num_layers if model.is_encoder_decoder else 0
        ld = model.num_decoder_layers if model.is_encoder_decoder else model.num_layers
        kf = le * ef + ld * df
        kb = le * eb + ld * db + (kf if recompute == "full" else 0)
        return dataclasses.replace(ct, forward=max(ct.forward, kf * host_s), backward=max(ct.backward, kb * host_s))
    return wrapped


def loso_ab(hosts_us: list[float]) -> None:
    base = None
    for h in [0.0, *hosts_us]:
        stages.compute_times = terms.compute_times = host_bound_compute_times(h * 1e-6)
        res = P.leave_one_source_out()
        errs = {r["id"]: r["error"] for r in res["rows"]}
        base = base or errs
        moved = sorted((abs(errs[k]) - abs(base[k]), k) for k in errs if abs(errs[k] - base[k]) > 0.005)
        print(f"host {h:5.0f} us per launch: LOSO mean {100 * res['mean_abs_error']:.3f}%, max "
              f"{100 * res['max_abs_error']:.1f}%, rows > 20% {sum(abs(e) > 0.2 for e in errs.values())}, "
              f"rows moved > 0.5 pt {len(moved)}")
        for _, k in moved[:4] + moved[-4:]:
            print(f"    {k[:50]:50s} {100 * base[k]:+6.1f}% -> {100 * errs[k]:+6.1f}%")
    stages.compute_times = terms.compute_times = step.compute_times


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--engines", default="megatron,ddp,fsdp,deepspeed")
    ap.add_argument("--rows", default="", help="print only rows whose id matches this regex (bins use all)")
    ap.add_argument("--loso-host-us", type=float, nargs="+", default=None,
                    help="LOSO headline with every pass max(device, kernels x this many us), beside 0")
    args = ap.parse_args()
    if args.loso_host_us:
        loso_ab(args.loso_host_us)
        return
    engines = set(args.engines.split(","))
    out = [x for x in (row_numbers(r) for r in P.load()["throughput"] if r["engine"] in engines) if x]
    out.sort(key=lambda x: x["dev_per_kernel"])
    for x in out:
        if args.rows and not re.search(args.rows, x["id"]):
            continue
        print(f"{x['source'][:18]:18s} {x['id'][:42]:42s} ga {x['ga']:4d} K/mb {x['kernels']:6.0f} "
              f"device/mb {x['per_mb'] * 1e3:8.1f} ms  device/kernel {x['dev_per_kernel'] * 1e6:6.1f} us  "
              f"gap {x['gap'] * 1e3:+8.1f} ms  host/launch needed {x['need'] * 1e6:6.1f} us  "
              f"tensors {x['tensors']:5.0f}" + (f"  gap/tensor {x['gap'] / x['tensors'] * 1e6:+6.1f} us"
                                                 if x["ga"] == 1 else ""))
    edges = [0, 60, 80, 100, 130, 170, 250, 400, float("inf")]
    print(f"\n{len(out)} GPU rows; in-sample signed error (predicted / published throughput - 1) by device/kernel:")
    for lo, hi in zip(edges, edges[1:]):
        sel = [x["error"] for x in out if lo <= x["dev_per_kernel"] * 1e6 < hi]
        if sel:
            print(f"  {lo:4.0f}-{hi:4.0f} us: {len(sel):4d} rows, mean {100 * sum(sel) / len(sel):+5.1f}%, "
                  f"mean |error| {100 * sum(map(abs, sel)) / len(sel):4.1f}%")


if __name__ == "__main__":
    main()
