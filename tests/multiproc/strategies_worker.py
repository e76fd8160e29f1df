"""Runs several strategies inside ONE torchrun launch (start-up paid once) and writes their loss curves.

Usage (under torchrun): strategies_worker.py OUT MODE STRATEGY... with STRATEGY `engine:zero[:extra]`, e.g.
`deepspeed:3`, `ddp:1`, `deepspeed:3:full` (activation checkpointing), `deepspeed:2:offload` (CPU Adam offload).
MODE `losses`: train each strategy for STEPS steps from the same seed.
MODE `resume`: per strategy, one uninterrupted run, and one killed after step 3 (checkpoint at 3) then resumed.
Rank 0 writes OUT/results.json: {strategy: {"losses": [...], ...}}.
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path

from scalestudy.specs.run import RunConfig
from scalestudy.engine.train import SimulatedCrash, load_data, run_training, setup_distributed, teardown_distributed

STEPS = int(os.environ.get("WORKER_STEPS", "5"))


def base_config(out: Path, engine: str, zero: int, **changes) -> RunConfig:
    cfg = RunConfig().replace(model="t5-tiny", engine=engine, zero=zero, nproc=int(os.environ["WORLD_SIZE"]),
                              steps=STEPS, micro_batch=1, global_batch=4, seq_len=64, target_len=16, lr=1e-3,
                              warmup_steps=2, warmup=1, seed=7, progress=False, tokenizer=str(out / "tokenizer.json"),
                              output=str(out / f"{engine}{zero}"))
    return cfg.replace(**changes)


def main() -> None:
    warnings.filterwarnings("ignore", category=FutureWarning)
    out, mode, strategies = Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
    ctx = setup_distributed()
    # The corpus is read and tokenized once for all strategies (rank 0 trains the tokenizer into OUT).
    prepared = load_data(base_config(out, "ddp", 0, tokenizer=None), ctx, out)
    results = {}
    for item in strategies:
        engine, zero, *extra = item.split(":")
        cfg = base_config(out, engine, int(zero))
        if "full" in extra:
            cfg = cfg.replace(recompute="full", output=cfg.output.dir + "-recompute")
        if "offload" in extra:
            cfg = cfg.replace(offload_optimizer="cpu", output=cfg.output.dir + "-offload")
        if mode == "losses":
            summary = run_training(cfg, ctx, prepared)  # every rank trains; only rank 0 gets the summary
            if ctx.is_main:
                results[item] = {"losses": summary["losses"], "peak_mem_bytes": summary["peak_mem_bytes"]}
            continue
        full = run_training(cfg.replace(output=cfg.output.dir + "-full"), ctx, prepared)
        try:
            run_training(cfg.replace(output=cfg.output.dir + "-killed", save_every=3, crash_after_step=3), ctx, prepared)
        except SimulatedCrash:
            pass
        resumed = run_training(cfg.replace(output=cfg.output.dir + "-killed", resume=True), ctx, prepared)
        if ctx.is_main:
            results[item] = {"full": full["losses"], "resumed": resumed["losses"],
                             "resumed_from": resumed["resumed_from_step"]}
    if ctx.is_main:
        (out / "results.json").write_text(json.dumps(results))
    teardown_distributed()


if __name__ == "__main__":
    main()
