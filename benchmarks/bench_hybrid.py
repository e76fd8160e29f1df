"""Measured tp/pp step times on this CPU beside the cost model's prediction, per layout (issue 12).

    python benchmarks/bench_hybrid.py [--model llama-tiny] [--steps 8] [--warmup 3] [--seq-len 128] [--profile P]

First the calibration `scalestudy tune` uses (plan/tuner.py `tuning_device`): this machine's cached CPU profile
(costmodel/cpu_profile.py, measured once when absent, incl. the tensor/pipeline-parallel overheads of
engine/parallel_profile.py) with fresh micro-benchmarks on 2 ranks (matmul, copy, Adam, gloo alpha-beta);
--profile PATH uses a saved hardware profile instead. Then ONE torchrun launch of 2 ranks trains, one after another
with the same data and seed: dp2 (DDP), tp2 (tensor parallel + sequence parallel), tp2 without sequence
parallelism, pp2 1f1b and pp2 gpipe (4 micro-batches per step). Prints each layout's median seconds per optimizer
step (first --warmup steps dropped) and three predictions of it with their errors (predicted / measured - 1):
  static      the cost model on the static `local-cpu` file (no calibration; the numbers before issue 12's terms
              were reported with this one),
  profile     the cost model on this machine's cached CPU profile (what estimate, plan and study predict
              `local-cpu` with),
  calibrated  the cost model on the calibrated profile (what tune ranks strategies with before any trial),
  refit dp2   tune's efficiency refit (calibrate.fit_efficiency) on the dp2 measurement alone, as after a screen
              trial, predicting the other layouts out of sample (it carries the machine's current load level over).
and the calibrated prediction's parts, and the load average before and after, since the machine is shared.
Add the printed rows to benchmarks/RESULTS.md with the commit.
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
    p.add_argument("--profile", default="", help="hardware profile YAML to predict with (skips calibration)")
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


def estimate_on(device, args, name: str, out: Path):
    from scalestudy.costmodel.estimate import estimate
    from scalestudy.specs.hardware import ClusterSpec

    cfg = run_config(args, name, out)
    return estimate(cfg.model_spec(), ClusterSpec(device=device, nodes=1, gpus_per_node=2, name=device.name),
                    cfg.strategy, cfg.to_workload())


def step_terms(est):
    """The estimate split as tune's refit sees it (plan/tuner.py `terms`)."""
    from types import SimpleNamespace

    from scalestudy.plan.tuner import terms

    return terms(SimpleNamespace(estimate=est, point=SimpleNamespace(grad_accum=est.layout.grad_accum),
                                 strategy=est.strategy))


def calibrated_device(args, tmp: Path):
    from scalestudy.plan.tuner import tuning_device

    device, _ = tuning_device(tmp / "calibration", 2, args.profile or None)
    return device


def main() -> None:
    args = parse()
    if "RANK" in os.environ:
        return worker(args)
    from scalestudy.costmodel.calibrate import fit_efficiency
    from scalestudy.costmodel.cpu_profile import local_cpu_profile
    from scalestudy.specs.hardware import get_device

    with tempfile.TemporaryDirectory() as tmp:
        device = calibrated_device(args, Path(tmp))  # before the timed runs, never beside them
        env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", __file__,
               *sys.argv[1:], "--out", tmp]
        load_before = os.getloadavg()[0]
        subprocess.run(cmd, env=env, check=True, capture_output=True)
        load_after = os.getloadavg()[0]
        measured = json.loads((Path(tmp) / "medians.json").read_text())
        static = {n: estimate_on(get_device("local-cpu"), args, n, Path(tmp)) for n in measured}
        profile = local_cpu_profile(measure=False) or get_device("local-cpu")
        profiled = {n: estimate_on(profile, args, n, Path(tmp)) for n in measured}
        calibrated = {n: estimate_on(device, args, n, Path(tmp)) for n in measured}
        fit = fit_efficiency([(step_terms(calibrated["dp2"]), measured["dp2"])])
        print(f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC, {args.model}, seq {args.seq_len}, global batch "
              f"{args.global_batch}, 2 CPU ranks, load average {load_before:.1f} -> {load_after:.1f}; "
              f"profile: {device.source[:90]}...")
        print("seconds per optimizer step (median after warm-up); error = predicted / measured - 1")
        print(f"{'layout':<10} {'measured':>9} {'static':>8} {'error':>7} {'profile':>8} {'error':>7} "
              f"{'calibrated':>10} {'error':>7} {'refit dp2':>9} {'error':>7}")
        for name, seconds in measured.items():
            row = [static[name].step_s, profiled[name].step_s, calibrated[name].step_s,
                   fit.predict(step_terms(calibrated[name]))]
            print(f"{name:<10} {seconds:>9.4f} " + " ".join(f"{g:>{w}.4f} {g / seconds - 1:>+7.1%}"
                                                         for g, w in zip(row, (8, 8, 10, 9))))
        print("calibrated prediction's parts (s per step): "
              + "; ".join(f"{n}: " + ", ".join(f"{k.removesuffix('_s')} {v:.4f}"
                                               for k, v in e.time_parts().items() if v > 0)
                          for n, e in calibrated.items()))


if __name__ == "__main__":
    main()
