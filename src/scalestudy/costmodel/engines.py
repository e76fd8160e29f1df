"""Per-engine collective behaviour (engines.yaml): efficiencies, rails, latency counts, recompute re-gathers,
prefetch depth and bucket sizes. Data, not code: a new engine or a measured efficiency is a YAML edit."""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import lru_cache
from importlib import resources

import yaml

from scalestudy.errors import ScalestudyError
from scalestudy.specs.hardware import SAFE_LOADER


# What steps an engine's CPU-offloaded shards (engines.yaml host_optimizer): DeepSpeed's CPU-Adam, torch's fused CPU
# AdamW, torch's single-tensor AdamW, or nothing (the engine never steps on the host)
HOST_OPTIMIZERS = ("cpu-adam", "fused", "single-tensor", "none")


@dataclass(frozen=True, slots=True)
class EngineComm:
    collective_efficiency: float
    gather_rails: str  # ZeRO-3/FSDP parameter gathers: "rank" (own NIC share) or "node" (all of the node's NICs)
    grad_rails: str  # bucketed gradient collectives of DDP / ZeRO-0/1/2, the same choice
    collectives_per_layer: int
    regather_on_recompute: bool
    prefetch_layers: int
    reduce_bucket_elems: float
    allgather_bucket_elems: float
    stage3_prefetch_elems: float
    bucket_elems_per_dp_rank: float  # overlapped buckets grow with dp: max(reduce_bucket_elems, this x dp)
    pipeline_scatter_gather: bool  # pipeline sends split over the tp ranks, all-gathered after (comm.stage_boundary_time)
    tp_async_backward: bool  # sequence-parallel backward collectives overlap the linear GEMMs (terms._sp_async_exposed)
    grad_all_reduce: bool  # zero 1: gradients all-reduced whole (not reduce-scattered) before the owner's update
    param_broadcast_per_owner: bool  # zero 1: updated parameters re-sent as one broadcast per owner rank
    attention_kernel: str = "fa2"  # the fused attention kernel under flash attention (efficiency.attention_efficiency)
    fetch_host_s: float = 0.0  # host seconds per ZeRO-3 module fetch hook (DeepSpeed; zero3.hook_host_s)
    # CPU-offloaded optimizer step (terms.optimizer_offload), measured slowdowns of the engine's host code:
    host_optimizer: str = "none"  # what steps its offloaded shards: HOST_OPTIMIZERS (terms.host_adam_slowdown)
    host_adam_slowdown: float = 1.0  # its host Adam / DeepSpeed CPU-Adam (device YAML cpu_adam_params_per_s)
    unbound_ranks_host_adam_slowdown: float = 1.0  # several ranks per host, cores not bound to ranks
    zero3_upload_slowdown: float = 0.0  # ZeRO-3 pageable upload of the updated partition / a pinned fp32 copy
    zero3_upload_slowdown_one_gpu: float = 0.0  # the same with one GPU on the host
    param_persistence_threshold: int = 0  # ZeRO-3: tensors of at most this many elements stay whole (zero3.py)
    stage3_max_reuse_elems: float = 0.0  # ZeRO-3: gathered parameters reused within this distance stay gathered
    stage3_max_live_elems: float = 0.0  # ZeRO-3: prefetch stops while this many elements are gathered or in flight
    list_rank_host_s: float = 0.0  # ZeRO-3 before DeepSpeed 0.5.5: host seconds per rank of each list collective
    rs_interleave_host_s: float = 0.0  # ZeRO-3 reduce_scatter_coalesced: host seconds per rank and bucket tensor
    rs_divisible_host_s: float = 0.0  # the same per rank of a one-tensor bucket the ranks divide
    gather_wait_host_s: float = 0.0  # ZeRO-3 all-gather wait: host seconds per rank and gathered parameter


@lru_cache(maxsize=1)
def _engines_yaml() -> dict:
    """engines.yaml, parsed once for engine_table and tp_overlap by libyaml's parser where PyYAML has it
    (specs.hardware.SAFE_LOADER: the same objects as yaml.safe_load, ~10x faster; every plan / estimate reads it)."""
    return yaml.load((resources.files("scalestudy.costmodel") / "engines.yaml").read_text(encoding="utf-8"),
                     Loader=SAFE_LOADER)


@lru_cache(maxsize=1)
def engine_table() -> dict[str, EngineComm]:
    data = _engines_yaml()
    names = {f.name for f in fields(EngineComm)}
    out = {}
    for engine, row in data.items():
        if engine == "tp_comm_overlap":  # not an engine: Transformer Engine's TP overlap (tp_overlap())
            continue
        if set(row) != names:
            raise ScalestudyError(f"engines.yaml: {engine} needs exactly {', '.join(sorted(names))}")
        if row["host_optimizer"] not in HOST_OPTIMIZERS:
            raise ScalestudyError(f"engines.yaml: {engine}.host_optimizer must be one of {', '.join(HOST_OPTIMIZERS)}")
        if row["attention_kernel"] not in ("fa2", "cudnn"):
            raise ScalestudyError(f"engines.yaml: {engine}.attention_kernel must be fa2 or cudnn")
        for key in ("gather_rails", "grad_rails"):
            if row[key] not in ("rank", "node"):
                raise ScalestudyError(f"engines.yaml: {engine}.{key} must be rank or node")
        out[engine] = EngineComm(
            collective_efficiency=float(row["collective_efficiency"]), gather_rails=row["gather_rails"],
            grad_rails=row["grad_rails"],
            collectives_per_layer=int(row["collectives_per_layer"]),
            regather_on_recompute=bool(row["regather_on_recompute"]), prefetch_layers=int(row["prefetch_layers"]),
            reduce_bucket_elems=float(row["reduce_bucket_elems"]),
            allgather_bucket_elems=float(row["allgather_bucket_elems"]),
            stage3_prefetch_elems=float(row["stage3_prefetch_elems"]),
            bucket_elems_per_dp_rank=float(row["bucket_elems_per_dp_rank"]),
            pipeline_scatter_gather=bool(row["pipeline_scatter_gather"]),
            tp_async_backward=bool(row["tp_async_backward"]),
            grad_all_reduce=bool(row["grad_all_reduce"]),
            param_broadcast_per_owner=bool(row["param_broadcast_per_owner"]),
            attention_kernel=str(row["attention_kernel"]), fetch_host_s=float(row["fetch_host_s"]),
            host_optimizer=row["host_optimizer"],
            host_adam_slowdown=_at_least(row, engine, "host_adam_slowdown", 1.0),
            unbound_ranks_host_adam_slowdown=_at_least(row, engine, "unbound_ranks_host_adam_slowdown", 1.0),
            zero3_upload_slowdown=_at_least(row, engine, "zero3_upload_slowdown", 0.0),
            zero3_upload_slowdown_one_gpu=_at_least(row, engine, "zero3_upload_slowdown_one_gpu", 0.0),
            param_persistence_threshold=int(_at_least(row, engine, "param_persistence_threshold", 0.0)),
            stage3_max_reuse_elems=_at_least(row, engine, "stage3_max_reuse_elems", 0.0),
            stage3_max_live_elems=_at_least(row, engine, "stage3_max_live_elems", 0.0),
            list_rank_host_s=_at_least(row, engine, "list_rank_host_s", 0.0),
            rs_interleave_host_s=_at_least(row, engine, "rs_interleave_host_s", 0.0),
            rs_divisible_host_s=_at_least(row, engine, "rs_divisible_host_s", 0.0),
            gather_wait_host_s=_at_least(row, engine, "gather_wait_host_s", 0.0))
    return out


def _at_least(row: dict, engine: str, key: str, low: float) -> float:
    """engines.yaml `engine`.`key` as a float >= `low` (a slowdown below 1 would be a speed-up), or a one-line error."""
    value = row[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= low:
        raise ScalestudyError(f"engines.yaml: {engine}.{key} must be a number >= {low:g}, got {value!r}")
    return float(value)


def engine_comm(engine: str) -> EngineComm:
    return engine_table()[engine]


def scatters_stage_boundary(st, eng: EngineComm) -> bool:
    """Whether a tp-replicated pipeline stage boundary goes 1/tp per rank, all-gathered on the receiving stage
    (comm.stage_boundary_time): the run's Strategy.pipeline_scatter_gather ("on" / "off": a statement about its
    software, e.g. Megatron-LM before April 2021 sends whole tensors), else the engine's (engines.yaml)."""
    if st.pipeline_scatter_gather == "engine":
        return eng.pipeline_scatter_gather
    return st.pipeline_scatter_gather == "on"


def copies_tied_modules(engine: str) -> bool:
    """Whether a pipeline chunk holds its own copy of every tied module even beside another copy of the same tensor:
    scalestudy's engine (ddp / fsdp pipelines, engine/parallel/stages._Tier hands each tied module out once, then
    copies) -- a T5 chunk starting the decoder and ending the model holds the decoder's embedding and the tied head
    as two tensors, where Megatron's stage reuses its embedding for the output layer
    (shared_embedding_or_output_weight) and DeepSpeed's TiedLayerSpec one module per stage."""
    return engine in ("ddp", "fsdp")


@dataclass(frozen=True, slots=True)
class TPOverlap:
    """Overlap of tensor-parallel collectives with their GEMMs (engines.yaml tp_comm_overlap): Transformer Engine
    userbuffers (Megatron-family engines), or PyTorch's micro-pipeline TP over symmetric memory (the torch engines)."""

    pipeline_splits: int  # GEMM chunks of a GEMM + reduce-scatter overlap; the last chunk's reduce-scatter is exposed
    interference: float  # share of the overlapped time the GEMM loses to the communication kernels
    micro_pipeline_engines: tuple = ()  # engines whose tp_comm_overlap is torch async TP (micro_pipeline)
    micro_pipeline_interference: float = 0.0  # the same share for its copy-engine transfers
    backward_reduce_scatter_fused: bool = False  # the input-gradient reduce-scatter fused with a matmul


@lru_cache(maxsize=1)
def tp_overlap() -> TPOverlap:
    row = _engines_yaml()["tp_comm_overlap"]
    mp = row.get("micro_pipeline")
    if set(row) != {"pipeline_splits", "interference", "micro_pipeline"} or int(row["pipeline_splits"]) < 1 \
            or not 0.0 <= float(row["interference"]) < 1.0 or not isinstance(mp, dict) \
            or set(mp) != {"engines", "interference", "backward_reduce_scatter_fused"} \
            or not 0.0 <= float(mp["interference"]) < 1.0:
        raise ScalestudyError("engines.yaml: tp_comm_overlap needs pipeline_splits >= 1, 0 <= interference < 1 and "
                              "micro_pipeline {engines, interference, backward_reduce_scatter_fused}")
    return TPOverlap(pipeline_splits=int(row["pipeline_splits"]), interference=float(row["interference"]),
                     micro_pipeline_engines=tuple(mp["engines"]), micro_pipeline_interference=float(mp["interference"]),
                     backward_reduce_scatter_fused=bool(mp["backward_reduce_scatter_fused"]))


def grad_bucket_elems(eng: EngineComm, dp: int, overlapped: bool) -> tuple[float, float]:
    """(reduce, all-gather) bucket elements of the bucketed gradient / parameter collectives at data-parallel size
    `dp` (0: the whole buffer in one collective). Megatron-Core grows its overlapped buckets with dp (engines.yaml
    bucket_elems_per_dp_rank) so that each ring step's chunk stays bandwidth-bound; every other engine's are fixed."""
    grow = eng.bucket_elems_per_dp_rank * dp if overlapped else 0.0
    reduce = max(eng.reduce_bucket_elems, grow) if eng.reduce_bucket_elems else 0.0
    gather = max(eng.allgather_bucket_elems, grow) if eng.allgather_bucket_elems else 0.0
    return reduce, gather
