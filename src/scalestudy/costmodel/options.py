"""Engine implementation constants of the cost model that are not part of a Strategy (bucket sizes).

What a run's software does (attention kernel, sequence parallelism, overlapped gradient reduction, pipeline
schedule) is part of the Strategy (specs/strategy.py), so `estimate`, `plan` and the published validation rows
share one vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CostOptions:
    # DeepSpeed defaults (docs: zero config): bucket sizes in elements.
    reduce_bucket_elems: float = 5e8
    allgather_bucket_elems: float = 5e8
    stage3_prefetch_elems: float = 5e7

    def to_dict(self) -> dict:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}  # plain floats: no asdict deep copy


DEFAULT_OPTIONS = CostOptions()
