"""Torch-free checks that a tp x pp layout fits the model and the engine; one-line errors before any launch."""

from __future__ import annotations

from scalestudy.errors import OptionError, ScalestudyError

# Families whose blocks have a tensor-parallel plan (engine/parallel/tensor_parallel.py).
TP_FAMILIES = ("llama", "gpt2", "t5", "mt5")
PP_FAMILIES = ("llama", "gpt2", "t5", "mt5")


def needs_hybrid(strategy) -> bool:
    """Tensor or pipeline parallelism runs on the hybrid backend (engine/backends/hybrid.py)."""
    return strategy.tp > 1 or strategy.pp > 1


def check_parallel_layout(spec, strategy, world_size: int, dropout: float = 0.0) -> None:
    """Raise ScalestudyError when `strategy`'s tp/pp cannot run `spec` on `world_size` ranks (OptionError naming the
    keys tp, pp, virtual_stages: train renames them to the flags typed)."""
    tp, pp = strategy.tp, strategy.pp
    if not needs_hybrid(strategy):
        return
    if world_size % (tp * pp):
        raise OptionError(f"the mesh tp {tp} x pp {pp} does not divide the world size {world_size} "
                          f"(--nproc x --nnodes)", "tp", "pp")
    if tp > 1:
        if spec.family not in TP_FAMILIES:
            raise ScalestudyError(f"tensor parallelism has no plan for {spec.family} models; "
                                  f"use --tp 1 or a llama/gpt2/t5 model")
        if spec.num_heads % tp:
            raise OptionError(f"tp {tp} does not divide the {spec.num_heads} attention heads of {spec.name}", "tp")
        if spec.kv_heads % tp:
            raise OptionError(f"tp {tp} does not divide the {spec.kv_heads} key/value heads of {spec.name}", "tp")
        if spec.d_ff % tp:
            raise OptionError(f"tp {tp} does not divide the feed-forward width {spec.d_ff} of {spec.name}", "tp")
        if dropout > 0:  # replicated activations would need the same mask on every tp rank (Megatron's RNG tracker)
            raise ScalestudyError("dropout > 0 with tp > 1 is not supported here (tp ranks draw different masks): "
                                  "set model.dropout to 0")
    if pp > 1:
        if spec.family not in PP_FAMILIES:
            raise ScalestudyError(f"pipeline parallelism has no stage split for {spec.family} models")
        layers = spec.total_layers
        if pp * strategy.virtual_stages > layers:
            if strategy.virtual_stages == 1:  # the default: a user who did not set it reads of pp only
                raise OptionError(f"pp {pp} exceeds the {layers} layers of {spec.name}", "pp")
            raise OptionError(f"pp {pp} x virtual_stages {strategy.virtual_stages} exceeds the {layers} layers of "
                              f"{spec.name}", "pp", "virtual_stages")
        strategy.stage_split(layers)  # raises on stage_layers that do not sum to the layers
    if strategy.engine == "deepspeed" or (strategy.engine == "ddp" and strategy.zero != 0):
        raise ScalestudyError(f"tp/pp > 1 run on FSDP2 (--engine fsdp --zero 2|3) or replication (--engine ddp "
                              f"--zero 0), not {strategy.engine} zero {strategy.zero}")
    if strategy.offload_optimizer != "none" or strategy.offload_params != "none":
        raise ScalestudyError("offload is not available with tp/pp > 1: use --offload-optimizer none")


def check_microbatches(strategy, grad_accum: int) -> None:
    """Pipeline schedules need at least one micro-batch per stage in flight (and whole rounds if interleaved)."""
    if strategy.pp > 1 and grad_accum < strategy.pp:
        raise OptionError(f"pp {strategy.pp} needs >= {strategy.pp} micro-batches per step, the layout gives "
                          f"{grad_accum} (raise global_batch or lower micro_batch)", "pp", "global_batch",
                          "micro_batch")
    if strategy.pp_schedule == "interleaved" and strategy.pp > 1 and grad_accum % strategy.pp:
        raise OptionError(f"the interleaved schedule needs micro-batches per step ({grad_accum}) divisible by "
                          f"pp {strategy.pp}", "pp")


def chunk_layer_counts(strategy, num_layers: int) -> list[int]:
    """Layers per model chunk in stage order (chunk s lives on pp rank s % pp): each device's layers
    (`Strategy.stage_split`) divided over its `virtual_stages` chunks, the remainder on its first chunks."""
    per_device = strategy.stage_split(num_layers) if strategy.pp > 1 else (num_layers,)
    return split_chunk_counts(per_device, strategy.virtual_stages if strategy.pp > 1 else 1)


def split_chunk_counts(per_device: tuple[int, ...], v: int) -> list[int]:
    """chunk_layer_counts of a stage split: `per_device` layers per device, each divided over its `v` chunks."""
    counts = [0] * (len(per_device) * v)
    for rank, n in enumerate(per_device):
        base, extra = divmod(n, v)
        for c in range(v):
            counts[c * len(per_device) + rank] = base + (1 if c < extra else 0)
    return counts


def check_sequence_parallel(strategy, seq_len: int, target_len: int) -> None:
    """Sequence parallelism splits every sequence evenly over the tp ranks."""
    if strategy.tp > 1 and strategy.sequence_parallel:
        for name, n in (("seq_len", seq_len), ("target_len", target_len)):
            if n % strategy.tp:
                raise OptionError(f"sequence parallelism splits sequences over tp {strategy.tp}: {name} {n} is not "
                                  f"divisible (or pass --no-sequence-parallel)", "tp", name)
