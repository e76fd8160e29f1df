"""The report's plots (matplotlib, Agg backend): each written as SVG (embedded in the HTML: sharp at any zoom) and as
a 2x-resolution PNG (linked from the Markdown), with alt text saying what the plot shows.

Every axis names its quantity and unit; world sizes are ranks (devices). Series that coincide stay visible: each
series gets its own colour, marker and line style, markers shrink from series to series so that one drawn over
another still shows the one below, and points at the same world size are spread slightly sideways.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import NamedTuple

from scalestudy.report.table import StudyData

MIB = 2**20
PNG_DPI = 200  # 2x the 100 dpi the figure sizes are laid out for: crisp on high-DPI screens
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f",
           "#bcbd22")  # tab10, red second so the first two series differ for red-green colour-blind readers too
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "*")
LINESTYLES = ("-", "--", "-.", ":")
DODGE = 0.03  # sideways spread of coinciding points, as a fraction of the world size (log axis: a constant gap)


class Plot(NamedTuple):
    png: Path
    svg: Path
    alt: str

    @property
    def name(self) -> str:
        return self.png.name


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams["svg.fonttype"] = "none"  # text stays text: smaller files, selectable, searchable
    plt.rcParams["svg.hashsalt"] = "scalestudy"  # stable ids: the same data gives the same file
    return plt


def style(i: int, n: int) -> dict:
    """Line/marker style of series i of n: colour, marker and dash pattern all differ, markers shrink with i."""
    return {"color": COLOURS[i % len(COLOURS)], "marker": MARKERS[i % len(MARKERS)],
            "linestyle": LINESTYLES[i % len(LINESTYLES)], "markersize": 9 - 4 * i / max(1, n - 1),
            "markerfacecolor": "none" if i % 2 == 0 else COLOURS[i % len(COLOURS)], "linewidth": 1.5, "zorder": 2 + i}


def dodge(x: float, i: int, n: int) -> float:
    return x * (1 + DODGE * (i - (n - 1) / 2))


def _grid(n: int, width: float = 5.0, height: float = 3.8):
    plt = _plt()
    cols = min(n, 3)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False)
    flat = [ax for row in axes for ax in row]
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]


def _save(fig, path: Path, alt: str) -> Plot:
    fig.tight_layout()
    svg = path.with_suffix(".svg")
    fig.savefig(svg, metadata={"Title": alt, "Date": None})
    fig.savefig(path, dpi=PNG_DPI)
    _plt().close(fig)
    return Plot(path, svg, alt)


def _world_axis(ax, sizes: list[int]) -> None:
    from matplotlib.ticker import NullFormatter

    ax.set_xlabel("world size (ranks)")
    sizes = sorted(set(sizes))
    ax.set_xscale("log", base=2)  # equal gaps for doublings; also makes the sideways spread a constant width
    ax.set_xticks(sizes)
    ax.set_xticklabels([str(s) for s in sizes])
    ax.xaxis.set_minor_formatter(NullFormatter())
    if sizes:
        ax.set_xlim(sizes[0] / 1.25, sizes[-1] * 1.25)


def _legend(ax, n: int) -> None:
    # below the panel, as the loss curves': inside it ('best') a 7-strategy legend covered points it had no room to
    # avoid (a study of 7 strategies at 1-2 ranks: t5-tiny's fsdp-z3 point at 2 ranks hidden under the legend)
    ax.legend(fontsize=8 if n <= 6 else 7, loc="upper center", bbox_to_anchor=(0.5, -0.16),
              ncol=min(n, 4), frameon=False)


def _names(items) -> str:
    items = list(items)
    return ", ".join(items) if len(items) <= 6 else ", ".join(items[:5]) + f" and {len(items) - 5} more"


def _series_lines(models: list[str], get, ylabel: str) -> tuple:
    """One panel per model, one styled line per series; returns (fig, alt-text fragments)."""
    fig, axes = _grid(len(models), height=4.8)  # taller: the legend below must leave the long y label its length
    parts = []
    for ax, model in zip(axes, models):
        series = get(model)
        sizes = []
        for i, (name, pts) in enumerate(series.items()):
            ax.plot([dodge(n, i, len(series)) for n in pts], list(pts.values()), label=name,
                    **style(i, len(series)))
            sizes += list(pts)
        _world_axis(ax, sizes)
        ax.set_ylabel(ylabel)
        ax.set_title(model)
        ax.grid(alpha=0.3)
        _legend(ax, len(series))
        parts.append(_extremes(model, series))
    return fig, parts


def _extremes(model: str, series: dict[str, dict[int, float]]) -> str:
    """'for t5-tiny at 2 ranks: highest ds-z0 (1,390), lowest fsdp-z3 (941)' at the largest world size (whole
    numbers from 1,000: alt text is read aloud, and '1.39e+03' reads as 'one point three nine e plus zero three')."""
    n = max((w for pts in series.values() for w in pts), default=None)
    at = {s: pts[n] for s, pts in series.items() if n in pts}
    if not at:
        return model
    hi, lo = max(at, key=at.get), min(at, key=at.get)
    def num(v: float) -> str:
        return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.3g}"
    return f"{model} at {n} rank{'s' if n != 1 else ''}: highest {hi} ({num(at[hi])}), lowest {lo} ({num(at[lo])})"


def _per_world_size(data: StudyData, value: str, ylabel: str, path: Path, what: str) -> Plot | None:
    models = [m for m in data.models() if data.points(m, value)]
    if not models:
        return None
    fig, parts = _series_lines(models, lambda m: data.points(m, value), ylabel)
    names = _names(dict.fromkeys(s for m in models for s in data.points(m, value)))
    alt = f"Line chart of {what} against world size (ranks), one line per strategy ({names}); " + "; ".join(parts)
    return _save(fig, path, alt + ".")


def step_time(data: StudyData, folder: Path) -> Plot | None:
    return _per_world_size(data, "step_s", "time per optimizer step (s, median after warm-up)",
                           folder / "step_time.png", "seconds per optimizer step")


def throughput(data: StudyData, folder: Path) -> Plot | None:
    return _per_world_size(data, "tokens_per_s", "throughput (tokens/s, encoder + decoder, median)",
                           folder / "throughput.png", "throughput in tokens/s")


def efficiency_points(data: StudyData, model: str) -> dict[str, dict[int, float]]:
    """Scaling efficiency (%): tokens/s at N ranks / (tokens/s at the smallest N0 x N / N0)."""
    out = {}
    for series, pts in data.points(model, "tokens_per_s").items():
        if len(pts) < 2:
            continue
        n0 = min(pts)
        out[series] = {n: 100.0 * v / (pts[n0] * n / n0) for n, v in pts.items()}
    return out


def scaling_efficiency(data: StudyData, folder: Path) -> Plot | None:
    models = [m for m in data.models() if efficiency_points(data, m)]
    if not models:
        return None
    fig, parts = _series_lines(models, lambda m: efficiency_points(data, m),
                               "scaling efficiency (%, vs linear from smallest size)")
    for ax in fig.axes:
        if ax.get_visible():
            ax.axhline(100, color="grey", lw=0.8, ls="--", zorder=1)
    alt = ("Line chart of scaling efficiency (%, 100 = linear speed-up from the smallest world size) against world "
           "size, one line per strategy; " + "; ".join(parts))
    return _save(fig, folder / "scaling_efficiency.png", alt + ".")


def memory(data: StudyData, folder: Path) -> Plot | None:
    """Grouped bars: peak memory per rank by strategy, one bar per world size; x = cost-model prediction."""
    models = [m for m in data.models() if data.points(m, "peak_mem_bytes")]
    if not models:
        return None
    fig, axes = _grid(len(models), width=6.0)
    parts = []
    for ax, model in zip(axes, models):
        measured = data.points(model, "peak_mem_bytes")
        predicted = data.points(model, "pred_mem_bytes")
        series = list(measured)
        sizes = sorted({n for pts in measured.values() for n in pts})
        width = 0.8 / max(1, len(sizes))
        for j, n in enumerate(sizes):
            xs = [i + (j - (len(sizes) - 1) / 2) * width for i in range(len(series))]
            ax.bar(xs, [measured[s].get(n, 0) / MIB for s in series], width,
                   label=f"{n} rank{'s' if n != 1 else ''} (measured)", color=COLOURS[j % len(COLOURS)],
                   hatch=("", "//", "..", "xx")[j % 4], edgecolor="white")
            pred = [(x, predicted.get(s, {}).get(n)) for x, s in zip(xs, series)]
            pred = [(x, v / MIB) for x, v in pred if v]
            if pred:
                ax.scatter(*zip(*pred), marker="x", color="black", zorder=3,
                           label="cost model" if j == 0 else None)
        ax.set_xticks(range(len(series)))
        ax.set_xticklabels(series, rotation=30, ha="right", fontsize=8)
        ax.set_ylabel("peak memory per rank (MiB)")
        ax.set_title(model)
        _legend(ax, len(sizes) + 1)
        ax.grid(alpha=0.3, axis="y")
        parts.append(_extremes(model, {s: {n: v / MIB for n, v in p.items()} for s, p in measured.items()}) + " MiB")
    alt = ("Bar chart of peak memory per rank (MiB) by strategy, one bar per world size, crosses marking the cost "
           "model's prediction; " + "; ".join(parts))
    return _save(fig, folder / "memory.png", alt + ".")


def _pairs(data: StudyData, measured: str, predicted: str) -> list[tuple[float, float]]:
    return [(t[measured], t[predicted]) for t in data.ok if t.get(measured) and t.get(predicted)]


def percent_error(pred: float, meas: float) -> float:
    """Signed relative error of a prediction (%): (predicted - measured) / measured x 100."""
    return 100.0 * (pred - meas) / meas


def log_ticks(axis, lo: float, hi: float) -> None:
    """Readable log-axis labels: a few ticks at round values, printed plainly (0.05, 0.1, 200); no minor labels,
    which matplotlib otherwise prints at every 2..9 x 10^k when the range spans less than a decade and which then
    run together."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    decades = math.log10(hi / lo)
    subs = (1.0,) if decades > 3 else (1.0, 2.0, 5.0) if decades > 1 else (1.0, 1.5, 2.0, 3.0, 5.0, 7.0)
    axis.set_major_locator(LogLocator(base=10, subs=subs, numticks=8))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


def predicted_vs_measured(data: StudyData, folder: Path) -> Plot | None:
    panels = [("step_s", "pred_step_s", "time per step", "s", 1.0),
              ("peak_mem_bytes", "pred_mem_bytes", "memory per rank", "MiB", 1 / MIB)]
    panels = [p for p in panels if _pairs(data, p[0], p[1])]
    if not panels:
        return None
    fig, axes = _grid(len(panels), width=5.0, height=4.5)
    parts = []
    for ax, (meas, pred, what, unit, scale) in zip(axes, panels):
        pairs = [(m * scale, p * scale) for m, p in _pairs(data, meas, pred)]
        ax.scatter([m for m, _ in pairs], [p for _, p in pairs], s=18, zorder=3, label="measured (wall clock)")
        # the like-for-like time on a busy machine (the profile's predictions leave others' run-queue wait out): the
        # findings state both errors, so the plot shows both points
        unqueued = [] if meas != "step_s" else [(m, p) for m, p in _pairs(data, "unqueued_step_s", pred)]
        if unqueued:
            ax.scatter([m for m, _ in unqueued], [p for _, p in unqueued], s=22, zorder=3, facecolors="none",
                       edgecolors="C1", label="measured less run-queue wait")
        values = [v for pair in pairs + unqueued for v in pair]
        lo, hi = min(values) * 0.8, max(values) * 1.25
        ax.plot([lo, hi], [lo, hi], color="grey", ls="--", lw=0.8, label="prediction = measurement")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        log_ticks(ax.xaxis, lo, hi)
        log_ticks(ax.yaxis, lo, hi)
        median = statistics.median(abs(percent_error(p, m)) for m, p in pairs)
        less = (f"; less run-queue wait {statistics.median(abs(percent_error(p, m)) for m, p in unqueued):.0f}%"
                if unqueued else "")
        ax.set_title(f"{what}: median |error| {median:.0f}%{less}\nover {len(pairs)} trials", fontsize=10)
        ax.set_xlabel(f"measured {what} ({unit})")
        ax.set_ylabel(f"predicted {what} ({unit}, cost model)")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3, which="both")
        parts.append(f"{what} ({unit}): median error {median:.0f}%{less} over {len(pairs)} trials")
    alt = ("Scatter plots, log axes, of the cost model's prediction against the measurement, one point per trial, "
           "a dashed line where they agree; " + "; ".join(parts))
    return _save(fig, folder / "predicted_vs_measured.png", alt + ".")


def coinciding(curves: dict[str, dict[int, float]], tol: float) -> list[list[str]]:
    """Group curves that never differ by more than tol at their common steps (first member keeps its place)."""
    groups: list[list[str]] = []
    for name, curve in curves.items():
        for group in groups:
            ref = curves[group[0]]
            common = set(ref) & set(curve)
            if common and set(ref) == set(curve) and max(abs(ref[s] - curve[s]) for s in common) <= tol:
                group.append(name)
                break
        else:
            groups.append([name])
    return groups


def _loss_label(group: list[str]) -> str:
    """'ws1: ds-z0, ds-z1, ds-z2 (3 coincide)' when the members differ only in their strategy."""
    if len(group) == 1:
        return group[0]
    heads, tails = zip(*((n.split(" ", 1) + [""])[:2] for n in group))
    if len(set(tails)) == 1 and tails[0]:
        return f"{tails[0]}: {_names(heads)} ({len(group)} coincide)"
    return f"{_names(group)} ({len(group)} coincide)"


def loss_curves(data: StudyData, folder: Path) -> Plot | None:
    """Training loss per step; curves closer than 0.2% of the panel's loss range are drawn once and labelled with
    every run they stand for (identical curves across strategies are the expected outcome, not a plotting bug)."""
    models = [m for m in data.models() if any(t["model"] == m and data.metrics.get(t["trial_id"]) for t in data.ok)]
    if not models:
        return None
    fig, axes = _grid(len(models), width=6.0, height=4.2)
    parts = []
    for ax, model in zip(axes, models):
        curves = {}
        for t in data.ok:
            rows = [r for r in data.metrics.get(t["trial_id"], []) if r.get("loss") is not None]
            if t["model"] == model and rows:
                lr = f" lr{t['lr']:g}" if t.get("lr") is not None else " lr ?"
                name = f"{data.series(t)} ws{t['world_size']}" + (lr if _lrs(data) > 1 else "")
                curves[name] = {r["step"]: r["loss"] for r in rows}
        values = [v for c in curves.values() for v in c.values()]
        tol = 0.002 * ((max(values) - min(values)) or 1.0)
        groups = coinciding(curves, tol)
        for i, group in enumerate(groups):
            curve = curves[group[0]]
            st = style(i, len(groups))
            ax.plot(list(curve), list(curve.values()), label=_loss_label(group),
                    **{**st, "markersize": st["markersize"] * 0.7, "markevery": max(1, len(curve) // 10)})
        ax.set_xlabel("optimizer step")
        ax.set_ylabel("training loss (nats/token)")
        ax.set_title(f"{model}: {len(curves)} runs, {len(groups)} distinct curve" + ("s" if len(groups) != 1 else ""))
        ax.grid(alpha=0.3)
        # below the panel: long labels never cover the curves
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=1 if len(groups) <= 4 else 2,
                  frameon=False)
        finals = [c[max(c)] for c in curves.values()]
        final = f"{min(finals):.3g}" + (f"-{max(finals):.3g}" if f"{min(finals):.3g}" != f"{max(finals):.3g}" else "")
        parts.append(f"{model}: {len(curves)} runs drawn as {len(groups)} distinct curve"
                     f"{'s' if len(groups) != 1 else ''} (runs within {tol:.2g} nats/token of each other at every step "
                     f"are drawn once), final loss {final} nats/token")
    alt = "Line chart of training loss (nats/token) per optimizer step; " + "; ".join(parts)
    return _save(fig, folder / "loss_curves.png", alt + ".")


def _lrs(data: StudyData) -> int:
    return len({t["lr"] for t in data.ok})


PLOTS = (step_time, throughput, scaling_efficiency, memory, predicted_vs_measured, loss_curves)


def write_plots(data: StudyData, folder: Path) -> list[Plot]:
    """Every plot the data allows; one that cannot be drawn (values matplotlib cannot place, e.g. 1e308 s/step
    from a damaged store) is left out and named in data.plot_failures, never the end of the report."""
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for plot in PLOTS:
        try:
            p = plot(data, folder)
        except Exception as exc:  # noqa: BLE001 - the rest of the report must still be written
            _plt().close("all")
            first = (str(exc).strip().splitlines() or [""])[0]
            data.plot_failures.append(f"{plot.__name__} ({type(exc).__name__}: {first})")
            continue
        if p is not None:
            out.append(p)
    return out
