"""The planner: estimate every strategy of the space, drop what does not fit, rank, Pareto front, explain.

Pure Python (no torch). The estimator is `scalestudy.costmodel.estimate.estimate` unless the caller passes
another callable with the same signature (the tuner passes one built on a calibrated device).

Speed: strategies are estimated in groups that differ only in micro-batch, ascending, and recompute is tried
full -> selective -> none. Memory per device grows with the micro-batch and shrinks with recompute, so the first
micro-batch that does not fit ends its group, and a layout/engine/schedule whose full-recompute micro-batch 1 does
not fit is skipped for every lighter recompute (not for another schedule: the chunks a rank holds place the vocabulary
tables, the schedule's in-flight micro-batches the activations). Pruned strategies are counted, never proposed
(`prune=False` turns this off).
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from scalestudy.errors import ScalestudyError
from scalestudy.plan.space import Constraints, Point, SpaceStats, enumerate_groups
from scalestudy.specs.hardware import ClusterSpec
from scalestudy.specs.model import ModelSpec
from scalestudy.specs.strategy import Strategy, Workload

OBJECTIVES = ("throughput", "time", "cost", "min-nodes")
GIB = 2**30

Estimator = Callable[[ModelSpec, ClusterSpec, Strategy, Workload], Any]


def default_estimator() -> Estimator:
    from scalestudy.costmodel.estimate import estimate

    return estimate


@dataclass(slots=True)  # one per feasible strategy, kept to the ranking: no per-instance __dict__
class Candidate:
    """A feasible strategy and its estimate (an `Estimate`: .fits .step_s .tokens_per_s .mfu .per_device_bytes)."""

    point: Point
    estimate: Any
    device_memory_bytes: int
    train_tokens: float = 0.0
    # memory per device (per rank on a CPU node) left free by the estimate (bytes); set once, ranking reads it often
    headroom_bytes: int = field(init=False)
    per_device_bytes: float = field(init=False, repr=False)  # the estimate's, read once (deduplication reads it)
    # read once, as the candidate is built (its objects in the CPU's caches), for the ranking and deduplication that
    # read them for every candidate after the whole space is priced: the estimate's tokens/s, the devices, and
    # _signature_but_step
    tokens_per_s: float = field(init=False, repr=False)
    world_size: int = field(init=False, repr=False)
    signature: tuple = field(init=False, repr=False)

    def __post_init__(self) -> None:
        _fill(self, self.point, self.estimate, self.device_memory_bytes, self.train_tokens)

    @property
    def strategy(self) -> Strategy:
        return self.point.strategy

    @property
    def nodes(self) -> int:
        return self.point.nodes

    @property
    def time_to_train_s(self) -> float:
        """Seconds to train `train_tokens`; seconds per million tokens when no token budget was given."""
        tokens = self.train_tokens or 1e6
        return tokens / self.tokens_per_s

    @property
    def device_hours(self) -> float:
        """Device-hours for `train_tokens` (per million tokens when no token budget was given)."""
        return self.world_size * self.time_to_train_s / 3600.0

    def layout_dict(self) -> dict:
        cp = self.strategy.cp  # named only where set, as estimate's layout names it
        return {"nodes": self.nodes, "world_size": self.world_size, "dp": self.point.dp, "tp": self.strategy.tp,
                "pp": self.strategy.pp, "grad_accum": self.point.grad_accum, **({"cp": cp} if cp > 1 else {})}

    def to_dict(self) -> dict:
        return {"strategy": self.strategy.to_dict(), "layout": self.layout_dict(), "label": self.strategy.label,
                "headroom_bytes": self.headroom_bytes, "time_to_train_s": self.time_to_train_s,
                "device_hours": self.device_hours, "estimate": self.estimate.to_dict()}


def _candidate(point: Point, estimate: Any, device_memory_bytes: int, train_tokens: float) -> Candidate:
    """Candidate(point, estimate, device_memory_bytes, train_tokens), built as its __init__ and __post_init__ build
    it (the planner builds one per feasible strategy)."""
    candidate = object.__new__(Candidate)
    _fill(candidate, point, estimate, device_memory_bytes, train_tokens)
    return candidate


def _fill(candidate: Candidate, point: Point, estimate: Any, device_memory_bytes: int, train_tokens: float) -> None:
    """Write every field of the Candidate of these four, its init=False ones read once (Candidate.__post_init__ and
    _candidate call it)."""
    per_device = estimate.per_device_bytes
    strategy = point.strategy
    candidate.point = point
    candidate.estimate = estimate
    candidate.device_memory_bytes = device_memory_bytes
    candidate.train_tokens = train_tokens
    candidate.headroom_bytes = int(device_memory_bytes - per_device)
    candidate.per_device_bytes = per_device
    candidate.tokens_per_s = estimate.tokens_per_s
    candidate.world_size = point.dp * strategy.tp * strategy.pp * strategy.cp
    candidate.signature = _signature_but_step(point, per_device)


@dataclass
class PlanResult:
    candidates: list[Candidate]  # feasible, deduplicated, best first
    pareto: list[Candidate]  # throughput vs memory headroom, by throughput descending
    objective: str
    evaluated: int  # strategies in the space (estimated + pruned)
    estimated: int  # full cost-model estimates computed
    pruned: int  # skipped by the memory bound (certainly do not fit)
    feasible: int  # estimated strategies that fit (before deduplication)
    duplicates: int  # feasible strategies whose estimate equals an earlier one's (same cost, other engine)
    elapsed_s: float
    workload: Workload
    skipped: dict[str, int] = field(default_factory=dict)

    @property
    def best(self) -> Candidate:
        return self.candidates[0]

    def to_json(self, top: int = 0) -> dict:
        from scalestudy.costmodel.breakdown import UNITS

        chosen = self.candidates if top <= 0 else self.candidates[:top]
        candidates = [c.to_dict() for c in chosen]
        for c in candidates:  # the same units in every estimate: stated once (a --top 0 plan has thousands)
            c["estimate"].pop("units", None)
        return {
            "candidates": candidates, "units": UNITS,
            "evaluated": self.evaluated, "feasible": self.feasible, "estimated": self.estimated,
            "pruned": self.pruned, "duplicates": self.duplicates, "objective": self.objective,
            "pareto": [c.strategy.label for c in self.pareto], "elapsed_s": self.elapsed_s,
            "workload": {"global_batch": self.workload.global_batch, "seq_len": self.workload.seq_len,
                         "target_len": self.workload.target_len, "train_tokens": self.workload.train_tokens},
        }


def rank_key(objective: str) -> Callable[[Candidate], tuple]:
    """Sort key (ascending = better) for an objective; ties break on more headroom, then fewer devices."""
    if objective == "throughput":
        return lambda c: (-c.tokens_per_s, -c.headroom_bytes, c.world_size)
    if objective == "time":
        return lambda c: (c.time_to_train_s, -c.headroom_bytes, c.world_size)
    if objective == "cost":
        return lambda c: (c.device_hours, c.time_to_train_s, -c.headroom_bytes)
    if objective == "min-nodes":
        return lambda c: (c.nodes, -c.tokens_per_s, -c.headroom_bytes)
    raise ScalestudyError(f"unknown objective {objective!r} (choose from {', '.join(OBJECTIVES)})")


def pareto_front(candidates: list[Candidate], presorted: bool = False) -> list[Candidate]:
    """Non-dominated candidates for (tokens/s up, headroom up), by throughput descending. `presorted`: the list is
    already in that order (the throughput objective's ranking, whose key begins with it), so it is not sorted again
    (a stable sort would return it unchanged)."""
    front: list[Candidate] = []
    best_headroom = -math.inf
    ordered = candidates if presorted else sorted(candidates, key=lambda c: (-c.tokens_per_s, -c.headroom_bytes))
    for c in ordered:
        if c.headroom_bytes > best_headroom:
            front.append(c)
            best_headroom = c.headroom_bytes
    return front


def _signature_but_step(point: Point, per_device_bytes: float) -> tuple:
    # Strategies with the same layout, micro-batch and recompute whose cost-model numbers (these fields and the step
    # time rounded to 12 digits) are equal are one choice as far as the model can tell (e.g. an engine that costs
    # the same); the earlier (preferred) engine stays (_deduplicated). Candidate.signature.
    s = point.strategy
    return point.nodes, s.tp, s.pp, s.micro_batch, s.recompute, int(per_device_bytes)


def evaluate(model: ModelSpec, cluster: ClusterSpec, workload: Workload, constraints: Constraints,
             estimator: Estimator, *, prune: bool = True) -> tuple[list[Candidate], dict]:
    """Estimate the space; return the feasible candidates and counters."""
    stats = SpaceStats()
    feasible: list[Candidate] = []
    estimated = pruned = 0
    dead: set[tuple] = set()  # layouts/engines/schedules whose lightest memory setting does not fit
    # a cluster mixing devices: pipeline layers split by each stage's device speed and memory (plan/partition.py)
    split_stages = cluster.heterogeneous and not constraints.stage_layers
    clusters = {}
    device_bytes, tokens = cluster.device.memory_bytes, workload.train_tokens
    group_estimator = None  # a group's micro-batch variants priced together (the default estimator's numbers)
    shared_terms: dict[int, dict] = {}  # node count -> MicroBatchGroup's shared terms on that cluster
    if estimator is default_estimator():  # the same numbers; a strategy that does not fit is not priced further
        from scalestudy.costmodel.estimate import MicroBatchGroup, estimate_if_fits as estimator
        if not split_stages:  # (resource_split gives each micro-batch its own stage layers)
            group_estimator = MicroBatchGroup
    for group in enumerate_groups(model, cluster, workload, constraints, stats):
        first = group[0]
        s = first.strategy
        # the schedule too: its chunks place the vocabulary tables (params.chunk_vocab_params: an interleaved T5
        # rank 0 can hold the embedding and the decoder's copy, a 1F1B one the embedding alone) and its in-flight
        # micro-batches the activations, so one schedule's memory bounds no other's
        family = (first.nodes, s.tp, s.pp, s.engine, s.zero, s.offload_optimizer, s.offload_params, s.pp_schedule,
                  s.virtual_stages)
        if prune and family in dead:
            pruned += len(group)
            continue
        sub = clusters.get(first.nodes) or clusters.setdefault(first.nodes, cluster.with_nodes(first.nodes))
        in_turn = None
        if group_estimator is not None:  # (what a strategy's recompute variants share: kept per cluster)
            in_turn = group_estimator(model, sub, workload, shared=shared_terms.setdefault(first.nodes, {}))
        for i, point in enumerate(group):
            if split_stages and point.strategy.pp > 1:
                point = _resource_aware(point, model, sub, workload)
            try:
                est = in_turn(point.strategy) if in_turn is not None else estimator(model, sub, point.strategy,
                                                                                    workload)
            except ScalestudyError as exc:  # a rule of the cost model the space does not know: skip, count why
                key = f"rejected by the cost model: {exc}"
                stats.skipped[key] = stats.skipped.get(key, 0) + 1
                continue
            estimated += 1
            if est is not None and est.fits:  # None: estimate_if_fits's "does not fit"
                # Capacity per device as the estimate counts it (on a CPU node the ranks share the host's memory).
                capacity = getattr(est, "capacity_bytes", device_bytes)
                feasible.append(_candidate(point, est, capacity, tokens))
                continue
            if prune:
                pruned += len(group) - i - 1
                if i == 0 and s.recompute == "full":
                    dead.add(family)
                break
    counters = {"evaluated": estimated + pruned, "estimated": estimated, "pruned": pruned,
                "feasible": len(feasible), "skipped": stats.skipped}
    return feasible, counters


def _resource_aware(point: Point, model: ModelSpec, cluster: ClusterSpec, workload: Workload) -> Point:
    """`point` with the stage layers of plan/partition.py's resource_split for its cluster (mixing devices)."""
    from dataclasses import replace

    from scalestudy.plan.partition import resource_split

    split = resource_split(model, cluster, point.strategy, workload, point.dp, point.grad_accum)
    return replace(point, strategy=point.strategy.replace(stage_layers=split))


def plan(model: ModelSpec, cluster: ClusterSpec, workload: Workload, constraints: Constraints | None = None, *,
         objective: str = "throughput", min_throughput: float | None = None, estimator: Estimator | None = None,
         prune: bool = True) -> PlanResult:
    """Evaluate the whole space, keep what fits, rank by `objective` (see `rank_key`)."""
    start = time.perf_counter()
    constraints = constraints or Constraints()
    key = rank_key(objective)
    if objective == "min-nodes" and not min_throughput:
        raise ScalestudyError("objective min-nodes needs --min-throughput (tokens/s the plan must reach)")
    if objective in ("min-nodes", "cost") and not constraints.vary_nodes:
        constraints = Constraints(**{**constraints.__dict__, "vary_nodes": True})
    estimator = estimator or default_estimator()
    with _gc_paused():
        return _plan(model, cluster, workload, constraints, objective, min_throughput, estimator, prune, key, start)


@contextmanager
def _gc_paused() -> Iterator[None]:
    """The cyclic garbage collector off while the planner runs (on again after, if it was on): the estimates and
    candidates it allocates hold no reference cycles (reference counting frees what is dropped), but every
    allocation-triggered collection scans them and the cost model's caches (measured: 3-7% of a llama-7b 128 x 8
    plan's CPU time, up to 14% with the stage-collective memo's table). On again, the first allocation would start a
    young-generation collection over everything the plan allocated (~10-40 ms after a 128 x 8 plan, the user waiting
    on it); they move to the oldest generation unscanned instead (_into_oldest_generation)."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            _into_oldest_generation()
            gc.enable()


def _into_oldest_generation() -> None:
    """Every object the collector tracks moved to its oldest generation without a scan: gc.freeze() moves them to the
    permanent generation, gc.unfreeze() that into the oldest one (Python's gc documentation). Only while nothing is
    frozen: a caller's frozen objects (kept out of collections before a fork) stay frozen."""
    if gc.get_freeze_count() == 0:
        gc.freeze()
        gc.unfreeze()


def _plan(model: ModelSpec, cluster: ClusterSpec, workload: Workload, constraints: Constraints, objective: str,
          min_throughput: float | None, estimator: Estimator, prune: bool, key: Callable, start: float) -> PlanResult:
    feasible, counters = evaluate(model, cluster, workload, constraints, estimator, prune=prune)
    if not feasible:
        skipped = counters["skipped"]
        why = (f"; most often {max(skipped, key=skipped.get)}" if skipped and not counters["evaluated"] else "")
        raise ScalestudyError(
            f"no strategy fits: {counters['evaluated']} evaluated for {model.name} on "
            f"{cluster.label} (relax the constraints, add nodes or lower the batch){why}")
    if min_throughput:
        reach = [c for c in feasible if c.estimate.tokens_per_s >= min_throughput]
        if not reach:
            best = max(c.estimate.tokens_per_s for c in feasible)
            raise ScalestudyError(f"no strategy reaches {min_throughput:,.0f} tokens/s (best {best:,.0f} tokens/s)")
        feasible = reach
    ranked = sorted(feasible, key=key)
    unique = _deduplicated(ranked)
    return PlanResult(candidates=unique,
                      pareto=pareto_front(unique, presorted=objective == "throughput"),
                      objective=objective,
                      evaluated=counters["evaluated"], estimated=counters["estimated"], pruned=counters["pruned"],
                      feasible=counters["feasible"], duplicates=len(ranked) - len(unique),
                      elapsed_s=time.perf_counter() - start, workload=workload, skipped=counters["skipped"])


def _deduplicated(ranked: list[Candidate]) -> list[Candidate]:
    """`ranked` without a candidate whose signature (_signature_but_step + the step time rounded to 12 digits) an
    earlier one has. The rounded step (round() of a float: its correctly rounded decimal digits, the costliest part)
    is computed only for candidates whose other fields an earlier one shares: the same kept list as comparing every
    full signature."""
    unique, kept = [], {}  # fields -> the first kept candidate, or the rounded steps of those kept
    for c in ranked:
        fields = c.signature
        steps = kept.get(fields)
        if steps is None:
            kept[fields] = c
            unique.append(c)
            continue
        if isinstance(steps, Candidate):
            steps = kept[fields] = {round(steps.estimate.step_s, 12)}
        step = round(c.estimate.step_s, 12)
        if step not in steps:
            steps.add(step)
            unique.append(c)
    return unique


def default_precision(device) -> str:
    """bf16 where the device has it, else fp16, else fp32 (CPUs here: fp32, see FACTS.md). A cluster (mixing
    devices or not): the first that every device of it has."""
    devices = [g.device for g in device.rank_groups()] if hasattr(device, "rank_groups") else [device]
    if any(d.kind == "cpu" for d in devices):
        return "fp32"
    return next((p for p in ("bf16", "fp16") if all(p in d.peak_flops for d in devices)), "fp32")


def step_time_terms(estimate: Any) -> dict[str, float]:
    """{name: seconds} of the estimate's step-time breakdown (`time.parts` of the estimate schema)."""
    parts = estimate.time_parts() if hasattr(estimate, "time_parts") else \
        estimate.to_dict().get("time", {}).get("parts", {})
    return {k: float(v) for k, v in parts.items() if isinstance(v, (int, float))}


def _verdict(a: Candidate, b: Candidate, objective: str) -> str:
    """'beats X' or, when the objective's number ties, 'ties with X on ... and wins on <tie-break>'."""
    primary = {"throughput": (a.estimate.tokens_per_s, b.estimate.tokens_per_s, "throughput"),
               "time": (a.time_to_train_s, b.time_to_train_s, "time-to-train"),
               "cost": (a.device_hours, b.device_hours, "device-hours"),
               "min-nodes": (a.nodes, b.nodes, "node count")}[objective]
    if abs(primary[0] - primary[1]) > 5e-4 * abs(primary[1]):
        return f"beats {b.strategy.label}"
    if objective == "min-nodes" and abs(a.estimate.tokens_per_s - b.estimate.tokens_per_s) > \
            5e-4 * b.estimate.tokens_per_s:
        why = "throughput"
    elif objective == "cost" and abs(a.time_to_train_s - b.time_to_train_s) > 5e-4 * b.time_to_train_s:
        why = "time-to-train"
    elif a.headroom_bytes != b.headroom_bytes:
        why = "memory headroom"
    else:
        why = "fewer devices" if a.world_size < b.world_size else "enumeration order (equal on every measure)"
    return f"ties with {b.strategy.label} on {primary[2]} and wins on {why}"


def seconds(value: float) -> str:
    """Seconds to 4 significant digits, trailing zeros kept: '11.00 vs 10.64 s', not '11 vs 10.64 s'."""
    return f"{value:#.4g}".rstrip(".")


def explain(result: PlanResult) -> str:
    """One or two lines of numbers: why the winner beats the runner-up."""
    from scalestudy.costmodel.breakdown import STEP_TERM_NAMES

    if len(result.candidates) < 2:
        return f"Only one feasible strategy: {result.best.strategy.label}."
    a, b = result.candidates[0], result.candidates[1]
    ea, eb = a.estimate, b.estimate
    gain = (ea.tokens_per_s / eb.tokens_per_s - 1.0) * 100.0
    line1 = (f"{a.strategy.label} ({a.nodes} node(s)) {_verdict(a, b, result.objective)}: {ea.tokens_per_s:,.0f} vs "
             f"{eb.tokens_per_s:,.0f} tokens/s ({gain:+.1f}%), step {seconds(ea.step_s)} vs {seconds(eb.step_s)} s, memory "
             f"{ea.per_device_bytes / GIB:.1f} vs {eb.per_device_bytes / GIB:.1f} GiB/device "
             f"(free {a.headroom_bytes / GIB:.1f} vs {b.headroom_bytes / GIB:.1f} GiB).")
    ta, tb = step_time_terms(ea), step_time_terms(eb)
    diffs = sorted(((abs(ta.get(k, 0.0) - tb.get(k, 0.0)), k) for k in set(ta) | set(tb)), reverse=True)
    parts = [f"{STEP_TERM_NAMES.get(k, k)} {seconds(ta.get(k, 0.0))} vs {seconds(tb.get(k, 0.0))} s per step"
             for d, k in diffs[:3] if d > 0]
    if result.objective in ("cost", "min-nodes"):
        parts.insert(0, f"{a.world_size} vs {b.world_size} devices, device-hours"
                        f"{'' if a.train_tokens else ' per 1M tokens'} {a.device_hours:.4g} vs {b.device_hours:.4g}")
    if not parts:
        return line1
    return line1 + "\nLargest differences (winner vs runner-up): " + "; ".join(parts) + "."
