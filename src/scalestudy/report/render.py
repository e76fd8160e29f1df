"""`scalestudy report DIR`: DIR/report.html (self-contained: plots embedded as SVG), DIR/report.md (plots linked
from DIR/plots/ as 2x PNG) and DIR/plots/*.svg|png, from the study's store. Files are written to temp and renamed.
"""

from __future__ import annotations

import base64
import html
import os
import re
import time
from pathlib import Path

from scalestudy.costmodel.mfu import MFU_CONVENTION
from scalestudy.errors import ScalestudyError
from scalestudy.outputs import check_output_dir
from scalestudy.report.findings import findings
from scalestudy.report.plots import MIB, Plot, write_plots
from scalestudy.report.scaling_section import report_section
from scalestudy.report.table import MEMORY_CONVENTION, StudyData, load, mfu_peaks
from scalestudy.atomicfile import write_text_atomic

CAPTIONS = {
    "step_time.png": "Seconds per optimizer step vs world size, per model and strategy (median after warm-up).",
    "throughput.png": "Training throughput (tokens/s, encoder + decoder tokens) vs world size.",
    "scaling_efficiency.png": "Scaling efficiency: tokens/s at N ranks / (tokens/s at the smallest size x N/N0).",
    "memory.png": "Peak memory per rank by strategy and world size (bars measured, x = cost-model prediction of "
                  "the same quantity: model states on CPU, the device total on GPU).",
    "predicted_vs_measured.png": "Cost-model prediction vs measurement (time per step and memory per rank).",
    "loss_curves.png": "Training loss per optimizer step (nats/token); runs whose curves coincide are drawn once and "
                       "named together in the legend.",
}
SPREAD = " Points at the same world size are spread slightly sideways so that coinciding lines stay visible."
for _name in ("step_time.png", "throughput.png", "scaling_efficiency.png"):
    CAPTIONS[_name] += SPREAD
# (column, header, format) of the trials table; None values print as "-".
COLUMNS = (
    ("model", "model", "{}"), ("strategy", "strategy", "{}"), ("world_size", "ranks", "{}"),
    ("global_batch", "global batch (seq)", "{}"), ("step_s", "s/step (median)", "{:.3g}"),
    ("unqueued_step_s", "s/step less run-queue wait", "{:.3g}"),  # what a CPU profile's prediction stands for
    ("tokens_per_s", "tokens/s", "{:,.0f}"), ("mfu", "MFU (%)", "pct"),
    ("peak_mem_bytes", "peak mem/rank (MiB)", "mib"), ("pred_step_s", "predicted s/step", "{:.3g}"),
    ("pred_mem_bytes", "predicted mem/rank (MiB)", "mib"), ("loss", "final loss (nats/token)", "{:.3f}"),
)
TEXT_COLUMNS = ("model", "strategy")  # every other column holds numbers: right-aligned so digits line up


def _fmt(value, fmt: str) -> str:
    if value is None:
        return "-"
    if fmt == "mib":
        return f"{value / MIB:.1f}"
    if fmt == "pct":
        return f"{100 * value:.2f}"
    return fmt.format(value)


def _conventions(data: StudyData) -> str:
    """What the table's memory and MFU columns count, with the peak the trials' MFU divides by (a CPU run's is this
    machine's measured matmul peak, which the formula alone does not give)."""
    peaks = mfu_peaks(data)
    return f"Memory: {MEMORY_CONVENTION}. {MFU_CONVENTION}" + (f"; peak: {'; '.join(peaks)}." if peaks else ".")


def _code_html(text: str) -> str:
    """Escaped text with its `command` spans as <code>, as the Markdown shows them (backticks are markup there)."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))


def _first_line(text: str | None) -> str:
    return (text or "").strip().splitlines()[0] if (text or "").strip() else ""


NO_SECTION = "No scaling-law section: "


def _no_section(reason: str) -> tuple[str, str]:
    """One line in place of the section (no heading over nothing)."""
    return f"_{NO_SECTION}{reason}._", f'<p class="meta">{_code_html(NO_SECTION + reason)}.</p>'


def scaling_section(directory: Path) -> tuple[str, str]:
    """(markdown, html) of the scaling-law section (`report_section`: the fits of `scalestudy.scaling`), or one
    line saying why there is none (starting with NO_SECTION)."""
    import warnings

    try:
        with warnings.catch_warnings():  # numpy's overflow warnings on absurd stored values: the fit's own checks
            warnings.simplefilter("ignore", RuntimeWarning)  # say what is unusable, in the report, not on stderr
            section = report_section(directory, plots_dir=directory / "plots")
    except ScalestudyError as exc:
        return _no_section(str(exc))
    except Exception as exc:  # noqa: BLE001 - the rest of the report must still be written
        return _no_section(f"the scaling fit failed: {type(exc).__name__}: {_first_line(str(exc))}")
    if not section.fitted:  # only reasons to show: say them in one line instead of an empty-looking section
        reason = "; ".join(section.not_fitted) or "no scaling law was fitted"
        return _no_section(f"{reason} (runs at several model sizes and compute budgets, e.g. from "
                           "`scalestudy search` or a study over several models, give one)")
    md, body = section.markdown, section.html
    for png in section.pngs:
        alt = _scaling_alt(Path(png))
        body += _img_tag(Path(png), alt)
        md += f"\n\n![{alt}]({os.path.relpath(png, directory)})"
    return md, body


def _scaling_alt(png: Path) -> str:
    """What a scaling figure (scaling/plots.py plot_fit, named scaling_<law>.png) shows."""
    law = png.stem.removeprefix("scaling_")
    alt = (f"Scatter of final loss (nats/token) against training compute (FLOPs, log axes) with the fitted {law} "
           "law, its bootstrap band and the extrapolation with its prediction interval")
    if law == "chinchilla":
        alt += "; beside it the iso-FLOP view: loss against parameters at fixed compute, compute-optimal N marked"
    return alt + "."


def _img_tag(path: Path, alt: str, caption: str = "") -> str:
    raw = path.read_bytes()
    mime, size = "image/svg+xml", ""
    if path.suffix == ".png":  # PNGs are drawn at 2x: shown at half their pixel width, sharp on high-DPI screens
        mime, size = "image/png", f' width="{int.from_bytes(raw[16:20], "big") // 2}"'
    data = base64.b64encode(raw).decode("ascii")
    cap = f"<figcaption>{html.escape(caption)}</figcaption>" if caption else ""
    return f'<figure><img alt="{html.escape(alt, quote=True)}"{size} src="data:{mime};base64,{data}">{cap}</figure>'


def _trial_rows(data: StudyData) -> list[list[str]]:
    return [[_fmt(t.get(c), f) for c, _, f in COLUMNS] for t in data.ok]


def _failure_rows(data: StudyData) -> list[list[str]]:
    return [[t["status"], t["label"], _fmt(t.get("wall_s"), "{:.1f}"), _first_line(t.get("error_tail")),
             "\n".join((t.get("error_tail") or "").splitlines()[-6:])] for t in data.failed]


FAIL_HEAD = ["outcome", "trial", "wall time (s)", "reason", "last lines of output"]
TRIAL_NUMERIC = [h not in TEXT_COLUMNS for h, _, _ in COLUMNS]
FAIL_NUMERIC = [h == "wall time (s)" for h in FAIL_HEAD]


def _md_table(head: list[str], rows: list[list[str]], numeric: list[bool]) -> list[str]:
    """A Markdown table with numeric columns right-aligned (`---:`) and '|' in cells escaped."""
    out = ["| " + " | ".join(head) + " |", "|" + "".join("---:|" if n else "---|" for n in numeric)]
    return out + ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows]


def _env_line(data: StudyData) -> str:
    env = data.env
    versions = ", ".join(f"{k} {v}" for k, v in (env.get("versions") or {}).items() if v)
    mem = env.get("memory_bytes")
    mem_text = f", {mem / 2**30:.0f} GiB RAM" if mem else ""
    return (f"host {env.get('host', '?')}: {env.get('cpu', '?')} x {env.get('cpu_count', '?')} cores{mem_text}; "
            f"Python {env.get('python', '?')}; {versions}")


def render_markdown(data: StudyData, lines: list[str], plots: list[Plot], scaling_md: str) -> str:
    out = [f"# Study report: {data.name}", "", f"_{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
           f"{_env_line(data)}_", "", "## Findings", ""]
    out += [f"- {line}" for line in lines] + ["", "## Plots", ""]
    for p in plots:
        out += [f"![{p.alt.replace(']', ')').replace('[', '(')}](plots/{p.name})", "",
                f"_{CAPTIONS.get(p.name, '')}_", ""]
    out += ["## Trials (OK)", ""] + _md_table([h for _, h, _ in COLUMNS], _trial_rows(data), TRIAL_NUMERIC)
    out += ["", _conventions(data), "",
            "## Failures", ""]
    fails = _failure_rows(data)
    if fails:
        out += _md_table(FAIL_HEAD[:4], [r[:4] for r in fails], FAIL_NUMERIC[:4])
    else:
        out.append("None: every trial finished OK.")
    out += ["", "## Scaling laws", "", scaling_md, ""] if _has_section(scaling_md) else ["", scaling_md, ""]
    return "\n".join(out)


CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2em auto;max-width:1200px;
color:#222;padding:0 1em} h1{font-size:1.6em} h2{border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:1.6em}
table{border-collapse:collapse;font-size:.85em;margin:.5em 0} th,td{border:1px solid #ccc;padding:.25em .5em;
text-align:left;vertical-align:top} th{background:#f3f3f3} td.num,th.num{text-align:right;
font-variant-numeric:tabular-nums} td.num{white-space:nowrap} figure{margin:1em 0}
.figs{display:flex;flex-wrap:wrap;gap:1.5em 1em;align-items:flex-start} .figs figure{margin:0;display:table}
.figs figcaption{display:table-caption;caption-side:bottom;padding-top:.3em} .scroll{overflow-x:auto}
.trials td{white-space:nowrap}
img{max-width:100%;border:1px solid #eee} figcaption{font-size:.85em;color:#555} pre{white-space:pre-wrap;
font-size:.8em;margin:0} .meta{color:#555;font-size:.9em} .OOM{color:#a0a} .FAILED{color:#c00} .TIMEOUT{color:#b80}
"""


def _has_section(scaling: str) -> bool:
    return NO_SECTION not in scaling


def _html_table(head: list[str], rows: list[list[str]], numeric: list[bool], pre_last: bool = False,
                css_class: str = "") -> str:
    th = "".join(f'<th class="num">{html.escape(h)}</th>' if n else f"<th>{html.escape(h)}</th>"
                 for h, n in zip(head, numeric))
    body = []
    for r in rows:
        cells = [f'<td class="num">{html.escape(c)}</td>' if n else f"<td>{html.escape(c)}</td>"
                 for c, n in zip(r, numeric)]
        if pre_last:
            cells[-1] = f"<td><pre>{html.escape(r[-1])}</pre></td>"
            cells[0] = f'<td class="{html.escape(r[0])}">{html.escape(r[0])}</td>'
        body.append("<tr>" + "".join(cells) + "</tr>")
    cls = f' class="{css_class}"' if css_class else ""
    return f'<div class="scroll"><table{cls}><thead><tr>{th}</tr></thead><tbody>{"".join(body)}</tbody></table></div>'


def render_html(data: StudyData, lines: list[str], plots: list[Plot], scaling_html: str) -> str:
    figs = "".join(_img_tag(p.svg, p.alt, CAPTIONS.get(p.name, "")) for p in plots)
    fails = _failure_rows(data)
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f"<title>Study report: {html.escape(data.name)}</title><style>{CSS}</style></head><body>",
        f"<h1>Study report: {html.escape(data.name)}</h1>",
        f'<p class="meta">{time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}; {html.escape(_env_line(data))}</p>',
        "<h2>Findings</h2><ul>" + "".join(f"<li>{html.escape(x)}</li>" for x in lines) + "</ul>",
        "<h2>Plots</h2>" + (f'<div class="figs">{figs}</div>' if figs else "<p>No OK trial to plot.</p>"),
        "<h2>Trials (OK)</h2>" + _html_table([h for _, h, _ in COLUMNS], _trial_rows(data), TRIAL_NUMERIC, css_class="trials"),
        f'<p class="meta">{_code_html(_conventions(data))}</p>',
        "<h2>Failures</h2>" + (_html_table(FAIL_HEAD, fails, FAIL_NUMERIC, pre_last=True) if fails
                               else "<p>None: every trial finished OK.</p>"),
        ("<h2>Scaling laws</h2>" if _has_section(scaling_html) else "") + scaling_html,
        "</body></html>",
    ]
    return "\n".join(parts)


def _write(path: Path, text: str) -> None:
    write_text_atomic(path, text)


def check_report_paths(directory: str | Path) -> Path:
    """The report's files and plots folder can be written in `directory` (a command that runs a study first, demo,
    asks before it starts); returns the plots folder."""
    directory = Path(directory)
    check_output_dir(directory, "report: study directory", files=("report.md", "report.html"))
    plots_dir = directory / "plots"
    for path, want in ((plots_dir, "a directory"), (directory / "report.md", "a file"),
                       (directory / "report.html", "a file")):
        if path.exists() and (path.is_dir() != (want == "a directory")):
            raise ScalestudyError(f"report: cannot write {path}: it exists and is not {want}")
    check_output_dir(plots_dir, "report: plots directory")  # an unwritable one would leave every plot out
    return plots_dir


def write_report(directory: str | Path) -> dict:
    """Write the report files; return their paths."""
    directory = Path(directory)
    data = load(directory)
    if not data.trials:
        raise ScalestudyError(f"study {directory} has no finished trial yet: nothing to report")
    plots_dir = check_report_paths(directory)  # before any plot
    plots = write_plots(data, plots_dir)
    lines = findings(data)
    scaling_md, scaling_html = scaling_section(directory)
    _write(directory / "report.md", render_markdown(data, lines, plots, scaling_md))
    _write(directory / "report.html", render_html(data, lines, plots, scaling_html))
    return {"html": directory / "report.html", "md": directory / "report.md", "plots": [p.png for p in plots],
            "svgs": [p.svg for p in plots], "plots_dir": plots_dir, "findings": lines, "gaps": data.gaps()}
