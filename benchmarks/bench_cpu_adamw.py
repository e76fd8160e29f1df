"""Host AdamW step time: torch's CPU AdamW paths against DeepSpeed's CPU-Adam, on the same host, threads and tensors.

Why: engine fsdp prices a CPU-offloaded optimizer step as DeepSpeed CPU-Adam time (the device YAML's
cpu_adam_params_per_s) x a factor that depends on which torch AdamW steps the host shards (terms.host_adam_slowdown):
the default on host tensors is the single-tensor loop (torch.optim.adamw picks foreach only for CUDA-like devices),
while torchtune's FSDP offload recipes, torchtitan's default and `train --engine fsdp` (engines.yaml fsdp
host_optimizer) pass fused=True (torch's fused CPU kernel, torch >= 2.4); torchtune with `dtype: bf16` keeps
parameters, gradients and both moments in bf16. This script times each of them per step and
prints them side by side as multiples of DeepSpeed CPU-Adam's time, next to the multiple the cost model prices
(terms.host_adam_slowdown), marking the one `train --engine fsdp` steps under CPU offload.

Tensors: one Llama decoder layer's shard per rank (FSDP2 shards every parameter on dim 0): q / k / v / o, gate / up /
down and two norms of a d_model x d_ff x kv model over `--shards` ranks, repeated `--layers` times, so each step
streams far more than the last-level cache (memory-bound, as a 70B shard is).

    .venv/bin/python benchmarks/bench_cpu_adamw.py [--threads 1] [--layers 2] [--rounds 5]

Each round times every optimizer once (interleaved, so a neighbour's burst hits all of them); the printed figure is
the median over rounds of each time / DeepSpeed's time in the same round. Needs DeepSpeed's cpu_adam op (JIT-built
on first use, ~75 s).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time


def _args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1, help="OpenMP / intra-op threads (torchrun's default is 1)")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--d-model", type=int, default=4096)
    ap.add_argument("--d-ff", type=int, default=14336)
    ap.add_argument("--kv-dim", type=int, default=1024)
    ap.add_argument("--shards", type=int, default=8, help="FSDP ranks the layer is sharded over")
    ap.add_argument("--rounds", type=int, default=5)
    return ap.parse_args()


ARGS = _args()
# before torch / DeepSpeed load: both read the OpenMP pool size once
os.environ["OMP_NUM_THREADS"] = str(ARGS.threads)

import torch  # noqa: E402

torch.set_num_threads(ARGS.threads)


def layer_shapes(d: int, ff: int, kv: int, shards: int) -> list[tuple[int, ...]]:
    """One decoder layer's parameter shards on one rank (dim 0 split over `shards`)."""
    full = [(d, d), (kv, d), (kv, d), (d, d), (ff, d), (ff, d), (d, ff), (d,), (d,)]
    return [(max(1, s[0] // shards),) + s[1:] for s in full]


def make_params(shapes: list[tuple[int, ...]], dtype: torch.dtype) -> list[torch.nn.Parameter]:
    gen = torch.Generator().manual_seed(0)
    params = []
    for shape in shapes:
        p = torch.nn.Parameter(torch.randn(shape, generator=gen).to(dtype))
        p.grad = torch.randn(shape, generator=gen).to(dtype) * 1e-3
        params.append(p)
    return params


def optimizers(shapes: list[tuple[int, ...]]) -> dict:
    """name -> an optimizer whose state is already allocated (one warm-up step), fp32 unless named."""
    from deepspeed.ops.adam import DeepSpeedCPUAdam

    kw = dict(lr=1e-5, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    built = {
        "deepspeed-cpu-adam fp32": DeepSpeedCPUAdam(make_params(shapes, torch.float32), adamw_mode=True, **kw),
        "torch single-tensor fp32": torch.optim.AdamW(make_params(shapes, torch.float32), foreach=False, **kw),
        "torch foreach fp32": torch.optim.AdamW(make_params(shapes, torch.float32), foreach=True, **kw),
        "torch fused fp32": torch.optim.AdamW(make_params(shapes, torch.float32), fused=True, **kw),
        "torch single-tensor bf16": torch.optim.AdamW(make_params(shapes, torch.bfloat16), foreach=False, **kw),
        "torch fused bf16": torch.optim.AdamW(make_params(shapes, torch.bfloat16), fused=True, **kw),
    }
    for opt in built.values():
        opt.step()
    return built


def priced() -> dict:
    """name -> the host-step time the cost model prices / DeepSpeed CPU-Adam's (terms.host_adam_slowdown on an fsdp
    CPU-offload strategy with that optimizer_loop / optimizer_dtype), and the name `train --engine fsdp` steps on a
    GPU host (engine/settings.host_adamw: engines.yaml fsdp host_optimizer)."""
    from scalestudy.costmodel.engines import engine_comm
    from scalestudy.costmodel.terms import host_adam_slowdown
    from scalestudy.specs.strategy import Strategy

    eng = engine_comm("fsdp")
    ask = {"deepspeed-cpu-adam fp32": ("cpu-adam", "engine"), "torch single-tensor fp32": ("per-tensor", "engine"),
           "torch foreach fp32": ("foreach", "engine"), "torch fused fp32": ("fused", "engine"),
           "torch single-tensor bf16": ("per-tensor", "bf16"), "torch fused bf16": ("fused", "bf16")}
    out = {name: host_adam_slowdown(Strategy(engine="fsdp", zero=3, offload_optimizer="cpu", offload_params="cpu",
                                             optimizer_loop=loop, optimizer_dtype=dtype), eng)
           for name, (loop, dtype) in ask.items()}
    trained = {"fused": "torch fused fp32", "single-tensor": "torch single-tensor fp32"}[eng.host_optimizer]
    return out, trained


def timed_step(opt) -> float:
    start = time.perf_counter()
    opt.step()
    return time.perf_counter() - start


def main() -> None:
    shapes = layer_shapes(ARGS.d_model, ARGS.d_ff, ARGS.kv_dim, ARGS.shards) * ARGS.layers
    elems = sum(torch.Size(s).numel() for s in shapes)
    opts = optimizers(shapes)
    times: dict[str, list[float]] = {name: [] for name in opts}
    for _ in range(ARGS.rounds):
        for name, opt in opts.items():
            times[name].append(timed_step(opt))
    ref = times["deepspeed-cpu-adam fp32"]
    print(f"torch {torch.__version__}, {ARGS.threads} thread(s), {len(shapes)} tensors, {elems / 1e6:.1f}M parameters"
          f" per step, median of {ARGS.rounds} interleaved rounds")
    model, trained = priced()
    print(f"{'optimizer':28s} {'ms/step':>9s} {'Mparam/s':>9s} {'x DeepSpeed CPU-Adam':>21s} {'priced':>7s}")
    for name, ts in times.items():
        ratio = statistics.median(t / r for t, r in zip(ts, ref))
        med = statistics.median(ts)
        mark = "  <- train --engine fsdp, CPU offload (engines.yaml fsdp host_optimizer)" if name == trained else ""
        print(f"{name:28s} {med * 1e3:9.1f} {elems / med / 1e6:9.1f} {ratio:21.2f} {model[name]:7.2f}{mark}")
    single = statistics.median(a / b for a, b in zip(times["torch single-tensor fp32"], times["torch fused fp32"]))
    print(f"single-tensor / fused, fp32: {single:.2f}")


if __name__ == "__main__":
    sys.exit(main())
