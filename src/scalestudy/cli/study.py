"""CLI: `scalestudy study run|status|export`, `scalestudy report`, `scalestudy demo` (thin over study/ and report/)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from scalestudy.cli import app

study_app = typer.Typer(help="Sweeps of real training runs into a crash-proof SQLite store.", no_args_is_help=True)
app.add_typer(study_app, name="study")
console = Console()


@study_app.command("run")
def study_run(
    spec: Path = typer.Argument(..., help="Study spec YAML (see examples/)."),
    output: str = typer.Option(..., "--output", "-o", help="Study directory (DIR/study.sqlite); re-running resumes."),
    executor: Optional[str] = typer.Option(None, help="local or slurm (default: the spec's executor)."),
    concurrency: Optional[int] = typer.Option(None, help="Local: trials at once (bounded by CPU cores)."),
    retry: list[str] = typer.Option([], help="Re-run finished trials with this status (OOM, FAILED, TIMEOUT)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Slurm: write and print the sbatch scripts, submit nothing."),
    no_wait: bool = typer.Option(False, "--no-wait", help="Slurm: submit and return (collect with `study status`)."),
    no_progress: bool = typer.Option(False, "--no-progress", help="No live progress bar."),
) -> None:
    """Run (or resume) every trial of a study; each result is committed as soon as its trial ends."""
    from scalestudy.errors import ScalestudyError
    from scalestudy.outputs import check_output_dir
    from scalestudy.study.runner import run_study
    from scalestudy.study.spec import load_spec

    # a str: typer's Path turns '' into the working directory; the names the runner writes there (store, lock,
    # trials): a link loop in their place was a traceback from SQLite
    output = check_output_dir(output, files=("study.sqlite", ".runner.lock"), dirs=("trials",))
    if executor is not None and not executor.strip():  # '' is not "the spec's executor"
        raise ScalestudyError(f"--executor needs a value (local or slurm), got {executor!r}")
    study = load_spec(spec)
    check_train_flags(study.extra_args, "extra_args")
    if (executor or study.executor) == "local":
        check_local_trials(study)
    for reason in study.skipped:
        console.print(f"[yellow]filtered[/] {escape(reason)}", highlight=False)
    result = run_study(study, output, executor=executor, concurrency=concurrency, retry=tuple(retry),
                       dry_run=dry_run, progress=not no_progress, console=console, wait=not no_wait)
    if dry_run:
        return
    counts = ", ".join(f"{k} {v}" for k, v in result.counts.items())
    console.print(f"study {study.name!r}: {result.total} trials ({result.skipped_finished} already finished, "
                  f"{result.ran} run now in {result.wall_s:.1f} s); outcomes: {counts}; store {output}/study.sqlite",
                  highlight=False, soft_wrap=True, markup=False)  # the name and path are data: "[" is text
    if result.ran and not result.counts.get("OK") and not no_wait:  # --no-wait: results come later
        from scalestudy.errors import RunFailed

        raise RunFailed(f"no trial of study {study.name!r} succeeded ({counts}); reasons: `scalestudy study status "
                        f"{output}`")


def check_local_trials(study) -> None:
    """Trials of the local executor start their ranks on this machine: the checks `train` makes before a run here
    (ranks vs RAM and open files, a micro-batch's token ids vs RAM), once for the study, before anything is written."""
    from scalestudy.cli.options import check_batch_fits_ram, check_cpu_ranks
    from scalestudy.errors import ScalestudyError

    for trial in study.trials:
        try:
            check_cpu_ranks(trial.nproc)
            check_batch_fits_ram(trial.nproc, trial.micro_batch, trial.seq_len + trial.workload.target_len)
        except ScalestudyError as exc:
            raise ScalestudyError(f"trial {trial.label}: {exc}") from None


def check_train_flags(args, where: str) -> None:
    """Options in `args` (a study's extra_args for every `scalestudy train`) that train does not have: refused when
    the spec is loaded, not once per trial."""
    import re

    import typer.main

    from scalestudy.errors import ScalestudyError

    command = typer.main.get_command(app).commands["train"]
    known = {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}
    for arg in args:
        flag = arg.split("=", 1)[0]
        if re.match(r"-{1,2}[A-Za-z]", flag) and flag not in known:  # not a value such as -1
            raise ScalestudyError(f"{where}: `scalestudy train` has no option {flag} (see `scalestudy train --help`)")
    try:  # values and positional words as train's parser reads them (`--steps many`, a stray `x`)
        command.make_context("train", list(args))
    except typer.TyperException as exc:
        raise ScalestudyError(f"{where}: `scalestudy train` would refuse {' '.join(args)!r}: "
                              f"{exc.format_message()}") from None


@study_app.command("status")
def study_status(directory: Path = typer.Argument(..., help="Study directory.")) -> None:
    """Trials finished (by outcome), interrupted and left; collects Slurm results from shared storage."""
    from scalestudy.study.status import status

    info = status(directory)
    table = Table(title=escape(f"study {info['name']!r} in {directory}"))
    for col in ("outcome", "trials"):
        table.add_column(col)
    for key, value in info["counts"].items():
        table.add_row(key, str(value))
    table.add_row("interrupted (will re-run)", str(info["interrupted"]))
    table.add_row("not started", str(info["not_started"]))
    if info.get("slurm"):
        table.add_row("queued in Slurm", str(info["slurm"]["queued"]))
        table.add_row("running in Slurm", str(info["slurm"]["running"]))
    table.add_row("total", str(info["total"]))
    console.print(table)
    if info.get("slurm") and info["slurm"]["error"]:
        console.print(f"[yellow]Slurm did not answer[/] ({escape(str(info['slurm']['error']))}): submitted trials "
                      "without results are left as they are", highlight=False)
    print_trials(directory)


def print_trials(directory: Path) -> None:
    """Each finished trial: outcome, step time, throughput, loss, wall time and, when not OK, why."""
    from scalestudy.cli.terminal import Column, fitted_table, terminal_console
    from scalestudy.study.status import trial_rows

    rows = trial_rows(directory)
    if not rows:
        return

    def num(value, spec: str) -> str:
        return "-" if value is None else format(value, spec)

    columns = [Column("trial", "left", wrap=True), Column("outcome", "left"), Column("s/step"), Column("tokens/s"),
               Column("loss", drop=2), Column("wall s", drop=1), Column("reason", "left", wrap=True)]
    cells = [[r["label"], r["status"], num(r["step_s"], ".3g"), num(r["tokens_per_s"], ",.0f"), num(r["loss"], ".3f"),
              num(r["wall_s"], ".1f"), r["reason"]] for r in rows]
    if not any(r["reason"] for r in rows):  # all OK: no empty reason column taking the labels' room
        columns, cells = columns[:-1], [c[:-1] for c in cells]
    wide = terminal_console()  # the table and its caption wrap at the same width
    table, hidden = fitted_table(f"{len(rows)} finished trial(s)", columns, cells, wide.width)
    wide.print(table)
    wide.print("s/step: median seconds per optimizer step after the timing warm-up; tokens/s: encoder + decoder "
               "tokens per second, whole job; loss: final training loss (nats/token); wall s: the trial's whole "
               "run, start-up included" + (f"; left out for width: {', '.join(hidden)}" if hidden else "") + ".",
               highlight=False)


@study_app.command("export")
def study_export(
    directory: Path = typer.Argument(..., help="Study directory."),
    output: Path = typer.Option(..., "--output", "-o", help="File ending in .csv or .parquet."),
    table: str = typer.Option("trials", help="trials, metrics or runs (params/tokens/flops/loss of OK trials)."),
) -> None:
    """Export a store table to CSV or Parquet."""
    from scalestudy.study.store import Store

    with Store(directory, create=False) as store:
        path = store.export(output, table=table)
    console.print(f"wrote {escape(str(path))}", soft_wrap=True)


@app.command("report")
def report(directory: Path = typer.Argument(..., help="Study directory (holding study.sqlite).")) -> None:
    """Write DIR/report.html (self-contained), DIR/report.md and DIR/plots/*.svg, *.png from a study's store."""
    from scalestudy.report.render import write_report

    paths = write_report(directory)
    console.print(f"report: {paths['html']} (HTML)\n        {paths['md']} (Markdown)\n        {len(paths['plots'])} "
                  f"plots in {paths['plots_dir']}", highlight=False, soft_wrap=True, markup=False)  # a path a line, whole
    for gap in paths["gaps"]:  # a store whose rows lack fields: what the report could not show (also in it)
        console.print(f"note: {escape(gap)}", highlight=False, soft_wrap=True)


@app.command("demo")
def demo(
    output: str = typer.Option("scalestudy-demo", "--output", "-o", help="Study directory to write."),
    no_progress: bool = typer.Option(False, "--no-progress", help="No live progress bar."),
) -> None:
    """Run a small real scaling study on this CPU (tiny T5, ZeRO 0-3 and FSDP, 1-2 ranks) and write its report."""
    import time

    from scalestudy.outputs import check_output_dir
    from scalestudy.report.render import check_report_paths, write_report
    from scalestudy.study.demo import run_demo

    output = check_output_dir(output)  # as a str: typer's Path would turn '' into the working directory
    if output.is_dir():  # a report name taken by a folder failed only after the ~10 min study
        check_report_paths(output)
    start = time.time()
    result = run_demo(output, console=console, progress=not no_progress)
    paths = write_report(output)
    counts = ", ".join(f"{k} {v}" for k, v in result.counts.items())
    console.print(f"\nDone in {(time.time() - start) / 60:.1f} min ({counts}).", highlight=False)
    from scalestudy.wrapped import fill

    for line in paths["findings"][:6]:
        # a hanging indent: wrapped by Rich, a finding's later lines started at column 0, under the bullets
        console.print(fill(line, console.width, initial_indent="  - ", subsequent_indent="    "), highlight=False,
                      markup=False, soft_wrap=True)
    # one path a line: three on two lines ran past 80 columns, where the terminal cut the plots' path mid-name
    console.print(f"\nReport: {paths['html'].resolve()}\n        {paths['md'].resolve()} (Markdown)\n        plots: "
                  f"{paths['plots_dir'].resolve()}/", highlight=False, soft_wrap=True, markup=False)
