"""Devices and clusters. Device numbers are data (`hardware/*.yaml`), not code.

Conventions: bytes are bytes, bandwidths are bytes/s in one direction per device, peaks are dense FLOP/s.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields, replace
from functools import lru_cache
from importlib import resources
from pathlib import Path

import yaml

from scalestudy.errors import ScalestudyError
from scalestudy.yamlfile import read_yaml


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
    # GEMM-efficiency family in costmodel/calibration.yaml (fitted curve); "" = use `matmul_efficiency` (measured)
    family: str = ""
    # Measured framework overheads (CPU profiles, costmodel/cpu_profile.py); 0 = none measured. GPUs use the
    # fitted per-layer constant of costmodel/calibration.yaml instead.
    layer_overhead_s: float = 0.0  # per sublayer (attention / FFN / cross-attention) per forward pass
    step_overhead_s: float = 0.0  # per optimizer step (loop, zero_grad, optimizer dispatch)
    microstep_overhead_s: float = 0.0  # per micro-batch (batch assembly, embeddings, loss, autograd set-up)
    # per engine ("deepspeed-3", "fsdp-2", ...): its own cost above plain PyTorch, seconds per sublayer per micro-batch
    engine_overhead_s: dict[str, float] = field(default_factory=dict)

    def peak(self, precision: str) -> float:
        if precision not in self.peak_flops:
            raise ScalestudyError(f"device {self.name} does not support {precision} (has {', '.join(self.peak_flops)})")
        return self.peak_flops[precision]


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
    name: str = field(default="")

    def __post_init__(self) -> None:
        if self.nodes < 1 or self.gpus_per_node < 1:
            raise ScalestudyError(f"nodes and gpus per node must be >= 1, got {self.nodes} and {self.gpus_per_node}")

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

    def with_nodes(self, nodes: int) -> ClusterSpec:
        return replace(self, nodes=nodes)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["device"] = self.device.name
        return d


def _hardware_dir():
    return resources.files("scalestudy.specs") / "hardware"


def device_names() -> list[str]:
    return sorted(p.name[: -len(".yaml")] for p in _hardware_dir().iterdir() if p.name.endswith(".yaml"))


def _device_from_dict(data: dict, origin: str) -> DeviceSpec:
    known = {f.name for f in fields(DeviceSpec)}
    unknown = set(data) - known
    if unknown:
        raise ScalestudyError(f"{origin}: unknown device field(s) {', '.join(sorted(unknown))}")
    try:
        return DeviceSpec(**_numbers(data, origin))
    except TypeError as exc:
        raise ScalestudyError(f"{origin}: {exc}") from None


_INT_FIELDS = ("memory_bytes", "host_memory_bytes")
_FLOAT_FIELDS = ("hbm_bytes_per_s", "pcie_bytes_per_s", "intra_node_bytes_per_s", "intra_node_latency_s",
                 "inter_node_bytes_per_s", "inter_node_latency_s", "cpu_adam_params_per_s", "layer_overhead_s",
                 "step_overhead_s", "microstep_overhead_s")


def _num(value, name: str, origin: str) -> float:
    # YAML 1.1 (PyYAML) reads `312.0e12` (no exponent sign) as a string: convert, and reject what is not a number.
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise ScalestudyError(f"{origin}: {name} must be a number, got {value!r}") from None
    if not math.isfinite(out):
        raise ScalestudyError(f"{origin}: {name} must be a finite number, got {value!r}")
    if out < 0:
        raise ScalestudyError(f"{origin}: {name} must not be negative, got {value!r}")
    return out


def _numbers(data: dict, origin: str) -> dict:
    data = dict(data)
    for name in _INT_FIELDS:
        if name in data:
            data[name] = int(_num(data[name], name, origin))
    for name in _FLOAT_FIELDS:
        if name in data:
            data[name] = _num(data[name], name, origin)
    if isinstance(data.get("peak_flops"), dict):
        data["peak_flops"] = {str(k): _num(v, f"peak_flops.{k}", origin) for k, v in data["peak_flops"].items()}
    if isinstance(data.get("engine_overhead_s"), dict):
        data["engine_overhead_s"] = {str(k): _num(v, f"engine_overhead_s.{k}", origin)
                                     for k, v in data["engine_overhead_s"].items()}
    if isinstance(data.get("matmul_efficiency"), list):
        try:
            data["matmul_efficiency"] = [[_num(d, "matmul_efficiency", origin), _num(f, "matmul_efficiency", origin)]
                                         for d, f in data["matmul_efficiency"]]
        except (TypeError, ValueError):
            raise ScalestudyError(f"{origin}: matmul_efficiency must be a list of [dimension, fraction] pairs") from None
    return data


@lru_cache(maxsize=None)
def get_device(name: str) -> DeviceSpec:
    """A device by name (`a100-40gb`) or a path to a device YAML file."""
    key = name.lower()
    path = _hardware_dir() / f"{key}.yaml"
    if path.is_file():
        return _device_from_dict(yaml.safe_load(path.read_text()), f"device {key}")
    if Path(name).is_file() or name.endswith((".yaml", ".yml")):
        data = read_yaml(name, "device file")
        if not isinstance(data, dict):
            raise ScalestudyError(f"device file {name}: must be a mapping of device fields")
        return _device_from_dict(data, name)
    raise ScalestudyError(f"unknown device {name!r}: choose from {', '.join(device_names())} or give a YAML path")


def load_cluster(path: str | Path) -> ClusterSpec:
    """A cluster YAML: `device: a100-40gb`, `nodes`, `gpus_per_node`, optional bandwidth/latency overrides."""
    path = Path(path)
    data = read_yaml(path, "cluster file")
    if not isinstance(data, dict) or "device" not in data:
        raise ScalestudyError(f"cluster file {path}: needs a mapping with at least 'device'")
    device = data.pop("device")
    device = _device_from_dict(device, str(path)) if isinstance(device, dict) else get_device(str(device))
    known = {f.name for f in fields(ClusterSpec)} - {"device"}
    unknown = set(data) - known
    if unknown:
        raise ScalestudyError(f"cluster file {path}: unknown field(s) {', '.join(sorted(unknown))}")
    for key in ("intra_node_bytes_per_s", "inter_node_bytes_per_s", "intra_node_latency_s", "inter_node_latency_s"):
        if data.get(key) is not None:
            data[key] = _num(data[key], key, str(path))
    for key in ("nodes", "gpus_per_node"):
        if key in data:
            data[key] = int(_num(data[key], key, str(path)))
    return ClusterSpec(device=device, name=data.pop("name", path.stem), **data)


def make_cluster(gpu: str = "a100-40gb", nodes: int = 1, gpus_per_node: int = 8, cluster_file: str | None = None
                 ) -> ClusterSpec:
    if cluster_file:
        return load_cluster(cluster_file)
    return ClusterSpec(device=get_device(gpu), nodes=nodes, gpus_per_node=gpus_per_node, name=gpu)
