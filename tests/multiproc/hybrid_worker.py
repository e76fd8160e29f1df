"""Trains several tp x pp x dp layouts inside ONE torchrun launch and writes their first losses.

Usage (under torchrun): hybrid_worker.py OUT LAYOUT... where LAYOUT is `model:dims[:option...]`:
model `llama` (a 4-layer llama-tiny, so 2 stages x 2 virtual stages fit), `gpt2` (gpt2-tiny: tied head, fused q/k/v) or
`t5` (t5-tiny: 2 encoder + 2 decoder layers); dims like `tp2`, `dp2xpp2`, `dp2xtp2xpp2`, `single` (1 rank);
options `gpipe`/`1f1b`/`interleaved` (pipeline schedule, interleaved with 2 virtual stages), `fsdp2`/`fsdp3` (FSDP2 over dp; default replication),
`nosp` (no sequence parallelism), `rc` (activation checkpointing), `stages=a,b` (uneven stage_layers),
`resume` (also: killed after step 3, resumed; report both curves), `from=DIMS[+OPT]` (killed after step 3 under
the layout DIMS with options OPT, e.g. `from=tp2xpp2` or `from=dp2xtp2+fsdp3`, then resumed under this layout).
Every layout sees the same data order, seed and global batch 4 (micro-batch 1), fp32.
Rank 0 writes OUT/results.json: {layout: {"losses": [...], "grad_norms": [...], "calls": {FSDP2 collective: rank 0's
calls over the run (_torchrun.count_calls)}}}.
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path

from _torchrun import count_calls, measure_peak_once
from scalestudy.engine.train import SimulatedCrash, load_data, run_training, setup_distributed, teardown_distributed
from scalestudy.specs.run import RunConfig

STEPS = int(os.environ.get("WORKER_STEPS", "5"))
LLAMA4 = {"model_type": "llama", "vocab_size": 8192, "hidden_size": 64, "intermediate_size": 192,
          "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
          "max_position_embeddings": 128, "tie_word_embeddings": False}
MODELS = {"llama": {"objective": "causal", "seq_len": 32},
          "gpt2": {"model": "gpt2-tiny", "objective": "causal", "seq_len": 32},
          "t5": {"model": "t5-tiny", "objective": "span", "seq_len": 32, "target_len": 8}}


def layout_config(out: Path, item: str) -> RunConfig:
    model, dims, *options = item.split(":")
    degrees = {"dp": 1, "tp": 1, "pp": 1}
    if dims != "single":
        for part in dims.split("x"):
            degrees[part[:2]] = int(part[2:])
    flat = dict(MODELS[model])
    if model == "llama":
        flat["model"] = str(out / "llama4.json")
    engine, zero = "ddp", 0
    for opt in options:
        if opt.startswith("fsdp"):
            engine, zero = "fsdp", int(opt[4:])
        elif opt in ("gpipe", "1f1b"):
            flat["pp_schedule"] = opt
        elif opt == "interleaved":
            flat.update(pp_schedule="interleaved", virtual_stages=2)
        elif opt == "nosp":
            flat["sequence_parallel"] = False
        elif opt == "rc":
            flat["recompute"] = "full"
        elif opt.startswith("stages="):
            flat["stage_layers"] = [int(n) for n in opt[7:].split(",")]
    return RunConfig().replace(
        engine=engine, zero=zero, tp=degrees["tp"], pp=degrees["pp"], nproc=int(os.environ["WORLD_SIZE"]),
        steps=STEPS, micro_batch=1, global_batch=4, lr=1e-3, warmup_steps=2, warmup=1, seed=7, progress=False,
        tokenizer=str(out / "tokenizer.json"), output=str(out / item.replace(":", "_").replace(",", "-")), **flat)


def grad_norms(run_dir: Path) -> list[float]:
    """Each step's global gradient norm before clipping, from the run's metrics log."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [r["grad_norm"] for r in rows if "grad_norm" in r]


def main() -> None:
    warnings.filterwarnings("ignore", category=FutureWarning)
    out, layouts = Path(sys.argv[1]), sys.argv[2:]
    measure_peak_once()
    ctx = setup_distributed()
    results, prepared, calls = {}, {}, {}
    count_calls(calls)
    (out / "llama4.json").write_text(json.dumps(LLAMA4))
    if not (out / "tokenizer.json").exists():  # rank 0 trains the tokenizer once, into OUT
        load_data(layout_config(out, "t5:single").replace(tokenizer=None), ctx, out)
    for item in layouts:
        cfg = layout_config(out, item)
        key = item.split(":")[0]
        if key not in prepared:  # once per objective; OUT's tokens.npz (the session's or rank 0's) read, not made
            prepared[key] = load_data(cfg, ctx, out)
        source = [o[5:] for o in item.split(":") if o.startswith("from=")]
        if source:  # written under one layout, resumed under another
            dims, *opts = source[0].split("+")
            first = layout_config(out, ":".join([key, dims, *opts])).replace(output=cfg.output.dir)
            try:
                run_training(first.replace(save_every=3, crash_after_step=3), ctx, prepared[key])
            except SimulatedCrash:
                pass
            resumed = run_training(cfg.replace(resume=True), ctx, prepared[key])
            if ctx.is_main:
                results[item] = {"resumed": resumed["losses"], "resumed_from": resumed["resumed_from_step"]}
            continue
        if "resume" not in item.split(":"):
            calls.clear()
            summary = run_training(cfg, ctx, prepared[key])
            if ctx.is_main:
                results[item] = {"losses": summary["losses"], "grad_norms": grad_norms(Path(cfg.output.dir)),
                                 "calls": dict(calls)}
            continue
        full = run_training(cfg.replace(output=cfg.output.dir + "-full"), ctx, prepared[key])
        try:
            run_training(cfg.replace(output=cfg.output.dir + "-killed", save_every=3, crash_after_step=3), ctx,
                         prepared[key])
        except SimulatedCrash:
            pass
        resumed = run_training(cfg.replace(output=cfg.output.dir + "-killed", resume=True), ctx, prepared[key])
        if ctx.is_main:
            results[item] = {"full": full["losses"], "resumed": resumed["losses"],
                             "resumed_from": resumed["resumed_from_step"]}
    if ctx.is_main:
        (out / "results.json").write_text(json.dumps(results))
    teardown_distributed()


if __name__ == "__main__":
    main()
