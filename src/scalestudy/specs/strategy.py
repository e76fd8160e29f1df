"""Strategy and Workload: the one vocabulary shared by the cost model, planner, engine and study store.

If the planner can name a Strategy, `train` can run it (or says clearly why not) and the store can record it.

Engine x zero semantics:
- deepspeed: zero 0-3 as DeepSpeed ZeRO stages; optimizer offload (stage >= 1), parameter offload (stage 3).
- ddp:       zero 0 = DistributedDataParallel; zero 1 = DDP + torch ZeroRedundancyOptimizer.
- fsdp:      FSDP2 `fully_shard`; zero 3 = reshard after forward (ZeRO-3-like),
             zero 2 = keep parameters gathered between forward and backward (ZeRO-2-like).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Literal

from scalestudy.errors import ScalestudyError

Engine = Literal["deepspeed", "fsdp", "ddp"]
Offload = Literal["none", "cpu", "nvme"]
Recompute = Literal["none", "selective", "full"]
Precision = Literal["bf16", "fp16", "fp32"]

ENGINES = ("deepspeed", "fsdp", "ddp")
OFFLOADS = ("none", "cpu", "nvme")
RECOMPUTES = ("none", "selective", "full")
PRECISIONS = ("bf16", "fp16", "fp32")
ZERO_STAGES = {"deepspeed": (0, 1, 2, 3), "ddp": (0, 1), "fsdp": (2, 3)}


@dataclass(frozen=True)
class Strategy:
    """How to parallelise one training run. Data-parallel degree and accumulation are derived (see `Layout`)."""

    engine: Engine = "deepspeed"
    zero: int = 0
    offload_optimizer: Offload = "none"
    offload_params: Offload = "none"
    tp: int = 1
    pp: int = 1
    micro_batch: int = 1
    recompute: Recompute = "none"
    precision: Precision = "bf16"

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise ScalestudyError(f"unknown engine {self.engine!r} (choose from {', '.join(ENGINES)})")
        if self.zero not in ZERO_STAGES[self.engine]:
            allowed = ", ".join(map(str, ZERO_STAGES[self.engine]))
            raise ScalestudyError(f"engine {self.engine} supports zero stage {allowed}, not {self.zero}")
        for name, value, allowed in (
            ("offload_optimizer", self.offload_optimizer, OFFLOADS),
            ("offload_params", self.offload_params, OFFLOADS),
            ("recompute", self.recompute, RECOMPUTES),
            ("precision", self.precision, PRECISIONS),
        ):
            if value not in allowed:
                raise ScalestudyError(f"unknown {name} {value!r} (choose from {', '.join(allowed)})")
        for name in ("tp", "pp", "micro_batch"):
            if getattr(self, name) < 1:
                raise ScalestudyError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.offload_optimizer != "none" and not (self.engine == "deepspeed" and self.zero >= 1):
            raise ScalestudyError("optimizer offload needs DeepSpeed ZeRO stage 1, 2 or 3")
        if self.offload_params != "none" and not (self.engine == "deepspeed" and self.zero == 3):
            raise ScalestudyError("parameter offload needs DeepSpeed ZeRO stage 3")
        if self.pp > 1 and self.engine == "deepspeed" and self.zero >= 2:
            raise ScalestudyError("pipeline parallelism is incompatible with ZeRO stage 2/3 (DeepSpeed allows 0-1)")

    @property
    def label(self) -> str:
        """Short human name, e.g. 'ds-z2+optcpu tp1 pp1 mb4 bf16'."""
        base = {"deepspeed": f"ds-z{self.zero}", "ddp": "ddp" if self.zero == 0 else "ddp-zero1",
                "fsdp": f"fsdp-z{self.zero}"}[self.engine]
        if self.offload_optimizer != "none":
            base += f"+opt{self.offload_optimizer}"
        if self.offload_params != "none":
            base += f"+param{self.offload_params}"
        rc = "" if self.recompute == "none" else f" rc-{self.recompute}"
        return f"{base} tp{self.tp} pp{self.pp} mb{self.micro_batch}{rc} {self.precision}"

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Strategy:
        unknown = set(data) - set(cls.__dataclass_fields__)
        if unknown:
            raise ScalestudyError(f"unknown strategy field(s): {', '.join(sorted(unknown))}")
        return cls(**data)

    def replace(self, **changes) -> Strategy:
        return replace(self, **changes)


@dataclass(frozen=True)
class Workload:
    """What is trained: global batch in sequences, encoder (or decoder-only) length and decoder target length."""

    global_batch: int
    seq_len: int
    target_len: int = 0  # decoder length of encoder-decoder models; 0 for decoder-only
    train_tokens: float = 0.0  # optional: tokens to train, for time-to-train and device-hours

    def __post_init__(self) -> None:
        if self.global_batch < 1:
            raise ScalestudyError(f"global batch must be >= 1, got {self.global_batch}")
        if self.seq_len < 1:
            raise ScalestudyError(f"sequence length must be >= 1, got {self.seq_len}")
        if self.target_len < 0 or self.train_tokens < 0:
            raise ScalestudyError("target length and train tokens must not be negative")

    @property
    def tokens_per_step(self) -> int:
        """Tokens per optimizer step, counting encoder input and decoder target tokens."""
        return self.global_batch * (self.seq_len + self.target_len)


@dataclass(frozen=True)
class Layout:
    """The degrees a Strategy takes on a given world size."""

    world_size: int
    dp: int
    tp: int
    pp: int
    grad_accum: int


def resolve_layout(strategy: Strategy, world_size: int, global_batch: int, *, gpus_per_node: int = 0,
                   num_heads: int = 0, num_layers: int = 0) -> Layout:
    """Check the degrees divide and return dp and gradient accumulation; raise ScalestudyError otherwise."""
    if world_size < 1:
        raise ScalestudyError(f"world size must be >= 1, got {world_size}")
    model_par = strategy.tp * strategy.pp
    if world_size % model_par:
        raise ScalestudyError(f"world size {world_size} is not divisible by tp*pp = {strategy.tp}*{strategy.pp}")
    if gpus_per_node and strategy.tp > gpus_per_node:
        raise ScalestudyError(f"tp {strategy.tp} exceeds {gpus_per_node} devices per node (tp stays inside a node)")
    if gpus_per_node and gpus_per_node % strategy.tp:
        raise ScalestudyError(f"tp {strategy.tp} does not divide {gpus_per_node} devices per node")
    if num_heads and num_heads % strategy.tp:
        raise ScalestudyError(f"{num_heads} attention heads are not divisible by tp {strategy.tp}")
    if num_layers and num_layers % strategy.pp:
        raise ScalestudyError(f"{num_layers} layers are not divisible by pp {strategy.pp}")
    dp = world_size // model_par
    per_step = strategy.micro_batch * dp
    if global_batch % per_step:
        raise ScalestudyError(
            f"global batch {global_batch} is not divisible by micro-batch {strategy.micro_batch} x dp {dp}"
        )
    return Layout(world_size=world_size, dp=dp, tp=strategy.tp, pp=strategy.pp, grad_accum=global_batch // per_step)
