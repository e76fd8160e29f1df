"""The report's PNG plots (matplotlib, Agg backend). Each function writes one file and returns its path or None.

Every axis names its quantity and unit; world sizes are ranks (devices).
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path

from scalestudy.report.table import StudyData

MIB = 2**20
DPI = 100


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _grid(n: int, width: float = 5.0, height: float = 3.8):
    plt = _plt()
    cols = min(n, 3)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False)
    flat = [ax for row in axes for ax in row]
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    _plt().close(fig)
    return path


def _world_axis(ax, sizes: list[int]) -> None:
    ax.set_xlabel("world size (ranks)")
    if sizes and max(sizes) / min(sizes) >= 8:
        ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(set(sizes)))
    ax.set_xticklabels([str(s) for s in sorted(set(sizes))])


def _per_world_size(data: StudyData, value: str, ylabel: str, path: Path, scale: float = 1.0) -> Path | None:
    models = [m for m in data.models() if data.points(m, value)]
    if not models:
        return None
    fig, axes = _grid(len(models))
    for ax, model in zip(axes, models):
        sizes = []
        for series, pts in data.points(model, value).items():
            ax.plot(list(pts), [v * scale for v in pts.values()], marker="o", label=series)
            sizes += list(pts)
        _world_axis(ax, sizes)
        ax.set_ylabel(ylabel)
        ax.set_title(model)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    return _save(fig, path)


def step_time(data: StudyData, folder: Path) -> Path | None:
    return _per_world_size(data, "step_s", "time per optimizer step (s, median after warm-up)",
                           folder / "step_time.png")


def throughput(data: StudyData, folder: Path) -> Path | None:
    return _per_world_size(data, "tokens_per_s", "throughput (tokens/s, encoder + decoder, median)",
                           folder / "throughput.png")


def efficiency_points(data: StudyData, model: str) -> dict[str, dict[int, float]]:
    """Scaling efficiency (%): tokens/s at N ranks / (tokens/s at the smallest N0 x N / N0)."""
    out = {}
    for series, pts in data.points(model, "tokens_per_s").items():
        if len(pts) < 2:
            continue
        n0 = min(pts)
        out[series] = {n: 100.0 * v / (pts[n0] * n / n0) for n, v in pts.items()}
    return out


def scaling_efficiency(data: StudyData, folder: Path) -> Path | None:
    models = [m for m in data.models() if efficiency_points(data, m)]
    if not models:
        return None
    fig, axes = _grid(len(models))
    for ax, model in zip(axes, models):
        sizes = []
        for series, pts in efficiency_points(data, model).items():
            ax.plot(list(pts), list(pts.values()), marker="o", label=series)
            sizes += list(pts)
        ax.axhline(100, color="grey", lw=0.8, ls="--")
        _world_axis(ax, sizes)
        ax.set_ylabel("scaling efficiency (%, vs linear from smallest size)")
        ax.set_title(model)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    return _save(fig, folder / "scaling_efficiency.png")


def memory(data: StudyData, folder: Path) -> Path | None:
    """Grouped bars: peak memory per rank by strategy, one bar per world size; x = cost-model prediction."""
    models = [m for m in data.models() if data.points(m, "peak_mem_bytes")]
    if not models:
        return None
    fig, axes = _grid(len(models), width=6.0)
    for ax, model in zip(axes, models):
        measured = data.points(model, "peak_mem_bytes")
        predicted = data.points(model, "pred_mem_bytes")
        series = list(measured)
        sizes = sorted({n for pts in measured.values() for n in pts})
        width = 0.8 / max(1, len(sizes))
        for j, n in enumerate(sizes):
            xs = [i + (j - (len(sizes) - 1) / 2) * width for i in range(len(series))]
            ax.bar(xs, [measured[s].get(n, 0) / MIB for s in series], width, label=f"{n} ranks (measured)")
            pred = [(x, predicted.get(s, {}).get(n)) for x, s in zip(xs, series)]
            pred = [(x, v / MIB) for x, v in pred if v]
            if pred:
                ax.scatter(*zip(*pred), marker="x", color="black", zorder=3,
                           label="cost model" if j == 0 else None)
        ax.set_xticks(range(len(series)))
        ax.set_xticklabels(series, rotation=30, ha="right", fontsize=8)
        ax.set_ylabel("peak memory per rank (MiB)")
        ax.set_title(model)
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3, axis="y")
    return _save(fig, folder / "memory.png")


def _pairs(data: StudyData, measured: str, predicted: str) -> list[tuple[float, float]]:
    return [(t[measured], t[predicted]) for t in data.ok if t.get(measured) and t.get(predicted)]


def percent_error(pred: float, meas: float) -> float:
    """Signed relative error of a prediction (%): (predicted - measured) / measured x 100."""
    return 100.0 * (pred - meas) / meas


def predicted_vs_measured(data: StudyData, folder: Path) -> Path | None:
    panels = [("step_s", "pred_step_s", "time per step", "s", 1.0),
              ("peak_mem_bytes", "pred_mem_bytes", "memory per rank", "MiB", 1 / MIB)]
    panels = [p for p in panels if _pairs(data, p[0], p[1])]
    if not panels:
        return None
    fig, axes = _grid(len(panels), width=5.0, height=4.5)
    for ax, (meas, pred, what, unit, scale) in zip(axes, panels):
        pairs = [(m * scale, p * scale) for m, p in _pairs(data, meas, pred)]
        ax.scatter([m for m, _ in pairs], [p for _, p in pairs], s=18)
        values = [v for pair in pairs for v in pair]
        lo, hi = min(values) * 0.8, max(values) * 1.25
        ax.plot([lo, hi], [lo, hi], color="grey", ls="--", lw=0.8, label="prediction = measurement")
        ax.set_xscale("log")
        ax.set_yscale("log")
        median = statistics.median(abs(percent_error(p, m)) for m, p in pairs)
        ax.set_title(f"{what}: median |error| {median:.0f}% over {len(pairs)} trials")
        ax.set_xlabel(f"measured {what} ({unit})")
        ax.set_ylabel(f"predicted {what} ({unit}, cost model)")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3, which="both")
    return _save(fig, folder / "predicted_vs_measured.png")


def loss_curves(data: StudyData, folder: Path) -> Path | None:
    models = [m for m in data.models() if any(t["model"] == m and data.metrics.get(t["trial_id"]) for t in data.ok)]
    if not models:
        return None
    fig, axes = _grid(len(models))
    for ax, model in zip(axes, models):
        for t in data.ok:
            rows = [r for r in data.metrics.get(t["trial_id"], []) if r.get("loss") is not None]
            if t["model"] != model or not rows:
                continue
            ax.plot([r["step"] for r in rows], [r["loss"] for r in rows], lw=1,
                    label=f"{data.series(t)} ws{t['world_size']}" + (f" lr{t['lr']:g}" if _lrs(data) > 1 else ""))
        ax.set_xlabel("optimizer step")
        ax.set_ylabel("training loss (nats/token)")
        ax.set_title(model)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, ncol=2)
    return _save(fig, folder / "loss_curves.png")


def _lrs(data: StudyData) -> int:
    return len({t["lr"] for t in data.ok})


PLOTS = (step_time, throughput, scaling_efficiency, memory, predicted_vs_measured, loss_curves)


def write_plots(data: StudyData, folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    return [p for p in (plot(data, folder) for plot in PLOTS) if p is not None]
