"""Plan = reality on a real GPU: `scalestudy train` runs beside `scalestudy estimate` for the same configurations.

Two phases, so the GPU is held only for the runs:

    python benchmarks/bench_gpu_plan_vs_real.py run --out DIR [--gpu h200]   # on the GPU machine: train runs
    python benchmarks/bench_gpu_plan_vs_real.py compare DIR/gpu_runs.json    # anywhere: estimate + the table

benchmarks/gpu_check.sh runs the first phase on the device tool's machine; benchmarks/data/h200-2026-12-04.json is
what it recorded there (compare it: `... compare benchmarks/data/h200-2026-12-04.json`).

`run` trains each configuration of RUNS for a few steps on one GPU (bf16, the bundled corpus, one tokenizer shared by
all runs) and appends each run's summary.json to DIR/gpu_runs.json as it finishes (a run stopped by the time limit
leaves the others). `compare` predicts every recorded run with the cost model (the device named at `run`, one GPU,
the run's own strategy and workload) and prints measured / predicted for the median step time and the peak memory
(train's max_memory_allocated on a GPU, estimate's per-device total with its CUDA-context allowance).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

# name -> train options (one GPU; span corruption for T5 / mT5, causal for GPT-2)
RUNS = {
    "t5-large ddp": ["--model", "t5-large", "--engine", "ddp", "--micro-batch", "16", "--seq-len", "512"],
    "t5-large ddp recompute": ["--model", "t5-large", "--engine", "ddp", "--micro-batch", "16", "--seq-len", "512",
                               "--recompute", "full"],
    "t5-large fsdp3": ["--model", "t5-large", "--engine", "fsdp", "--zero", "3", "--micro-batch", "16",
                       "--seq-len", "512"],
    "t5-large ds2": ["--model", "t5-large", "--engine", "deepspeed", "--zero", "2", "--micro-batch", "16",
                     "--seq-len", "512"],
    "t5-large ds3": ["--model", "t5-large", "--engine", "deepspeed", "--zero", "3", "--micro-batch", "16",
                     "--seq-len", "512"],
    "mt5-base ds2": ["--model", "mt5-base", "--engine", "deepspeed", "--zero", "2", "--micro-batch", "16",
                     "--seq-len", "512"],
    "gpt2-medium ddp": ["--model", "gpt2-medium", "--objective", "causal", "--engine", "ddp", "--micro-batch", "8",
                        "--seq-len", "1024"],
}
COMMON = ["--precision", "bf16", "--steps", "14", "--warmup", "4", "--warmup-steps", "2", "--no-progress"]


def _refuse(message: str) -> None:
    """Bad input: one line on stderr, exit status 2, nothing written."""
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def run(out: Path, gpu: str, names: list[str], timeout_s: float) -> None:
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        _refuse(f"--out {out}: {exc.strerror}")
    record = out / "gpu_runs.json"
    results = json.loads(record.read_text()) if record.is_file() else {"gpu": gpu, "runs": {}}
    tokenizer: str | None = None
    for name in names:
        run_dir = out / "runs" / name.replace(" ", "_")
        cmd = [sys.executable, "-m", "scalestudy", "train", *RUNS[name], *COMMON, "-o", str(run_dir)]
        if tokenizer:
            cmd += ["--tokenizer", tokenizer]
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
            rc, tail = proc.returncode, (proc.stdout + proc.stderr)[-1500:]
        except subprocess.TimeoutExpired as exc:
            rc, tail = "timeout", str(exc.stdout or "")[-1500:]
        wall = time.perf_counter() - t0
        summary = run_dir / "summary.json"
        entry = {"argv": RUNS[name] + COMMON, "rc": rc, "wall_s": wall, "tail": tail,
                 "summary": json.loads(summary.read_text()) if summary.is_file() else None}
        results["runs"][name] = entry
        record.write_text(json.dumps(results, indent=1))
        if tokenizer is None and (run_dir / "tokenizer.json").is_file():
            tokenizer = str(run_dir / "tokenizer.json")
        step = entry["summary"]["median_step_s"] if entry["summary"] else float("nan")
        print(f"{name:26s} rc={rc} wall {wall:6.1f} s  median step {step:.4f} s", flush=True)


def trained_options(s: dict) -> list[str]:
    """estimate's options naming the software train ran (specs/run.train_software: torch AdamW's foreach loop,
    DeepSpeed's compute-dtype accumulation, checkpoint early stop, the model's own loss, SDPA's kernel for T5's bias),
    as plan prices train's runs (as_trained): estimate's defaults are the published runs' software, not train's."""
    from scalestudy.specs.presets import get_model
    from scalestudy.specs.run import train_software

    st = s["strategy"]
    fields = {"engine": st["engine"], "zero": st["zero"], "tp": st.get("tp", 1), "pp": st.get("pp", 1),
              "precision": st["precision"], "offload_optimizer": st.get("offload_optimizer", "none"),
              "attention": st["attention"]}
    return [arg for name, value in train_software(fields, get_model(s["model"])).items()
            for arg in (f"--{name.replace('_', '-')}", str(value))]


def estimate(gpu: str, s: dict) -> dict:
    """The cost model's estimate of one recorded run (its strategy, workload and model; one GPU)."""
    st = s["strategy"]
    argv = ["--model", s["model"], "--gpu", gpu, "--nodes", "1", "--gpus-per-node", str(s["world_size"]),
            "--engine", st["engine"], "--zero", str(st["zero"]), "--micro-batch", str(st["micro_batch"]),
            "--global-batch", str(s["global_batch"]), "--seq-len", str(s["seq_len"]), "--precision",
            st["precision"], "--recompute", st["recompute"], "--attention", st["attention"], "--json",
            *trained_options(s)]
    if s["target_len"] and s["model_spec"].get("num_decoder_layers"):
        argv += ["--target-len", str(s["target_len"])]
    proc = subprocess.run([sys.executable, "-m", "scalestudy", "estimate", *argv], capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "200"})
    if proc.returncode != 0:
        raise SystemExit(f"estimate {' '.join(argv)}: {proc.stderr.strip()}")
    return json.loads(proc.stdout)


def stopped_run(entry: dict) -> tuple[dict, str] | None:
    """(summary-like dict, "first-last") of a run the time limit stopped: the median of the step times it printed after
    its --warmup steps (train's own "step N/M ... X s/step" lines, kept in the tail) and its configuration read from
    its argv (one GPU, no accumulation, the strategy defaults train takes); None if it printed no such step."""
    argv = entry["argv"]
    opt = {argv[i]: argv[i + 1] for i in range(len(argv) - 1) if argv[i].startswith("--")}
    warmup = int(opt.get("--warmup", 0))
    times = {int(n): float(t) for n, t in re.findall(r"step (\d+)/\d+ .*? ([\d.]+) s/step", entry["tail"])}
    kept = sorted(n for n in times if n > warmup)
    if not kept:
        return None
    mb = int(opt["--micro-batch"])
    strategy = {"engine": opt["--engine"], "zero": int(opt.get("--zero", 0)), "micro_batch": mb,
                "precision": opt.get("--precision", "bf16"), "recompute": opt.get("--recompute", "none"),
                "attention": opt.get("--attention", "flash")}
    s = {"strategy": strategy, "model": opt["--model"], "world_size": 1, "global_batch": mb,
         "seq_len": int(opt["--seq-len"]), "target_len": 0, "model_spec": {},
         "median_step_s": statistics.median(times[n] for n in kept)}
    return s, f"{kept[0]}-{kept[-1]}"


def compare(record: Path) -> None:
    try:
        data = json.loads(record.read_text())
        gpu, _ = data["gpu"], data["runs"].items()
    except (OSError, ValueError, KeyError, TypeError) as exc:
        _refuse(f"{record}: not a record `run` wrote ({type(exc).__name__}: {exc})")
    if data.get("note"):
        print(data["note"])
    print(f"measured on {gpu} (one GPU, bf16) / cost model; step = median seconds per optimizer step after the "
          "warm-up steps; memory = train's peak (its memory_convention: torch.cuda.max_memory_allocated on a GPU) / "
          "estimate's per-device total (CUDA context included), GB = 1e9 B")
    print(f"{'run':26s} {'step s':>8s} {'pred s':>8s} {'ratio':>6s} {'mem GB':>7s} {'pred GB':>7s} {'ratio':>6s}")
    for name, entry in data["runs"].items():
        s = entry["summary"]
        if not s:
            cut = stopped_run(entry)
            if cut is None:
                print(f"{name:26s} failed: rc={entry['rc']}: {entry['tail'].strip().splitlines()[-1:]}")
                continue
            s, steps = cut
            pred = estimate(gpu, s)["time"]["step_s"]
            step = s["median_step_s"]
            print(f"{name:26s} {step:8.4f} {pred:8.4f} {step / pred:6.2f}  (stopped by the time limit: median of "
                  f"its printed steps {steps}; no peak memory)")
            continue
        e = estimate(gpu, s)
        step, pred = s["median_step_s"], e["time"]["step_s"]
        mem, pmem = s["peak_mem_bytes"] / 1e9, e["memory"]["per_device_bytes"] / 1e9
        print(f"{name:26s} {step:8.4f} {pred:8.4f} {step / pred:6.2f} {mem:7.2f} {pmem:7.2f} {mem / pmem:6.2f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="phase", required=True)
    r = sub.add_parser("run")
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--gpu", default="h200", help="device data name the compare phase predicts with")
    r.add_argument("--only", nargs="*", default=list(RUNS), choices=list(RUNS), metavar="NAME",
                   help=f"run names (default: all): {', '.join(RUNS)}")
    r.add_argument("--timeout-s", type=float, default=150.0, help="per run")
    c = sub.add_parser("compare")
    c.add_argument("record", type=Path)
    a = p.parse_args()
    if a.phase == "run":
        run(a.out, a.gpu, a.only, a.timeout_s)
    else:
        compare(a.record)


if __name__ == "__main__":
    main()
