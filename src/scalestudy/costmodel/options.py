"""Engine implementation constants of the cost model that are not part of a Strategy (bucket sizes).

What a run's software does (attention kernel, sequence parallelism, overlapped gradient reduction, pipeline
schedule) is part of the Strategy (specs/strategy.py), so `estimate`, `plan` and the published validation rows
share one vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scalestudy.costmodel.engines import engine_comm


def _deepspeed(name: str):
    """Default of a CostOptions field: the engines.yaml deepspeed row's value (one source for time and memory)."""
    return lambda: getattr(engine_comm("deepspeed"), name)


@dataclass(frozen=True)
class CostOptions:
    # DeepSpeed's bucket sizes in elements (its zero config defaults, engines.yaml deepspeed), for the memory terms
    reduce_bucket_elems: float = field(default_factory=_deepspeed("reduce_bucket_elems"))
    allgather_bucket_elems: float = field(default_factory=_deepspeed("allgather_bucket_elems"))
    stage3_prefetch_elems: float = field(default_factory=_deepspeed("stage3_prefetch_elems"))

    def to_dict(self) -> dict:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}  # plain floats: no asdict deep copy


DEFAULT_OPTIONS = CostOptions()
