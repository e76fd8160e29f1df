"""Estimate: the result of the cost model (memory per device, step-time parts, throughput, MFU) and its
`to_dict()`, the `scalestudy estimate --json` schema (docs/estimate-schema.md). Built by costmodel/estimate.py
(one device type) and costmodel/stages.py (clusters mixing devices, per pipeline stage)."""

from __future__ import annotations

from dataclasses import dataclass

from scalestudy.costmodel.comm import tp_overlap_priced
from scalestudy.costmodel.memory import Memory, allocator_cache_bytes, device_total_bytes, reserved_bytes
from scalestudy.costmodel.mfu import flops_convention, flops_utilization
from scalestudy.costmodel.options import CostOptions
from scalestudy.costmodel.step import OVERLAP_MODEL
from scalestudy.specs.hardware import ClusterSpec
from scalestudy.specs.model import ModelSpec
from scalestudy.specs.strategy import Layout, Strategy, Workload

SCHEMA = "scalestudy.estimate/1"

# The step-time terms (`time_parts()` keys, the --json schema's) as printed to a reader: the JSON keys are field
# names, not words; each term is seconds per optimizer step.
STEP_TERM_NAMES = {
    "compute_s": "compute",
    "pipeline_bubble_s": "pipeline bubble",
    "tp_comm_s": "exposed tensor-parallel communication",
    "pp_comm_s": "exposed pipeline-parallel communication",
    "dp_comm_exposed_s": "exposed data-parallel communication",
    "cp_comm_exposed_s": "exposed context-parallel ring sends",
    "optimizer_s": "optimizer",
    "offload_s": "offload",
    "framework_s": "framework (measured CPU)",
}


def figures_convention(encoder_decoder: bool = True) -> str:
    """What `flops.convention` says: the model-FLOPs convention of this kind of model, then hardware FLOPs, MFU, HFU."""
    return (f"{flops_convention(encoder_decoder)}; hardware FLOPs add recomputation; MFU/HFU = FLOP/s per device / "
            "dense peak of the precision (scalestudy.costmodel.mfu)")


# What each figure of `to_dict()` is counted in, so a reader compares the right number with a paper's: papers
# report "TFLOP/s" as model or hardware FLOPs, and T5 throughput as input (encoder) tokens.
UNITS = {
    "time.step_s": "seconds per optimizer step",
    "throughput.samples_per_s": "sequences per second, whole cluster",
    "throughput.tokens_per_s": "tokens per second, whole cluster: global batch x (seq_len + target_len) / step_s "
                               "(encoder + decoder tokens of encoder-decoder models)",
    "throughput.source_tokens_per_s": "input tokens per second, whole cluster: global batch x seq_len / step_s "
                                      "(encoder tokens only: NeMo's T5/mT5 convention; = tokens_per_s for "
                                      "decoder-only models)",
    "throughput.tokens_per_s_per_device": "tokens_per_s / world_size",
    "throughput.model_tflops_per_device": "1e12 model FLOP/s per device (flops.convention, recomputation not "
                                          "counted: Megatron's 'model FLOPs')",
    "throughput.hardware_tflops_per_device": "1e12 hardware FLOP/s per device (recomputation counted: Megatron / "
                                             "Narayanan et al. 2021's 'TFLOP/s per GPU')",
    "mfu": "fraction (not %): model FLOP/s per device / dense peak of the precision (PaLM's MFU, flops.convention)",
    "hfu": "fraction (not %): hardware FLOP/s per device / dense peak of the precision",
    "memory": "bytes (not GiB)",
    "memory.per_device_bytes": "tensor_peak_bytes + parts.overhead (the CUDA-context allowance): nvidia-smi's kind of "
                               "figure, less the caching allocator's cached blocks and NCCL's / cuBLAS's own buffers "
                               "(memory.Memory.total; memory.device_total_bytes adds them)",
    "memory.device_total_bytes": "per_device_bytes + the allocator's cache (as in reserved_bytes) + NCCL's "
                                 "communicator buffers + cuBLAS's workspace: what nvidia-smi shows at the step's "
                                 "peak (memory.device_total_bytes); `fits` is decided on per_device_bytes, not on this",
    "memory.tensor_peak_bytes": "tensors alive at the step's highest moment (backward or optimizer step): what "
                                "torch.cuda.max_memory_allocated counts; max_memory_reserved adds the allocator's cache",
    "memory.reserved_bytes": "tensor_peak_bytes + the caching allocator's cached free blocks that the allocation "
                             "order fixes (the loss's hole, side-stream pools) + cuBLAS's workspace: what "
                             "torch.cuda.max_memory_reserved reads (memory.reserved_bytes); not the 'fits' verdict",
}


@dataclass(slots=True)
class Estimate:
    model: ModelSpec
    cluster: ClusterSpec
    strategy: Strategy
    workload: Workload
    options: CostOptions
    layout: Layout
    target_len: int  # decoder length used (enc-dec: workload.target_len, or the span-corruption need when that is 0)
    params_total: int
    params_per_device: int  # on the busiest model-parallel rank, before ZeRO partitioning
    memory: Memory
    capacity_bytes: float
    host_capacity_bytes: float
    fits: bool
    compute_s: float
    bubble_s: float
    tp_comm_s: float
    pp_comm_s: float
    dp_comm_s: float  # exposed
    dp_comm_total_s: float
    optimizer_s: float
    offload_s: float
    framework_s: float  # fixed per-step framework time of a measured CPU profile (0 for GPUs)
    step_s: float
    model_flops: float  # per optimizer step, whole global batch
    hardware_flops: float
    tokens_per_step: int
    peak_flops: float
    stages: tuple = ()  # clusters mixing devices: per pipeline stage (costmodel/stages.py, StageEstimate)
    cp_comm_s: float = 0.0  # context parallelism's exposed ring sends per step (costmodel/context_parallel.py)

    @property
    def per_device_bytes(self) -> float:
        return self.memory.total

    @property
    def device_total_bytes(self) -> float:
        """What nvidia-smi shows on the busiest device (memory.device_total_bytes): per_device_bytes + the caching
        allocator's cache + NCCL's and cuBLAS's buffers. Mixed clusters: buffers sized for `cluster.device` (the
        first group's; they differ by cuBLAS's workspace only, <= 24 MiB)."""
        return device_total_bytes(self.memory, self.strategy, self.layout.dp, self.cluster.gpus_per_node,
                                  self.cluster.device, self.allocator_cache_bytes)

    @property
    def allocator_cache_bytes(self) -> float:
        """The caching allocator's reserved-but-free bytes at the peak (memory.allocator_cache_bytes)."""
        st = self.strategy
        return allocator_cache_bytes(self.model, st, st.micro_batch, self.workload.seq_len // self.layout.cp,
                                     self.target_len,
                                     self.layout.tp, self.layout.pp, self.params_per_device, self.cluster.device,
                                     self.memory.transient)

    @property
    def reserved_bytes(self) -> float:
        """torch.cuda.max_memory_reserved on the busiest device (memory.reserved_bytes)."""
        return reserved_bytes(self.memory, self.allocator_cache_bytes, self.cluster.device)

    @property
    def samples_per_s(self) -> float:
        return self.workload.global_batch / self.step_s

    @property
    def tokens_per_s(self) -> float:
        return self.tokens_per_step / self.step_s

    @property
    def model_tflops_per_device(self) -> float:
        return self.model_flops / self.step_s / self.layout.world_size / 1e12

    @property
    def hardware_tflops_per_device(self) -> float:
        return self.hardware_flops / self.step_s / self.layout.world_size / 1e12

    @property
    def mfu(self) -> float:
        return flops_utilization(self.model_flops, self.step_s, self.layout.world_size, self.peak_flops)

    @property
    def hfu(self) -> float:
        return flops_utilization(self.hardware_flops, self.step_s, self.layout.world_size, self.peak_flops)

    @property
    def time_to_train_s(self) -> float | None:
        return self.workload.train_tokens / self.tokens_per_s if self.workload.train_tokens else None

    @property
    def device_hours(self) -> float | None:
        t = self.time_to_train_s
        return None if t is None else t * self.layout.world_size / 3600.0

    def time_parts(self) -> dict:
        """{`time.parts` key: seconds per optimizer step}; STEP_TERM_NAMES names each key for printing."""
        return {"compute_s": self.compute_s, "pipeline_bubble_s": self.bubble_s, "tp_comm_s": self.tp_comm_s,
                "pp_comm_s": self.pp_comm_s, "dp_comm_exposed_s": self.dp_comm_s, "optimizer_s": self.optimizer_s,
                "offload_s": self.offload_s, "framework_s": self.framework_s,
                **({"cp_comm_exposed_s": self.cp_comm_s} if self.layout.cp > 1 else {})}

    def priced_strategy(self) -> dict:
        """Strategy.to_dict() as the model priced it: tp_comm_overlap false for a tp group spanning nodes, where no
        overlap is priced (comm.tp_overlap_priced) -- the engine's default had it on, and the JSON said so."""
        out = self.strategy.to_dict()
        out["tp_comm_overlap"] = tp_overlap_priced(self.strategy.tp_comm_overlap, self.strategy.tp, self.cluster)
        return out

    def to_dict(self) -> dict:
        c, m, lay = self.cluster, self.memory, self.layout
        out = {
            "schema": SCHEMA,
            "model": self.model.name,
            "params_total": self.params_total,
            "params_per_device": self.params_per_device,
            "cluster": {"device": c.device.name, "nodes": c.nodes, "gpus_per_node": c.gpus_per_node,
                        "world_size": c.world_size, "intra_node_bytes_per_s": c.intra_bw,
                        "inter_node_bytes_per_s": c.inter_bw, "peak_flops_per_device": self.peak_flops},
            "strategy": self.priced_strategy(),
            "workload": {"global_batch": self.workload.global_batch, "seq_len": self.workload.seq_len,
                         "target_len": self.target_len if self.model.is_encoder_decoder else 0,
                         "tokens_per_step": self.tokens_per_step, "train_tokens": self.workload.train_tokens},
            "layout": {"world_size": lay.world_size, "dp": lay.dp, "tp": lay.tp, "pp": lay.pp,
                       "grad_accum": lay.grad_accum, "micro_batch": self.strategy.micro_batch,
                       **({"cp": lay.cp} if lay.cp > 1 else {})},
            "memory": {
                "per_device_bytes": m.total,
                "tensor_peak_bytes": m.tensor_peak,
                "reserved_bytes": self.reserved_bytes,
                "device_total_bytes": self.device_total_bytes,
                "parts": m.parts(),
                "model_states_bytes": m.model_states,
                "capacity_bytes": self.capacity_bytes,
                "host_bytes_per_rank": m.host_bytes,
                "host_capacity_bytes_per_rank": self.host_capacity_bytes,
                "nvme_bytes_per_rank": m.nvme_bytes,
                "unit": "bytes",
            },
            "fits": self.fits,
            "time": {
                "step_s": self.step_s,
                "parts": self.time_parts(),
                "dp_comm_total_s": self.dp_comm_total_s,
                "time_to_train_s": self.time_to_train_s,
                "device_hours": self.device_hours,
            },
            "throughput": {
                "samples_per_s": self.samples_per_s,
                "tokens_per_s": self.tokens_per_s,
                "source_tokens_per_s": self.samples_per_s * self.workload.seq_len,
                "tokens_per_s_per_device": self.tokens_per_s / lay.world_size,
                "model_tflops_per_device": self.model_tflops_per_device,
                "hardware_tflops_per_device": self.hardware_tflops_per_device,
            },
            "flops": {"model_per_step": self.model_flops, "hardware_per_step": self.hardware_flops,
                      "convention": figures_convention(self.model.is_encoder_decoder)},
            "mfu": self.mfu,
            "hfu": self.hfu,
            "assumptions": {**self.options.to_dict(), "overlap_model": OVERLAP_MODEL},
            "units": UNITS,
        }
        if self.stages:  # clusters mixing devices: time and memory per pipeline stage
            stages_dict(self, out)
        return out


def stages_dict(est, out: dict) -> None:
    """Add the per-stage breakdown of a mixed-cluster estimate to its `to_dict()` (estimate --json)."""
    slowest = max(est.stages, key=lambda x: x.slot_s)
    out["cluster"]["groups"] = [g.to_dict() for g in est.cluster.rank_groups()]
    out["stages"] = {
        "rule": "stage k on ranks [k W/pp, (k+1) W/pp) in the cluster's rank order, bound by its slowest device; "
                "step = sum of stage slots + (micro-batches - 1) x slowest slot + slowest tail",
        "slowest_stage": slowest.index,
        "per_stage": [x.to_dict() for x in est.stages],
        "unit": "seconds per micro-batch (slot, compute, tp/pp comm), seconds per step (tail terms), bytes",
    }
