"""A study's results prepared for plots and findings: OK trials grouped into series (model x strategy x shape).

A *series* is one strategy label (`ds-z2`, `fsdp-z3`, `ddp`, with offload) plus whichever of micro-batch, global
batch, precision and sequence length vary in the study; trials of the same model, series and world size (e.g. a
learning-rate sweep) are summarised by their median.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from scalestudy.errors import ScalestudyError
from scalestudy.study.store import TRIAL_COLUMNS, Store

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
    # Gaps of a store not written (whole) by `scalestudy study run`, said in the report instead of a traceback:
    left_out: list[tuple[str, list[str]]] = field(default_factory=list)  # OK trials without PLACED_BY fields
    unreadable: list[tuple[str, str, object]] = field(default_factory=list)  # (trial, column, value) shown as "-"
    plot_failures: list[str] = field(default_factory=list)  # plots the values did not allow (report/plots.py)

    def gaps(self) -> list[str]:
        """Sentences naming what the report leaves out of a store whose rows lack fields (none for a whole one)."""
        out = []
        if self.left_out:
            fields_ = sorted({f for _, missing in self.left_out for f in missing}, key=PLACED_BY.index)
            out.append(f"{len(self.left_out)} OK trial(s) are left out of the tables and plots: the store gives no "
                       f"{'/'.join(fields_)} for them ({_ids(i for i, _ in self.left_out)}).")
        if self.unreadable:
            shown = ", ".join(f"{c} of {i} ({v!r})" for i, c, v in self.unreadable[:4])
            more = f" and {len(self.unreadable) - 4} more" if len(self.unreadable) > 4 else ""
            out.append(f"{len(self.unreadable)} stored value(s) are not usable numbers and show as '-': "
                       f"{shown}{more}.")
        if self.plot_failures:
            out.append(f"Plots left out (the stored values could not be drawn): {'; '.join(self.plot_failures)}.")
        return out

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


# What places an OK trial in the report (its model panel, its series, its world size on the x axis).
PLACED_BY = ("model", "strategy", "world_size")
NUMERIC = tuple(k for k, kind in TRIAL_COLUMNS.items() if kind.split()[0] in ("INTEGER", "REAL"))
# Measurements the report divides by or compares as rates: a zero or negative one is not a measurement.
POSITIVE = ("world_size", "step_s", "tokens_per_s", "samples_per_s", "peak_mem_bytes", "pred_step_s",
            "pred_tokens_per_s", "pred_per_device_bytes", "pred_model_states_bytes")


def load(directory: str | Path) -> StudyData:
    """The store's trials and per-step metrics, checked field by field: a store whose rows lack fields or hold
    values of the wrong type (written by another tool, edited, damaged) is reported with its gaps said."""
    directory = Path(directory)
    with Store(directory, create=False) as store:
        trials = store.trials()
        metrics: dict[str, list[dict]] = {}
        for m in store.metrics():
            if _number(m.get("step")) is not None:  # a row without a step has no place on a curve
                m["loss"] = _number(m.get("loss"))
                metrics.setdefault(m["trial_id"], []).append(m)
        name, env, ids = store.get_meta("name", directory.name), store.get_meta("env", {}), \
            store.get_meta("trial_ids", [])
    data = StudyData(name=str(name or directory.name), directory=directory, trials=[], metrics=metrics,
                     env=env if isinstance(env, dict) else {}, planned=len(ids) if isinstance(ids, list) else 0)
    for t in trials:
        _clean(t, data)
        missing = [k for k in PLACED_BY if t.get(k) is None] if t["status"] == "OK" else []
        if missing:
            data.left_out.append((t["trial_id"], missing))
            continue
        t["pred_mem_bytes"] = comparable_prediction(t)
        t["unqueued_step_s"] = unqueued_step_s(t)
        data.trials.append(t)
    if trials and not data.trials:
        first, missing = data.left_out[0]
        raise ScalestudyError(f"study {directory}: no trial can be reported: every trial lacks "
                              f"{'/'.join(sorted({f for _, m in data.left_out for f in m}, key=PLACED_BY.index))} "
                              f"(trial {first} has no {', '.join(missing)}); was the store written by "
                              "`scalestudy study run`?")
    data.varying = [k for k, _ in SHAPE_AXES if len({t[k] for t in data.ok}) > 1]
    return data


def _number(value) -> float | int | None:
    """A finite number, or None (SQLite keeps whatever was written, whatever the column's type)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return value


def _clean(t: dict, data: StudyData) -> None:
    """Unusable values become None (shown as '-', left out of plots), each noted in data.unreadable."""
    for key in NUMERIC:
        value = t.get(key)
        good = _number(value)
        if good is not None and key in POSITIVE and good <= 0:
            good = None
        if value is not None and good is None:
            data.unreadable.append((t["trial_id"], key, value))
        t[key] = good
    for key in ("model", "strategy", "label", "error_tail", "memory_convention", "pred_error"):
        if t.get(key) is not None and not isinstance(t[key], str):
            t[key] = str(t[key])
    if not (t.get("strategy") or "").strip():
        t["strategy"] = None  # nothing to name a series by
    t["label"] = t.get("label") or str(t["trial_id"])


def _ids(ids) -> str:
    ids = [str(i) for i in ids]
    return ", ".join(ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")


def unqueued_step_s(t: dict) -> float | None:
    """The trial's median step less its run-queue wait (summary.json `median_unqueued_step_s`; engine/train.py):
    the step time of this machine to itself, which the measured CPU profile's predictions stand for. None for trials
    of older versions and for unusable values."""
    value = _number(_summary(t).get("median_unqueued_step_s"))
    return value if value is not None and value > 0 else None


def _summary(t: dict) -> dict:
    """The trial's summary.json as stored ({} for trials of older versions and unreadable values)."""
    summary = t.get("summary_json")
    try:
        summary = json.loads(summary) if isinstance(summary, str) else summary
    except ValueError:
        return {}
    return summary if isinstance(summary, dict) else {}


def mfu_peaks(data: StudyData) -> list[str]:
    """The peaks the OK trials' MFU divides by (summary.json `mfu_peak_source`: on a CPU the profile's measured matmul
    peak, on a GPU the device's dense peak), each once: the MFU convention alone does not say which peak it was."""
    peaks = (_summary(t).get("mfu_peak_source") for t in data.ok)
    return list(dict.fromkeys(p for p in peaks if isinstance(p, str) and p.strip()))


def comparable_prediction(t: dict) -> float | None:
    """The predicted bytes that match what was measured: on CPU `scalestudy train` counts the parameter, gradient
    and optimizer-state shards (-> predicted model states); on GPU the allocator peak (-> predicted total)."""
    convention = (t.get("memory_convention") or "").lower()
    if convention and "cuda" not in convention and t.get("pred_model_states_bytes"):
        return t["pred_model_states_bytes"]
    return t.get("pred_per_device_bytes")
