"""Implementation assumptions of the cost model that are not part of a Strategy (kernels, overlap, buckets).

Defaults describe how scalestudy's own engines run (DeepSpeed / FSDP2 / DDP over Hugging Face models); published
validation rows override them with what the paper's software did (e.g. Megatron-LM 2021: no sequence
parallelism, gradient all-reduce after the backward pass, unfused softmax attention).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

from scalestudy.errors import ScalestudyError

Attention = Literal["auto", "eager", "flash"]


@dataclass(frozen=True)
class CostOptions:
    # "eager" stores the softmax probabilities (5*a*s^2 bytes per layer in 16-bit, Korthikanti et al.) and moves
    # them through memory; "flash" (FlashAttention / memory-efficient SDPA) keeps neither. "auto" = flash:
    # Transformers 5 runs T5/mT5 (relative position bias passed as an additive mask), GPT-2 and Llama through
    # torch SDPA by default (`_supports_sdpa = True`).
    attention: Attention = "auto"
    sequence_parallel: bool = True  # Megatron sequence parallelism whenever tp > 1 (Korthikanti et al. 2022)
    overlap_grad_comm: bool = True  # data-parallel gradient reduction overlaps the backward pass (buckets)
    # DeepSpeed defaults (docs: zero config): bucket sizes in elements.
    reduce_bucket_elems: float = 5e8
    allgather_bucket_elems: float = 5e8
    stage3_prefetch_elems: float = 5e7

    def __post_init__(self) -> None:
        if self.attention not in ("auto", "eager", "flash"):
            raise ScalestudyError(f"unknown attention kernel {self.attention!r} (auto, eager, flash)")

    def to_dict(self) -> dict:
        return asdict(self)


DEFAULT_OPTIONS = CostOptions()


def uses_flash(options: CostOptions, family: str) -> bool:
    return options.attention != "eager"
