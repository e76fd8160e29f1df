"""A study's results prepared for plots and findings: OK trials grouped into series (model x strategy x shape).

A *series* is one strategy label (`ds-z2`, `fsdp-z3`, `ddp`, with offload) plus whichever of micro-batch, global
batch, precision and sequence length vary in the study; trials of the same model, series and world size (e.g. a
learning-rate sweep) are summarised by their median.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path

from scalestudy.study.store import Store

SHAPE_AXES = (("micro_batch", "mb"), ("global_batch", "gb"), ("precision", ""), ("seq_len", "seq"))
MEMORY_CONVENTION = ("peak memory per rank as `scalestudy train` measures it (GPU: torch.cuda.max_memory_allocated; "
                     "CPU: bytes of the rank's parameter, gradient and optimizer-state shards)")


@dataclass
class StudyData:
    name: str
    directory: Path
    trials: list[dict]  # every finished trial (all statuses)
    metrics: dict[str, list[dict]]  # trial_id -> per-step rows
    env: dict
    planned: int  # trials in the spec
    varying: list[str] = field(default_factory=list)

    @property
    def ok(self) -> list[dict]:
        return [t for t in self.trials if t["status"] == "OK"]

    @property
    def failed(self) -> list[dict]:
        return [t for t in self.trials if t["status"] != "OK"]

    def models(self) -> list[str]:
        """Models by parameter count (then name)."""
        seen = {t["model"]: t.get("params") or 0 for t in self.trials}
        return sorted(seen, key=lambda m: (seen[m], m))

    def series(self, t: dict) -> str:
        label = t["strategy"].split(" ")[0]
        extras = [f"{prefix}{t[k]}" for k, prefix in SHAPE_AXES if k in self.varying]
        return " ".join([label, *extras])

    def points(self, model: str, value: str) -> dict[str, dict[int, float]]:
        """{series: {world_size: median value}} over the OK trials of one model with a value."""
        groups: dict[str, dict[int, list[float]]] = {}
        for t in self.ok:
            if t["model"] == model and t.get(value) is not None:
                groups.setdefault(self.series(t), {}).setdefault(t["world_size"], []).append(t[value])
        return {s: {ws: statistics.median(v) for ws, v in sorted(d.items())} for s, d in sorted(groups.items())}


def load(directory: str | Path) -> StudyData:
    directory = Path(directory)
    with Store(directory, create=False) as store:
        trials = store.trials()
        metrics: dict[str, list[dict]] = {}
        for m in store.metrics():
            metrics.setdefault(m["trial_id"], []).append(m)
        data = StudyData(name=store.get_meta("name", directory.name), directory=directory, trials=trials,
                         metrics=metrics, env=store.get_meta("env", {}) or {},
                         planned=len(store.get_meta("trial_ids", []) or []))
    for t in data.trials:
        t["pred_mem_bytes"] = comparable_prediction(t)
    data.varying = [k for k, _ in SHAPE_AXES if len({t[k] for t in data.ok}) > 1]
    return data


def comparable_prediction(t: dict) -> float | None:
    """The predicted bytes that match what was measured: on CPU `scalestudy train` counts the parameter, gradient
    and optimizer-state shards (-> predicted model states); on GPU the allocator peak (-> predicted total)."""
    convention = (t.get("memory_convention") or "").lower()
    if convention and "cuda" not in convention and t.get("pred_model_states_bytes"):
        return t["pred_model_states_bytes"]
    return t.get("pred_per_device_bytes")
