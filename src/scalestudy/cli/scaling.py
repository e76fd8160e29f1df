"""CLI: `scalestudy fit` (scaling-law fits with bootstrap CIs and extrapolation) and `scalestudy search`
(hyperparameter search on a family of small proxies). Thin over scalestudy.scaling."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from scalestudy.cli import app

console = Console()


@app.command()
def fit(
    source: Path = typer.Argument(..., help="Study directory (DIR/study.sqlite) or a runs CSV "
                                            "(columns params, tokens, flops, loss; optional model)."),
    law: str = typer.Option("chinchilla", help="compute: L(C) = a C^-b + L_inf; "
                                               "chinchilla: L(N, D) = E + A/N^alpha + B/D^beta."),
    target_params: Optional[float] = typer.Option(None, help="Extrapolate to N parameters (with --target-tokens)."),
    target_tokens: Optional[float] = typer.Option(None, help="Extrapolate to D training tokens."),
    budget_flops: Optional[float] = typer.Option(None, help="Extrapolate to a compute budget C in FLOPs "
                                                            "(chinchilla: compute-optimal N and D)."),
    flops_per_param_token: str = typer.Option("6", help="k in C = k N D (6: decoder-only convention), or 'auto' "
                                                        "to measure it from the runs' flops (encoder-decoder)."),
    bootstrap: int = typer.Option(200, help="Bootstrap replicates (resample runs, refit)."),
    seed: int = typer.Option(0, help="Bootstrap seed."),
    level: float = typer.Option(0.95, help="Confidence level of the intervals."),
    as_json: bool = typer.Option(False, "--json", help="Print the fit as JSON."),
    plot: Optional[Path] = typer.Option(None, help="Write the loss-vs-compute (and iso-FLOP) figure to this PNG."),
) -> None:
    """Fit a scaling law to a study's runs, with bootstrap confidence intervals and extrapolation."""
    from scalestudy.errors import ScalestudyError
    from scalestudy.scaling.analysis import analyze

    if seed < 0:  # numpy's bootstrap generator takes no negative seed
        raise ScalestudyError(f"--seed must be a whole number >= 0, got {seed}")
    if flops_per_param_token == "auto":
        k: float | str = "auto"
    else:
        from scalestudy.yamlfile import number_from_text

        try:
            k = number_from_text(flops_per_param_token)
        except ValueError:
            raise ScalestudyError(f"--flops-per-param-token must be a number or 'auto', got {flops_per_param_token!r}") from None
    if plot is not None:
        from scalestudy.outputs import check_output_file

        check_output_file(plot, "--plot", (".png",))
    result = analyze(source, law, target_params=target_params, target_tokens=target_tokens,
                     budget_flops=budget_flops, n_boot=bootstrap, seed=seed, level=level, flops_per_param_token=k)
    if plot is not None:
        from scalestudy.errors import ScalestudyError
        from scalestudy.scaling.plots import plot_fit

        try:
            plot_fit(result, plot)
        except OSError as exc:  # matplotlib's write on a full disk names no file: 'No space left on device' alone
            raise ScalestudyError(f"--plot {plot}: cannot write it: {exc.strerror or exc}") from None
    data = result.to_dict()
    if as_json:
        print(json.dumps(data, indent=2))
        return
    _print_fit(data)
    if plot is not None:
        console.print(f"wrote {plot}", highlight=False)


def _print_fit(data: dict) -> None:
    level = f"{data['ci_level']:.0%}"
    table = Table(title=f"{data['formula']}; {data['n_runs']} runs")
    for col in ("coefficient", "value", f"{level} CI (bootstrap, {data['bootstrap']['replicates']} refits)"):
        table.add_column(col)
    for name, value in data["coef"].items():
        ci = data["ci"].get(name)
        table.add_row(name, f"{value:.4g}", "-" if ci is None else f"[{ci[0]:.4g}, {ci[1]:.4g}]")
    console.print(table)
    console.print(f"fit: Huber(delta={data['fit']['huber_delta']:g}) on log-loss, L-BFGS from a grid "
                  f"(Hoffmann et al. 2022); residual s.d. {data['fit']['residual_sd_log']:.3g} (log-loss units)",
                  highlight=False)
    for warning in data.get("warnings", []):
        console.print(f"[yellow]warning:[/] {warning}", highlight=False)
    pred = data["prediction"]
    if not pred:
        return
    # to_dict() turns values that left floating point into None: print them as n/a, never fail on them
    pred = {key: _NotAvailable() if value is None else value for key, value in pred.items()}

    def iv(key):
        v = pred.get(key)
        return "n/a" if isinstance(v, _NotAvailable) or v is None or None in v else f"[{v[0]:.4g}, {v[1]:.4g}]"
    if "params_opt" in pred:
        console.print(f"compute-optimal for C = {pred['flops']:.3g} FLOPs ({pred['convention']}): "
                      f"N = {pred['params_opt']:.3g} params {iv('params_opt_ci')}, "
                      f"D = {pred['tokens_opt']:.3g} tokens {iv('tokens_opt_ci')}, "
                      f"D/N = {pred['tokens_per_param_opt']:.3g}", highlight=False)
    elif "params" in pred:
        console.print(f"target N = {pred['params']:.3g} params, D = {pred['tokens']:.3g} tokens "
                      f"(C = {pred['flops']:.3g} FLOPs, {pred['convention']})", highlight=False)
    else:
        console.print(f"target C = {pred['flops']:.3g} FLOPs", highlight=False)
    console.print(f"predicted loss {pred['loss']:.4g} nats/token; {level} CI of the curve {iv('loss_ci')}; "
                  f"{level} prediction interval of a run {iv('loss_pi')}", highlight=False)


class _NotAvailable:
    """A prediction value that is not a finite number: formats as n/a under any number format."""

    def __format__(self, spec: str) -> str:
        return "n/a"


@app.command()
def search(
    spec: Path = typer.Argument(..., help="Search spec YAML: a study spec plus a `search:` block "
                                          "(see examples/scaling/search-t5-proxies.yaml)."),
    output: str = typer.Option(..., "--output", "-o", help="Search directory (study.sqlite, search.sqlite, "
                                                            "search.json, best_runs.csv); re-running resumes."),
    trials_per_model: Optional[int] = typer.Option(None, help="Override search.trials_per_model."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Hyperparameter search (lr, batch, warm-up, precision) over small proxies with ASHA early stopping."""
    from dataclasses import replace

    from scalestudy.outputs import check_output_dir
    from scalestudy.search.hyperparams import check_trials_per_model, load_search, run_search

    # a str: typer's Path turns '' into the working directory; the names the search writes there (its stores,
    # trials): a link loop in their place was a traceback from SQLite
    output = check_output_dir(output, files=("study.sqlite", "search.sqlite", ".runner.lock"), dirs=("trials",))
    loaded = load_search(spec)
    if trials_per_model is not None:
        check_trials_per_model(trials_per_model)
        loaded.config = replace(loaded.config, trials_per_model=trials_per_model)
    log = (lambda s: None) if as_json else (lambda s: console.print(s, highlight=False, markup=False))  # plain text
    result = run_search(loaded, output, log=log)
    if as_json:
        print(json.dumps(result, indent=2))
        return
    _print_search(result)


def _print_search(result: dict) -> None:
    table = Table(title=f"search {result['name']!r}: {result['objective']}")
    for col in ("proxy", "params", "best lr", "batch (seq)", "warm-up (steps)", "precision", "final loss",
                "trials (complete/pruned/failed)"):
        table.add_column(col)
    for m in result["models"]:
        b, t = m["best"], m["trials"]
        counts = f"{t.get('complete', 0)}/{t.get('pruned', 0)}/{t.get('fail', 0)}"
        if b is None:
            table.add_row(m["model"], f"{m['params']:.3g}", "-", "-", "-", "-", "-", counts)
            continue
        p = b["params"]
        table.add_row(m["model"], f"{m['params']:.3g}", f"{p['lr']:.3g}", str(p["global_batch"]),
                      str(p["warmup_steps"]), p["precision"], f"{b['loss']:.4g}", counts)
    console.print(table)
    console.print(result["pruner"], highlight=False)
    for key, label in (("lr", "best learning rate"), ("global_batch", "best global batch (sequences)")):
        tr = result["trends"][key]
        if "error" in tr:
            console.print(f"{label} trend: not fitted ({tr['error']})", highlight=False)
            continue
        ci = tr.get("exponent_ci")
        line = (f"{label} ~ {tr['coef']:.3g} * N^{tr['exponent']:.3f}"
                + (f" (exponent {tr['level']:.0%} CI [{ci[0]:.3f}, {ci[1]:.3f}])" if ci else ""))
        if tr.get("target_params"):
            pi = tr.get("target_pi")
            line += (f"; at {result['target_model']} (N = {tr['target_params']:.3g}): {tr['target_value']:.3g}"
                     + (f" ({tr['level']:.0%} PI [{pi[0]:.3g}, {pi[1]:.3g}])" if pi else ""))
        console.print(line + (f" [yellow]note:[/] {tr['note']}" if tr.get("note") else ""), highlight=False)
    if result.get("best_runs_csv"):
        console.print(f"best runs for `scalestudy fit`: {result['best_runs_csv']}", highlight=False)
