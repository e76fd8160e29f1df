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
    """Drop every memoised per-model quantity (benchmarks measure cold evaluation with it)."""
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
    comm._GATHERS.clear()
    stage_terms._COMM.clear()
    stage_terms._TP.clear()
    attention_bias._SAVED_AND_GRAD.clear()
    memory._zero3_held_elems.cache_clear()
    zero3._zero3_reuse.cache_clear()
