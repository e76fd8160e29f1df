"""Measured tp/pp step times on this CPU beside the cost model's prediction, per layout (issue 12).

    python benchmarks/bench_hybrid.py [--model llama-tiny] [--steps 8] [--warmup 3] [--seq-len 128]

ONE torchrun launch of 2 ranks trains, one after another with the same data and seed: dp2 (DDP), tp2 (tensor
parallel + sequence parallel), tp2 without sequence parallelism, pp2 1f1b and pp2 gpipe (4 micro-batches per step).
Prints each layout's median seconds per optimizer step (first --warmup steps dropped), the cost model's step_s for
the same Strategy on `local-cpu` (its stored CPU calibration), the error (predicted / measured - 1) and the load
average, since the machine is shared. Add the printed row to benchmarks/RESULTS.md with the commit.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LAYOUTS = {"dp2": {}, "tp2": {"tp": 2}, "tp2-no-sp": {"tp": 2, "sequence_parallel": False},
           "pp2-1f1b": {"pp": 2, "pp_schedule": "1f1b"}, "pp2-gpipe": {"pp": 2, "pp_schedule": "gpipe"}}


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="llama-tiny")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--global-batch", type=int, default=8)
    p.add_argument("--out", default="")
    return p.parse_args(argv)


def run_config(args, name: str, out: Path):
    from scalestudy.specs.run import RunConfig

    spec_causal = not args.model.startswith(("t5", "mt5"))
    return RunConfig().replace(
        model=args.model, objective="causal" if spec_causal else "span", engine="ddp", zero=0, nproc=2,
        steps=args.steps, micro_batch=1 if "pp" in name else args.global_batch // 2, global_batch=args.global_batch,
        seq_len=args.seq_len, warmup=args.warmup, seed=1, progress=False, precision="fp32",
        tokenizer=str(out / "tokenizer.json"), output=str(out / name), **LAYOUTS[name])


def worker(args) -> None:
    from scalestudy.engine.train import load_data, run_training, setup_distributed, teardown_distributed

    out = Path(args.out)
    ctx = setup_distributed()
    prepared = load_data(run_config(args, "dp2", out).replace(tokenizer=None), ctx, out)
    medians = {}
    for name in LAYOUTS:
        summary = run_training(run_config(args, name, out), ctx, prepared)
        if ctx.is_main:
            medians[name] = summary["median_step_s"]
    if ctx.is_main:
        (out / "medians.json").write_text(json.dumps(medians))
    teardown_distributed()


def predicted(args, name: str, out: Path) -> float:
    from scalestudy.costmodel.estimate import estimate
    from scalestudy.specs.hardware import make_cluster

    cfg = run_config(args, name, out)
    return estimate(cfg.model_spec(), make_cluster("local-cpu", 1, 2), cfg.strategy, cfg.to_workload()).step_s


def main() -> None:
    args = parse()
    if "RANK" in os.environ:
        return worker(args)
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", __file__,
               *sys.argv[1:], "--out", tmp]
        load_before = os.getloadavg()[0]
        subprocess.run(cmd, env=env, check=True, capture_output=True)
        load_after = os.getloadavg()[0]
        measured = json.loads((Path(tmp) / "medians.json").read_text())
        print(f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC, {args.model}, seq {args.seq_len}, global batch "
              f"{args.global_batch}, 2 CPU ranks, load average {load_before:.1f} -> {load_after:.1f}")
        print(f"{'layout':<10} {'measured s/step':>16} {'predicted s/step':>17} {'error':>8}")
        for name, seconds in measured.items():
            guess = predicted(args, name, Path(tmp))
            print(f"{name:<10} {seconds:>16.4f} {guess:>17.4f} {guess / seconds - 1:>+8.1%}")


if __name__ == "__main__":
    main()
