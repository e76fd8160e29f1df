"""Calibration: measurements of the machine at hand -> a hardware profile (DeviceSpec) the cost model reads.

Pure Python (no torch): the measurements come from `scalestudy.engine.microbench` (a JSON dict) and from real
training trials (`scalestudy train` summaries); this module only fits numbers.

1. `profile_from_microbench`: peak FLOP/s per precision = the best measured matmul rate per rank; the GEMM
   efficiency curve = measured rate / peak vs matrix size (as measured, see `efficiency_curve`); memory bandwidth
   from a copy; CPU Adam rate from torch AdamW; the link from an alpha-beta fit of all_reduce time vs size
   (ring all-reduce: t = 2(n-1) alpha + 2(n-1)/n * S / B, Thakur et al. 2005; alpha = per-hop latency,
   B = per-device one-direction bandwidth, the convention of `DeviceSpec.intra_node_bytes_per_s`).
2. `fit_efficiency`: the efficiency terms refit from trials (measured step time vs the estimate's parts): a
   compute factor, a communication factor, an optimizer factor and a per-micro-step framework overhead (with
   engine and engine/ZeRO-family parts) that the analytical model has no term for (`EfficiencyFit`).
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
    world = int(meas.get("world_size", 1))
    ar = [(c["bytes"], c["seconds"]) for c in meas.get("collectives", []) if c["op"] == "all_reduce"]
    if world > 1 and len(ar) >= 2:
        alpha, bw = fit_alpha_beta(ar, world)
        changes["intra_node_latency_s"] = float(f"{alpha:.4g}")
        changes["intra_node_bytes_per_s"] = float(f"{bw:.4g}")
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
    comm_s: float  # data-parallel / ZeRO communication, in full (nothing overlaps on one-thread gloo ranks)
    optimizer_s: float  # optimizer update + offload transfers
    micro_steps: int  # gradient-accumulation micro-steps per optimizer step
    family: str  # engine/ZeRO family, e.g. "ds-z2", "fsdp-z3", "ddp"
    engine: str = ""  # deepspeed | fsdp | ddp


@dataclass
class EfficiencyFit:
    """Efficiency terms refit from measured steps; the defaults are the uncalibrated cost model.

    step = compute * compute_s + comm * comm_s + optimizer * optimizer_s + step_overhead_s
           + micro_steps * (overhead_s + engine_overhead_s[engine] + family_overhead_s[family])
    `overhead_s` is framework time per micro-step (Python, hooks, kernel launches) the analytical model has no term
    for, `step_overhead_s` the same per optimizer step (clipping, scheduler, bookkeeping); the two are told apart
    only by trials with different accumulation (with one accumulation the least-norm solution splits them evenly).
    The engine and engine/ZeRO-family parts are 0 for an engine or family never measured, so a measured DeepSpeed
    ZeRO-1 trial informs the prediction of ZeRO-2 (same engine) before ZeRO-2 is run.
    """

    compute: float = 1.0
    comm: float = 1.0
    optimizer: float = 1.0
    overhead_s: float = 0.0
    step_overhead_s: float = 0.0
    engine_overhead_s: dict = field(default_factory=dict)
    family_overhead_s: dict = field(default_factory=dict)
    prior: float = 0.3  # ridge weight pulling compute/comm/optimizer to 1 and engine/family terms to 0
    trials_fitted: int = 0

    def predict(self, t: StepTerms) -> float:
        over = self.overhead_s + self.engine_overhead_s.get(t.engine, 0.0) + self.family_overhead_s.get(t.family, 0.0)
        return (self.compute * t.compute_s + self.comm * t.comm_s + self.optimizer * t.optimizer_s
                + max(0.0, self.step_overhead_s) + t.micro_steps * max(0.0, over))

    def to_dict(self) -> dict:
        return asdict(self)


def fit_efficiency(observed: list[tuple[StepTerms, float]], prior: float = 0.3) -> EfficiencyFit:
    """Least squares on relative error, sum ((pred - m) / m)^2, plus the ridge prior; negative factors clip.

    Linear in the unknowns, so one `numpy.linalg.lstsq`; with one trial the whole residual goes to the
    (unpenalised) per-micro-step overhead, with more the factors and engine/family terms move as the data demand.
    """
    import numpy as np

    obs = [(t, m) for t, m in observed if m > 0]
    engines = sorted({t.engine for t, _ in obs})
    fams = sorted({t.family for t, _ in obs})
    n = 5 + len(engines) + len(fams)
    rows, rhs = [], []
    for t, m in obs:
        rows.append([t.compute_s / m, t.comm_s / m, t.optimizer_s / m, t.micro_steps / m, 1.0 / m]
                    + [t.micro_steps / m if t.engine == e else 0.0 for e in engines]
                    + [t.micro_steps / m if t.family == f else 0.0 for f in fams])
        rhs.append(1.0)
    w = math.sqrt(prior)

    def prior_row(j: int, weight: float, target: float) -> None:
        rows.append([weight if k == j else 0.0 for k in range(n)])
        rhs.append(weight * target)

    for j in range(3):
        prior_row(j, w, 1.0)
    prior_row(3, 1e-3, 0.0)  # keep the system defined with no trials; equal tiny weights -> even split
    prior_row(4, 1e-3, 0.0)
    for j in range(5, n):
        prior_row(j, w, 0.0)
    theta = np.linalg.lstsq(np.array(rows), np.array(rhs), rcond=None)[0]
    a, b, c = (max(0.05, float(x)) for x in theta[:3])
    return EfficiencyFit(compute=a, comm=b, optimizer=c, overhead_s=float(theta[3]), step_overhead_s=float(theta[4]),
                         engine_overhead_s={e: float(theta[5 + j]) for j, e in enumerate(engines)},
                         family_overhead_s={f: float(theta[5 + len(engines) + j]) for j, f in enumerate(fams)},
                         prior=prior, trials_fitted=len(obs))


def apply_efficiency(device: DeviceSpec, fit: EfficiencyFit) -> DeviceSpec:
    """The device with the fitted compute and communication factors folded in (GEMM efficiency / compute factor,
    link bandwidths / comm factor), so `--gpu` on the saved profile predicts like the refit model minus overheads."""
    curve = [[n, f / fit.compute] for n, f in device.matmul_efficiency]
    return replace(device, matmul_efficiency=curve,
                   intra_node_bytes_per_s=device.intra_node_bytes_per_s / fit.comm,
                   inter_node_bytes_per_s=device.inter_node_bytes_per_s / fit.comm,
                   source=device.source + f"; refit from {fit.trials_fitted} trial(s): compute x{fit.compute:.3g}, "
                                          f"comm x{fit.comm:.3g}")


# ---------------------------------------------------------------------------------------------- files


def save_profile(device: DeviceSpec, path: str | Path, extra_comment: str = "") -> Path:
    """Write the DeviceSpec as YAML (temp file + rename); `get_device(path)` reads it back."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = asdict(device)
    text = (f"# {extra_comment}\n" if extra_comment else "") + yaml.safe_dump(data, sort_keys=False)
    return write_text_atomic(path, text)


def load_profile(path: str | Path) -> DeviceSpec:
    return get_device(str(path))
