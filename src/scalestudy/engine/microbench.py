"""Micro-benchmarks of the machine at hand, for calibrating the cost model (`scalestudy calibrate`).

Every rank measures at once (as in training, where all ranks compute together):
- matmul throughput (FLOP/s per rank) vs square size and dtype;
- memory copy bandwidth (bytes/s per rank) and the torch AdamW update rate (parameters/s per rank); on CPU also
  the copy bandwidth vs buffer size (caches vs DRAM; into existing and into newly allocated buffers) and the
  trainer's optimizer step (clip_grad_norm_ + torch AdamW, single-tensor kernels as on CPU) vs parameter count and
  tensor count;
- with more than one rank, collective time vs message size over the real backend (gloo on CPU, NCCL on GPU):
  all_reduce, all_gather, reduce_scatter.
Rank 0 writes one JSON file; `scalestudy.costmodel.calibrate` turns it into a hardware profile.

Run under torchrun (`launch()` does that): python -m scalestudy.engine.microbench --output FILE [--quick].
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

from scalestudy.engine.cpu_wait import Meter, peer_wait, wait_s

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# Wall and run-queue seconds of this rank's CPU timings (cpu_wait.py), written into the results as "wait".
WAIT = Meter()


def timed(fn, device: torch.device, reps: int, min_s: float = 0.0, peers: bool = False) -> float:
    """Median seconds of `fn()` over `reps` runs after one warm-up (repeats until `min_s` total when given). On CPU
    each run's wall time less the seconds this process waited for a CPU (other processes' load, cpu_wait.py); with
    `peers` (a collective), less the largest such wait over the ranks in that run."""
    fn()
    _sync(device)
    walls: list[float] = []
    waits: list[float] = []
    total = 0.0
    while len(walls) < reps or total < min_s:
        q0 = wait_s()  # read outside the timed span (a /proc read per thread: tens of us)
        t0 = time.perf_counter()
        fn()
        _sync(device)
        dt = time.perf_counter() - t0
        walls.append(dt)
        waits.append(wait_s() - q0 if device.type == "cpu" else 0.0)
        total += dt
        if len(walls) >= 50:
            break
    if peers and device.type == "cpu":  # every rank ran the same number of runs (reps, no min_s): gloo, CPU tensors
        waits = peer_wait(waits)
    WAIT.add(sum(walls), sum(waits))
    return statistics.median(max(0.0, w - q) for w, q in zip(walls, waits))


def bench_matmul(device: torch.device, sizes: list[int], dtype: str, budget_s: float) -> list[dict]:
    out = []
    for n in sizes:
        a = torch.randn(n, n, device=device, dtype=DTYPES[dtype])
        b = torch.randn(n, n, device=device, dtype=DTYPES[dtype])
        flops = 2.0 * n**3
        t = timed(lambda: torch.mm(a, b), device, reps=3, min_s=min(0.05, budget_s))
        out.append({"n": n, "dtype": dtype, "seconds": t, "flops_per_s": flops / t})
        if t > budget_s:  # slow dtype (e.g. bf16 on CPUs without native support): stop growing
            break
    return out


def bench_copy(device: torch.device, nbytes: int) -> dict:
    src = torch.empty(nbytes // 4, device=device, dtype=torch.float32).normal_()
    dst = torch.empty_like(src)
    t = timed(lambda: dst.copy_(src), device, reps=5)
    return {"bytes": nbytes, "seconds": t, "bytes_per_s": 2.0 * nbytes / t}  # read + write


def bench_adam(device: torch.device, numel: int) -> dict:
    p = torch.nn.Parameter(torch.randn(numel, device=device))
    p.grad = torch.randn_like(p)
    opt = torch.optim.AdamW([p], lr=1e-3)
    t = timed(opt.step, device, reps=5)
    return {"params": numel, "seconds": t, "params_per_s": numel / t}


# Buffer sizes of the CPU copy-bandwidth curve: inside the caches up to DRAM-sized (a 38M-parameter model's fp32
# gradients are 152 MB; on this 32 MB-L3 machine 1-4 MB copies ran at 75-107 GB/s, 64-256 MB at 26-35).
COPY_CURVE_BYTES = (1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20)
# The trainer's optimizer step timed on (tensors, elements each): 1 MB tensors, as a model's weights are, 256K
# parameters in all (state in the caches) and 16M (beyond them); many small ones for the per-tensor cost (Python
# and kernel dispatch); and one 64 MB tensor, as DeepSpeed ZeRO steps its flat partition: AdamW's temporaries of a
# tensor over the allocator's mmap threshold (32 MB) are faulted in afresh every step (measured ~3x slower per
# parameter here).
OPTIMIZER_SHAPES = ((1, 1 << 18), (64, 1 << 18), (256, 1 << 10), (1, 1 << 24))
# Collective message sizes the quick CPU run adds: a small model's whole gradient or parameter buffer (DeepSpeed
# all-reduces, all-gathers and reduce-scatters it in one call; t5-micro: 152 MB). Beyond glibc's 32 MB mmap
# threshold gloo's all_gather / reduce_scatter run 3-6x slower per byte than at 16 MB (measured here at 152 MB: 293 /
# 364 ms, against 61 ms of all_reduce-fit bytes time), all_reduce about as fast.
LARGE_CPU_MESSAGES = [64 << 20, 128 << 20]


def bench_copy_curve(device: torch.device, sizes=COPY_CURVE_BYTES) -> list[dict]:
    """Copy bandwidth (read + write bytes/s per rank, every rank copying at once) per buffer size: into an existing
    buffer (`bytes_per_s`, as a copy_ into a reduce bucket) and into a newly allocated one (`fresh_bytes_per_s`, as
    torch.cat / clone / flatten do: over glibc malloc's mmap threshold every such buffer is a fresh mapping whose
    pages the copy faults in; measured here: a 152 MB clone 150 ms, a copy_ 17 ms)."""
    out = []
    for nbytes in sizes:
        src = torch.ones(nbytes // 4, device=device, dtype=torch.float32)
        dst = torch.empty_like(src)
        into = timed(lambda: dst.copy_(src), device, reps=5)
        fresh = timed(lambda: src.clone(), device, reps=3)
        out.append({"bytes": nbytes, "bytes_per_s": 2.0 * nbytes / into, "fresh_bytes_per_s": 2.0 * nbytes / fresh})
    return out


def bench_optimizer(device: torch.device, shapes=OPTIMIZER_SHAPES) -> list[dict]:
    """Seconds of the trainer's optimizer step (engine/backends/common.py: clip_grad_norm_, then torch AdamW's
    step; on CPU torch runs AdamW tensor by tensor) per (tensors, elements per tensor)."""
    out = []
    for tensors, numel in shapes:
        params = [torch.nn.Parameter(torch.randn(numel, device=device)) for _ in range(tensors)]
        for p in params:
            p.grad = torch.randn_like(p)
        opt = torch.optim.AdamW(params, lr=1e-3)

        def step():
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()

        out.append({"tensors": tensors, "params": tensors * numel, "seconds": timed(step, device, reps=3)})
    return out


def bench_collective(op: str, nbytes: int, world: int, device: torch.device, reps: int) -> dict:
    numel = max(world, nbytes // 4 // world * world)
    x = torch.ones(numel, device=device)
    if op == "all_reduce":
        fn = lambda: dist.all_reduce(x)  # noqa: E731
    elif op == "all_gather":
        shard = torch.ones(numel // world, device=device)
        fn = lambda: dist.all_gather_into_tensor(x, shard)  # noqa: E731
    else:
        shard = torch.empty(numel // world, device=device)
        fn = lambda: dist.reduce_scatter_tensor(shard, x)  # noqa: E731

    def step():
        fn()
        _sync(device)

    dist.barrier()
    t = timed(step, device, reps=reps, peers=True)
    # Each rank's median; the slowest rank sets the collective's time.
    tt = torch.tensor([t], dtype=torch.float64)
    dist.all_reduce(tt, op=dist.ReduceOp.MAX)
    size = numel * 4
    return {"op": op, "bytes": size, "seconds": float(tt.item()), "algbw_bytes_per_s": size / float(tt.item())}


def run(output: str, quick: bool) -> dict:
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if torch.cuda.is_available() else \
        torch.device("cpu")
    world = int(os.environ.get("WORLD_SIZE", 1))
    if world > 1:
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    rank = dist.get_rank() if world > 1 else 0
    sizes = [64, 128, 256, 512, 1024] if quick else [64, 128, 256, 512, 1024, 2048]
    if device.type == "cuda":
        sizes = [256, 512, 1024, 2048, 4096, 8192]
    result: dict = {"world_size": world, "device": device.type, "threads": torch.get_num_threads(),
                    "torch": torch.__version__, "matmul": [], "collectives": []}
    if world > 1:
        dist.barrier()
    t0 = time.perf_counter()
    for dtype in ("fp32", "bf16", "fp16"):
        # Every precision gets the same sizes (native bf16/AMX kernels only reach speed on larger matrices); an
        # emulated precision stops growing once one product takes over 50 ms.
        result["matmul"] += bench_matmul(device, sizes, dtype, budget_s=0.5 if dtype == "fp32" else 0.05)
    result["copy"] = bench_copy(device, 16 << 20 if quick else 64 << 20)
    result["adam"] = bench_adam(device, 1 << 20 if quick else 4 << 20)
    if device.type == "cpu":
        result["copy_curve"] = bench_copy_curve(device)
        result["optimizer"] = bench_optimizer(device)
    if world > 1:
        sizes_b = [4 << 10, 256 << 10, 4 << 20, 16 << 20] if quick else \
            [4 << 10, 64 << 10, 1 << 20, 8 << 20, 32 << 20, 128 << 20]
        if quick and device.type == "cpu":  # model-sized buffers: gloo copies them through fresh mappings
            sizes_b += LARGE_CPU_MESSAGES
        for op in ("all_reduce", "all_gather", "reduce_scatter"):
            for nbytes in sizes_b:
                reps = 2 if nbytes >= 64 << 20 else 3 if nbytes >= 8 << 20 else 10
                result["collectives"].append(bench_collective(op, nbytes, world, device, reps=reps))
    result["elapsed_s"] = time.perf_counter() - t0
    result["wait"] = [WAIT.wall, WAIT.waited]  # what other processes took of the timed runs (rank 0's)
    if rank == 0:
        path = Path(output)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(result, indent=2), encoding="utf-8")
        os.replace(tmp, path)
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()
    return result


def launch(output: str, nproc: int, *, quick: bool = True, timeout_s: float = 300.0) -> dict:
    """Run the micro-benchmarks on `nproc` local ranks through torchrun; return the measurements."""
    from scalestudy.errors import ScalestudyError

    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
           "-m", "scalestudy.engine.microbench", "--output", str(output)] + (["--quick"] if quick else [])
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise ScalestudyError(f"micro-benchmarks timed out after {timeout_s:.0f} s") from None
    if proc.returncode != 0 or not Path(output).is_file():
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise ScalestudyError(f"micro-benchmarks failed (exit {proc.returncode}): {tail[0]}")
    return json.loads(Path(output).read_text(encoding="utf-8"))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--output", required=True)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    run(args.output, args.quick)


if __name__ == "__main__":
    main()
