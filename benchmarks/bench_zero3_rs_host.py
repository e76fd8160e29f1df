"""Host time of DeepSpeed ZeRO-3's per-rank Python loops, measured on this host with the installed DeepSpeed:
(1) comm/coalesced_collectives.py reduce_scatter_coalesced, the path stage3.py __avg_scatter_grads takes for every
reduce bucket: for each gradient of the bucket it builds one view per rank (a Python list comprehension of slices),
then -- unless the bucket is one tensor the ranks divide -- appends every (rank, tensor) chunk to a list in rank-major
order and torch.cat's it, and always splits the flat buffer into one view per rank with torch.chunk; (2)
zero/partition_parameters.py AllGatherCoalescedHandle.wait, which every fetch of a coalesced all-gather runs: per
gathered parameter one narrow per rank of the gathered buffer, appended to a list and torch.cat'ed into the parameter
(and, on a CUDA device, record_stream per rank's piece: not in this CPU measurement). Both run on the thread that runs
the pass (the module hooks call them), so they grow with ranks x tensors per micro-batch.

The collective itself is replaced by a no-op and the world size is only told to the function (a 1-process run), so
what is timed is the Python and dispatcher work; chunks are 4 elements, so the copies are negligible. Prints, per
world size and bucket shape, microseconds per call and per (rank x tensor), and the least-squares
    t = W x (n x per_rank_tensor + per_rank)
over the multi-tensor buckets (n tensors) and t = W x per_rank_divisible over the one-tensor divisible buckets.
CPU tensors: a CUDA tensor's views and torch.cat take the same dispatcher path; the CUDA cat adds one kernel launch
per batch of inputs, not counted here (a lower bound).

    .venv/bin/python benchmarks/bench_zero3_rs_host.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import time
import types

import torch

WORLDS = (64, 384, 1536, 2240)
TENSORS = (1, 4, 12)  # tensors per bucket (GPT-3 175B at a 5e8 bucket: a block's small tensors share one bucket)


def _patched(world: int):
    from deepspeed.runtime.comm import coalesced_collectives as cc

    cc.dist = types.SimpleNamespace(get_rank=lambda group=None: 0, get_world_size=lambda group=None: world)
    cc._torch_reduce_scatter_fn = lambda *args, **kwargs: None
    return cc.reduce_scatter_coalesced


def _time(fn, tensors, repeat: int) -> float:
    fn(tensors)  # warm the dispatcher
    runs = []
    for _ in range(repeat):
        t0 = time.thread_time()  # this thread's CPU seconds: the host work, not the machine's load
        fn(tensors)
        runs.append(time.thread_time() - t0)
    return statistics.median(runs)


def _wait_time(world: int, n: int, repeat: int) -> float:
    """AllGatherCoalescedHandle.wait over `n` parameters of 4 elements per rank (the all-gather itself done)."""
    from deepspeed.runtime.zero.partition_parameters import AllGatherCoalescedHandle, ZeroParamStatus

    part = 4
    flat = torch.zeros(world * part * n, dtype=torch.bfloat16)
    partitions = [flat.narrow(0, part * n * i, part * n) for i in range(world)]
    params = []
    for _ in range(n):
        p = torch.nn.Parameter(torch.empty(0, dtype=torch.bfloat16), requires_grad=False)
        p.ds_tensor = torch.zeros(part, dtype=torch.bfloat16)
        p.ds_tensor.ds_numel = part
        p.ds_numel, p.ds_shape = world * part, (world * part,)
        params.append(p)

    class Done:
        def wait(self):
            return None

    runs = []
    for i in range(repeat + 1):
        for p in params:
            p.ds_status = ZeroParamStatus.INFLIGHT
        handle = AllGatherCoalescedHandle(allgather_handle=Done(), params=params, partitions=partitions,
                                          world_size=world)
        t0 = time.thread_time()
        handle.wait()
        if i:  # the first call warms the dispatcher
            runs.append(time.thread_time() - t0)
    return statistics.median(runs)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}; reduce_scatter_coalesced host CPU time of the calling thread (median of {args.repeat})")
    multi, divisible = [], []
    for world in WORLDS:
        fn = _patched(world)
        for n in TENSORS:
            # divisible one-tensor bucket (the fast path) and otherwise the interleave (+1 element: padding)
            shapes = [("divisible", 0)] if n == 1 else []
            shapes.append(("interleave", 1))
            for label, extra in shapes:
                tensors = [torch.zeros(world * 4 + extra, dtype=torch.bfloat16) for _ in range(n)]
                t = _time(fn, tensors, args.repeat)
                per = t / (world * n)
                print(f"  W {world:5d}  tensors {n:3d}  {label:10s}  {1e3 * t:8.2f} ms  {1e6 * per:6.3f} us per rank x tensor")
                (divisible if label == "divisible" else multi).append((world, n, t))
    # t = W (n a + b) by least squares over the interleaved buckets
    sxx = sum((w * n) ** 2 for w, n, _ in multi)
    sxy = sum((w * n) * w for w, n, _ in multi)
    syy = sum(w * w for w, _, _ in multi)
    bx = sum((w * n) * t for w, n, t in multi)
    by = sum(w * t for w, _, t in multi)
    det = sxx * syy - sxy * sxy
    a = (bx * syy - by * sxy) / det
    b = (sxx * by - sxy * bx) / det
    d = sum(t for _, _, t in divisible) / sum(w for w, _, _ in divisible)
    print(f"fit, interleaved buckets: {1e6 * a:.3f} us per rank x tensor + {1e6 * b:.3f} us per rank and bucket; "
          f"median {1e6 * statistics.median(t / (w * n) for w, n, t in multi):.3f} us per rank x tensor")
    print(f"one divisible tensor: {1e6 * d:.3f} us per rank")
    waits = []
    for world in WORLDS:
        for n in (1, 4):
            t = _wait_time(world, n, args.repeat)
            waits.append(t / (world * n))
            print(f"  W {world:5d}  params {n:3d}  all-gather wait  {1e3 * t:8.2f} ms  {1e6 * t / (world * n):6.3f} us per rank x parameter")
    print(f"all-gather wait: {1e6 * statistics.median(waits):.3f} us per rank x parameter (median)")


if __name__ == "__main__":
    main()
