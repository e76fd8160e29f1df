"""The exact settings each engine is given for a RunConfig: DeepSpeed's JSON, FSDP2's and DDP's arguments.

Torch-free on purpose: `plan --emit` writes these files from the same RunConfig the workers build them from, so
the emitted ds_config.json / fsdp_config.json / ddp_config.json is what training uses. The backends read their
arguments from here (nothing else decides them) and every run writes the one it used to DIR/<engine file>.

All engines share the optimizer: torch AdamW with the RunConfig's optimizer section and the LambdaLR schedule of
engine/backends/common.py. DeepSpeed gets it as a client optimizer (hence `zero_allow_untested_optimizer`), except
with ZeRO-Offload, which needs DeepSpeed's own CPU Adam: then the JSON carries the `optimizer` block.
"""

from __future__ import annotations

from scalestudy.specs.run import RunConfig

DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
FILE_NAMES = {"deepspeed": "ds_config.json", "fsdp": "fsdp_config.json", "ddp": "ddp_config.json"}


def adamw_params(run: RunConfig) -> dict:
    o = run.optimizer
    return {"lr": o.lr, "betas": [o.beta1, o.beta2], "eps": o.eps, "weight_decay": o.weight_decay}


def deepspeed_config(run: RunConfig, *, cuda: bool) -> dict:
    """The JSON handed to `deepspeed.initialize` (keys as in DeepSpeed's config docs)."""
    strategy, layout = run.strategy, run.layout()
    zero: dict = {"stage": strategy.zero}
    if strategy.zero >= 1:
        # Overlap needs a side stream (GPU); on CPU DeepSpeed's overlap path only adds copies.
        zero["overlap_comm"] = bool(cuda and strategy.overlap_grad_comm)
    if strategy.offload_optimizer != "none":
        zero["offload_optimizer"] = {"device": strategy.offload_optimizer, "pin_memory": cuda}
    if strategy.offload_params != "none":
        zero["offload_param"] = {"device": strategy.offload_params, "pin_memory": cuda}
    config = {
        "train_batch_size": strategy.micro_batch * layout.grad_accum * layout.dp,
        "train_micro_batch_size_per_gpu": strategy.micro_batch,
        "gradient_accumulation_steps": layout.grad_accum,
        "gradient_clipping": run.optimizer.grad_clip,
        "zero_optimization": zero,
        "zero_allow_untested_optimizer": True,  # torch AdamW as a client optimizer
        "steps_per_print": 10**9,  # scalestudy logs every step itself
        "wall_clock_breakdown": False,
    }
    if strategy.precision == "bf16":
        config["bf16"] = {"enabled": True}
    elif strategy.precision == "fp16":
        config["fp16"] = {"enabled": True, "loss_scale": 0, "initial_scale_power": 16}
    if strategy.offload_optimizer != "none":
        config["optimizer"] = {"type": "AdamW", "params": adamw_params(run)}
    return config


def fsdp_settings(run: RunConfig) -> dict:
    """Arguments of `torch.distributed.fsdp.fully_shard` (FSDP2), applied to each transformer layer, then the root."""
    strategy, layout = run.strategy, run.layout()
    settings = {
        "reshard_after_forward": strategy.zero == 3,  # ZeRO-3-like; False keeps params gathered (ZeRO-2-like)
        "mixed_precision": None,
        "cpu_offload": strategy.offload_params == "cpu",
        "activation_checkpointing": strategy.recompute,
        "gradient_accumulation_steps": layout.grad_accum,
        "gradient_clipping": run.optimizer.grad_clip,
        "optimizer": {"type": "torch.optim.AdamW", "params": adamw_params(run)},
    }
    if strategy.precision == "bf16":  # bf16 compute and all-gathers, fp32 gradient reduction and master weights
        settings["mixed_precision"] = {"param_dtype": DTYPES["bf16"], "reduce_dtype": DTYPES["fp32"]}
    return settings


def ddp_settings(run: RunConfig) -> dict:
    """Arguments of `DistributedDataParallel` (and ZeroRedundancyOptimizer for zero 1)."""
    strategy, layout = run.strategy, run.layout()
    return {
        "gradient_as_bucket_view": True,  # gradients are views into DDP's buckets: no second copy
        "zero_redundancy_optimizer": strategy.zero == 1,
        "autocast_dtype": DTYPES["bf16"] if strategy.precision == "bf16" else None,
        "activation_checkpointing": strategy.recompute,
        "gradient_accumulation_steps": layout.grad_accum,
        "gradient_clipping": run.optimizer.grad_clip,
        "optimizer": {"type": "torch.optim.AdamW", "params": adamw_params(run)},
    }


def parallel_settings(run: RunConfig) -> dict:
    """The (pp, dp, tp) mesh and pipeline schedule of a tp/pp run (engine/backends/hybrid.py); {} without tp/pp."""
    s, layout = run.strategy, run.layout()
    if s.tp * s.pp == 1:
        return {}
    return {"parallel": {"mesh": {"pp": layout.pp, "dp": layout.dp, "tp": layout.tp},
                         "sequence_parallel": s.sequence_parallel and s.tp > 1,
                         "pp_schedule": s.pp_schedule if s.pp > 1 else None,
                         "virtual_stages": s.virtual_stages,
                         "stage_layers": list(s.stage_layers) or "even split" if s.pp > 1 else None}}


def engine_settings(run: RunConfig, *, cuda: bool) -> tuple[str, dict]:
    """(file name, settings) of the run's engine: what the backend uses and what DIR/<file name> records."""
    engine = run.strategy.engine
    if engine == "deepspeed":
        return FILE_NAMES[engine], deepspeed_config(run, cuda=cuda)
    if engine == "fsdp":
        return FILE_NAMES[engine], fsdp_settings(run) | parallel_settings(run)
    return FILE_NAMES[engine], ddp_settings(run) | parallel_settings(run)
