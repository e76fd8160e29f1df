"""Overhead of scalestudy's training loop over a minimal hand-written DeepSpeed loop (target: < 3%).

    python benchmarks/bench_train_overhead.py [--zero 2] [--steps 20] [--rounds 3] [--model t5-tiny]

Both loops train the same model (same seed) with the same DeepSpeed config, optimizer and data stream on 2 CPU
ranks, in ONE torchrun launch, interleaved A B A B ... so that drift in machine load hits both alike. The time per
optimizer step is the interval between consecutive step ends (ours: `wall_time` of metrics.jsonl rows, so it
includes our metrics, memory census, loss all-gather and logging); the first `--warmup` steps of each round are
dropped. Prints the median s/step of each loop, their ratio (ours / minimal) per round and overall, and the date.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="t5-tiny")
    p.add_argument("--zero", type=int, default=2)
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--micro-batch", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--target-len", type=int, default=32)
    p.add_argument("--out", default="")
    return p.parse_args(argv)


def minimal_loop(cfg, prepared, ctx) -> list[float]:
    """What a user would write by hand: build, deepspeed.initialize, forward/backward/step. Step end times."""
    import deepspeed
    import torch

    from scalestudy.engine.backends.common import make_adamw, make_scheduler
    from scalestudy.engine.settings import adamw_params, deepspeed_config
    from scalestudy.engine.data.pipeline import BatchStream
    from scalestudy.engine.models import build_model

    _, strategy, _, layout = cfg.validate()
    model = build_model(cfg.model_spec(), seed=cfg.optimizer.seed)
    optimizer = make_adamw(model.parameters(), adamw_params(cfg))
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer,
                                           lr_scheduler=make_scheduler(optimizer, cfg),
                                           config=deepspeed_config(cfg, cuda=ctx.device.type == "cuda"),
                                           dist_init_required=False)
    stream = BatchStream(prepared, strategy.micro_batch, dp_rank=ctx.rank, dp_size=layout.dp, seed=cfg.optimizer.seed)
    ends = []
    for _ in range(cfg.workload.steps):
        for _ in range(layout.grad_accum):
            batch = next(stream)
            ids = torch.as_tensor(batch["input_ids"])
            loss = engine(input_ids=ids, attention_mask=(ids != 0).long(), labels=torch.as_tensor(batch["labels"])).loss
            engine.backward(loss)
            engine.step()
        ends.append(time.time())
    engine.destroy()
    return ends


def intervals(ends: list[float], warmup: int) -> list[float]:
    steps = [b - a for a, b in zip(ends, ends[1:])]
    return steps[max(0, warmup - 1):]


def worker(args: argparse.Namespace) -> None:
    import warnings

    import torch.distributed as dist

    from scalestudy.specs.run import RunConfig
    from scalestudy.engine.train import load_data, run_training, setup_distributed, teardown_distributed

    warnings.filterwarnings("ignore", category=FutureWarning)
    ctx = setup_distributed()
    out = Path(args.out)
    cfg = RunConfig().replace(model=args.model, engine="deepspeed", zero=args.zero, nproc=args.nproc,
                              steps=args.steps, micro_batch=args.micro_batch, seq_len=args.seq_len,
                              target_len=args.target_len, seed=1, progress=False, warmup=args.warmup, output=str(out))
    prepared = load_data(cfg, ctx, out)
    rounds = []
    for r in range(args.rounds):
        run_dir = out / f"ours-{r}"
        run_training(cfg.replace(output=str(run_dir), tokenizer=str(out / "tokenizer.json")), ctx, prepared)
        dist.barrier()
        mine = minimal_loop(cfg, prepared, ctx)
        if ctx.is_main:
            rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
            ours = statistics.median(intervals([row["wall_time"] for row in rows], args.warmup))
            base = statistics.median(intervals(mine, args.warmup))
            rounds.append({"ours_s": ours, "minimal_s": base, "ratio": ours / base})
    if ctx.is_main:
        (out / "bench.json").write_text(json.dumps(rounds))
    teardown_distributed()


def main() -> None:
    args = parse()
    if "RANK" in os.environ:
        worker(args)
        return
    with tempfile.TemporaryDirectory(prefix="bench-overhead-") as tmp:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "DS_ACCELERATOR": "cpu", "TOKENIZERS_PARALLELISM": "false"}
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(args.nproc),
               __file__, *sys.argv[1:], "--out", tmp]
        t0 = time.time()
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if proc.returncode:
            sys.exit(proc.stderr[-4000:])
        rounds = json.loads((Path(tmp) / "bench.json").read_text())
    load = os.getloadavg()[0]
    print(f"# bench_train_overhead {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: {args.model}, DeepSpeed "
          f"ZeRO-{args.zero}, {args.nproc} CPU ranks, micro-batch {args.micro_batch}, seq {args.seq_len}+"
          f"{args.target_len}, {args.steps} steps x {args.rounds} rounds (A/B interleaved), first {args.warmup} "
          f"steps dropped; load average {load:.1f}; wall {time.time() - t0:.0f} s")
    print(f"{'round':>5} {'scalestudy s/step':>18} {'minimal DS s/step':>18} {'ratio':>7}")
    for i, r in enumerate(rounds):
        print(f"{i:>5} {r['ours_s']:>18.4f} {r['minimal_s']:>18.4f} {r['ratio']:>7.3f}")
    ratio = statistics.median(r["ratio"] for r in rounds)
    print(f"median ratio (scalestudy / minimal, time per optimizer step): {ratio:.3f} "
          f"-> overhead {100 * (ratio - 1):+.1f}% (target < 3%)")


if __name__ == "__main__":
    main()
