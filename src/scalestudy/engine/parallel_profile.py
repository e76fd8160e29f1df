"""Measure what tensor and pipeline parallelism cost on this CPU beyond their arithmetic and their collectives.

For the cost model's CPU terms (costmodel/cpu_parallel.py); part of the CPU profile (engine/cpu_profile.py).
One process, a one-rank gloo group and a one-rank DeviceMesh, so the collectives move nothing (their latency on
several ranks is the gloo alpha-beta the micro-benchmarks fit) and what is left is the framework's own time:

- "tp-linear": seconds per sharded projection per micro-batch (forward + backward): the same llama blocks, seq 64,
  micro-batch 2, trained with and without train's tensor-parallel plan (engine/parallel/tensor_parallel.py, no
  sequence parallelism): DTensor from_local / redistribute / to_local and the sharded matmuls' dispatch;
- "tp-sp-sublayer": what sequence parallelism adds per sub-layer per micro-batch (the plan with it vs without);
- "tp-step": per sharded projection per optimizer step: partial-gradient reduction, global norm, clipping and
  AdamW on DTensor parameters (train's hybrid backend, engine/parallel/grads.py), vs the same on plain tensors;
- "pp-microbatch": per micro-batch per pipeline chunk: torch.distributed.pipelining's 1F1B schedule over a
  one-stage pipeline vs the same micro-batches run one after another;
- "tp-collective@multi" (`multi_rank_parallel`, on nproc ranks under torchrun): seconds of one DTensor all-reduce of
  a 64 KiB activation after a compute phase (gloo, the functional collective's dispatch and wait, the ranks' skew).
Each configuration is timed in three interleaved rounds (median of each), as the rest of the profile.
"""

from __future__ import annotations

import statistics
import time

import torch

SEQ_LEN, MICRO_BATCH, LAYERS, MICROBATCHES = 64, 2, 2, 4


def _chunk(spec, tp_mesh=None, sp: bool = False):
    from scalestudy.engine.hf_model import build_hf_model
    from scalestudy.engine.parallel.stages import split_model

    torch.manual_seed(0)
    (chunk,) = split_model(build_hf_model(spec), spec.family, [spec.num_layers])
    if tp_mesh is not None:
        from scalestudy.engine.parallel.tensor_parallel import apply_tensor_parallel

        apply_tensor_parallel(chunk, spec.family, tp_mesh, sp)
    chunk.train()
    return chunk


def _time_training(chunk, spec, steps: int = 6, warmup: int = 2) -> tuple[float, float]:
    """(median s of forward + backward of one micro-batch, median s of one hybrid-backend optimizer step)."""
    from scalestudy.engine.parallel import grads
    from scalestudy.engine.parallel.stages import causal_lm_loss

    params = list(chunk.parameters())
    opt = torch.optim.AdamW(params, lr=1e-4)
    ids = torch.randint(0, spec.vocab_size, (MICRO_BATCH, SEQ_LEN))
    mask = torch.ones_like(ids)
    fb, st = [], []
    for i in range(warmup + steps):
        t0 = time.perf_counter()
        loss = causal_lm_loss(chunk(ids, attention_mask=mask, labels=ids), ids)
        loss.backward()
        t1 = time.perf_counter()
        grads.reduce_partial(params)
        norm = grads.global_norm(params, 1, {})
        grads.clip_(params, norm, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if i >= warmup:
            fb.append(t1 - t0)
            st.append(time.perf_counter() - t1)
    return statistics.median(fb), statistics.median(st)


def _time_pipeline(chunk, spec, steps: int = 6, warmup: int = 2) -> tuple[float, float]:
    """(median s of MICROBATCHES micro-batches one after another, the same through a one-stage 1F1B schedule)."""
    import torch.distributed as dist
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B

    from scalestudy.engine.parallel.stages import causal_lm_loss

    ids = torch.randint(0, spec.vocab_size, (MICRO_BATCH * MICROBATCHES, SEQ_LEN))
    mask = torch.ones_like(ids)
    stage = PipelineStage(chunk, 0, 1, torch.device("cpu"), group=dist.group.WORLD)
    schedule = Schedule1F1B(stage, n_microbatches=MICROBATCHES, loss_fn=causal_lm_loss)
    plain, piped = [], []
    for i in range(warmup + steps):
        t0 = time.perf_counter()
        for ids_mb, mask_mb in zip(ids.chunk(MICROBATCHES), mask.chunk(MICROBATCHES)):
            (causal_lm_loss(chunk(ids_mb, attention_mask=mask_mb, labels=ids_mb), ids_mb) / MICROBATCHES).backward()
        t1 = time.perf_counter()
        schedule.step(ids, target=ids, losses=[], return_outputs=False, attention_mask=mask, labels=ids)
        t2 = time.perf_counter()
        chunk.zero_grad(set_to_none=True)
        if i >= warmup:
            plain.append(t1 - t0)
            piped.append(t2 - t1)
    return statistics.median(plain), statistics.median(piped)


def parallel_overheads(log=print, rounds: int = 3) -> dict[str, float]:
    """{"tp-linear": s, "tp-sp-sublayer": s, "tp-step": s, "pp-microbatch": s} (module docstring); a part that
    cannot run here is left out (the cost model then counts 0 for it)."""
    from dataclasses import replace

    from torch.distributed.device_mesh import init_device_mesh

    from scalestudy.costmodel.cpu_parallel import PP_MICROBATCH, TP_LINEAR, TP_SP_SUBLAYER, TP_STEP, tp_layer_counts
    from scalestudy.engine.single_rank import init_single_rank_group
    from scalestudy.specs.presets import get_model

    init_single_rank_group()
    spec = replace(get_model("llama-tiny"), num_layers=LAYERS)
    ((layers, col, row, sub),) = tp_layer_counts(spec)
    linears, sublayers = layers * (col + row), layers * sub
    out: dict[str, float] = {}
    try:
        mesh = init_device_mesh("cpu", (1,))
        chunks = {"plain": _chunk(spec), "tp": _chunk(spec, mesh, False), "sp": _chunk(spec, mesh, True)}
        runs = [{name: _time_training(c, spec) for name, c in chunks.items()} for _ in range(rounds)]
        med = {name: tuple(statistics.median(r[name][k] for r in runs) for k in range(2)) for name in chunks}
        out[TP_LINEAR] = max(0.0, med["tp"][0] - med["plain"][0]) / linears
        out[TP_SP_SUBLAYER] = max(0.0, med["sp"][0] - med["tp"][0]) / sublayers
        out[TP_STEP] = max(0.0, med["sp"][1] - med["plain"][1]) / linears
    except Exception as exc:  # noqa: BLE001 - a part that cannot run here keeps no term
        log(f"tensor-parallel overheads not timed: {type(exc).__name__}: {exc}")
    try:
        chunk = _chunk(spec)
        runs = [_time_pipeline(chunk, spec) for _ in range(rounds)]
        plain = statistics.median(r[0] for r in runs)
        piped = statistics.median(r[1] for r in runs)
        out[PP_MICROBATCH] = max(0.0, piped - plain) / MICROBATCHES
    except Exception as exc:  # noqa: BLE001
        log(f"pipeline schedule overhead not timed: {type(exc).__name__}: {exc}")
    return out


def collective_loop_times(output, reps: int = 60) -> None:
    """Under torchrun: every rank runs a sub-layer-sized matmul, then a DTensor all-reduce (Partial -> Replicate, as
    a row-parallel output) of a tensor-parallel activation, `reps` times; each collective is timed from the end of
    the rank's compute (so the peer's skew counts, as in training). Rank 0 writes {"bytes": B, "seconds": s}: the
    median over repetitions, averaged over the ranks (a burst of other load moves few of the samples)."""
    import json

    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Partial, Replicate

    dist.init_process_group("gloo")
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    act = torch.randn(MICRO_BATCH, SEQ_LEN, 128)
    weight = torch.randn(128, 512)
    samples = []
    for i in range(reps + 5):
        (act.view(-1, 128) @ weight).sum()
        t0 = time.perf_counter()
        DTensor.from_local(act, mesh, [Partial()], run_check=False).redistribute(mesh, [Replicate()]).to_local()
        if i >= 5:
            samples.append(time.perf_counter() - t0)
    mine = torch.tensor([statistics.median(samples)], dtype=torch.float64)
    dist.all_reduce(mine)
    if dist.get_rank() == 0:
        output.write_text(json.dumps({"bytes": act.numel() * 4, "seconds": float(mine) / dist.get_world_size()}),
                          encoding="utf-8")
    dist.barrier()
    dist.destroy_process_group()


def multi_rank_parallel(device, nproc: int, timeout_s: float = 300.0) -> dict[str, float]:
    """{"tp-collective@multi": s}: what one DTensor all-reduce of a 64 KiB activation costs on `nproc` ranks of
    this machine inside a compute loop (the gloo collective, the functional collective's dispatch and wait, the
    ranks' skew on shared cores), measured directly: the micro-benchmarks' alpha-beta fit over 4 KiB-16 MiB
    messages is dominated by large messages and moves by 10x with other load; {} if it cannot run."""
    import json
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    from scalestudy.costmodel.cpu_parallel import TP_COLLECTIVE, TP_COLLECTIVE_BYTES

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "collectives.json"
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", "-m",
               "scalestudy.engine.parallel_profile", "--collectives", str(path)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return {}
        if proc.returncode != 0 or not path.is_file():
            return {}
        m = json.loads(path.read_text(encoding="utf-8"))
    assert m["bytes"] == TP_COLLECTIVE_BYTES
    return {TP_COLLECTIVE: m["seconds"]}


if __name__ == "__main__":
    import argparse
    import json
    import os
    from pathlib import Path

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    parser = argparse.ArgumentParser()
    parser.add_argument("--collectives", type=Path, help="(internal, under torchrun) time DTensor collectives")
    args = parser.parse_args()
    if args.collectives:
        collective_loop_times(args.collectives)
    else:
        print(json.dumps(parallel_overheads(rounds=1)))
