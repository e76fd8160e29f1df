"""Calibration: measurements of the machine at hand -> a hardware profile (DeviceSpec) the cost model reads.

Pure Python (no torch): the measurements come from `scalestudy.engine.microbench` (a JSON dict) and from real
training trials (`scalestudy train` summaries); this module only fits numbers.

1. `profile_from_microbench`: peak FLOP/s per precision = the best measured matmul rate per rank; the GEMM
   efficiency curve = measured rate / peak vs matrix size (made non-decreasing, since a smaller GEMM is never
   faster per FLOP than a larger one and a lower point at a larger size is contention noise); memory bandwidth
   from a copy; CPU Adam rate from torch AdamW; the link from an alpha-beta fit of all_reduce time vs size
   (ring all-reduce: t = 2(n-1) alpha + 2(n-1)/n * S / B, Thakur et al. 2005; alpha = per-hop latency,
   B = per-device one-direction bandwidth, the convention of `DeviceSpec.intra_node_bytes_per_s`).
2. `fit_efficiency`: the efficiency terms refit from trials (measured step time vs the estimate): a compute
   factor (scales the GEMM efficiency curve), a communication factor (scales link bandwidths) and a fixed
   per-micro-step overhead (framework time: Python, hooks, kernel launches) that the analytical model has no
   term for. Fitted by least squares on log step time; fewer trials fit fewer terms (1: compute factor only).
3. `save_profile` / `load_profile`: YAML with exactly the DeviceSpec fields (`--gpu PATH.yaml` reads it back).
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import yaml

from scalestudy.errors import ScalestudyError
from scalestudy.specs.hardware import DeviceSpec, get_device

# ---------------------------------------------------------------------------------------------- micro-benchmarks


def best_rates(matmul: list[dict]) -> dict[str, float]:
    """Peak FLOP/s per precision: the best measured matmul rate (per rank)."""
    peaks: dict[str, float] = {}
    for row in matmul:
        peaks[row["dtype"]] = max(peaks.get(row["dtype"], 0.0), float(row["flops_per_s"]))
    return peaks


def efficiency_curve(matmul: list[dict], dtype: str, peak: float) -> list[list[float]]:
    """[[size, fraction of peak], ...] ascending in size, non-decreasing (running maximum, see module doc)."""
    rows = sorted((int(r["n"]), float(r["flops_per_s"]) / peak) for r in matmul if r["dtype"] == dtype)
    curve, best = [], 0.0
    for n, frac in rows:
        best = max(best, frac)
        curve.append([n, round(min(best, 1.0), 4)])
    return curve


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
class Efficiency:
    """Efficiency terms refit from measured trials (1.0 / 1.0 / 0.0 = the uncalibrated model)."""

    compute: float = 1.0  # multiplies the GEMM efficiency curve (achieved / modelled compute rate)
    comm: float = 1.0  # multiplies link bandwidths (achieved / modelled)
    overhead_s: float = 0.0  # fixed seconds per micro-step (framework time the model has no term for)

    def to_dict(self) -> dict:
        return asdict(self)


def apply_efficiency(device: DeviceSpec, eff: Efficiency) -> DeviceSpec:
    """The device with the compute and communication factors applied (the overhead is added by `predict`)."""
    curve = [[n, f * eff.compute] for n, f in device.matmul_efficiency]
    return replace(device, matmul_efficiency=curve,
                   intra_node_bytes_per_s=device.intra_node_bytes_per_s * eff.comm,
                   inter_node_bytes_per_s=device.inter_node_bytes_per_s * eff.comm)


@dataclass(frozen=True)
class Observation:
    """One measured trial: its strategy's step time as estimated for given factors, via `model(eff)`."""

    measured_step_s: float
    grad_accum: int
    # step time (s) the cost model gives with the factors applied: callable(compute, comm) -> seconds
    model: object


def predict(obs: Observation, eff: Efficiency) -> float:
    return obs.model(eff.compute, eff.comm) + eff.overhead_s * obs.grad_accum


def _loss(obs: list[Observation], eff: Efficiency) -> float:
    return sum((math.log(predict(o, eff)) - math.log(o.measured_step_s)) ** 2 for o in obs)


def fit_efficiency(obs: list[Observation], start: Efficiency | None = None) -> Efficiency:
    """Least squares on log step time by coordinate search (a few hundred model calls; no scipy needed).

    Terms fitted: 1 trial -> compute; 2 -> compute + overhead; >= 3 -> compute + comm + overhead.
    """
    ok = [o for o in obs if o.measured_step_s > 0]
    if not ok:
        return start or Efficiency()
    eff = start or Efficiency()
    terms = ["compute"] + (["overhead_s"] if len(ok) >= 2 else []) + (["comm"] if len(ok) >= 3 else [])
    best = _loss(ok, eff)
    step = {"compute": 0.5, "comm": 0.5, "overhead_s": 0.25}
    floor = {"compute": 1e-3, "comm": 1e-3, "overhead_s": 0.0}
    scale = min(o.measured_step_s / max(o.grad_accum, 1) for o in ok)  # overhead moves in units of a micro-step
    for _ in range(60):
        improved = False
        for t in terms:
            for sign in (+1, -1):
                cur = getattr(eff, t)
                if t == "overhead_s":
                    new = max(floor[t], cur + sign * step[t] * scale)
                else:
                    new = max(floor[t], cur * math.exp(sign * step[t]))
                cand = replace(eff, **{t: new})
                loss = _loss(ok, cand)
                if loss < best - 1e-12:
                    eff, best, improved = cand, loss, True
        if not improved:
            step = {k: v / 2 for k, v in step.items()}
            if max(step.values()) < 1e-3:
                break
    return eff


# ---------------------------------------------------------------------------------------------- files


def save_profile(device: DeviceSpec, path: str | Path, extra_comment: str = "") -> Path:
    """Write the DeviceSpec as YAML (temp file + rename); `get_device(path)` reads it back."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = asdict(device)
    text = (f"# {extra_comment}\n" if extra_comment else "") + yaml.safe_dump(data, sort_keys=False)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return path


def load_profile(path: str | Path) -> DeviceSpec:
    return get_device(str(path))
