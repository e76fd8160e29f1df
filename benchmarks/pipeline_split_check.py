"""Pipeline rows split into a per-micro-batch slot and a per-step part (docs/costmodel-validation.md, 'Pipeline
rows split into slot and per-step part').

A 1F1B step is (fill and drain + per-step work) + m x the slowest stage's slot, m the micro-batches per step. Where a
source publishes one layout (model, device, tp, pp, micro-batch, software) at several m -- the global batch fixed and
the node count varied, or the global batch varied -- a least-squares line step = a + b m through its published steps
gives the slot b and the per-step part a, and the same line through the model's steps gives the model's (the
model's a carries its data-parallel time's change with the node count the same way as the published one does).

For encoder-decoder pipelines it also prints, per row, each block kind's forward + backward seconds (one more
decoder block's seconds: the difference of step.compute_times with it and without, as stages.layer_costs takes the
FLOPs) beside its FLOPs, and the slowest stage's blocks priced by its FLOP share (what estimate() does) and by its
share of the blocks' seconds.

    python3 benchmarks/pipeline_split_check.py [--blocks] [SOURCE ...]
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json

from scalestudy.costmodel.alignment import pads_vocab
from scalestudy.costmodel.constants import stored
from scalestudy.costmodel.estimate import estimate
from scalestudy.costmodel.flops import target_length
from scalestudy.costmodel.fp8 import recipe as fp8_recipe
from scalestudy.costmodel.memory import loss_kernel
from scalestudy.costmodel.op_checkpoint import early_stop
from scalestudy.costmodel.published import _metric, _setup, load
from scalestudy.costmodel.stages import layer_costs
from scalestudy.costmodel.step import compute_times
from scalestudy.costmodel.terms import attention_kernel
from scalestudy.specs.strategy import logit_shards, resolve_software, vocab_shards


def line(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares (a, b) of y = a + b x."""
    n = len(points)
    mx, my = sum(x for x, _ in points) / n, sum(y for _, y in points) / n
    b = sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x, _ in points)
    return my - b * mx, b


def rows_by_layout(sources: set[str]) -> dict[tuple, list[tuple]]:
    """(m, published step, model step, dp, id, error) of every pipeline row, by layout."""
    out = collections.defaultdict(list)
    for r in load()["throughput"]:
        if int(r.get("pp", 1)) < 2 or (sources and r["source"] not in sources):
            continue
        model, cluster, st, wl = _setup(r)
        est = estimate(model, cluster, st, wl)
        pred = float(_metric(est, r["metric"], r.get("counted_batch")))
        published_step = est.step_s * pred / float(r["published"])  # every metric is inverse in the step time
        key = (r["source"], json.dumps(r["model"], sort_keys=True), r["device"], st.tp, st.pp, st.micro_batch,
               json.dumps(r.get("software"), sort_keys=True), r["engine"], r.get("zero", 0), r["recompute"])
        out[key].append((est.layout.grad_accum, published_step, est.step_s, est.layout.dp, r["id"],
                         pred / float(r["published"]) - 1))
    return out


def block_kinds(r: dict) -> str:
    """One line: an encoder-decoder pipeline row's encoder / decoder block seconds and FLOPs, and its slowest
    stage's blocks by FLOP share and by time share."""
    model, cluster, st, wl = _setup(r)
    st, dev, cal = resolve_software(st, model), cluster.device, stored()
    s, t, tp = wl.seq_len, target_length(model, wl), st.tp

    def passes(m) -> float:
        ct = compute_times(m, dev, st.precision, tp, st.micro_batch, s, t, st.recompute, st.attention == "flash",
                           st.sequence_parallel and tp > 1, cal, st.kernels, attention_kernel(st, dev),
                           early_stop(st), loss_kernel(st), pads_vocab(st.engine), vocab_shards(st, tp), st.cublas,
                           st.tf32, logit_shards(st, tp), fp8_recipe(st.engine))
        return ct.forward + ct.backward

    le, ld = model.num_layers, model.num_decoder_layers
    whole = passes(model)
    dec = passes(dataclasses.replace(model, num_decoder_layers=ld + 1)) - whole
    enc = (whole - ld * dec) / le
    costs, _ = layer_costs(model, s, t)
    split = st.stage_split(model.total_layers)
    flop_stage = time_stage = 0.0
    start = 0
    for n in split:
        e = max(0, min(n, le - start))
        flop_stage = max(flop_stage, whole * sum(costs[start:start + n]) / sum(costs))
        time_stage = max(time_stage, e * enc + (n - e) * dec)
        start += n
    return (f"{r['id']:40s} block s enc {enc * 1e3:6.2f} ms dec {dec * 1e3:6.2f} ms (dec/enc {dec / enc:.2f}, FLOPs "
            f"{costs[-1] / costs[0]:.2f}); slowest stage's blocks by FLOPs {flop_stage:.4f} s, by seconds "
            f"{time_stage:.4f} s ({time_stage / flop_stage - 1:+.1%})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sources", nargs="*", help="published.yaml sources (default: every pipeline row's)")
    parser.add_argument("--blocks", action="store_true", help="encoder-decoder rows: block seconds by kind")
    args = parser.parse_args()
    groups = rows_by_layout(set(args.sources))
    print("layout (source tp pp mb)         published a      b | model a      b | b published / model")
    for key, rows in sorted(groups.items()):
        if len({x[0] for x in rows}) < 2:
            continue
        pa, pb = line([(x[0], x[1]) for x in rows])
        ma, mb = line([(x[0], x[2]) for x in rows])
        print(f"{key[0]:22s} tp{key[3]} pp{key[4]} mb{key[5]:<3d} {pa:8.3f} {pb:7.4f} | {ma:7.3f} {mb:7.4f} | "
              f"{pb / mb:5.2f}   (" + ", ".join(f"m {x[0]} dp {x[3]} {x[5]:+.1%}" for x in sorted(rows)) + ")")
    if args.blocks:
        wanted, seen = {x[4] for rows in groups.values() for x in rows}, set()
        for r in load()["throughput"]:
            layout = (json.dumps(r["model"], sort_keys=True), r.get("tp", 1), r.get("pp", 1), r["micro_batch"])
            if r["id"] in wanted and "target" in r["model"] and layout not in seen:  # one row per layout
                seen.add(layout)
                print(block_kinds(r))


if __name__ == "__main__":
    main()
