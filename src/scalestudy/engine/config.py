"""TrainConfig: everything one `scalestudy train` run needs, from a YAML file and/or command-line flags.

Flags override the YAML file, which overrides the defaults. The same object travels to every worker as a
YAML file (`DIR/train_config.yaml`), so the launcher and the workers can never disagree.
"""

from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import yaml

from scalestudy.errors import ScalestudyError
from scalestudy.specs.model import ModelSpec, get_model
from scalestudy.specs.strategy import Layout, Strategy, Workload, resolve_layout
from scalestudy.yamlfile import read_yaml

OBJECTIVES = ("span", "knowledge", "causal")
DECAYS = ("cosine", "linear", "constant")


@dataclass
class TrainConfig:
    # what to train
    model: str = "t5-tiny"
    objective: str = "span"
    data: list[str] = field(default_factory=list)  # empty -> the bundled corpus
    text_field: str = "text"
    lexicon: str | None = None
    tokenizer: str | None = None  # tokenizer.json; trained on the corpus when None
    vocab_size: int = 8192
    seq_len: int = 128
    target_len: int = 0  # decoder length (span/knowledge); 0 -> what span corruption of seq_len needs; causal: unused
    # how (one Strategy)
    engine: str = "ddp"
    zero: int = 0
    offload_optimizer: str = "none"
    offload_params: str = "none"
    tp: int = 1
    pp: int = 1
    precision: str = "fp32"
    recompute: str = "none"
    nproc: int = 1
    nnodes: int = 1
    micro_batch: int = 8
    global_batch: int = 0  # 0 -> micro_batch x dp (no gradient accumulation)
    # optimisation (AdamW, linear warm-up, then decay to min_lr_ratio x lr)
    steps: int = 100
    lr: float = 1e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 10
    decay: str = "cosine"
    weight_decay: float = 0.01
    beta1: float = 0.9
    beta2: float = 0.999
    grad_clip: float = 1.0  # 0 disables clipping
    dropout: float = 0.0  # T5 v1.1 / mT5 pre-training used none; also keeps engines bit-comparable
    seed: int = 1234
    # bookkeeping
    output: str = "runs/train"
    resume: bool = False
    save_every: int = 0  # 0 -> only the final checkpoint
    warmup: int = 2  # measured steps excluded from the summary medians
    progress: bool = True
    crash_after_step: int = 0  # tests only: die hard right after this step (after its checkpoint)

    # ---- construction ------------------------------------------------------------------------------------
    @classmethod
    def field_names(cls) -> set[str]:
        return {f.name for f in fields(cls)}

    @classmethod
    def from_dict(cls, data: dict) -> TrainConfig:
        data = {str(k).replace("-", "_"): v for k, v in (data or {}).items()}
        unknown = set(data) - cls.field_names()
        if unknown:
            raise ScalestudyError(f"unknown training option(s): {', '.join(sorted(unknown))}")
        if isinstance(data.get("data"), str):
            data["data"] = [data["data"]]
        try:
            cfg = cls(**data)
        except TypeError as exc:
            raise ScalestudyError(f"bad training options: {exc}") from None
        cfg._check_types()
        return cfg

    @classmethod
    def from_yaml(cls, path: str | Path) -> TrainConfig:
        return cls.from_dict(read_yaml_config(path))

    @classmethod
    def merged(cls, yaml_path: str | None, overrides: dict) -> TrainConfig:
        """Defaults <- YAML file <- explicit flags (None values in `overrides` mean 'not given')."""
        base = read_yaml_config(yaml_path) if yaml_path else {}
        base = {str(k).replace("-", "_"): v for k, v in base.items()}
        base.update({k: v for k, v in overrides.items() if v is not None})
        return cls.from_dict(base)

    def to_dict(self) -> dict:
        return asdict(self)

    def write_yaml(self, path: str | Path) -> None:
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(yaml.safe_dump(self.to_dict(), sort_keys=False), encoding="utf-8")
        tmp.replace(path)

    def replace(self, **changes) -> TrainConfig:
        return dataclasses.replace(self, **changes)

    # ---- validation --------------------------------------------------------------------------------------
    def _check_types(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type in ("int", int) and (not isinstance(value, int) or isinstance(value, bool)):
                raise ScalestudyError(f"option {f.name} must be an integer, got {value!r}")
            if f.type in ("float", float) and not isinstance(value, (int, float)):
                try:  # YAML 1.1 reads `1e-3` (no dot) as a string
                    setattr(self, f.name, float(value))
                except (TypeError, ValueError):
                    raise ScalestudyError(f"option {f.name} must be a number, got {value!r}") from None

    @property
    def world_size(self) -> int:
        return self.nproc * self.nnodes

    @property
    def is_causal(self) -> bool:
        return self.objective == "causal"

    def model_spec(self) -> ModelSpec:
        return get_model(self.model)

    def strategy(self) -> Strategy:
        return Strategy(engine=self.engine, zero=self.zero, offload_optimizer=self.offload_optimizer,
                        offload_params=self.offload_params, tp=self.tp, pp=self.pp, micro_batch=self.micro_batch,
                        recompute=self.recompute, precision=self.precision)

    def effective_global_batch(self) -> int:
        return self.global_batch or self.micro_batch * (self.world_size // (self.tp * self.pp))

    def workload(self) -> Workload:
        return Workload(global_batch=self.effective_global_batch(), seq_len=self.seq_len,
                        target_len=0 if self.is_causal else self.target_len)

    def validate(self, *, cuda: bool = False) -> tuple[ModelSpec, Strategy, Workload, Layout]:
        """Check everything that can be checked before any process starts; one-line ScalestudyError otherwise."""
        for name in ("steps", "nproc", "nnodes", "micro_batch", "seq_len"):
            if getattr(self, name) < 1:
                raise ScalestudyError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}")
        for name in ("global_batch", "target_len", "warmup_steps", "warmup", "save_every", "crash_after_step"):
            if getattr(self, name) < 0:
                raise ScalestudyError(f"--{name.replace('_', '-')} must be >= 0, got {getattr(self, name)}")
        if self.objective not in OBJECTIVES:
            raise ScalestudyError(f"unknown objective {self.objective!r} (choose from {', '.join(OBJECTIVES)})")
        if self.decay not in DECAYS:
            raise ScalestudyError(f"unknown decay {self.decay!r} (choose from {', '.join(DECAYS)})")
        if self.lr <= 0 or not 0 <= self.min_lr_ratio <= 1:
            raise ScalestudyError("--lr must be > 0 and min_lr_ratio within [0, 1]")
        spec = self.model_spec()
        strategy = self.strategy()
        if spec.is_encoder_decoder and self.is_causal:
            raise ScalestudyError(f"model {spec.name} is encoder-decoder: use --objective span or knowledge")
        if not spec.is_encoder_decoder and not self.is_causal:
            raise ScalestudyError(f"model {spec.name} is decoder-only: use --objective causal")
        if strategy.tp > 1 or strategy.pp > 1:
            raise ScalestudyError("tp/pp > 1: the Hugging Face models trained here have no tensor/pipeline-parallel "
                                  "implementation (the cost model and planner still reason about them); use tp=pp=1")
        if strategy.recompute == "selective":
            raise ScalestudyError("--recompute selective is not available for Hugging Face models "
                                  "(they checkpoint whole layers): use none or full")
        if strategy.offload_optimizer == "nvme" or strategy.offload_params == "nvme":
            raise ScalestudyError("NVMe offload is not supported by `scalestudy train`: use --offload-optimizer cpu")
        if not cuda and strategy.precision != "fp32":
            # Decision: refuse rather than silently fall back: a bf16 run on these CPUs is ~100x slower than fp32
            # (no native bf16/fp16 matmul), so its throughput numbers would be meaningless.
            raise ScalestudyError(f"--precision {strategy.precision} needs a GPU (CPUs here have no native "
                                  f"{strategy.precision} matmul, ~100x slower than fp32): use --precision fp32")
        if strategy.precision == "fp16" and strategy.engine != "deepspeed":
            raise ScalestudyError("fp16 needs loss scaling, which scalestudy runs through DeepSpeed: use --engine "
                                  "deepspeed, or bf16 with ddp/fsdp")
        if self.global_batch and self.global_batch < self.micro_batch:
            raise ScalestudyError(f"--global-batch {self.global_batch} is smaller than --micro-batch {self.micro_batch}")
        layout = resolve_layout(strategy, self.world_size, self.effective_global_batch())
        return spec, strategy, self.workload(), layout


def read_yaml_config(path: str | Path) -> dict:
    data = read_yaml(path, "config file")
    if not isinstance(data, dict):
        raise ScalestudyError(f"config file {path} must hold a mapping of option: value")
    return data
