"""Calibration: measurements of the machine at hand -> a hardware profile (DeviceSpec) the cost model reads.

Pure Python (no torch): the measurements come from `scalestudy.engine.microbench` (a JSON dict) and from real
training trials (`scalestudy train` summaries); this module only fits numbers.

1. `profile_from_microbench`: peak FLOP/s per precision = the best measured matmul rate per rank; the GEMM
   efficiency curve = measured rate / peak vs matrix size (as measured, see `efficiency_curve`); memory bandwidth
   from a copy (on CPU also vs buffer size); CPU Adam rate from torch AdamW (on CPU also the trainer's clip + AdamW
   step vs parameter and tensor count); the link from an alpha-beta fit of all_reduce time vs size
   (ring all-reduce: t = 2(n-1) alpha + 2(n-1)/n * S / B, Thakur et al. 2005; alpha = per-hop latency,
   B = per-device one-direction bandwidth, the convention of `DeviceSpec.intra_node_bytes_per_s`).
2. `fit_efficiency`: the efficiency terms refit from trials (measured step time vs the estimate's parts): an
   overall scale, compute / communication / optimizer / framework / engine-hook factors pulled toward it,
   engine and engine/ZeRO-family communication factors, and per-step and per-micro-step framework overheads
   (global, engine, family) the model has no term for (`EfficiencyFit`); what few trials cannot identify stays
   at the uncalibrated model.
   `fit_residual`: what the trials say the model still misses, as one factor on its predictions (level, engine,
   ZeRO family, per doubling of the micro-steps; Gaussian priors, so few trials move it only part of the way):
   tune's predictions of the strategies it did not run (`ResidualFit`).
3. `save_profile` / `load_profile`: YAML with exactly the DeviceSpec fields (`--gpu PATH.yaml` reads it back).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import yaml

from scalestudy.errors import ScalestudyError
from scalestudy.specs.hardware import DeviceSpec, get_device
from scalestudy.atomicfile import write_text_atomic

# ---------------------------------------------------------------------------------------------- micro-benchmarks


def best_rates(matmul: list[dict]) -> dict[str, float]:
    """Peak FLOP/s per precision: the best measured matmul rate (per rank)."""
    peaks: dict[str, float] = {}
    for row in matmul:
        peaks[row["dtype"]] = max(peaks.get(row["dtype"], 0.0), float(row["flops_per_s"]))
    return peaks


def efficiency_curve(matmul: list[dict], dtype: str, peak: float) -> list[list[float]]:
    """[[size, fraction of peak], ...] ascending in size, as measured (the best of repeated sizes).

    Not forced monotone: on a CPU whose caches hold the small matrices a larger GEMM can be slower per FLOP, and
    all ranks measure at once, as they compute in training.
    """
    best: dict[int, float] = {}
    for r in matmul:
        if r["dtype"] == dtype:
            best[int(r["n"])] = max(best.get(int(r["n"]), 0.0), float(r["flops_per_s"]) / peak)
    return [[n, round(min(f, 1.0), 4)] for n, f in sorted(best.items())]


def fit_alpha_beta(points: list[tuple[float, float]], world: int) -> tuple[float, float]:
    """(per-hop latency s, bandwidth bytes/s) from ring all-reduce times [(bytes, seconds), ...].

    Least squares of t = a + b*S on relative error (weights 1/t^2, so the small-message latency counts as much
    as the large-message bandwidth), then alpha = a / (2(n-1)), B = 2(n-1)/n / b. A negative intercept clips to 0.
    """
    if world < 2 or len(points) < 2:
        raise ScalestudyError("an alpha-beta fit needs all_reduce timings on >= 2 ranks at >= 2 sizes")
    xs = [float(s) for s, _ in points]
    ys = [float(t) for _, t in points]
    ws = [1.0 / (y * y) for y in ys]
    sw = sum(ws)
    mx = sum(w * x for w, x in zip(ws, xs)) / sw
    my = sum(w * y for w, y in zip(ws, ys)) / sw
    sxx = sum(w * (x - mx) ** 2 for w, x in zip(ws, xs))
    b = sum(w * (x - mx) * (y - my) for w, x, y in zip(ws, xs, ys)) / sxx
    if b <= 0:
        raise ScalestudyError("all_reduce time does not grow with message size: the timings are unusable")
    a = max(0.0, my - b * mx)
    hops = 2 * (world - 1)
    return a / hops, hops / world / b


def collective_time_ratios(collectives: list[dict], world: int, alpha: float, bandwidth: float) -> dict[str, float]:
    """Per collective op, its measured time at the largest message / the ring alpha-beta model's (fitted on
    all_reduce): all_reduce 2(n-1) alpha + 2(n-1)/n S/B; all_gather and reduce_scatter (n-1) alpha + (n-1)/n S/B
    (S = the full buffer). On one-thread gloo ranks reduce_scatter is several times slower per byte than the
    all_reduce fit says: ZeRO-2/3 and FSDP move their gradients with it (tune's refit reads this)."""
    out: dict[str, float] = {}
    for op in ("all_reduce", "all_gather", "reduce_scatter"):
        rows = [c for c in collectives if c["op"] == op]
        if not rows or world < 2:
            continue
        big = max(rows, key=lambda c: c["bytes"])
        hops = 2 * (world - 1) if op == "all_reduce" else world - 1
        model = hops * alpha + hops / world * big["bytes"] / bandwidth
        if model > 0 and big["seconds"] > 0:
            out[op] = round(min(20.0, max(0.25, big["seconds"] / model)), 3)
    return out


def collective_ratio_curves(collectives: list[dict], world: int, alpha: float, bandwidth: float
                            ) -> dict[str, list[list[float]]]:
    """`collective_time_ratios` at every measured message size: {op: [[bytes, measured / modelled], ...]}, the
    ratios clipped as there. A gloo collective's cost is not one factor off the all_reduce fit at every size: the
    fit's latency comes from the smallest messages' noise, while large reduce-scatters fall far behind it."""
    out: dict[str, list[list[float]]] = {}
    for op in ("all_reduce", "all_gather", "reduce_scatter"):
        hops = 2 * (world - 1) if op == "all_reduce" else world - 1
        rows = []
        for c in sorted((c for c in collectives if c["op"] == op), key=lambda c: c["bytes"]):
            model = hops * alpha + hops / world * c["bytes"] / bandwidth
            if model > 0 and c["seconds"] > 0 and world >= 2:
                rows.append([float(c["bytes"]), round(min(20.0, max(0.25, c["seconds"] / model)), 3)])
        if rows:
            out[op] = rows
    return out


def profile_from_microbench(meas: dict, base: DeviceSpec, name: str) -> DeviceSpec:
    """A DeviceSpec from micro-benchmark results; what was not measured keeps the base device's value."""
    if not meas.get("matmul"):
        raise ScalestudyError("micro-benchmark results hold no matmul timings")
    peaks = best_rates(meas["matmul"])
    ref = "fp32" if "fp32" in peaks else max(peaks, key=peaks.get)
    changes: dict = {
        "name": name, "kind": base.kind if meas.get("device") != "cpu" else "cpu",
        "peak_flops": {k: float(f"{v:.4g}") for k, v in peaks.items()},
        "matmul_efficiency": efficiency_curve(meas["matmul"], ref, peaks[ref]),
    }
    if meas.get("copy"):
        changes["hbm_bytes_per_s"] = float(f"{meas['copy']['bytes_per_s']:.4g}")
    if meas.get("adam"):
        # Host-side Adam rate per node: every rank of the node updates its own shard at once.
        changes["cpu_adam_params_per_s"] = float(f"{meas['adam']['params_per_s'] * meas.get('world_size', 1):.4g}")
    if meas.get("copy_curve"):  # CPU: bandwidth by buffer size (costmodel/cpu_memory.py)
        changes["copy_bandwidth"] = [[float(r["bytes"]), float(f"{r['bytes_per_s']:.4g}")] for r in meas["copy_curve"]]
        if all("fresh_bytes_per_s" in r for r in meas["copy_curve"]):  # into newly allocated buffers
            changes["fresh_copy_bandwidth"] = [[float(r["bytes"]), float(f"{r['fresh_bytes_per_s']:.4g}")]
                                               for r in meas["copy_curve"]]
    if meas.get("optimizer"):  # CPU: the trainer's clip + AdamW step (costmodel/cpu_memory.py)
        changes["optimizer_step_s"] = [[float(r["tensors"]), float(r["params"]), float(f"{r['seconds']:.4g}")]
                                       for r in meas["optimizer"]]
    world = int(meas.get("world_size", 1))
    ar = [(c["bytes"], c["seconds"]) for c in meas.get("collectives", []) if c["op"] == "all_reduce"]
    if world > 1 and len(ar) >= 2:
        alpha, bw = fit_alpha_beta(ar, world)
        changes["intra_node_latency_s"] = float(f"{alpha:.4g}")
        changes["intra_node_bytes_per_s"] = float(f"{bw:.4g}")
        changes["collective_time_ratio"] = collective_time_ratios(meas["collectives"], world, alpha, bw)
        if meas.get("device") == "cpu":  # gloo: the ratio moves with the message size (cpu_collectives.rate)
            changes["collective_ratio_by_size"] = collective_ratio_curves(meas["collectives"], world, alpha, bw)
    sources = [f"calibrated by `scalestudy calibrate` from micro-benchmarks on {world} rank(s) "
               f"({meas.get('device', '?')}, {meas.get('threads', '?')} thread(s)/rank, torch {meas.get('torch', '?')})",
               f"unmeasured fields from {base.name}"]
    changes["source"] = "; ".join(sources)
    return replace(base, **changes)


# ---------------------------------------------------------------------------------------------- trials refit


@dataclass(frozen=True)
class StepTerms:
    """The cost model's step time of one strategy, split into the parts the refit scales (seconds per step)."""

    compute_s: float  # compute + pipeline bubble + tensor/pipeline communication
    comm_s: float  # data-parallel / ZeRO communication, in full (nothing overlaps on one-thread gloo ranks); as
    #                the model counts it: per micro-step for ZeRO-2 reduces and ZeRO-3/FSDP gathers, else per step
    optimizer_s: float  # optimizer update + offload transfers
    micro_steps: int  # gradient-accumulation micro-steps per optimizer step
    family: str  # engine/ZeRO family, e.g. "ds-z2", "fsdp-z3", "ddp"
    engine: str = ""  # deepspeed | fsdp | ddp
    framework_s: float = 0.0  # measured framework time of a CPU profile (Estimate.framework_s; 0 without one)
    engine_s: float = 0.0  # the part of framework_s that is the engine's own (the profile's engine_overhead_s:
    #                        hooks, bucketing, per micro-step), measured on a small model
    comm_ratio: float = 1.0  # measured / modelled time of the collectives comm_s is made of (the calibration's
    #                          DeviceSpec.collective_time_ratio, mixed by the family's collectives); 1 = unmeasured
    micro_batch: int = 0  # sequences per micro-batch (0 = unknown)

    @property
    def comm_measured_s(self) -> float:
        """comm_s at the calibration's measured rate of each collective."""
        return self.comm_s * self.comm_ratio

    @property
    def modelled_s(self) -> float:
        """The cost model's step time on the calibrated profile (collectives at their measured rates), no refit."""
        return self.compute_s + self.comm_measured_s + self.optimizer_s + self.framework_s


@dataclass
class EfficiencyFit:
    """Efficiency terms refit from measured steps; the defaults are the uncalibrated cost model.

    step = (compute + compute_slope * (log2 micro_batch - slope_ref)) * compute_s + optimizer * optimizer_s
           + framework * (framework_s - engine_s) + hooks * engine_s
           + (comm + comm_engine[engine] + comm_family[family]) * comm_s * comm_ratio
           + step_overhead_s + engine_step_overhead_s[engine] + family_step_overhead_s[family]
           + micro_steps * (overhead_s + engine_overhead_s[engine] + family_overhead_s[family])
    `scale` is the one factor that best maps the uncalibrated model onto the trials (the median ratio, in logs):
    the factors are pulled toward it, not toward 1, so a machine that is uniformly slower than calibrated (other
    jobs on the cores) moves every prediction alike. What a measured engine or ZeRO family costs beyond that goes
    first to its communication factor (`comm_engine` / `comm_family`): the model's collectives of model-sized
    buffers are its least-known term (fitted on micro-benchmark messages <= 16 MB, while DeepSpeed's ZeRO-1/2
    reduce per partition owner and ZeRO-3 gathers per module), and a communication factor extrapolates with the
    family's own pattern (ZeRO-2 reduces and ZeRO-3/FSDP gathers every micro-step, ZeRO-1 once per step). Plain
    overheads (per step / per micro-step, global, per engine, per family) take the rest at a higher price. An
    unmeasured family inherits its engine's terms; an unmeasured engine gets the global ones only.
    """

    compute: float = 1.0
    compute_slope: float = 0.0  # compute factor change per doubling of the micro-batch (from trials at two sizes)
    slope_ref: float = 0.0  # log2 micro-batch where compute_slope is 0
    comm: float = 1.0
    optimizer: float = 1.0
    framework: float = 1.0
    hooks: float = 1.0  # factor on the profile's engine overheads (engine_s)
    scale: float = 1.0
    overhead_s: float = 0.0
    step_overhead_s: float = 0.0
    engine_overhead_s: dict = field(default_factory=dict)  # per micro-step
    family_overhead_s: dict = field(default_factory=dict)  # per micro-step
    engine_step_overhead_s: dict = field(default_factory=dict)  # per optimizer step
    family_step_overhead_s: dict = field(default_factory=dict)  # per optimizer step
    comm_engine: dict = field(default_factory=dict)  # communication factor, deviation of the engine
    comm_family: dict = field(default_factory=dict)  # communication factor, deviation of the family
    prior: float = 0.3  # ridge weight (relative-error units) pulling the factors to `scale`, the overheads to 0
    trials_fitted: int = 0

    def comm_factor(self, t: StepTerms) -> float:
        return max(0.0, self.comm + self.comm_engine.get(t.engine, 0.0) + self.comm_family.get(t.family, 0.0))

    def predict(self, t: StepTerms) -> float:
        over = self.overhead_s + self.engine_overhead_s.get(t.engine, 0.0) + self.family_overhead_s.get(t.family, 0.0)
        once = (self.step_overhead_s + self.engine_step_overhead_s.get(t.engine, 0.0)
                + self.family_step_overhead_s.get(t.family, 0.0))
        slope = self.compute_slope * (math.log2(t.micro_batch) - self.slope_ref) if t.micro_batch > 0 else 0.0
        step = ((self.compute + slope) * t.compute_s + self.comm_factor(t) * t.comm_measured_s
                + self.optimizer * t.optimizer_s
                + self.framework * (t.framework_s - t.engine_s) + self.hooks * t.engine_s + once
                + t.micro_steps * over)
        # negative overhead parts may offset each other, never make a step faster than a tenth of the scaled model
        return max(step, 0.1 * self.scale * t.modelled_s)

    def to_dict(self) -> dict:
        return asdict(self)


FAMILY_PRIOR_RATIO = 2.0  # a family term's ridge weight / its engine's (a family deviates less than an engine)
OVERHEAD_PRIOR_RATIO = 3.0  # an engine/family overhead's ridge weight per second / a communication factor's
SLOPE_PRIOR_RATIO = 0.3  # the compute factor's change per micro-batch doubling: loosely held (its ridge weight /
#                          a factor's): on CPU it moves by tens of % (GEMM shapes; gpt2-tiny's logits outgrow the
#                          caches at micro-batch 8, its steps 14% slower than at 4 where the model says 5% faster)
COMM_PRIOR_FLOOR = 0.05  # communication factors' ridge weight never below this (x prior weight): a family whose
#                          collectives are a tiny share of its step (a small model) cannot blow its factor up


def _median(xs: list[float]) -> float:
    xs = sorted(xs)
    mid = len(xs) // 2
    return xs[mid] if len(xs) % 2 else 0.5 * (xs[mid - 1] + xs[mid])


def _median_ratio(obs: list[tuple[StepTerms, float]]) -> float:
    logs = [math.log(m / t.modelled_s) for t, m in obs if t.modelled_s > 0]
    if not logs:
        return 1.0
    return min(50.0, max(0.05, math.exp(_median(logs))))


def fit_efficiency(observed: list[tuple[StepTerms, float]], prior: float = 0.3) -> EfficiencyFit:
    """Least squares on relative error, sum ((pred - m) / m)^2, plus ridge priors; negative factors clip.

    Which terms the trials identify: a few trials at one micro-batch pin down one overall level and, per engine
    or family measured, its excess; they cannot separate compute from framework time or per-step from
    per-micro-step overhead. So the fit first takes the overall `scale` (median measured / modelled), then lets
    each factor leave `scale` and each overhead leave 0 only as far as the data demand (ridge, weight `prior`;
    overheads in units of the median measured step, so the prior means the same for any model size). An engine's
    or family's communication factor is priced per second it moves (weight x the median communication time of
    what it covers / the median step), overheads OVERHEAD_PRIOR_RATIO times dearer: an engine's excess is read as
    its collectives running slower than modelled (the mechanism on one-thread gloo ranks, `EfficiencyFit`) before
    it is read as a fixed cost. With no trials it is the uncalibrated model.
    """
    import numpy as np

    obs = [(t, m) for t, m in observed if m > 0]
    if not obs:
        return EfficiencyFit(prior=prior)
    scale = _median_ratio(obs)
    ref = _median([m for _, m in obs])  # typical step (s): the unit of the overhead priors
    engines = sorted({t.engine for t, _ in obs})
    fams = sorted({t.family for t, _ in obs})
    w = math.sqrt(prior)

    def comm_weight(ts: list[StepTerms]) -> float:
        return w * max(_median([t.comm_measured_s for t in ts]) / ref, COMM_PRIOR_FLOOR)

    # columns: (name, key, feature(t), prior target, prior weight)
    cols: list[tuple[str, str, object, float, float]] = [
        ("compute", "", lambda t: t.compute_s, scale, w),
        ("optimizer", "", lambda t: t.optimizer_s, scale, w),
        ("framework", "", lambda t: t.framework_s - t.engine_s, scale, w),
        ("hooks", "", lambda t: t.engine_s, scale, w),
        ("comm", "", lambda t: t.comm_measured_s, scale, w),
    ]
    sizes = sorted({t.micro_batch for t, _ in obs if t.micro_batch > 0})
    slope_ref = _median([math.log2(t.micro_batch) for t, _ in obs if t.micro_batch > 0]) if sizes else 0.0
    if len(sizes) > 1:  # compute efficiency vs micro-batch: only trials at two sizes show it
        cols.append(("compute_slope", "", lambda t: t.compute_s * (math.log2(t.micro_batch) - slope_ref)
                     if t.micro_batch > 0 else 0.0, 0.0, SLOPE_PRIOR_RATIO * w))
    ow = OVERHEAD_PRIOR_RATIO * w / ref
    # the global overheads are the same PyTorch loop under every engine: one engine's trials at two accumulations
    # inform all (gpt2-tiny: micro-steps cost less than the profile says, for every engine), so they keep the
    # base price; engine and family overheads are what a few trials cannot pin, OVERHEAD_PRIOR_RATIO dearer
    cols += [("overhead_s", "", lambda t: float(t.micro_steps), 0.0, w / ref),
             ("step_overhead_s", "", lambda t: 1.0, 0.0, w / ref)]
    for e in engines:
        cw = comm_weight([t for t, _ in obs if t.engine == e])
        cols += [("comm_engine", e, lambda t, e=e: t.comm_measured_s if t.engine == e else 0.0, 0.0, cw),
                 ("engine_overhead_s", e, lambda t, e=e: float(t.micro_steps) if t.engine == e else 0.0, 0.0, ow),
                 ("engine_step_overhead_s", e, lambda t, e=e: 1.0 if t.engine == e else 0.0, 0.0, ow)]
    for f in fams:
        cw = FAMILY_PRIOR_RATIO * comm_weight([t for t, _ in obs if t.family == f])
        fw = FAMILY_PRIOR_RATIO * ow
        cols += [("comm_family", f, lambda t, f=f: t.comm_measured_s if t.family == f else 0.0, 0.0, cw),
                 ("family_overhead_s", f, lambda t, f=f: float(t.micro_steps) if t.family == f else 0.0, 0.0, fw),
                 ("family_step_overhead_s", f, lambda t, f=f: 1.0 if t.family == f else 0.0, 0.0, fw)]
    # A per-micro-step overhead is told from a per-step one only by trials at different accumulations. Where its
    # trials all ran one accumulation the prior splits a correction between the two, and one that comes out
    # negative is dropped and the rest refitted (as costmodel/cpu_profile.fit_overheads does): a model that ran
    # fast at 1 micro-step must not come back 8-fold faster at 8.
    scope = {"overhead_s": lambda t, key: True, "engine_overhead_s": lambda t, key: t.engine == key,
             "family_overhead_s": lambda t, key: t.family == key}
    blind = {j for j, col in enumerate(cols) if col[0] in scope
             and len({t.micro_steps for t, _ in obs if scope[col[0]](t, col[1])}) < 2}
    active = list(range(len(cols)))
    while True:
        use = [cols[j] for j in active]
        rows = [[feat(t) / m for _, _, feat, _, _ in use] for t, m in obs]
        rhs = [1.0] * len(rows)
        for j, (_, _, _, target, weight) in enumerate(use):
            rows.append([weight if k == j else 0.0 for k in range(len(use))])
            rhs.append(weight * target)
        theta = np.linalg.lstsq(np.array(rows), np.array(rhs), rcond=None)[0]
        negative = [active[j] for j, v in enumerate(theta) if active[j] in blind and v < 0]
        if not negative:
            break
        active = [j for j in active if j not in negative]
    cols = use
    fit = EfficiencyFit(scale=scale, prior=prior, trials_fitted=len(obs), slope_ref=slope_ref)
    for (name, key, _, _, _), value in zip(cols, theta):
        if key:
            getattr(fit, name)[key] = float(value)
        elif name in ("compute", "optimizer", "framework", "hooks", "comm"):  # compute_slope may be negative
            setattr(fit, name, max(0.05, float(value)))
        else:
            setattr(fit, name, float(value))
    for e in engines:  # a dropped overhead is 0
        fit.engine_overhead_s.setdefault(e, 0.0)
    for f in fams:
        fit.family_overhead_s.setdefault(f, 0.0)
    return fit


# ---------------------------------------------------------------------------------------------- residual of trials


# Prior sd (log scale) of what measured trials can show the cost model misses beyond one overall level (the
# machine's speed against its calibration, which the trials set freely). The CPU model carries each (engine, ZeRO
# stage)'s own mechanisms apart -- the CPU profile's framework overhead is measured per engine AND stage
# ("<engine>-<zero>@multi"), the gloo data-parallel path is priced per stage (cpu_collectives.gloo_dp_comm: DeepSpeed
# ZeRO-0 bucket all-reduce, ZeRO-1/2 full-bucket all-reduce + fresh copies, ZeRO-3 gathers, FSDP2) -- so what one
# stage's trial shows beyond the model is mostly that stage's own (and its noise), and little is shared by the
# engine's other stages: the engine term ~5%, the (engine, stage) term (`family`) ~10%. Shared at 15% (before the
# model carried the stages' paths, 2026-12-02 01:16), one noisy DeepSpeed ZeRO-0 screen sample moved every ZeRO stage
# by two thirds of its excess. Per doubling of the micro-steps ~15% (per-micro-step framework time against GEMM
# efficiency and cache traffic: on this CPU gpt2-tiny's micro-batch 8 ran 14% slower per sample than 4, where the
# model says 5% faster). Round values; replayed on three recorded grids (benchmarks/RESULTS.md, 2026-12-02 01:45):
# a narrower engine term is better on all three, a wider or narrower per-doubling term trades median for maximum.
RESIDUAL_TAU = {"engine": 0.05, "family": 0.10, "per_doubling": 0.15}
RESIDUAL_TAU_LEVEL = 2.0  # the overall level: effectively free (the trials set it)
# Share of the measured change per doubling that carries beyond the accumulations the trials covered: the cost
# model's own per-micro-step terms carry the extrapolation, the trials' correction only half (one noisy pair of
# trials at two micro-batches, extrapolated in full over three doublings, over-predicted micro-batch 1 by 2x).
RESIDUAL_BEYOND = 0.5


@dataclass
class ResidualFit:
    """A factor on a model's predictions learned from measured trials (multiplicative, in logs):
    log(measured / predicted) = level + engine[e] + family[f] + per_doubling * doublings(micro-steps from ref),
    the doublings beyond those the trials covered counted at `beyond`.
    Every term has a Gaussian prior (mean 0, sd RESIDUAL_TAU) and the trials update it (each strategy's median
    with relative noise `noise` / sqrt(its trials)): the posterior mean is a ridge regression. With one trial of an
    engine its term moves only part of the way (shrinkage toward the model); an engine or family no trial measured
    keeps 0 and its prior sd counts in the prediction's uncertainty (`log_sd`)."""

    level: float = 0.0
    engine: dict = field(default_factory=dict)
    family: dict = field(default_factory=dict)
    per_doubling: float = 0.0
    ref: float = 0.0  # log2 micro-steps where per_doubling adds nothing (the trials' median)
    span: tuple = (0.0, 0.0)  # log2 micro-steps the trials covered (min, max): per_doubling applies within it
    beyond: float = 0.0  # share of per_doubling that carries beyond the span
    names: list = field(default_factory=list)  # the fitted terms, in the order of `cov`
    cov: list = field(default_factory=list)  # their posterior covariance (log scale)
    tau: dict = field(default_factory=lambda: dict(RESIDUAL_TAU))

    def doublings(self, t: StepTerms) -> float:
        """Doublings of the micro-steps from `ref`, those beyond the trials' span counted at `beyond`."""
        x = math.log2(max(1, t.micro_steps))
        inside = min(max(x, self.span[0]), self.span[1])
        return inside - self.ref + self.beyond * (x - inside)

    def _x(self, t: StepTerms) -> list[float]:
        d = self.doublings(t)
        return [1.0 if n == "level" else d if n == "per_doubling" else float(n == f"engine:{t.engine}" or
                                                                             n == f"family:{t.family}")
                for n in self.names]

    def log_factor(self, t: StepTerms) -> float:
        return (self.level + self.engine.get(t.engine, 0.0) + self.family.get(t.family, 0.0)
                + self.per_doubling * self.doublings(t))

    def log_sd(self, t: StepTerms) -> float:
        """sd of log_factor: the posterior's, plus the prior of an engine or family no trial measured."""
        x = self._x(t)
        var = sum(x[i] * self.cov[i][j] * x[j] for i in range(len(x)) for j in range(len(x)))
        var += (self.tau["engine"] ** 2 if t.engine not in self.engine else 0.0)
        var += (self.tau["family"] ** 2 if t.family not in self.family else 0.0)
        return math.sqrt(max(0.0, var))

    def to_dict(self) -> dict:
        return {"level": self.level, "engine": self.engine, "family": self.family, "per_doubling": self.per_doubling,
                "ref_log2_micro_steps": self.ref, "span_log2_micro_steps": list(self.span), "beyond": self.beyond,
                "prior_sd": self.tau, "convention": "log(measured / cost model) = level + engine + family + "
                                                   "per_doubling x doublings of the micro-steps from ref"}


def fit_residual(rows: list[tuple[StepTerms, float, float, int]], noise: float, tau: dict | None = None,
                 beyond: float = RESIDUAL_BEYOND) -> ResidualFit:
    """`ResidualFit` from (terms, predicted s, measured s, trials) per measured strategy; `noise`: relative sd of
    one trial's median step (plan/noise.py). No rows: the factor 1."""
    import numpy as np

    tau = {**RESIDUAL_TAU, **(tau or {})}
    rows = [r for r in rows if r[1] > 0 and r[2] > 0]
    if not rows:
        return ResidualFit(tau=tau)
    logs = [math.log2(max(1, t.micro_steps)) for t, _, _, _ in rows]
    ref = _median(logs)
    names = (["level"] + [f"engine:{e}" for e in sorted({t.engine for t, *_ in rows})]
             + [f"family:{f}" for f in sorted({t.family for t, *_ in rows})] + ["per_doubling"])
    prior_sd = [RESIDUAL_TAU_LEVEL if n == "level" else tau["per_doubling"] if n == "per_doubling"
                else tau[n.split(":")[0]] for n in names]
    fit = ResidualFit(ref=ref, span=(min(logs), max(logs)), beyond=beyond, names=names, tau=tau)
    x = np.array([fit._x(t) for t, _, _, _ in rows])
    w = np.array([math.sqrt(n) / max(noise, 1e-3) for _, _, _, n in rows])
    y = np.array([math.log(m / p) for _, p, m, _ in rows])
    a = np.vstack([x * w[:, None], np.diag([1.0 / s for s in prior_sd])])
    b = np.concatenate([y * w, np.zeros(len(names))])
    theta = np.linalg.lstsq(a, b, rcond=None)[0]
    cov = np.linalg.inv(a.T @ a)
    for n, v in zip(names, theta):
        if n == "level":
            fit.level = float(v)
        elif n == "per_doubling":
            fit.per_doubling = float(v)
        else:
            kind, key = n.split(":", 1)
            getattr(fit, kind)[key] = float(v)
    fit.cov = cov.tolist()
    return fit


def apply_efficiency(device: DeviceSpec, fit: EfficiencyFit) -> DeviceSpec:
    """The device with the fitted factors folded in (GEMM efficiency / compute factor, link bandwidths / comm
    factor, measured framework overheads x framework factor, the engines' measured overheads x hooks factor), so
    `--gpu` on the saved profile predicts like the refit model minus its per-engine/family terms (those stay in
    tune.json)."""
    # capped at the peak, as the measured curve is (efficiency_curve): a device YAML takes fractions in (0, 1]
    curve = [[n, min(f / fit.compute, 1.0)] for n, f in device.matmul_efficiency]
    fw = fit.framework
    return replace(device, matmul_efficiency=curve,
                   intra_node_bytes_per_s=device.intra_node_bytes_per_s / fit.comm,
                   inter_node_bytes_per_s=device.inter_node_bytes_per_s / fit.comm,
                   layer_overhead_s=device.layer_overhead_s * fw, step_overhead_s=device.step_overhead_s * fw,
                   microstep_overhead_s=device.microstep_overhead_s * fw,
                   engine_overhead_s={k: v * fit.hooks for k, v in device.engine_overhead_s.items()},
                   source=device.source + f"; refit from {fit.trials_fitted} trial(s): compute x{fit.compute:.3g}, "
                                          f"comm x{fit.comm:.3g}, framework x{fw:.3g}, engine hooks "
                                          f"x{fit.hooks:.3g}")


# ---------------------------------------------------------------------------------------------- files


# A line in the head of every profile scalestudy writes (after the note, whose first line cpu_profile.profile_quality
# reads): how calibrate / tune tell their own hardware_profile.yaml from a user's, which they never replace
# (specs/run.check_not_users_files).
PROFILE_HEADER = "# Written by scalestudy: a hardware profile (--gpu PATH reads it back).\n"


def save_profile(device: DeviceSpec, path: str | Path, extra_comment: str = "") -> Path:
    """Write the DeviceSpec as YAML (temp file + rename); `get_device(path)` reads it back."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = asdict(device)
    text = (f"# {extra_comment}\n" if extra_comment else "") + PROFILE_HEADER + yaml.safe_dump(data, sort_keys=False)
    return write_text_atomic(path, text)


def load_profile(path: str | Path) -> DeviceSpec:
    return get_device(str(path))
