"""The exact settings each engine is given for a RunConfig: DeepSpeed's JSON, FSDP2's and DDP's arguments.

Torch-free on purpose: `plan --emit` writes these files from the same RunConfig the workers build them from, so
the emitted ds_config.json / fsdp_config.json / ddp_config.json is what training uses. The backends read their
arguments from here (nothing else decides them) and every run writes the one it used to DIR/<engine file>.

All engines share the optimizer: torch AdamW with the RunConfig's optimizer section and the LambdaLR schedule of
engine/backends/common.py. DeepSpeed gets it as a client optimizer (hence `zero_allow_untested_optimizer`), except
with ZeRO-Offload, which needs DeepSpeed's own CPU Adam: then the JSON carries the `optimizer` block.

plan = reality: every knob the cost model prices is set here explicitly, never left to the installed library's
default (a different DeepSpeed / torch would change it under the prediction). Sizes and switches the cost model
reads from data come from that data -- costmodel/engines.yaml (bucket sizes, ZeRO-3 prefetch / persistence / reuse,
FSDP prefetch depth): one copy, read by both. The others are the code paths the cost model's terms price, named at
each value. tests/unit/test_engine_settings_parity.py checks
them knob by knob against engines.yaml and the installed DeepSpeed's own config parser.
"""

from __future__ import annotations

from scalestudy.costmodel.engines import engine_comm
from scalestudy.errors import ScalestudyError
from scalestudy.specs.run import RunConfig

DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
FILE_NAMES = {"deepspeed": "ds_config.json", "fsdp": "fsdp_config.json", "ddp": "ddp_config.json"}
DS_DTYPES = {"bf16": "bf16", "fp16": "fp16", "fp32": "fp32"}  # DeepSpeed's names (communication / accumulation)
# A DeepSpeed ZeRO-3 limit the cost model has no term for, at DeepSpeed 0.19's default, explicit: one optimizer
# sub-group below 1e9 parameters per rank (terms.optimizer_offload steps the partition at once).
# (stage3_max_live_parameters comes from engines.yaml stage3_max_live_elems: it bounds the prefetch, which
# costmodel/zero3.py zero3_reuse walks; memory.zero3_gathered_elems holds the modules the reuse distance keeps, under
# 1e9 by construction, plus the prefetch bucket.)
ZERO3_SUB_GROUP_SIZE = 10**9


def adamw_params(run: RunConfig) -> dict:
    o = run.optimizer
    return {"lr": o.lr, "betas": [o.beta1, o.beta2], "eps": o.eps, "weight_decay": o.weight_decay}


def deepspeed_config(run: RunConfig, *, cuda: bool) -> dict:
    """The JSON handed to `deepspeed.initialize` (keys as in DeepSpeed's config docs)."""
    strategy, layout = run.strategy, run.layout()
    zero = deepspeed_zero(strategy, cuda=cuda)
    if strategy.offload_optimizer != "none":
        zero["offload_optimizer"] = {"device": strategy.offload_optimizer, "pin_memory": cuda}
    if strategy.offload_params != "none":
        zero["offload_param"] = {"device": strategy.offload_params, "pin_memory": cuda}
    config = {
        "train_batch_size": strategy.micro_batch * layout.grad_accum * layout.dp,
        "train_micro_batch_size_per_gpu": strategy.micro_batch,
        "gradient_accumulation_steps": layout.grad_accum,
        "gradient_clipping": run.optimizer.grad_clip,
        # gradients reduced and accumulated in the compute dtype (terms.main_grad_bytes: DeepSpeed 2 B under fp16 /
        # bf16); the accumulation dtype also keeps bf16 ZeRO-1 on ZeRO's optimizer, whose reduce-scatter terms price
        "communication_data_type": DS_DTYPES[strategy.precision],
        "data_types": {"grad_accum_dtype": DS_DTYPES[strategy.precision]},
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


def deepspeed_zero(strategy, *, cuda: bool) -> dict:
    """`zero_optimization`: the stage and every knob of it the cost model prices (see the module docstring)."""
    zero: dict = {"stage": strategy.zero}
    if strategy.zero == 0:  # engine.allreduce_gradients: a fixed 5e8-element bucket (MEMORY_OPT_ALLREDUCE_SIZE)
        return zero
    eng = engine_comm("deepspeed")
    zero.update({
        # Overlap needs a side stream (GPU); on CPU DeepSpeed's overlap path only adds copies (cpu_collectives).
        "overlap_comm": bool(cuda and strategy.overlap_grad_comm),
        # gradients copied into the reduce bucket and a contiguous partition (memory.buffer_bytes), reduced by
        # partition, not all-reduced whole (terms._bucketed_dp_comm)
        "contiguous_gradients": True,
        "reduce_scatter": True,
        "reduce_bucket_size": int(eng.reduce_bucket_elems),
        "allgather_bucket_size": int(eng.allgather_bucket_elems),
    })
    if strategy.zero in (1, 2):
        # GPU terms price one reduce per owner's slice of each bucket (a reduce-scatter's bytes, engines.yaml
        # grad_rails); 0.19's default all-reduces the whole bucket (twice the bytes), which cpu_collectives prices
        # on gloo ranks
        zero["use_multi_rank_bucket_allreduce"] = not cuda
    else:
        zero.update({"stage3_prefetch_bucket_size": int(eng.stage3_prefetch_elems),
                     "stage3_param_persistence_threshold": int(eng.param_persistence_threshold),
                     "stage3_max_reuse_distance": int(eng.stage3_max_reuse_elems),
                     "stage3_max_live_parameters": int(eng.stage3_max_live_elems),
                     "sub_group_size": ZERO3_SUB_GROUP_SIZE})
    return zero


def activation_checkpointing(strategy) -> dict:
    """How `recompute` runs: Hugging Face gradient checkpointing, one checkpoint per transformer block, PyTorch's
    non-reentrant checkpoint (engine/models.py), which stops re-running a block after its last op that saves a
    tensor (torch.utils.checkpoint early stop; op_checkpoint.early_stop prices it) -- on for every engine, set
    explicitly: DeepSpeed ZeRO-3 fails without it (the re-run goes on into ops whose parameters it has released:
    'size of tensor a (0)' in the backward, t5-tiny on 2 gloo ranks, DeepSpeed 0.19.8, torch 2.13)."""
    return {"recompute": strategy.recompute, "unit": "transformer block", "use_reentrant": False,
            "early_stop": strategy.recompute == "full"}


def fsdp_settings(run: RunConfig, *, cuda: bool = True) -> dict:
    """Arguments of `torch.distributed.fsdp.fully_shard` (FSDP2), applied to each transformer layer, then the root."""
    strategy, layout = run.strategy, run.layout()
    settings = {
        "reshard_after_forward": strategy.zero == 3,  # ZeRO-3-like; False keeps params gathered (ZeRO-2-like)
        # GPU: the root unit (embeddings, head, final norms) stays gathered from its forward to the end of the
        # backward (terms._fsdp_unit_ends gathers it once per micro-batch; memory.fsdp_root_gathered_bytes), as
        # FSDP2 does for a root left at its default -- torch 2.13 reshards a root given reshard_after_forward=True.
        # gloo ranks: resharded like every unit and gathered again for the backward (cpu_collectives.fsdp_dp_comm
        # prices every unit twice under zero 3, and the CPU profile's fsdp overhead was measured so).
        "root_reshard_after_forward": strategy.zero == 3 and not cuda,
        # each block all-gathers the next one(s) in forward and the previous one(s) in backward (engines.yaml fsdp)
        "prefetch_layers": engine_comm("fsdp").prefetch_layers,
        "mixed_precision": None,
        "cpu_offload": strategy.offload_params == "cpu",
        "activation_checkpointing": activation_checkpointing(strategy),
        "gradient_accumulation_steps": layout.grad_accum,
        # each micro-batch's backward reduce-scatters its gradients into the sharded .grad (FSDP2's default, as
        # torchtitan and Composer run it): what terms._sharded_dp_comm / cpu_collectives.fsdp_calls_per_step price
        # and memory.py holds (sharded gradients + one unit's unsharded buffer). "last_micro_batch" would keep a
        # whole model's unsharded gradients per rank between micro-batches (set_requires_gradient_sync(False)).
        "gradient_sync": "every_micro_batch",
        "gradient_clipping": run.optimizer.grad_clip,
        "optimizer": {"type": "torch.optim.AdamW", "params": {**adamw_params(run), **host_adamw(strategy, cuda)}},
    }
    if strategy.precision == "bf16":  # bf16 compute and all-gathers, fp32 gradient reduction and master weights
        settings["mixed_precision"] = {"param_dtype": DTYPES["bf16"], "reduce_dtype": DTYPES["fp32"]}
    return settings


def host_adamw(strategy, cuda: bool) -> dict:
    """torch AdamW's implementation argument for FSDP's host step: under CPU offload on a GPU host the one engines.yaml
    fsdp host_optimizer names, which terms.host_adam_slowdown prices ("fused": AdamW(fused=True), torch's fused CPU
    kernel; torch otherwise runs host tensors through its single-tensor loop, ~5.7x slower: benchmarks/
    bench_cpu_adamw.py). {} on the device (torch's foreach default there: optimizer_loop foreach) and on gloo ranks,
    whose host step the CPU profile prices at its measured rate of torch's default AdamW (microbench.bench_adam)."""
    if strategy.offload_optimizer == "none" or not cuda:
        return {}
    host = engine_comm("fsdp").host_optimizer
    if host not in ("fused", "single-tensor"):  # DeepSpeed's CPU-Adam under FSDP (fairseq) is cost-model only
        raise ScalestudyError(f"engines.yaml: fsdp.host_optimizer {host!r} is not a torch AdamW; train steps FSDP's "
                              f"host shards with torch AdamW (fused or single-tensor)")
    return {"fused": host == "fused"}


def ddp_settings(run: RunConfig) -> dict:
    """Arguments of `DistributedDataParallel` (and ZeroRedundancyOptimizer for zero 1)."""
    strategy, layout = run.strategy, run.layout()
    return {
        "gradient_as_bucket_view": True,  # gradients are views into DDP's buckets: no second copy
        # fp32 gradients (autocast keeps fp32 weights) in buckets of engines.yaml ddp reduce_bucket_elems
        "bucket_cap_mb": engine_comm("ddp").reduce_bucket_elems * 4 / 2**20,
        "zero_redundancy_optimizer": strategy.zero == 1,
        "autocast_dtype": DTYPES["bf16"] if strategy.precision == "bf16" else None,
        "activation_checkpointing": activation_checkpointing(strategy),
        "gradient_accumulation_steps": layout.grad_accum,
        # no_sync() on all but the last micro-batch: one all-reduce per step (terms._bucketed_dp_comm; DDP's
        # gradients stay whole on every rank anyway, so deferring costs no memory)
        "gradient_sync": "last_micro_batch",
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
        return FILE_NAMES[engine], fsdp_settings(run, cuda=cuda) | parallel_settings(run)
    return FILE_NAMES[engine], ddp_settings(run) | parallel_settings(run)
