"""Devices and clusters. Device numbers are data (`hardware/*.yaml`), not code.

Conventions: bytes are bytes, bandwidths are bytes/s in one direction per device, peaks are dense FLOP/s.

A cluster is one device type (`device`, `nodes`, `gpus_per_node`) or, for clusters that mix device types, an
ordered list of node groups (`groups: [{device: a100-80gb, nodes: 2}, {device: v100-32gb, nodes: 2}]`, see
`load_cluster`). Ranks are numbered node by node through the groups in the order written; the cost model places
pipeline stage i on ranks [i W/pp, (i+1) W/pp) of that order (Megatron-LM: pipeline outermost), so stages follow
the groups. A group may carry a measured relative `speed` (its device's compute runs at `speed` x the data's).
"""

from __future__ import annotations

import math
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from functools import lru_cache
from importlib import resources
from pathlib import Path

import yaml

from scalestudy.errors import ScalestudyError
from scalestudy.specs.near_keys import did_you_mean
from scalestudy.specs.run_options import training_option_hint
from scalestudy.yamlfile import number_value, read_yaml

# yaml.safe_load's loader with libyaml's C parser where PyYAML has it: the same SafeConstructor builds the same
# objects, ~10x faster (every plan / estimate reads the shipped device YAMLs: ~0.1 CPU-s of a CLI call)
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True)
class DeviceSpec:
    name: str
    memory_bytes: int
    peak_flops: dict[str, float]  # precision -> dense FLOP/s (tensor cores where the device has them)
    # Achieved fraction of peak for a GEMM, as [[smallest matrix dimension, fraction], ...] ascending;
    # interpolated linearly in log2(dimension). Data from published GEMM benchmarks (see each YAML's source).
    matmul_efficiency: list[list[float]]  # [] when `family` names a fitted curve (costmodel/calibration.yaml)
    hbm_bytes_per_s: float
    pcie_bytes_per_s: float
    intra_node_bytes_per_s: float  # per device, one direction (NVLink / NVSwitch / shared memory)
    intra_node_latency_s: float
    inter_node_bytes_per_s: float  # per device, one direction (NIC share)
    inter_node_latency_s: float
    host_memory_bytes: int  # per node
    cpu_adam_params_per_s: float  # DeepSpeed CPU-Adam update rate per node (parameters/s)
    kind: str = "gpu"
    source: str = ""
    # The die (a100, hopper, ...): documentation; a GPU's GEMM efficiency is the fitted curve of
    # costmodel/calibration.yaml scaled by `matmul_peak_fraction` (costmodel/efficiency.py)
    family: str = ""
    # Measured maximum achievable matmul FLOP/s (large bf16 GEMMs, the best shape found) / `peak_flops`, at the
    # device's default power limit: the ceiling the fitted GEMM curve is a share of. 0 = not measured (then
    # `matmul_efficiency` is the device's own measured table)
    matmul_peak_fraction: float = 0.0
    # Clock (MHz) the datasheet peak is computed at, and the sustained tensor clock at board power limits
    # [[watts, MHz], ...] for this die; with `power_limit_w` (0 = the vendor default) they scale compute-bound time
    # by clock(power_limit_w) / clock_mhz (memory-bound terms keep `hbm_bytes_per_s`: HBM has its own clock)
    clock_mhz: float = 0.0
    power_clock_mhz: list[list[float]] = field(default_factory=list)
    power_limit_w: float = 0.0
    # Measured framework overheads (CPU profiles, costmodel/cpu_profile.py); 0 = none measured. GPUs use the
    # fitted per-layer constant of costmodel/calibration.yaml instead.
    layer_overhead_s: float = 0.0  # per sublayer (attention / FFN / cross-attention) per forward pass
    step_overhead_s: float = 0.0  # per optimizer step (loop, zero_grad, optimizer dispatch)
    microstep_overhead_s: float = 0.0  # per micro-batch (batch assembly, embeddings, loss, autograd set-up)
    # per engine ("deepspeed-3", "fsdp-2", ...): its own cost above plain PyTorch, seconds per sublayer per micro-batch
    engine_overhead_s: dict[str, float] = field(default_factory=dict)
    # per collective ("all_gather", "reduce_scatter", "all_reduce"): measured time at the calibration's largest
    # message / the link model's (alpha-beta fitted on all_reduce); {} = not measured. Read by tune's refit only.
    collective_time_ratio: dict[str, float] = field(default_factory=dict)
    # CPU profiles (engine/microbench.py, every rank at once; costmodel/cpu_memory.py reads them): the copy bandwidth
    # by buffer size, [[bytes, bytes/s read + write], ...] ascending (caches, then DRAM), and the trainer's optimizer
    # step (clip_grad_norm_ + torch AdamW), [[tensors, parameters, seconds], ...]; [] = not measured
    copy_bandwidth: list[list[float]] = field(default_factory=list)
    optimizer_step_s: list[list[float]] = field(default_factory=list)
    # CPU profiles: collective_time_ratio at every measured message size, {op: [[bytes, ratio], ...]} ascending (gloo's
    # small messages cost far less than the all_reduce fit's latency says, its large reduce-scatters far more); {}
    # = only the largest message's (collective_time_ratio)
    collective_ratio_by_size: dict[str, list[list[float]]] = field(default_factory=dict)
    # CPU profiles: the copy bandwidth into a newly allocated buffer (torch.cat, clone, flatten), [[bytes, bytes/s
    # read + write], ...] ascending: beyond the allocator's mmap threshold the copy faults its pages in; [] = not
    # measured (copies priced at copy_bandwidth)
    fresh_copy_bandwidth: list[list[float]] = field(default_factory=list)
    # Attention-core kernels that reach less of this device's peak than its GEMM curve gives them: {kernel: fraction
    # of the dense peak at the default power limit}, published kernel benchmarks (see each YAML); a kernel not
    # listed runs at the GEMM curve (costmodel/efficiency.attention_efficiency)
    flash_attention_fraction: dict[str, float] = field(default_factory=dict)
    # Fused attention kernels this device cannot run, each mapped to the kernel its stack runs in its place when the
    # engine's default asks for it (terms.attention_kernel: PyTorch SDPA falls through its backends, flash ->
    # memory-efficient -> math); a run that names one of them is refused. {} = every kernel runs (its rate above)
    attention_kernel_fallback: dict[str, str] = field(default_factory=dict)
    # CUDA compute capability ("7.0"), named where a kernel is refused for it (attention_kernel_fallback); "" = not
    # stated
    compute_capability: str = ""
    # NVLink point-to-point meshes (no NVSwitch): {GPUs per node: [[links between GPU i and GPU j], ...]} (DGX-1's
    # hybrid cube mesh, 4-GPU SXM2 boards); intra_node_bytes_per_s is then the rate over all of a GPU's links. A node
    # size not listed is switched (NVSwitch): every group of its GPUs gets the full rate.
    nvlink_peer_links: dict[int, list[list[float]]] = field(default_factory=dict)
    # GEMM operand alignment (costmodel/alignment.py): [[alignment in 16-bit elements (4, 2 or 1), fraction of the
    # aligned GEMM rate], ...] for a fp16/bf16 GEMM whose leading dimensions are multiples of only that many elements
    # (8 = 16 bytes = aligned); empty: alignment not priced on this device
    unaligned_gemm_fraction: list[list[float]] = field(default_factory=list)
    # Optional mechanism data (defaults documented in docs/estimate-schema.md, "Device YAML"): NVMe offload bandwidth
    # as a share of pcie_bytes_per_s (assumed: a PCIe 4.0 x4 drive behind an x16 GPU link), and how much slower
    # compute runs while a collective overlaps it (Lee et al. 2025, measured on A100 and H100: 18.9% on average)
    nvme_fraction_of_pcie: float = 0.25
    compute_slowdown_under_comm: float = 0.189
    # GPUs whose host copies share one PCIe link to the host CPU (a PCIe switch with one x16 uplink per GPU pair on
    # DGX-1 / DGX A100): when every GPU of a node offloads at once, each gets pcie_bytes_per_s / this many
    # (DeviceSpec.host_link_bytes_per_s); 1 = a link of its own
    gpus_per_host_link: int = 1
    # NUMA nodes of the host's memory (sockets x nodes per socket): a rank's pinned host buffers sit on one of them
    # (terms.numa_pinned_slowdown); 1 = the host's bandwidth serves every buffer
    host_numa_nodes: int = 1
    # Seconds the node's host CPU takes to post one network step of an NCCL collective (NCCL src/graph/tuning.cc
    # getNetOverhead, since 2.18.1: 1 us on Intel x86 hosts, 2 us on AMD x86 hosts, 1 us otherwise): every step of
    # a ring that spans nodes, NVLink steps included, lasts at least 3 of them (comm.ring_latency)
    net_post_overhead_s: float = 1.0e-6
    # Device memory a training process holds before its first tensor (bytes); left out of a YAML: by kind,
    # DEFAULT_PROCESS_MEMORY_BYTES
    process_memory_bytes: int = 1 << 30

    def peak(self, precision: str) -> float:
        if precision not in self.peak_flops:
            raise ScalestudyError(f"device {self.name} does not support {precision} (has {', '.join(self.peak_flops)})")
        return self.peak_flops[precision]

    def host_link_bytes_per_s(self, gpus_per_node: int) -> float:
        """Host <-> device bytes/s each GPU gets when all `gpus_per_node` GPUs of a node copy at once (offload
        traffic: data-parallel ranks copy in lockstep): the GPUs behind one host link share it."""
        return self.pcie_bytes_per_s / max(1, min(self.gpus_per_host_link, gpus_per_node))

    def nvlink_group_fraction(self, size: int, gpus_per_node: int) -> float:
        """Share of intra_node_bytes_per_s a collective among `size` consecutive local ranks gets (the tensor-parallel
        groups: ranks k*size .. k*size+size-1). On a point-to-point mesh NCCL's rings among a group ride only the
        links between its members (P2P transport: direct NVLink, no routing through other GPUs), so the member with
        the fewest links to the rest bounds its group and the slowest group the step; 1 on switched nodes, or for a
        group that fills or leaves the node."""
        mesh = self.nvlink_peer_links.get(gpus_per_node)
        if not mesh or size < 2 or size >= gpus_per_node or gpus_per_node % size:
            return 1.0
        total = max(sum(row) for row in mesh)
        groups = [range(k, k + size) for k in range(0, gpus_per_node, size)]
        return min(sum(mesh[i][j] for j in g if j != i) for g in groups for i in g) / total


def scaled_device(device: DeviceSpec, speed: float) -> DeviceSpec:
    """`device` as a rank measured at `speed` x its figures: peak FLOP/s, memory bandwidth and CPU-Adam rate x speed,
    measured per-layer/step framework times / speed (links and memory unchanged). One object per (device, speed),
    so the cost model's per-device caches hold."""
    if speed == 1.0:
        return device
    key = (id(device), speed)
    hit = _SCALED.get(key)
    if hit is not None and hit[0] is device:
        return hit[1]
    out = replace(device, name=f"{device.name}@{speed:g}x",
                  peak_flops={k: v * speed for k, v in device.peak_flops.items()},
                  hbm_bytes_per_s=device.hbm_bytes_per_s * speed,
                  cpu_adam_params_per_s=device.cpu_adam_params_per_s * speed,
                  layer_overhead_s=device.layer_overhead_s / speed, step_overhead_s=device.step_overhead_s / speed,
                  microstep_overhead_s=device.microstep_overhead_s / speed,
                  engine_overhead_s={k: v / speed for k, v in device.engine_overhead_s.items()})
    _SCALED[key] = (device, out)
    return out


_SCALED: dict[tuple, tuple] = {}


# The most ranks one job can join: torchrun's c10d rendezvous and every rank's process group meet at one TCP store on
# node 0, which holds a socket per rank (a gloo rank also one per peer), and Linux caps a process's open files at
# fs.nr_open, 2^20 by default. (torch's ranks are C ints besides.) The largest clusters built hold ~2^17 GPUs.
MAX_WORLD_SIZE = 2**20
WORLD_SIZE_LIMIT = "the rendezvous store on node 0 holds a socket per rank; Linux caps a process at 2^20 open files"


@dataclass(frozen=True)
class DeviceGroup:
    """Consecutive ranks of one device type (a node group of a cluster YAML, or the ranks of one pipeline stage
    with a measured speed, `--stage-speeds`)."""

    device: DeviceSpec  # as the data describes it
    ranks: int
    speed: float = 1.0  # measured speed relative to the data's figures
    nodes: int = 0  # whole nodes (cluster YAML groups); 0 when the group is a number of ranks

    @property
    def effective(self) -> DeviceSpec:
        """The device as these ranks run it (`scaled_device`)."""
        return scaled_device(self.device, self.speed)

    def to_dict(self) -> dict:
        return {"device": self.device.name, "ranks": self.ranks, "nodes": self.nodes, "speed": self.speed}


@dataclass(frozen=True)
class ClusterSpec:
    device: DeviceSpec
    nodes: int = 1
    gpus_per_node: int = 1
    # Optional overrides of the device's interconnect (custom clusters): None keeps the device value.
    intra_node_bytes_per_s: float | None = None
    inter_node_bytes_per_s: float | None = None
    intra_node_latency_s: float | None = None
    inter_node_latency_s: float | None = None
    net_post_overhead_s: float | None = None  # the nodes' host CPU differs from the device YAML's (its docstring)
    name: str = field(default="")
    # Board power limit of every device (W, `nvidia-smi -pl`); None keeps the device's own (its YAML power_limit_w)
    power_limit_w: float | None = None
    # The nodes' host where it is not the one the device YAML describes (a cloud instance's CPUs, not a DGX's): its
    # DeepSpeed CPU-Adam rate per node (parameters/s, the device YAML's rule: ZeRO-Offload's 4.5e9 on a 48-core,
    # 256 GB/s host, scaled by the lesser of cores and memory bandwidth) and the NUMA nodes of its memory
    # (terms.numa_pinned_slowdown). None keeps the device's own.
    cpu_adam_params_per_s: float | None = None
    host_numa_nodes: int | None = None
    # Clusters mixing device types (or measured rank speeds): the ranks in order, group by group; () = every rank
    # is `device`. `device` is then the first group's (its precision, kind and links stand for the cluster's).
    groups: tuple[DeviceGroup, ...] = ()

    def __post_init__(self) -> None:
        if self.nodes < 1 or self.gpus_per_node < 1:
            raise ScalestudyError(f"nodes and gpus per node must be >= 1, got {self.nodes} and {self.gpus_per_node}")
        if self.world_size > MAX_WORLD_SIZE:
            raise ScalestudyError(f"{self.nodes} nodes x {self.gpus_per_node} devices = {self.world_size:,} ranks: "
                                  f"more than one training job can join ({MAX_WORLD_SIZE:,}; {WORLD_SIZE_LIMIT})")
        if self.power_limit_w is not None:
            if self.groups:
                raise ScalestudyError("power_limit_w of a cluster with groups: state it in each group's device YAML")
            watts = self.power_limit_w
            if isinstance(watts, bool) or not isinstance(watts, (int, float)) or not (math.isfinite(watts)
                                                                                       and watts > 0):
                raise ScalestudyError(f"power_limit_w must be a positive number of watts, got {self.power_limit_w!r}")
            object.__setattr__(self, "device", power_limited(self.device, float(self.power_limit_w)))
        host = _host_fields(self.cpu_adam_params_per_s, self.host_numa_nodes)
        if host:
            if self.groups:
                raise ScalestudyError("cpu_adam_params_per_s / host_numa_nodes of a cluster with groups: state them in "
                                      "each group's device YAML")
            object.__setattr__(self, "host_numa_nodes", host.get("host_numa_nodes"))
            object.__setattr__(self, "device", with_host(self.device, host))
        if self.groups and sum(g.ranks for g in self.groups) != self.world_size:
            raise ScalestudyError(f"the device groups hold {sum(g.ranks for g in self.groups)} ranks, the cluster "
                                  f"{self.world_size} ({self.nodes} nodes x {self.gpus_per_node})")

    @property
    def heterogeneous(self) -> bool:
        """True when ranks differ in device type or measured speed (then the cost model works stage by stage)."""
        return bool(self.groups)

    @property
    def label(self) -> str:
        """'16 x a100-80gb' or, mixing devices, '16 x a100-80gb + 16 x v100-32gb'."""
        return " + ".join(f"{g.ranks} x {g.effective.name}" for g in self.rank_groups())

    def rank_groups(self) -> tuple[DeviceGroup, ...]:
        """The device groups in rank order (one group of every rank for a single-device cluster)."""
        return self.groups or (DeviceGroup(self.device, self.world_size, 1.0, self.nodes),)

    @property
    def world_size(self) -> int:
        return self.nodes * self.gpus_per_node

    def _get(self, name: str) -> float:
        value = getattr(self, name)
        return getattr(self.device, name) if value is None else value

    @property
    def intra_bw(self) -> float:
        return self._get("intra_node_bytes_per_s")

    @property
    def inter_bw(self) -> float:
        return self._get("inter_node_bytes_per_s")

    @property
    def intra_latency(self) -> float:
        return self._get("intra_node_latency_s")

    @property
    def inter_latency(self) -> float:
        return self._get("inter_node_latency_s")

    @property
    def net_post_overhead(self) -> float:
        return self._get("net_post_overhead_s")

    def with_nodes(self, nodes: int) -> ClusterSpec:
        """The first `nodes` nodes (of a mixed cluster: its first groups, in the order written); all of them: this
        (frozen) cluster itself, so that the cost model's memos, keyed by the cluster's identity, serve every plan
        on it, not only the first."""
        if nodes == self.nodes:
            return self
        if not self.groups:
            return replace(self, nodes=nodes)
        left, kept = nodes * self.gpus_per_node, []
        for g in self.groups:
            if left <= 0:
                break
            take = min(g.ranks, left)
            kept.append(replace(g, ranks=take, nodes=take // self.gpus_per_node if g.nodes else 0))
            left -= take
        return _cluster_of_groups(replace(self, nodes=nodes, groups=()), tuple(kept))

    def to_dict(self) -> dict:
        d = asdict(replace(self, groups=()))
        d["device"] = self.device.name
        if self.groups:
            d["groups"] = [g.to_dict() for g in self.groups]
        else:
            d.pop("groups")
        return d


def _cluster_of_groups(base: ClusterSpec, groups: tuple[DeviceGroup, ...]) -> ClusterSpec:
    """`base` with these groups; one group of one device at speed 1 is a plain single-device cluster."""
    if all(g.device is groups[0].device and g.speed == 1.0 for g in groups):
        return replace(base, device=groups[0].device, groups=())
    return replace(base, device=groups[0].device, groups=groups)


def with_stage_speeds(cluster: ClusterSpec, speeds: tuple[float, ...] | list[float]) -> ClusterSpec:
    """`cluster` whose ranks run at measured relative speeds, one per pipeline stage (`--stage-speeds 2,1`): the
    ranks of stage i (the i-th of len(speeds) equal blocks in rank order) run at speeds[i] / max(speeds) of the
    device's figures (the fastest stage is the device as its data describes it)."""
    if not speeds:
        return cluster
    speeds = [float(v) for v in speeds]
    if any(not math.isfinite(v) or v <= 0 for v in speeds):
        raise ScalestudyError(f"--stage-speeds must be positive numbers, got {','.join(map(str, speeds))}")
    if cluster.groups:
        raise ScalestudyError("--stage-speeds and a cluster YAML with groups: give speeds in the YAML (group key "
                              "'speed') or use one of them")
    world, pp = cluster.world_size, len(speeds)
    if world % pp:
        raise ScalestudyError(f"--stage-speeds gives {pp} stage(s); the cluster's {world} ranks do not split into "
                              f"{pp} equal stages")
    top = max(speeds)
    groups = tuple(DeviceGroup(cluster.device, world // pp, v / top) for v in speeds)
    # A cluster YAML's power_limit_w / host fields are already in cluster.device (ClusterSpec.__post_init__): the
    # groups carry them, so the cluster-wide copies go (kept, they would be refused as set on a cluster of groups)
    folded = replace(cluster, power_limit_w=None, cpu_adam_params_per_s=None, host_numa_nodes=None)
    return _cluster_of_groups(folded, groups)


def _hardware_dir():
    return resources.files("scalestudy.specs") / "hardware"


def device_names() -> list[str]:
    return sorted(p.name[: -len(".yaml")] for p in _hardware_dir().iterdir() if p.name.endswith(".yaml"))


def _device_from_dict(data: dict, origin: str) -> DeviceSpec:
    known = {f.name for f in fields(DeviceSpec)}
    unknown = set(data) - known
    if unknown:
        raise ScalestudyError(f"{origin}: unknown device field(s) {', '.join(sorted(unknown))}"
                              f"{did_you_mean(unknown, known)}")
    missing = [f.name for f in fields(DeviceSpec)
               if f.name not in data and f.default is MISSING and f.default_factory is MISSING]
    if missing:
        raise ScalestudyError(f"{origin}: missing device field(s) {', '.join(missing)}")
    data = _numbers(data, origin)
    data.setdefault("process_memory_bytes", DEFAULT_PROCESS_MEMORY_BYTES[data.get("kind", "gpu")])
    _check_gemm_source(data, origin)
    for name in ("memory_bytes", "host_memory_bytes"):  # the memory checks divide by them and compare with them
        if name in data and not data[name] > 0:
            raise ScalestudyError(f"{origin}: {name} must be > 0, got {data[name]!r}")
        if name in data and not MIN_MEMORY_BYTES <= data[name] <= MAX_MEMORY_BYTES:
            raise ScalestudyError(f"{origin}: {name} must be between 1 MiB and 1 PiB ({MIN_MEMORY_BYTES} to "
                                  f"{MAX_MEMORY_BYTES} bytes), got {data[name]:.6g}")
    if data["process_memory_bytes"] >= data["memory_bytes"]:
        raise ScalestudyError(f"{origin}: process_memory_bytes {data['process_memory_bytes']} must be below "
                              f"memory_bytes {data['memory_bytes']} (it is held before the first tensor)")
    try:
        return DeviceSpec(**data)
    except TypeError as exc:
        raise ScalestudyError(f"{origin}: {exc}") from None


def _check_gemm_source(data: dict, origin: str) -> None:
    """How fast the device's GEMMs run must be stated: a known family (its fitted curve) or a measured
    matmul_efficiency table (or a measured ceiling, matmul_peak_fraction). A family without a curve, or nothing
    at all, used to fall back to 50% of peak without a word."""
    family, known = data.get("family") or "", gemm_families()
    ways = (f"name a family ({', '.join(known)}) or give matmul_efficiency [[dimension, fraction of peak], ...] "
            "measured on the device")
    if any(not d >= 1 for d, _ in data.get("matmul_efficiency") or ()):  # interpolated in log2(dimension)
        raise ScalestudyError(f"{origin}: matmul_efficiency dimensions must be >= 1 (matrix sizes), got "
                              f"{[d for d, _ in data['matmul_efficiency']]}")
    if family and family not in known:  # even beside a measured table: a misspelt die must not pass unnoticed
        raise ScalestudyError(f"{origin}: unknown GEMM family {family!r} (known: {', '.join(known)}): {ways}")
    if data.get("matmul_peak_fraction"):
        return
    if not family and not data.get("matmul_efficiency"):
        raise ScalestudyError(f"{origin}: no GEMM efficiency: {ways}")


@lru_cache(maxsize=1)
def gemm_families() -> tuple[str, ...]:
    """The `family` names of the shipped device YAMLs: the dies with a fitted GEMM curve (costmodel/
    calibration.yaml; tests/unit/test_specs.py checks every one has it). Read as data: specs sits below the cost
    model and imports none of it."""
    names = set()
    for path in _hardware_dir().iterdir():
        if path.name.endswith(".yaml"):
            family = (yaml.load(path.read_text(encoding="utf-8"), Loader=SAFE_LOADER) or {}).get("family")
            if isinstance(family, str) and family:
                names.add(family)
    return tuple(sorted(names))


_INT_FIELDS = ("memory_bytes", "host_memory_bytes", "process_memory_bytes")
# process_memory_bytes when a device YAML leaves it out: CUDA context + cuBLAS/NCCL workspaces on a GPU (~1 GiB is what
# nvidia-smi shows before the first tensor; not measured per device); interpreter + torch + transformers + DeepSpeed
# imports on a CPU rank (shared/FACTS.md: ~350 MB of RSS)
DEFAULT_PROCESS_MEMORY_BYTES = {"gpu": 1 << 30, "cpu": 350 * (1 << 20)}
MAX_TIME_FIELD_S = 3600.0  # a link latency or a per-layer / per-step overhead: microseconds to seconds
# a byte or parameter rate: HBM3e is ~8e12 B/s, NVLink ~9e11 B/s per device; 1e15 leaves 100x of headroom, and a
# 1e308 rate would price every transfer at zero seconds
MAX_RATE_PER_S = 1.0e15
# Physical bounds of the other device figures: a YAML outside them is a typo, not a device. Dense peak: B200's FP4
# is ~9e15 FLOP/s, 1e17 leaves 10x. Memory: whole bytes, 1 MiB (below it not even a CUDA context fits) to 1 PiB
# (a GPU holds <= 288 GB, a host <= ~32 TiB). Clocks and power of one device: < 100 GHz and < 100 kW (H100 SXM
# 1830 MHz / 700 W). A measured collective / GEMM figure against its model: at most 1e4 times it.
MAX_PEAK_FLOPS = 1.0e17
MIN_MEMORY_BYTES, MAX_MEMORY_BYTES = 1 << 20, 1 << 50
MAX_CLOCK_MHZ, MAX_POWER_W = 1.0e5, 1.0e5
MAX_MEASURED_RATIO = 1.0e4
# A fraction of peak (matmul_efficiency, matmul_peak_fraction), NVMe's share of PCIe or a group's relative speed
# divides a time: no device runs a GEMM, a disk or a rank at under a millionth of its figures, and 5e-324 gave an
# 'inf' step (share 'nan%') instead of a refusal
MIN_FRACTION = 1.0e-6
_TIME_FIELDS = ("intra_node_latency_s", "inter_node_latency_s", "layer_overhead_s", "step_overhead_s",
                "microstep_overhead_s", "net_post_overhead_s")
_RATE_FIELDS = ("hbm_bytes_per_s", "pcie_bytes_per_s", "intra_node_bytes_per_s", "inter_node_bytes_per_s",
                "cpu_adam_params_per_s")
_FLOAT_FIELDS = ("hbm_bytes_per_s", "pcie_bytes_per_s", "intra_node_bytes_per_s", "intra_node_latency_s",
                 "inter_node_bytes_per_s", "inter_node_latency_s", "cpu_adam_params_per_s", "layer_overhead_s",
                 "step_overhead_s", "microstep_overhead_s", "matmul_peak_fraction", "clock_mhz", "power_limit_w",
                 "nvme_fraction_of_pcie", "compute_slowdown_under_comm", "net_post_overhead_s")


def _num(value, name: str, origin: str) -> float:
    # YAML 1.1 (PyYAML) reads `312.0e12` (no exponent sign) as a string: convert, and reject what is not a number.
    try:
        if isinstance(value, bool):  # YAML true/false: float() would take them as 1/0
            raise TypeError
        out = number_value(value)
    except (TypeError, ValueError):
        raise ScalestudyError(f"{origin}: {name} must be a number, got {value!r}") from None
    except OverflowError:  # a YAML integer of hundreds of digits: beyond any float
        raise ScalestudyError(f"{origin}: {name} must be a finite number, got an integer of {len(str(value))} "
                              "digits") from None
    if not math.isfinite(out):
        raise ScalestudyError(f"{origin}: {name} must be a finite number, got {value!r}")
    if out < 0:
        raise ScalestudyError(f"{origin}: {name} must not be negative, got {value!r}")
    if name in _TIME_FIELDS and out > MAX_TIME_FIELD_S:  # summed over a step's hops and layers: floats overflow
        raise ScalestudyError(f"{origin}: {name} must be at most {MAX_TIME_FIELD_S:g} s (a link latency or an "
                              f"overhead per layer or step), got {value!r}")
    if name.endswith("_per_s") and out > MAX_RATE_PER_S:
        raise ScalestudyError(f"{origin}: {name} must be at most {MAX_RATE_PER_S:g} per second (HBM3e moves ~8e12 "
                              f"bytes/s), got {value!r}")
    return out


def _peer_links(value, origin: str) -> dict[int, list[list[float]]]:
    """{GPUs per node: symmetric n x n matrix of NVLink counts, zero diagonal, every GPU linked}."""
    bad = ScalestudyError(f"{origin}: nvlink_peer_links must map GPUs per node to a symmetric matrix of link counts "
                          f"(zero diagonal, every GPU with a link), got {value!r}")
    if not isinstance(value, dict):
        raise bad
    out = {}
    for n, rows in value.items():
        if isinstance(n, bool) or not isinstance(n, int) or n < 2 or not isinstance(rows, list) or len(rows) != n:
            raise bad
        if any(not isinstance(r, list) or len(r) != n for r in rows):
            raise bad
        m = [[_num(x, "nvlink_peer_links", origin) for x in r] for r in rows]  # non-negative finite numbers
        if any(m[i][i] or m[i][j] != m[j][i] for i in range(n) for j in range(n)) or not all(sum(r) for r in m):
            raise bad
        out[n] = m
    return out


def _numbers(data: dict, origin: str) -> dict:
    data = dict(data)
    for name in _INT_FIELDS:
        if name in data:
            value = _num(data[name], name, origin)
            if value != int(value):
                raise ScalestudyError(f"{origin}: {name} must be a whole number of bytes, got {data[name]!r}")
            data[name] = int(value)
    for name in _FLOAT_FIELDS:
        if name in data:
            data[name] = _num(data[name], name, origin)
    for name in _RATE_FIELDS:  # the cost model divides by these; below one per second a step time leaves floats
        if name in data and not data[name] >= 1:
            raise ScalestudyError(f"{origin}: {name} must be > 0 (>= 1 per second), got {data[name]!r}")
    if "nvme_fraction_of_pcie" in data and not MIN_FRACTION <= data["nvme_fraction_of_pcie"] <= 16:
        raise ScalestudyError(f"{origin}: nvme_fraction_of_pcie must be in [{MIN_FRACTION:g}, 16] (NVMe bandwidth / "
                              f"pcie_bytes_per_s), got {data['nvme_fraction_of_pcie']!r}")
    for name, meaning in (("gpus_per_host_link", "GPUs sharing one PCIe link to the host"),
                          ("host_numa_nodes", "NUMA nodes of the host's memory")):
        if name in data:
            count = _num(data[name], name, origin)
            if count != int(count) or not 1 <= count <= 64:
                raise ScalestudyError(f"{origin}: {name} must be a whole number in [1, 64] ({meaning}), "
                                      f"got {data[name]!r}")
            data[name] = int(count)
    if "compute_slowdown_under_comm" in data and not 0 <= data["compute_slowdown_under_comm"] <= 10:
        raise ScalestudyError(f"{origin}: compute_slowdown_under_comm must be in [0, 10] (0.189 = compute 18.9% "
                              f"slower beside a collective), got {data['compute_slowdown_under_comm']!r}")
    if "peak_flops" in data:
        if not isinstance(data["peak_flops"], dict) or not data["peak_flops"]:
            raise ScalestudyError(f"{origin}: peak_flops must map precisions to dense FLOP/s (e.g. {{bf16: 312.0e+12}}), "
                                  f"got {data['peak_flops']!r}")
        data["peak_flops"] = {str(k): _num(v, f"peak_flops.{k}", origin) for k, v in data["peak_flops"].items()}
        if not all(v >= 1 for v in data["peak_flops"].values()):  # one FLOP/s at least: times must stay finite
            raise ScalestudyError(f"{origin}: peak_flops must be > 0 (>= 1 FLOP/s), got {data['peak_flops']!r}")
        if not all(v <= MAX_PEAK_FLOPS for v in data["peak_flops"].values()):
            raise ScalestudyError(f"{origin}: peak_flops must be at most {MAX_PEAK_FLOPS:g} FLOP/s per device (B200's "
                                  f"dense FP4 is ~9e15), got {data['peak_flops']!r}")
    for name in ("engine_overhead_s", "collective_time_ratio"):
        if name in data:
            if not isinstance(data[name], dict):
                raise ScalestudyError(f"{origin}: {name} must be a mapping of numbers, got {data[name]!r}")
            data[name] = {str(k): _num(v, f"{name}.{k}", origin) for k, v in data[name].items()}
    if any(not v for v in data.get("collective_time_ratio", {}).values()):
        raise ScalestudyError(f"{origin}: collective_time_ratio values must be > 0, got {data['collective_time_ratio']}")
    if any(v > MAX_MEASURED_RATIO for v in data.get("collective_time_ratio", {}).values()):
        raise ScalestudyError(f"{origin}: collective_time_ratio values must be at most {MAX_MEASURED_RATIO:g} (measured "
                              f"/ modelled time), got {data['collective_time_ratio']}")
    if any(v > MAX_TIME_FIELD_S for v in data.get("engine_overhead_s", {}).values()):
        raise ScalestudyError(f"{origin}: engine_overhead_s values must be at most {MAX_TIME_FIELD_S:g} s (per sublayer "
                              f"per micro-batch), got {data['engine_overhead_s']}")
    if "nvlink_peer_links" in data:
        data["nvlink_peer_links"] = _peer_links(data["nvlink_peer_links"], origin)
    if "matmul_efficiency" in data:
        try:
            if not isinstance(data["matmul_efficiency"], list):
                raise TypeError
            data["matmul_efficiency"] = [[_num(d, "matmul_efficiency", origin), _num(f, "matmul_efficiency", origin)]
                                         for d, f in data["matmul_efficiency"]]
        except (TypeError, ValueError):
            raise ScalestudyError(f"{origin}: matmul_efficiency must be a list of [dimension, fraction] pairs") from None
        if any(not MIN_FRACTION <= f <= 1 for _, f in data["matmul_efficiency"]):  # refits cap profiles at 1
            raise ScalestudyError(f"{origin}: matmul_efficiency fractions of peak must be in [{MIN_FRACTION:g}, 1], "
                                  f"got {[f for _, f in data['matmul_efficiency']]}")
        data["matmul_efficiency"].sort()  # interpolated in ascending dimension
        dims = [d for d, _ in data["matmul_efficiency"]]
        if len(set(dims)) < len(dims):
            raise ScalestudyError(f"{origin}: matmul_efficiency gives two fractions for the same dimension: {dims}")
    for name, width in (("copy_bandwidth", 2), ("fresh_copy_bandwidth", 2), ("optimizer_step_s", 3)):
        if name in data:
            data[name] = _rows(data[name], width, name, origin)
    for name in ("copy_bandwidth", "fresh_copy_bandwidth"):
        if any(not (b > 0 and 0 < bw <= MAX_RATE_PER_S) for b, bw in data.get(name, [])):
            raise ScalestudyError(f"{origin}: {name} buffer sizes and rates must be > 0, rates at most "
                                  f"{MAX_RATE_PER_S:g} bytes/s")
    if any(not (t >= 1 and t == int(t) and p > 0 and 0 < s <= MAX_TIME_FIELD_S)
           for t, p, s in data.get("optimizer_step_s", [])):
        raise ScalestudyError(f"{origin}: optimizer_step_s rows are [tensors (a whole number >= 1), parameters > 0, "
                              f"seconds in (0, {MAX_TIME_FIELD_S:g}]]")
    if "collective_ratio_by_size" in data:
        curves = data["collective_ratio_by_size"]
        if not isinstance(curves, dict):
            raise ScalestudyError(f"{origin}: collective_ratio_by_size must map collectives to [bytes, ratio] rows")
        data["collective_ratio_by_size"] = {str(k): _rows(v, 2, f"collective_ratio_by_size.{k}", origin)
                                            for k, v in curves.items()}
        if any(not (b > 0 and 0 < r <= MAX_MEASURED_RATIO) for v in data["collective_ratio_by_size"].values()
               for b, r in v):
            raise ScalestudyError(f"{origin}: collective_ratio_by_size message sizes must be > 0 and ratios in (0, "
                                  f"{MAX_MEASURED_RATIO:g}]")
    if "flash_attention_fraction" in data:
        kernels = data["flash_attention_fraction"]
        if not isinstance(kernels, dict):
            raise ScalestudyError(f"{origin}: flash_attention_fraction must map kernels to fractions of peak")
        data["flash_attention_fraction"] = {str(k): _num(v, f"flash_attention_fraction.{k}", origin)
                                            for k, v in kernels.items()}
        if any(not 0 < f <= 1 for f in data["flash_attention_fraction"].values()):
            raise ScalestudyError(f"{origin}: flash_attention_fraction values are fractions of peak in (0, 1]")
    if "attention_kernel_fallback" in data:
        fallback = data["attention_kernel_fallback"]
        if not isinstance(fallback, dict) or any(not isinstance(v, str) or v in fallback for v in fallback.values()):
            raise ScalestudyError(f"{origin}: attention_kernel_fallback must map each kernel the device cannot run to "
                                  f"one it runs (e.g. {{fa2: mem-efficient}})")
        data["attention_kernel_fallback"] = {str(k): v for k, v in fallback.items()}
    if "unaligned_gemm_fraction" in data:  # [[alignment in elements (4, 2 or 1), fraction of the aligned rate], ...]
        rows = _rows(data["unaligned_gemm_fraction"], 2, "unaligned_gemm_fraction", origin)
        if any(a not in (1, 2, 4) or not 0 < f <= 1 for a, f in rows):
            raise ScalestudyError(f"{origin}: unaligned_gemm_fraction rows are [alignment 4, 2 or 1 (elements), "
                                  f"fraction of the aligned GEMM rate in (0, 1]], got {rows!r}")
        data["unaligned_gemm_fraction"] = rows
    _check_power(data, origin)
    if data.get("kind", "gpu") not in ("gpu", "cpu"):
        raise ScalestudyError(f"{origin}: kind must be gpu or cpu, got {data['kind']!r}")
    for name in ("name", "source", "family", "compute_capability"):
        if name in data and not isinstance(data[name], str):
            raise ScalestudyError(f"{origin}: {name} must be a string, got {data[name]!r}")
    _one_line_name(data.get("name", ""), origin)
    return data


def _one_line_name(name: str, origin: str) -> None:
    """A device's or cluster's name heads every table (estimate's title, plan's): an ESC in it cleared or recoloured
    the terminal, a newline split the title. As a study's and a config.json model's name."""
    if any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in name):
        raise ScalestudyError(f"{origin}: name {name!r} holds a control character (it heads every table): give one "
                              "line of text")


def _rows(value, width: int, name: str, origin: str) -> list[list[float]]:
    """A list of `width`-number rows (non-negative, finite), or a one-line error."""
    if not isinstance(value, list) or any(not isinstance(r, (list, tuple)) or len(r) != width for r in value):
        raise ScalestudyError(f"{origin}: {name} must be a list of {width}-number rows, got {value!r}")
    return [[_num(x, name, origin) for x in r] for r in value]


def _check_power(data: dict, origin: str) -> None:
    """The GEMM ceiling and power/clock fields (see DeviceSpec): consistent, or a one-line error."""
    if data.get("family") and not data.get("matmul_peak_fraction"):
        raise ScalestudyError(f"{origin}: family {data['family']!r} needs matmul_peak_fraction (measured maximum "
                              "achievable matmul FLOP/s / peak_flops); or leave family out, give matmul_efficiency")
    fraction = data.get("matmul_peak_fraction", 0.0)
    if fraction and not MIN_FRACTION <= fraction <= 1.0:  # 0: not given
        raise ScalestudyError(f"{origin}: matmul_peak_fraction is a fraction of peak_flops in [{MIN_FRACTION:g}, 1], "
                              f"got {fraction!r}")
    if "power_clock_mhz" in data:
        try:
            if not isinstance(data["power_clock_mhz"], list):
                raise TypeError
            data["power_clock_mhz"] = sorted([_num(w, "power_clock_mhz", origin), _num(f, "power_clock_mhz", origin)]
                                             for w, f in data["power_clock_mhz"])
        except (TypeError, ValueError):
            raise ScalestudyError(f"{origin}: power_clock_mhz must be a list of [watts, MHz] pairs") from None
        if any(not (0 < w <= MAX_POWER_W and 0 < f <= MAX_CLOCK_MHZ) for w, f in data["power_clock_mhz"]):
            raise ScalestudyError(f"{origin}: power_clock_mhz watts and MHz must be > 0, at most {MAX_POWER_W:g} W and "
                                  f"{MAX_CLOCK_MHZ:g} MHz")
        watts = [w for w, _ in data["power_clock_mhz"]]
        if len(set(watts)) < len(watts):
            raise ScalestudyError(f"{origin}: power_clock_mhz gives two clocks at the same watts: {watts}")
    for name, bound, unit in (("clock_mhz", MAX_CLOCK_MHZ, "MHz"), ("power_limit_w", MAX_POWER_W, "W")):
        if data.get(name, 0.0) > bound:
            raise ScalestudyError(f"{origin}: {name} must be at most {bound:g} {unit} for one device, got {data[name]!r}")
    if data.get("power_limit_w") and not (data.get("power_clock_mhz") and data.get("clock_mhz")):
        raise ScalestudyError(f"{origin}: power_limit_w needs clock_mhz and power_clock_mhz (the sustained clock at "
                              "board power limits) to say what the limit does")
    if data.get("power_limit_w"):
        _check_limit_covered(data["power_limit_w"], data["power_clock_mhz"], origin)


def _check_limit_covered(watts: float, power_clock_mhz: list, where: str) -> None:
    """Below the lowest listed [watts, MHz] point the sustained clock is unknown (the data do not reach the firmware's
    floor): refuse, rather than price it like that point. Above the top point the datasheet clock holds."""
    lowest = min(w for w, _ in power_clock_mhz)
    if watts < lowest:
        raise ScalestudyError(f"{where}: power_limit_w {watts:g} W is below the lowest limit the device's "
                              f"power_clock_mhz covers ({lowest:g} W): its clock there is unknown")


def power_limited(device: DeviceSpec, watts: float) -> DeviceSpec:
    """`device` run at a board power limit of `watts` (`nvidia-smi -pl`; a cluster YAML's power_limit_w). One object
    per (device, watts), so the cost model's per-device caches hold."""
    if watts == device.power_limit_w:
        return device
    if not (device.power_clock_mhz and device.clock_mhz):
        raise ScalestudyError(f"device {device.name} does not say how its clock follows the power limit "
                              "(clock_mhz, power_clock_mhz): power_limit_w cannot be applied")
    _check_limit_covered(watts, device.power_clock_mhz, f"device {device.name}")
    key = (id(device), watts)
    hit = _LIMITED.get(key)
    if hit is None or hit[0] is not device:
        hit = (device, replace(device, power_limit_w=watts))  # same name: a cluster's to_dict names its device
        _LIMITED[key] = hit
    return hit[1]


_LIMITED: dict[tuple, tuple] = {}


def _host_fields(cpu_adam_params_per_s, host_numa_nodes) -> dict:
    """A cluster's host overrides that are set, checked: a rate >= 1 parameter/s, a whole number of NUMA nodes."""
    host = {}
    if cpu_adam_params_per_s is not None:
        rate = cpu_adam_params_per_s
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not (math.isfinite(rate) and rate >= 1):
            raise ScalestudyError(f"cpu_adam_params_per_s must be a number of parameters/s >= 1, got {rate!r}")
        host["cpu_adam_params_per_s"] = float(rate)
    if host_numa_nodes is not None:
        nodes = host_numa_nodes
        if isinstance(nodes, bool) or not isinstance(nodes, (int, float)) or nodes != int(nodes) \
                or not 1 <= nodes <= 64:
            raise ScalestudyError(f"host_numa_nodes must be a whole number in [1, 64] (NUMA nodes of the host's "
                                  f"memory), got {nodes!r}")
        host["host_numa_nodes"] = int(nodes)
    return host


def with_host(device: DeviceSpec, host: dict) -> DeviceSpec:
    """`device` on another host (a cluster YAML's cpu_adam_params_per_s / host_numa_nodes). One object per
    (device, host), so the cost model's per-device caches hold."""
    key = (id(device), tuple(sorted(host.items())))
    hit = _HOSTED.get(key)
    if hit is None or hit[0] is not device:
        hit = (device, replace(device, **host))  # same name: a cluster's to_dict names its device
        _HOSTED[key] = hit
    return hit[1]


_HOSTED: dict[tuple, tuple] = {}


@lru_cache(maxsize=None)
def get_device(name: str) -> DeviceSpec:
    """A device by name (`a100-40gb`) or a path to a device YAML file."""
    key = name.lower()
    path = _hardware_dir() / f"{key}.yaml"
    if path.is_file():
        return _device_from_dict(yaml.load(path.read_text(), Loader=SAFE_LOADER), f"device {key}")
    if Path(name).is_file() or name.endswith((".yaml", ".yml")):
        data = read_yaml(name, "device file")
        if not isinstance(data, dict):
            raise ScalestudyError(f"device file {name}: must be a mapping of device fields")
        return _device_from_dict(data, name)
    raise ScalestudyError(f"unknown device {name!r}: choose from {', '.join(device_names())} or give a YAML path")


def _device_ref(value, origin: str, folder: Path | None = None) -> DeviceSpec:
    """A device by name, YAML path (also relative to `folder`, the cluster file's) or inline mapping of fields."""
    if isinstance(value, dict):
        return _device_from_dict(value, origin)
    if not isinstance(value, str) or not value.strip():
        raise ScalestudyError(f"{origin}: device must be a device name, a device YAML path or a mapping, got "
                              f"{value!r}")
    if folder is not None and value.endswith((".yaml", ".yml")) and not Path(value).is_file() \
            and (folder / value).is_file():
        value = str(folder / value)
    try:
        return get_device(value)
    except ScalestudyError as exc:
        raise ScalestudyError(f"{origin}: {exc}") from None


def _count(value, name: str, origin: str) -> int:
    # .inf / .nan first: int() of them raises (OverflowError, ValueError) instead of comparing
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or (isinstance(value, float) and not math.isfinite(value)) or value != int(value) or value < 1:
        raise ScalestudyError(f"{origin}: {name} must be a whole number >= 1, got {value!r}")
    return int(value)


GROUP_KEYS = ("device", "nodes", "gpus_per_node", "speed")


def _load_groups(data: dict, path: Path) -> ClusterSpec:
    """`groups:` of a cluster YAML (clusters mixing device types): validated, in the order written."""
    raw = data.pop("groups")
    if "device" in data:
        raise ScalestudyError(f"cluster file {path}: give either 'device' (one device type) or 'groups', not both")
    if "power_limit_w" in data:  # one group of one device would drop it without a word
        raise ScalestudyError(f"cluster file {path}: power_limit_w of a cluster with groups: state it in each "
                              "group's device YAML")
    if not isinstance(raw, list) or not raw:
        raise ScalestudyError(f"cluster file {path}: groups must be a non-empty list of {{device, nodes}} mappings")
    default_gpn = _count(data["gpus_per_node"], "gpus_per_node", str(path)) if "gpus_per_node" in data else None
    groups, gpns = [], set()
    for i, g in enumerate(raw, 1):
        where = f"cluster file {path}: group {i}"
        if not isinstance(g, dict) or "device" not in g or "nodes" not in g:
            raise ScalestudyError(f"{where}: needs a mapping with 'device' and 'nodes', got {g!r}")
        unknown = set(g) - set(GROUP_KEYS)
        if unknown:
            raise ScalestudyError(f"{where}: unknown key(s) {', '.join(sorted(map(str, unknown)))}"
                                  f"{did_you_mean(unknown, GROUP_KEYS)} (known: {', '.join(GROUP_KEYS)})")
        device = _device_ref(g["device"], where, path.parent)
        nodes = _count(g["nodes"], "nodes", where)
        if "gpus_per_node" in g:
            gpn = _count(g["gpus_per_node"], "gpus_per_node", where)
        elif default_gpn:
            gpn = default_gpn
        else:
            raise ScalestudyError(f"{where}: needs gpus_per_node (or a cluster-wide gpus_per_node)")
        speed = _num(g.get("speed", 1.0), "speed", where)
        if not MIN_FRACTION <= speed <= 1 / MIN_FRACTION:  # x the device's figures: 5e-324 priced an 'inf' step
            raise ScalestudyError(f"{where}: speed must be > 0 (a measured relative speed, {MIN_FRACTION:g} to "
                                  f"{1 / MIN_FRACTION:g}), got {g.get('speed')!r}")
        gpns.add(gpn)
        groups.append(DeviceGroup(device, nodes * gpn, speed, nodes))
    if len(gpns) > 1:
        raise ScalestudyError(f"cluster file {path}: every group needs the same gpus_per_node (tensor parallelism "
                              f"stays inside a node), got {', '.join(map(str, sorted(gpns)))}")
    kinds = {g.device.kind for g in groups}
    if len(kinds) > 1:
        raise ScalestudyError(f"cluster file {path}: groups mix device kinds ({', '.join(sorted(kinds))}); one "
                              "cluster is all GPUs or all CPU nodes")
    nodes = sum(g.nodes for g in groups)
    if "nodes" in data and _count(data["nodes"], "nodes", str(path)) != nodes:
        raise ScalestudyError(f"cluster file {path}: nodes is {data['nodes']} but the groups hold {nodes} nodes")
    data["nodes"], data["gpus_per_node"] = nodes, gpns.pop()
    cluster = _cluster_fields(data, path, groups[0].device)
    return _cluster_of_groups(cluster, tuple(groups))


def load_cluster(path: str | Path) -> ClusterSpec:
    """A cluster YAML: `device: a100-40gb`, `nodes`, `gpus_per_node`, optional bandwidth/latency overrides; or,
    mixing device types, `groups:` -- a list of {device, nodes, gpus_per_node, speed} in rank order (device: a name,
    a device YAML -- also relative to the cluster file's folder -- or a mapping; gpus_per_node the same in every
    group, or given once at the top; `speed` an optional measured relative speed)."""
    path = Path(path)
    data = read_yaml(path, "cluster file")
    if isinstance(data, dict) and "groups" in data:
        return _load_groups(dict(data), path)
    if not isinstance(data, dict) or "device" not in data:
        raise ScalestudyError(f"cluster file {path}: needs a mapping with at least 'device' (or 'groups')")
    device = data.pop("device")
    device = _device_from_dict(device, str(path)) if isinstance(device, dict) else get_device(str(device))
    return _cluster_fields(data, path, device)


def _cluster_fields(data: dict, path: Path, device: DeviceSpec) -> ClusterSpec:
    known = {f.name for f in fields(ClusterSpec)} - {"device", "groups"}
    unknown = set(data) - known
    if unknown:
        hint = did_you_mean(unknown, known | {'device', 'groups'}) or training_option_hint(unknown, "a cluster file")
        raise ScalestudyError(f"cluster file {path}: unknown field(s) {', '.join(sorted(map(str, unknown)))}{hint}"
                              f" (known: device or groups, {', '.join(sorted(known))})")
    for key in ("intra_node_bytes_per_s", "inter_node_bytes_per_s", "intra_node_latency_s", "inter_node_latency_s",
                "net_post_overhead_s", "power_limit_w", "cpu_adam_params_per_s", "host_numa_nodes"):
        if data.get(key) is not None:
            data[key] = _num(data[key], key, str(path))
            if key.endswith(("bytes_per_s", "_w")) and not data[key] > 0:
                raise ScalestudyError(f"{path}: {key} must be > 0, got {data[key]!r}")
            if key.endswith("bytes_per_s") and data[key] < 1:  # a step time must stay a finite number
                raise ScalestudyError(f"{path}: {key} must be >= 1 byte/s, got {data[key]!r}")
            if key == "power_limit_w" and data[key] > MAX_POWER_W:  # a board's limit, as in a device YAML
                raise ScalestudyError(f"{path}: power_limit_w must be at most {MAX_POWER_W:g} W for one device, got "
                                      f"{data[key]!r}")
    for key in ("nodes", "gpus_per_node"):
        if key in data:
            value = _num(data[key], key, str(path))
            if value != int(value):
                raise ScalestudyError(f"{path}: {key} must be a whole number, got {data[key]!r}")
            if value < 1:
                raise ScalestudyError(f"{path}: {key} must be >= 1, got {data[key]!r}")
            data[key] = int(value)
    try:  # ClusterSpec checks them again (published rows build it directly); here the message names the file
        _host_fields(data.get("cpu_adam_params_per_s"), data.get("host_numa_nodes"))
    except ScalestudyError as err:
        raise ScalestudyError(f"{path}: {err}") from None
    if not isinstance(data.get("name", ""), str):
        raise ScalestudyError(f"cluster file {path}: name must be a string, got {data['name']!r}")
    _one_line_name(data.get("name", ""), f"cluster file {path}")
    return ClusterSpec(device=device, name=data.pop("name", path.stem), **data)


def make_cluster(gpu: str = "a100-40gb", nodes: int = 1, gpus_per_node: int = 8, cluster_file: str | None = None
                 ) -> ClusterSpec:
    if cluster_file is not None:
        if not cluster_file.strip():  # '' is not "no cluster file": --gpu/--nodes would be used unasked
            raise ScalestudyError(f"--cluster needs a cluster YAML file name, got {cluster_file!r}")
        return load_cluster(cluster_file)
    for flag, value in (("--nodes", nodes), ("--gpus-per-node", gpus_per_node)):  # the flag typed, not the field
        if value < 1:
            raise ScalestudyError(f"{flag} must be >= 1, got {value}")
    return ClusterSpec(device=get_device(gpu), nodes=nodes, gpus_per_node=gpus_per_node, name=gpu)
