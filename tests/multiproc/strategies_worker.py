"""Trains several strategies inside ONE torchrun launch (start-up paid once) and writes their loss curves.

Usage (under torchrun): strategies_worker.py OUT STRATEGY... with STRATEGY `engine:zero[:extra...][+resume]`, e.g.
`deepspeed:3`, `ddp:1`, `deepspeed:3:full` (activation checkpointing), `deepspeed:2:offload` (optimizer states and
step on the CPU: DeepSpeed's CPU Adam), `deepspeed:3:offload:params` (parameters offloaded too).
Each strategy trains STEPS steps from the same seed. `+resume` also runs it killed after step 4 (its last checkpoint
at step 3, so step 4 is trained again) and resumed: the uninterrupted curve to compare with is the strategy's own
`losses` (the same configuration).
OUT/tokenizer.json is used when present (rank 0 trains it into OUT otherwise).
Rank 0 writes OUT/results.json: {strategy: {"losses": [...], "peak_mem_bytes": ..., "setup_param_bytes": ...,
"engine_backend": ..., "calls": {collective: rank 0's calls over the run}, and with +resume "resumed": [...],
"resumed_from": step}}. `calls` counts FSDP2's single-tensor collectives (all_gather_single, reduce_scatter_single:
nothing else in a run calls them), to hold against the cost model's count per step.
"""

from __future__ import annotations

import json
import os
import sys
import time
import warnings
from pathlib import Path

from _torchrun import count_calls, measure_peak_once
from scalestudy.engine.train import SimulatedCrash, load_data, run_training, setup_distributed, teardown_distributed
from scalestudy.specs.run import RunConfig

STEPS = int(os.environ.get("WORKER_STEPS", "5"))
def strategy_config(out: Path, item: str) -> RunConfig:
    engine, zero, *extra = item.split(":")
    flat = {}
    if "full" in extra:
        flat["recompute"] = "full"
    if "offload" in extra:
        flat["offload_optimizer"] = "cpu"
    if "params" in extra:
        flat["offload_params"] = "cpu"
    return RunConfig().replace(
        model="t5-tiny", engine=engine, zero=int(zero), nproc=int(os.environ["WORLD_SIZE"]), steps=STEPS,
        micro_batch=1, global_batch=4, seq_len=64, target_len=16, lr=1e-3, warmup_steps=2, warmup=1, seed=7,
        progress=False, tokenizer=str(out / "tokenizer.json"), output=str(out / item.replace(":", "-")), **flat)


def main() -> None:
    warnings.filterwarnings("ignore", category=FutureWarning)
    out, items = Path(sys.argv[1]), sys.argv[2:]
    measure_peak_once()
    ctx = setup_distributed()
    # The corpus is read and tokenized once for all strategies.
    base = strategy_config(out, "ddp:0")
    if not (out / "tokenizer.json").is_file():
        base = base.replace(tokenizer=None)
    prepared = load_data(base, ctx, out)
    results = {}
    calls: dict = {}
    count_calls(calls)
    for item in items:
        name, _, option = item.partition("+")
        t0 = time.perf_counter()
        if ctx.is_main:  # which strategy a traceback in the launch's output belongs to
            print(f"strategy {name}", flush=True)
        cfg = strategy_config(out, name)
        calls.clear()
        summary = run_training(cfg, ctx, prepared)  # every rank trains; only rank 0 gets the summary
        if ctx.is_main:
            results[name] = {"losses": summary["losses"], "peak_mem_bytes": summary["peak_mem_bytes"],
                             "setup_param_bytes": summary["setup_param_bytes"],
                             "engine_backend": summary["engine_backend"], "calls": dict(calls)}
        if option == "resume":
            killed = cfg.output.dir + "-killed"
            try:
                run_training(cfg.replace(output=killed, save_every=3, crash_after_step=4), ctx, prepared)
            except SimulatedCrash:
                pass
            resumed = run_training(cfg.replace(output=killed, resume=True), ctx, prepared)
            if ctx.is_main:
                results[name].update(resumed=resumed["losses"], resumed_from=resumed["resumed_from_step"])
        if ctx.is_main:
            results[name]["wall_s"] = time.perf_counter() - t0
    if ctx.is_main:
        (out / "results.json").write_text(json.dumps(results))
    teardown_distributed()


if __name__ == "__main__":
    main()
