"""Analytical cost model for parallel pre-training: parameters, FLOPs, memory, communication, step time.

Pure Python (no torch). Entry point: `scalestudy.costmodel.estimate.estimate(model, cluster, strategy, workload)`.
"""


def __getattr__(name: str):
    """`scalestudy.costmodel.estimate` (the module; `estimate.estimate` is the function) imported on first use: a
    training rank or `train` launcher reads only mfu / flops / engines, and the whole model's 24 other modules cost
    each of those processes ~127M instructions (~0.04 CPU-s) at start-up."""
    if name == "estimate":
        import importlib

        return importlib.import_module("scalestudy.costmodel.estimate")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def activation_cache_clear() -> None:
    """Drop the memoised per-shape quantities (benchmarks measure cold evaluation with it: the layouts, links, rank
    states and the small tables a planner fills once stay); clear_memos drops every memo."""
    from scalestudy.costmodel import attention_bias, comm, flops, memory, params, stage_terms, step, terms, zero3

    params.param_breakdown.cache_clear()
    params.param_count.cache_clear()
    params.params_per_device.cache_clear()
    flops.forward_flops.cache_clear()
    memory.activation_parts.cache_clear()
    memory._STORED.clear()
    memory._STAGE_STORED.clear()
    step._CACHE.clear()
    step._PASSES.clear()
    terms._SHAPES.clear()
    terms._SHAPES_BY_FIELDS.clear()
    terms._RANK_PARAMS.clear()
    comm._GATHERS.clear()
    stage_terms._COMM.clear()
    stage_terms._TP.clear()
    attention_bias._SAVED_AND_GRAD.clear()
    memory._zero3_held_elems.cache_clear()
    zero3._zero3_reuse.cache_clear()


def clear_memos() -> None:
    """Drop every memo the cost model prices through -- activation_cache_clear's and the rest (layouts, links, rank
    states, placements, stage collectives' numbers, the lru_caches of pure functions, the specs' derived devices and
    software fills) -- so the next estimate is priced as in a fresh process (tests/unit/test_costmodel_memo_keys.py
    compares the two). The loaders of input files (calibration.yaml, engines.yaml, published.yaml, device YAMLs) stay:
    their one entry is the file, not a computation."""
    from scalestudy.costmodel import (attention_bias, block_seconds, comm, cpu_engine, eager_kernels, efficiency,
                                      estimate, kernel_counts, memory, op_checkpoint, params, stage_terms, stages,
                                      terms, zero3)
    import sys

    from scalestudy.specs import hardware, strategy

    activation_cache_clear()
    for memo in (attention_bias._stage_blocks, eager_kernels.ffn_autocast_bytes, eager_kernels.gpt_ffn_autocast_bytes,
                 kernel_counts.block_kernels, memory.stage_in_flight, op_checkpoint.projections, zero3.zero3_gathers,
                 zero3.stack_order, zero3.interleaved_grad_elems, zero3.gradient_order, zero3.reduce_scatter_buckets,
                 zero3.reduce_scatter_rank_items):
        memo.cache_clear()
    for table in (block_seconds._BLOCK_S, comm._LINKS, cpu_engine._EXCESS, efficiency._TABLES, estimate._STAGE_PSI,
                  estimate._SHARES, memory._RANK_STATES, stage_terms._TP_GROUPS, stage_terms._TP_LINKS,
                  stages._PLACEMENT, terms._LAYOUTS, terms._SHAPE_GROUPS._numbers, stage_terms._COMM_NUMBERS._numbers,
                  strategy._FILLS, hardware._SCALED, hardware._LIMITED, hardware._HOSTED):
        table.clear()
    published = sys.modules.get("scalestudy.costmodel.published")  # the fit's memos, where a fit has run
    if published is not None:
        published._SETUPS.clear()
        published._GRID_ERRORS.clear()
