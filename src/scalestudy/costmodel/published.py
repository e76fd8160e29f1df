"""Published measurements (published.yaml) and the predicted-vs-published comparison behind `scalestudy validate`.

Every row is predicted from its configuration alone through the public `estimate` API; nothing is tuned per row.
The headline is leave-one-source-out (`leave_one_source_out`): for each source, every fitted constant
(constants.FITTED) is refitted on the other sources' rows, then that source's rows are predicted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from functools import lru_cache
from importlib import resources

import yaml

from scalestudy.costmodel.constants import FITTED, Calibration, stored
from scalestudy.costmodel.estimate import estimate
from scalestudy.costmodel.options import DEFAULT_OPTIONS
from scalestudy.costmodel.stages import stage_memory
from scalestudy.costmodel.memory import (activation_parts, layer_activation_bytes, whole_model_load_bytes,
                                        zero_model_states)
from scalestudy.errors import ScalestudyError
from scalestudy.specs.hardware import SAFE_LOADER, ClusterSpec, get_device
from scalestudy.specs.model import ModelSpec, from_shape
from scalestudy.specs.strategy import Strategy, Workload, resolve_software

# search box of each fitted constant (physically sensible ranges). gemm.half_dim is measured, not fitted
# (calibration.yaml): the rows do not identify it -- it traded against the share along a flat valley from 1 to 600
BOUNDS = {"gemm.share": (0.4, 1.0), "kernel_overhead_s": (2e-6, 4e-5)}
# points of fit's grid per constant, log-spaced over BOUNDS (costmodel/fit_search.py): steps of x1.08 in the share
# (the objective is steep in it: every row's GEMM time scales with it), x1.65 in the kernel time
FIT_GRID = {"gemm.share": 13, "kernel_overhead_s": 7}
_GRID_POINTS = tuple(FIT_GRID[n] for n in BOUNDS)


@dataclass(frozen=True)
class Row:
    id: str
    kind: str  # "throughput" or "memory"
    metric: str
    unit: str
    published: float
    predicted: float
    source: str
    config: str
    source_key: str = ""
    fit: bool = True  # used to fit constants (throughput rows only)
    check: str = ""  # memory rows: "measured" or "formula"

    @property
    def error(self) -> float:
        """Signed relative error (predicted - published) / published."""
        return (self.predicted - self.published) / self.published


@lru_cache(maxsize=1)
def load() -> dict:
    text = (resources.files("scalestudy.costmodel") / "published.yaml").read_text(encoding="utf-8")
    return yaml.load(text, Loader=SAFE_LOADER)  # libyaml's parser where PyYAML has it: 640 kB, ~4x faster


def gpt_spec(row_id: str, m: dict) -> ModelSpec:
    """A GPT-style model (GELU FFN of width 4d, learned positions, tied head unless `tied: false`) from a published
    configuration."""
    return row_model(row_id, {**m, "family": "gpt"})


def row_model(row_id: str, m: dict) -> ModelSpec:
    """The row's `model:` shape, read as `scalestudy estimate --model x.yaml` reads the same keys (specs.model)."""
    return from_shape(row_id, {k: v for k, v in m.items() if k != "target"}, f"published row {row_id}")


_UNITS = {"hardware_tflops_per_device": "TFLOP/s/device (hardware FLOPs)",
          "model_tflops_per_device": "TFLOP/s/device (model FLOPs)", "mfu": "MFU (model FLOPs / peak)",
          "tokens_per_s": "tokens/s (global batch x seq / step)",
          "source_tokens_per_s": "tokens/s (global batch x encoder seq / step)"}
# each throughput metric (the rows' `metric` key, validate --json's) in words, as validate's tables title it
METRIC_NAMES = {"hardware_tflops_per_device": "hardware TFLOP/s per device",
                "model_tflops_per_device": "model TFLOP/s per device", "mfu": "model FLOPs utilisation",
                "tokens_per_s": "tokens per second, whole cluster",
                "source_tokens_per_s": "input (encoder) tokens per second, whole cluster"}


def _setup(r: dict):
    model = row_model(r["id"], r["model"])
    cluster = ClusterSpec(device=get_device(r["device"]), nodes=int(r["nodes"]), gpus_per_node=int(r["gpus_per_node"]),
                          name=r["device"], **{k: float(v) for k, v in r.get("cluster", {}).items()})
    software = r.get("software", {})
    unknown = set(software) - {f.name for f in fields(Strategy)} if isinstance(software, dict) else None
    if unknown is None or unknown:
        raise ScalestudyError(f"published row {r['id']}: software must map Strategy options (kernels, attention, "
                              f"...) to values, got {sorted(unknown) if unknown else software!r}")
    try:
        strategy = Strategy(engine=r["engine"], zero=int(r.get("zero", 0)), tp=int(r.get("tp", 1)),
                            pp=int(r.get("pp", 1)), cp=int(r.get("cp", 1)), micro_batch=int(r["micro_batch"]),
                            recompute=r["recompute"],
                            precision=r.get("precision", "bf16"), **software)
    except ScalestudyError as exc:  # which row of the table says so
        raise ScalestudyError(f"published row {r['id']}: {exc}") from None
    workload = Workload(global_batch=int(r["global_batch"]), seq_len=int(r["model"]["seq"]),
                        target_len=int(r["model"].get("target", 0)))
    return model, cluster, strategy, workload


def _metric(est, metric: str, counted_batch: int | None = None) -> float:
    """The row's metric from an estimate. `counted_batch`: the sequences per step a source's table counted when it
    is not the batch the run ran (NeMo 22.08's GPT-3 175B table: 1536 x 2048 tokens per step of a global batch 2048
    run; published.yaml nemo2022) -- the table's tokens/s is that count over the run's step time."""
    if metric == "tokens_per_s":
        return (counted_batch or est.workload.global_batch) * est.workload.seq_len / est.step_s
    if metric == "source_tokens_per_s":
        return est.samples_per_s * est.workload.seq_len
    return getattr(est, metric)


def predict(r: dict, cal: Calibration | None = None) -> float:
    model, cluster, strategy, workload = _setup(r)
    return float(_metric(estimate(model, cluster, strategy, workload, calibration=cal), r["metric"],
                         r.get("counted_batch")))


def throughput_row(r: dict, sources: dict, cal: Calibration | None = None) -> Row:
    model, cluster, strategy, workload = _setup(r)
    est = estimate(model, cluster, strategy, workload, calibration=cal)
    config = (f"{est.params_total / 1e9:.1f}B {r['device']} x{cluster.world_size} tp{strategy.tp} pp{strategy.pp} "
              f"dp{est.layout.dp} mb{strategy.micro_batch} gb{workload.global_batch} {strategy.label.split()[0]} "
              f"rc-{strategy.recompute}" + (f" (counts gb{r['counted_batch']})" if "counted_batch" in r else ""))
    return Row(r["id"], "throughput", r["metric"], _UNITS[r["metric"]], float(r["published"]),
               float(_metric(est, r["metric"], r.get("counted_batch"))), sources[r["source"]], config, r["source"],
               bool(r.get("fit", True)))


# What a measured memory row's source read, and what the prediction it is compared with counts (memory_row)
MEASURED_AS = {
    "allocated": "max_memory_allocated: tensors; predicted: tensors, no CUDA context",
    "reserved": "max_memory_reserved: tensors + allocator cache; predicted: tensors + the cache the allocation order "
                "fixes + cuBLAS workspace, no CUDA context",
    "device": "nvidia-smi: device total; predicted: tensors + allocator cache + CUDA context + NCCL buffers + cuBLAS "
              "workspace",
}


def _stage_tensor_peak(model, cluster, strategy: Strategy, workload: Workload, est, k: int) -> float:
    """max_memory_allocated of a rank of pipeline stage `k` (stages.stage_memory of its blocks, the strategy's
    software resolved as estimate resolves it): where a source read one rank of a pipeline -- KempnerForge's
    metrics/memory.py reports rank 0's, the first stage -- and the estimate's figure is the busiest stage's."""
    st, lay = resolve_software(strategy, model), est.layout
    split = st.stage_split(model.total_layers)
    return stage_memory(model, st, lay.dp, lay.tp, lay.pp, lay.grad_accum, workload.seq_len, workload.target_len, k,
                        sum(split[:k]), split[k], cluster.device, DEFAULT_OPTIONS).tensor_peak


def memory_row(r: dict, sources: dict) -> Row:
    if r.get("measured"):
        model, cluster, strategy, workload = _setup(r)
        est = estimate(model, cluster, strategy, workload)
        measured_as = r.get("measured_as", "device")
        # like for like: the allocator's figures leave the CUDA context out (memory.Memory.tensor_peak), reserved adds
        # its cache (memory.reserved_bytes); nvidia-smi also counts NCCL's and cuBLAS's own buffers
        # (memory.device_total_bytes); a peak read over the whole run also sees a whole-model load
        predicted = {"allocated": est.memory.tensor_peak, "reserved": est.reserved_bytes,
                     "device": est.device_total_bytes}[measured_as]
        if "measured_stage" in r:  # one pipeline rank's own reading (rank 0: the first stage), not the busiest stage's
            if measured_as != "allocated":
                raise ScalestudyError(f"{r['id']}: measured_stage is priced for max_memory_allocated readings only")
            predicted = _stage_tensor_peak(model, cluster, strategy, workload, est, int(r["measured_stage"]))
        if r.get("whole_model_load"):
            predicted = max(predicted, whole_model_load_bytes(model, est.params_per_device, est.layout.dp,
                                                              est.layout.tp, strategy.zero, strategy.precision))
        predicted /= 1e9
        config = (f"{est.params_total / 1e9:.0f}B {r['device']} x{cluster.world_size} tp{strategy.tp} pp{strategy.pp} "
                  f"mb{strategy.micro_batch} {strategy.label.split()[0]} rc-{strategy.recompute}")
        metric, check = f"measured memory per device ({MEASURED_AS[measured_as]})", "measured"
    elif "params" in r:
        w, g, o = zero_model_states(float(r["params"]), int(r["dp"]), int(r["zero"]), "bf16")
        predicted = (w + g + o) / 1e9
        config = f"{float(r['params']) / 1e9:g}B params, N_d={r['dp']}, ZeRO stage {r['zero']}"
        metric, check = "model states per device (formula check)", "formula"
    else:
        gpt3 = gpt_spec("gpt3-175b", {"d_model": 12288, "layers": 96, "heads": 96, "vocab": 51200, "seq": 2048})
        _, dec = activation_parts(gpt3, 1, 2048, 0, "bf16", False)
        predicted = layer_activation_bytes(dec, int(r["tp"]), bool(r["sp"]), r["recompute"]) / 1e9
        config = f"GPT-3 175B layer, s=2048 b=1, tp{r['tp']}{' +sp' if r['sp'] else ''}, recompute {r['recompute']}"
        metric, check = "activations per layer (formula check)", "formula"
    return Row(r["id"], "memory", metric, "GB (1e9 bytes)", float(r["published_gb"]), predicted,
               sources[r["source"]], config, r["source"], False, check)


def validation_rows(cal: Calibration | None = None) -> list[Row]:
    data = load()
    sources = data["sources"]
    return [throughput_row(r, sources, cal) for r in data["throughput"]] + \
        [memory_row(r, sources) for r in data["memory"]]


# The software options issue 11 names (--attention, --[no-]sequence-parallel, --[no-]overlap-grad-comm, --pp-schedule,
# --virtual-stages, --stage-layers, FSDP's offload): a check written from the issue's text sets these and leaves
# every other software knob (kernels, cross_entropy, optimizer_loop, tp_comm_overlap, ...) at its default.
ISSUE_FLAGS = frozenset({"attention", "sequence_parallel", "overlap_grad_comm", "pp_schedule", "virtual_stages",
                         "stage_layers", "offload_optimizer", "offload_params"})


def issue_flags_only(cal: Calibration | None = None) -> dict:
    """In-sample |error| of the throughput rows predicted with only the ISSUE_FLAGS of each row's `software:` set,
    every other option at its default (specs/strategy.software_defaults): how far the defaults alone carry."""
    errors = []
    for r in load()["throughput"]:
        software = {k: v for k, v in (r.get("software") or {}).items() if k in ISSUE_FLAGS}
        errors.append(abs(predict({**r, "software": software}, cal) / float(r["published"]) - 1))
    return {"rows": len(errors), "mean_abs_error": sum(errors) / len(errors), "max_abs_error": max(errors),
            "rows_over_20pct": sum(e > 0.2 for e in errors)}


def summary(rows: list[Row]) -> dict:
    tp = [abs(r.error) for r in rows if r.kind == "throughput"]
    mem = [abs(r.error) for r in rows if r.kind == "memory"]
    measured = [abs(r.error) for r in rows if r.kind == "memory" and r.check == "measured"]
    return {"throughput_rows": len(tp), "throughput_mean_abs_error": sum(tp) / len(tp),
            "throughput_max_abs_error": max(tp), "memory_rows": len(mem),
            "memory_max_abs_error": max(mem) if mem else 0.0, "measured_memory_rows": len(measured),
            "measured_memory_max_abs_error": max(measured) if measured else 0.0}


# ---------------------------------------------------------------------------------------------- fitting

def _objective(rows: list[dict], cal: Calibration) -> float:
    """Mean |log(predicted / published)|: robust to a source whose table disagrees with the rest (least squares
    would let one such table -- NeMo 22.08's GPT-3 175B cells read at the run's batch were +35% -- pull the GEMM
    curve flat)."""
    return sum(abs(_log_error(r, cal)) for r in rows) / len(rows)


_SETUPS: dict[int, tuple] = {}  # id(row) -> (row, its _setup): a fit evaluates the same rows hundreds of times
# (id(row), unfitted constants) -> |log error| at fit_search.grid's points (_SETUPS holds the row: its id stays its)
_GRID_ERRORS: dict[tuple, tuple[float, ...]] = {}


def _log_error(r: dict, cal: Calibration) -> float:
    hit = _SETUPS.get(id(r))
    if hit is None or hit[0] is not r:
        hit = _SETUPS[id(r)] = (r, _setup(r))
    est = estimate(*hit[1], calibration=cal)
    return math.log(_metric(est, r["metric"], r.get("counted_batch")) / float(r["published"]))


def _grid_errors(r: dict, base: Calibration, points: list[dict[str, float]]) -> tuple[float, ...]:
    """|log error| of row `r` at each of the fixed grid's `points` (fit_search.grid), for the unfitted constants of
    `base`: the same for every fold that fits the row, so leave_one_source_out prices it once, not once a fold."""
    unfitted = replace(base.replace_values({n: 0.0 for n in FITTED}), fitted_on=())
    key = (id(r), unfitted)
    if key not in _GRID_ERRORS:
        _GRID_ERRORS[key] = tuple(abs(_log_error(r, base.replace_values(v))) for v in points)
    return _GRID_ERRORS[key]


def fit(rows: list[dict]) -> Calibration:
    """Fit every constant in constants.FITTED on `rows`, minimising `_objective` within BOUNDS by
    fit_search.search: a fixed grid, then Nelder-Mead from its best points. The result depends on the rows and on
    the constants that are not fitted, never on the stored values of the fitted ones (calibration.yaml holds this
    function's result on fit_rows(): `validate --refit`). No constant is per device (devices differ by their YAML
    data), so every one is informed by whatever rows are given: a source left out changes every constant, none
    keeps a value fitted on it."""
    from scalestudy.costmodel import fit_search  # numpy and scipy: only for a fit, not for validate's other tables

    base = stored()  # only for the constants that are not fitted (overlap_interference, elementwise_hbm_fraction)
    points = fit_search.grid(BOUNDS, _GRID_POINTS)
    columns = [_grid_errors(r, base, points) for r in rows]
    table = [sum(col) / len(rows) for col in zip(*columns)]
    values, _ = fit_search.search(lambda v: _objective(rows, base.replace_values(v)), table, BOUNDS, _GRID_POINTS)
    return base.replace_values(values, fitted_on=tuple(sorted({r["source"] for r in rows})))


def fit_rows(exclude_source: str = "") -> list[dict]:
    return [r for r in load()["throughput"] if r.get("fit", True) and r["source"] != exclude_source]


def leave_one_source_out() -> dict:
    """For each source: refit every constant without it (`fit`, the procedure of `validate --refit`), predict its
    rows. Returns per-row errors, the headline mean / max |error| over all throughput rows (fit: false rows are
    predicted with all sources) and `refitted_on_all`, fit(fit_rows())'s values (what calibration.yaml stores)."""
    data = load()
    sources = sorted({r["source"] for r in data["throughput"]})
    out_rows = []
    fits: dict[tuple, Calibration] = {}  # sources with only fit: false rows leave the same rows: one fit for all
    for source in [""] + sources:  # "": no source left out
        rows = fit_rows(exclude_source=source)
        key = tuple(r["id"] for r in rows)
        if key not in fits:
            fits[key] = fit(rows)
        cal = fits[key]
        for r in data["throughput"]:
            if source and r["source"] == source:
                row = throughput_row(r, data["sources"], cal)
                out_rows.append({"id": row.id, "source": source, "published": row.published,
                                 "predicted": row.predicted, "error": row.error, "fit": row.fit,
                                 "refitted": cal.values()})
    errs = [abs(r["error"]) for r in out_rows]
    by_source = {}
    for source in sources:
        e = [abs(r["error"]) for r in out_rows if r["source"] == source]
        by_source[source] = {"rows": len(e), "mean_abs_error": sum(e) / len(e), "max_abs_error": max(e)}
    return {"rows": out_rows, "sources": len(sources), "row_count": len(errs),
            "mean_abs_error": sum(errs) / len(errs), "max_abs_error": max(errs), "by_source": by_source,
            "refitted_on_all": fits[tuple(r["id"] for r in fit_rows())].values()}
