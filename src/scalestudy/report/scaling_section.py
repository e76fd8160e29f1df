"""The study report's scaling section: fits with their uncertainty, the extrapolation, and jump flags, rendered
from what `scalestudy.scaling` computes (`analyze`, `detect_jumps`, `load_runs`).

    report_section(source, plots_dir=None, **options) -> ScalingSection(markdown, html, pngs)

`source` is a study directory, a runs CSV, a list of row dicts or `Runs`. The markdown and HTML hold the text and
tables only; the caller places the PNGs (written to `plots_dir`; none when it is None), e.g. embedded in the HTML.
A law that cannot be fitted to these runs (too few runs, one model size, ...) is reported with its reason instead
of failing the section.
"""

from __future__ import annotations

import html as html_lib
import json
import re
from pathlib import Path
from typing import NamedTuple

import numpy as np

from scalestudy.errors import ScalestudyError
from scalestudy.scaling.analysis import Analysis, analyze
from scalestudy.scaling.jumps import JumpFlag, detect_jumps
from scalestudy.scaling.runs import Runs, load_runs


class _Parts(NamedTuple):
    markdown: str
    html: str
    pngs: list[Path]


class ScalingSection(_Parts):
    """Unpacks as (markdown, html, pngs); also says which laws were fitted and, one sentence each, why the others
    were not (a report with no fitted law says so in one line instead of showing an empty-looking section)."""

    def __new__(cls, markdown: str, html: str, pngs: list[Path], fitted=(), not_fitted=()):
        self = super().__new__(cls, markdown, html, pngs)
        self.fitted, self.not_fitted = tuple(fitted), tuple(not_fitted)
        return self


def _fmt(v: float) -> str:
    return f"{v:.4g}"


def _coef_table(data: dict) -> tuple[list[str], list[list[str]]]:
    head = ["coefficient", "value", f"{data['ci_level']:.0%} CI (bootstrap, {data['bootstrap']['replicates']} refits)"]
    rows = []
    for name, value in data["coef"].items():
        ci = data["ci"].get(name)
        rows.append([name, _fmt(value), "-" if ci is None else f"[{_fmt(ci[0])}, {_fmt(ci[1])}]"])
    return head, rows


def _interval(v) -> str:
    return "n/a" if not v else f"[{_fmt(v[0])}, {_fmt(v[1])}]"


def _prediction_line(data: dict) -> str:
    p = data["prediction"]
    if not p:
        return ""
    level = f"{data['ci_level']:.0%}"
    loss = (f"predicted loss {_fmt(p['loss'])} nats/token ({level} CI of the curve {_interval(p['loss_ci'])}, "
            f"{level} prediction interval of a run {_interval(p['loss_pi'])})")
    if "params_opt" in p:
        return (f"Extrapolation to C = {p['flops']:.3g} FLOPs ({p['convention']}): compute-optimal "
                f"N = {p['params_opt']:.3g} parameters {_interval(p['params_opt_ci'])}, "
                f"D = {p['tokens_opt']:.3g} tokens {_interval(p['tokens_opt_ci'])}; {loss}.")
    if "params" in p:
        return (f"Extrapolation to N = {p['params']:.3g} parameters, D = {p['tokens']:.3g} tokens "
                f"(C = {p['flops']:.3g} FLOPs, {p['convention']}): {loss}.")
    return f"Extrapolation to C = {p['flops']:.3g} FLOPs: {loss}."


def _series(runs: Runs, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Scale of each run, (N, D) when known (a grid has many N per compute) else C, and the metric; runs at the
    same scale are averaged."""
    scale = (np.column_stack([runs.params, runs.tokens]) if runs.params is not None and runs.tokens is not None
             else runs.flops[:, None])
    ok = np.isfinite(values) & np.all(np.isfinite(scale), axis=1)
    keys, inverse = np.unique(scale[ok], axis=0, return_inverse=True)
    inverse = inverse.ravel()
    return keys, np.array([values[ok][inverse == j].mean() for j in range(len(keys))])


def jump_report(runs: Runs, k: float = 3.0) -> list[tuple[str, list[JumpFlag] | str]]:
    """For the loss and each extra numeric metric: its jump flags vs scale, or why it was not tested."""
    out = []
    for name, values in {"loss": runs.loss, **runs.metrics}.items():
        if runs.flops is None and (runs.params is None or runs.tokens is None):
            out.append((name, "no scale columns (params and tokens, or flops)"))
            continue
        x, y = _series(runs, values)
        try:
            out.append((name, detect_jumps(x, y, k=k)))
        except ScalestudyError as exc:
            out.append((name, str(exc)))
    return out


NUMBER = re.compile(r"^[-+]?[\d.,]+(e[-+]?\d+)?%?$|^\[.*\]$|^-$")  # 1.5, 3e+08, 12%, [a, b] intervals, - (none)


def _numeric(rows: list[list[str]], j: int) -> bool:
    """Column j holds numbers (right-aligned so that digits line up)."""
    return bool(rows) and all(NUMBER.match(r[j].strip()) for r in rows)


def _md_table(head: list[str], rows: list[list[str]]) -> str:
    align = "".join("---:|" if _numeric(rows, j) else "---|" for j in range(len(head)))
    lines = ["| " + " | ".join(head) + " |", "|" + align]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def _html_table(head: list[str], rows: list[list[str]]) -> str:
    esc = html_lib.escape
    num = [_numeric(rows, j) for j in range(len(head))]
    cls = [' class="num"' if n else "" for n in num]
    body = "".join("<tr>" + "".join(f"<td{cls[j]}>{esc(c)}</td>" for j, c in enumerate(r)) + "</tr>" for r in rows)
    return f"<table><tr>{''.join(f'<th{cls[j]}>{esc(h)}</th>' for j, h in enumerate(head))}</tr>{body}</table>"


def _jump_rows(jumps, k: float) -> tuple[list[str], list[list[str]], list[str]]:
    head = ["metric", "scale", "value", "trend without it", "t score", "threshold", "test"]
    rows, notes = [], []
    for name, result in jumps:
        if isinstance(result, str):
            notes.append(f"{name}: not tested ({result})")
        elif not result:
            notes.append(f"{name}: follows a smooth trend (no point beyond {k:g} sigma)")
        for f in result if not isinstance(result, str) else []:
            scale = (f"N={f.scale[0]:.3g}, D={f.scale[1]:.3g}" if isinstance(f.scale, tuple)
                     else f"C={f.scale:.3g} FLOPs")
            rows.append([name, scale, _fmt(f.value), _fmt(f.expected), f"{f.score:.3g}",
                         f"{f.threshold:.3g}", f.test])
    return head, rows, notes


def search_summary(result: dict) -> tuple[str, str]:
    """Markdown and HTML of a hyperparameter search (DIR/search.json): best setting per proxy, trends."""
    head = ["proxy", "params", "best lr", "batch (seq)", "warm-up (steps)", "precision", "final loss (nats/token)",
            "trials complete/pruned/failed"]
    rows = []
    for m in result["models"]:
        b, t = m["best"], m["trials"]
        counts = f"{t.get('complete', 0)}/{t.get('pruned', 0)}/{t.get('fail', 0)}"
        if b is None:
            rows.append([m["model"], f"{m['params']:.3g}", "-", "-", "-", "-", "-", counts])
        else:
            p = b["params"]
            rows.append([m["model"], f"{m['params']:.3g}", f"{p['lr']:.3g}", str(p["global_batch"]),
                         str(p["warmup_steps"]), p["precision"], _fmt(b["loss"]), counts])
    lines = [f"Objective: {result['objective']}. {result['sampler']}; {result['pruner']}."]
    for key, label in (("lr", "best learning rate"), ("global_batch", "best global batch (sequences)")):
        tr = result["trends"].get(key, {})
        if "error" in tr:
            lines.append(f"Trend of the {label}: not fitted ({tr['error']}).")
            continue
        line = f"Trend of the {label}: {tr['coef']:.3g} * N^{tr['exponent']:.3f}"
        if tr.get("exponent_ci"):
            line += f" (exponent {tr['level']:.0%} CI [{tr['exponent_ci'][0]:.3f}, {tr['exponent_ci'][1]:.3f}])"
        if tr.get("target_params"):
            line += (f"; extrapolated to {result['target_model']} (N = {tr['target_params']:.3g}): "
                     f"{tr['target_value']:.3g}" + (f", {tr['level']:.0%} prediction interval "
                                                   f"{_interval(tr['target_pi'])}" if tr.get("target_pi") else ""))
        lines.append(line + "." + (f" Note: {tr['note']}." if tr.get("note") else ""))
    md = "### Hyperparameter search on proxies\n\n" + _md_table(head, rows) + "\n\n" + "\n".join(
        f"- {x}" for x in lines)
    html = ("<h3>Hyperparameter search on proxies</h3>" + _html_table(head, rows) + "<ul>"
            + "".join(f"<li>{html_lib.escape(x)}</li>" for x in lines) + "</ul>")
    return md, html


def report_section(source, plots_dir: str | Path | None = None, *, laws=("compute", "chinchilla"),
                   target_params: float | None = None, target_tokens: float | None = None,
                   budget_flops: float | None = None, n_boot: int = 100, seed: int = 0, level: float = 0.95,
                   flops_per_param_token: float | str | None = None, jump_k: float = 3.0) -> ScalingSection:
    """Markdown, HTML and PNGs of the scaling section for a study.

    Extrapolates to (target_params, target_tokens), or budget_flops, or by default 10x the largest run's compute.
    flops_per_param_token: k in C = k N D; default "auto" (measured from the runs' flops: the study's FLOPs come
    from the encoder-decoder-aware cost model) when the runs have params, tokens and flops, else 6.
    """
    search_dir = Path(source) if isinstance(source, (str, Path)) and Path(source).is_dir() else None
    best_runs = search_dir / "best_runs.csv" if search_dir is not None else None
    # A search directory's store mixes good and bad hyperparameters: fit its best runs instead.
    use_best = best_runs is not None and best_runs.is_file() and (search_dir / "search.json").is_file()
    runs = load_runs(best_runs if use_best else source)
    if flops_per_param_token is None:
        have = runs.params is not None and runs.tokens is not None and runs.flops is not None
        flops_per_param_token = "auto" if have else 6.0
    if budget_flops is None and target_params is None and target_tokens is None and runs.flops is not None:
        finite = runs.flops[np.isfinite(runs.flops)]
        budget_flops = 10 * float(finite.max()) if len(finite) else None
    search_json = search_dir / "search.json" if search_dir is not None else None
    md, html = [], []
    if search_json is not None and search_json.is_file():
        try:
            smd, shtml = search_summary(json.loads(search_json.read_text(encoding="utf-8")))
            md.append(smd)
            html.append(shtml)
        except (ValueError, KeyError, TypeError) as exc:
            md.append(f"_Hyperparameter search summary unreadable ({search_json}: {exc})._")
            html.append(f"<p><em>Hyperparameter search summary unreadable ({html_lib.escape(f'{search_json}: {exc}')})."
                        "</em></p>")
    what = ("the best trial of each proxy at several fractions of its token budget (best_runs.csv)" if use_best
            else "finished runs")
    md += [f"{len(runs)} rows: {what}. Fits: Huber loss on log-loss, L-BFGS from a grid of initialisations "
          f"(Hoffmann et al. 2022); {level:.0%} intervals from {n_boot} bootstrap refits (runs resampled, seed {seed})."]
    html.append(f"<p>{html_lib.escape(md[-1])}</p>")
    pngs: list[Path] = []
    fitted, not_fitted = [], []
    for law in laws:
        try:
            result: Analysis = analyze(runs, law, target_params=target_params, target_tokens=target_tokens,
                                       budget_flops=budget_flops, n_boot=n_boot, seed=seed, level=level,
                                       flops_per_param_token=flops_per_param_token)
        except ScalestudyError as exc:
            not_fitted.append(str(exc))
            md.append(f"### {law} law\n\n_Not fitted: {exc}._")
            html.append(f"<h3>{law} law</h3><p><em>Not fitted: {html_lib.escape(str(exc))}.</em></p>")
            continue
        fitted.append(law)
        data = result.to_dict()
        head, rows = _coef_table(data)
        quality = (f"{data['n_runs']} runs; residual s.d. {data['fit']['residual_sd_log']:.3g} in log-loss "
                   f"(about {100 * data['fit']['residual_sd_log']:.2g}% scatter of the runs around the fit).")
        pred = _prediction_line(data)
        warn = data["warnings"]
        md.append(f"### {law} law: `{data['formula']}`\n\n{_md_table(head, rows)}\n\n{quality}\n\n{pred}".rstrip()
                  + "".join(f"\n- **warning:** {w}" for w in warn))
        html.append(f"<h3>{law} law: <code>{html_lib.escape(data['formula'])}</code></h3>{_html_table(head, rows)}"
                    f"<p>{html_lib.escape(quality)}</p>" + (f"<p>{html_lib.escape(pred)}</p>" if pred else "")
                    + "".join(f"<p><strong>warning:</strong> {html_lib.escape(w)}</p>" for w in warn))
        if plots_dir is not None:
            from scalestudy.scaling.plots import plot_fit

            pngs.append(plot_fit(result, Path(plots_dir) / f"scaling_{law}.png"))
    head, rows, notes = _jump_rows(jump_report(runs, jump_k), jump_k)
    intro = (f"Jumps: each metric against a smooth power-law trend in scale (parameters N and tokens D, else compute "
             f"C): leave-one-out and forecast from smaller runs, flagged beyond {jump_k:g} sigma (Ganguli et al. 2022).")
    md.append(f"### Smooth trend or jump?\n\n{intro}\n\n" + (_md_table(head, rows) + "\n\n" if rows else "")
              + "\n".join(f"- {n}" for n in notes))
    html.append(f"<h3>Smooth trend or jump?</h3><p>{html_lib.escape(intro)}</p>"
                + (_html_table(head, rows) if rows else "")
                + "<ul>" + "".join(f"<li>{html_lib.escape(n)}</li>" for n in notes) + "</ul>")
    return ScalingSection("\n\n".join(md).strip() + "\n", "\n".join(html), pngs, tuple(fitted), tuple(not_fitted))
