"""CLI commands of the cost model: `estimate`, `validate`, `presets`, `devices`.

Thin: parse flags, call scalestudy.costmodel, print (rich table or --json). Bad input raises ScalestudyError,
which `scalestudy.cli.main` prints on one line with exit status 2.
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import Optional

import typer

from scalestudy.cli import app
from scalestudy.cli.options import SOFTWARE_OPTIONS, flag_named_errors, software_options

GIB = float(1 << 30)


def _gib(x: float | None) -> str:
    return "-" if x is None else f"{x / GIB:,.2f}"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 3600:
        return f"{seconds:,.1f} s"
    if seconds < 86400 * 2:
        return f"{seconds / 3600:,.2f} h"
    return f"{seconds / 86400:,.2f} days"


@app.command()
@flag_named_errors()
@software_options(SOFTWARE_OPTIONS)
def estimate(
    model: str = typer.Option(..., "--model", help="Preset name (see `scalestudy presets`), a config.json path, or a "
                                                   "model YAML of shape keys (docs/estimate-schema.md)."),
    gpu: str = typer.Option("a100-40gb", "--gpu", help="Device name (see `scalestudy devices`) or a device YAML."),
    nodes: int = typer.Option(1, "--nodes", help="Number of nodes."),
    gpus_per_node: int = typer.Option(8, "--gpus-per-node", help="Devices (ranks) per node."),
    cluster: Optional[str] = typer.Option(None, "--cluster", help="Cluster YAML (device, nodes, gpus_per_node, "
                                                                  "bandwidth overrides); replaces --gpu/--nodes."),
    engine: str = typer.Option("deepspeed", "--engine", help="deepspeed | fsdp | ddp | megatron (Megatron-Core, "
                                                             "cost model only: zero 1 = distributed optimizer) | "
                                                             "internlm (InternLM HybridZeroOptimizer, cost model "
                                                             "only: zero 1)"),
    zero: int = typer.Option(0, "--zero", help="ZeRO stage 0-3 (ddp: 0-1, fsdp: 2-3)."),
    tp: int = typer.Option(1, "--tp", help="Tensor-parallel degree: a divisor of --gpus-per-node, or a multiple of "
                           "it (the group fills tp / G whole nodes; its collectives priced over the NICs)."),
    pp: int = typer.Option(1, "--pp", help="Pipeline-parallel degree."),
    cp: int = typer.Option(1, "--cp", help="Context-parallel degree: each sequence split over cp ranks, attention "
                           "as a ring (engines megatron, fsdp; --seq-len divisible by 2 x cp); world = tp x cp x pp "
                           "x dp. Cost model only."),
    micro_batch: int = typer.Option(1, "--micro-batch", help="Sequences per micro-batch per data-parallel rank."),
    global_batch: Optional[int] = typer.Option(None, "--global-batch",
                                               help="Sequences per optimizer step (default: micro-batch x dp)."),
    seq_len: int = typer.Option(512, "--seq-len", help="Encoder (or decoder-only) length in tokens."),
    target_len: Optional[int] = typer.Option(None, "--target-len", help="Decoder length of encoder-decoder models "
                                                                     "(default: what T5 span corruption of --seq-len "
                                                                     "needs, 512 -> 114; as plan and train)."),
    recompute: str = typer.Option("none", "--recompute", help="none | selective | full | op "
                                                                          "(torchtitan's operator-level selective AC)"),
    precision: Optional[str] = typer.Option(None, "--precision", help="bf16 | fp16 | fp32 | fp8 (FP8 linear "
                                                                      "GEMMs, engines megatron / fsdp; default: bf16 "
                                                                      "where the device has it, else fp16; fp32 on "
                                                                      "CPUs)."),
    offload_optimizer: str = typer.Option("none", "--offload-optimizer", help="none | cpu | nvme"),
    offload_params: str = typer.Option("none", "--offload-params", help="none | cpu | nvme"),
    attention: str = typer.Option("flash", "--attention", help="flash (no stored probabilities) | eager."),
    software: Optional[dict] = None,  # one flag each, declared once for estimate and plan: SOFTWARE_OPTIONS
    pp_schedule: str = typer.Option("1f1b", "--pp-schedule", help="1f1b | gpipe | interleaved (with --pp > 1)."),
    virtual_stages: int = typer.Option(1, "--virtual-stages", help="Model chunks per device (interleaved, >= 2)."),
    stage_layers: Optional[str] = typer.Option(None, "--stage-layers",
                                               help="Layers per pipeline stage, e.g. 13,11,11,13 (default: even "
                                                    "split, remainder on the first stages), or auto: resource-aware "
                                                    "on a cluster mixing devices or with --stage-speeds."),
    stage_speeds: Optional[str] = typer.Option(None, "--stage-speeds", help="Measured relative speed of each "
                                               "pipeline stage's ranks, e.g. 2,1 (one per --pp stage)."),
    train_tokens: float = typer.Option(0.0, "--train-tokens", help="Tokens to train, for time and device-hours."),
    as_json: bool = typer.Option(False, "--json", help="Print the estimate as JSON (fields: docs/estimate-schema.md)."),
) -> None:
    """Predict memory per device, step time, throughput and MFU of one training configuration."""
    from scalestudy.costmodel.estimate import estimate as run_estimate
    from scalestudy.errors import ScalestudyError
    from scalestudy.specs.presets import get_model
    from scalestudy.specs.strategy import Strategy, Workload

    from scalestudy.cli.options import (check_attention_kernel_runs, check_target_len, check_tp_comm_overlap,
                                        cli_cluster, parse_speeds, parse_stage_layers)

    spec = get_model(model)
    check_target_len(spec, target_len)
    speeds = parse_speeds(stage_speeds)
    if speeds and len(speeds) != pp:
        raise ScalestudyError(f"--stage-speeds takes one speed per pipeline stage (--pp {pp}), got {len(speeds)}")
    clus = cli_cluster(gpu, nodes, gpus_per_node, cluster, speeds)
    check_tp_comm_overlap(software["tp_comm_overlap"], (tp,), clus)
    check_attention_kernel_runs(attention, software["attention_kernel"], clus)
    if precision is None:  # as plan: bf16 where every device has it, else fp16 (V100), fp32 on CPUs
        from scalestudy.plan.planner import default_precision

        precision = default_precision(clus)
    auto = stage_layers == "auto"
    strategy = Strategy(engine=engine, zero=zero, tp=tp, pp=pp, cp=cp, micro_batch=micro_batch, recompute=recompute,
                        precision=precision, offload_optimizer=offload_optimizer, offload_params=offload_params,
                        attention=attention, pp_schedule=pp_schedule, virtual_stages=virtual_stages,
                        stage_layers=() if auto else parse_stage_layers(stage_layers), **software)
    if global_batch is None:
        if tp < 1 or pp < 1 or clus.world_size % (tp * pp * cp):
            raise ScalestudyError(f"world size {clus.world_size} is not divisible by --tp {tp} x --pp {pp}"
                                  + (f" x --cp {cp}" if cp > 1 else ""))
        global_batch = micro_batch * clus.world_size // (tp * pp * cp)
    if seq_len < 1:
        raise ScalestudyError(f"--seq-len must be >= 1, got {seq_len}")
    from scalestudy.specs.run import resolve_target_len

    tlen = resolve_target_len("span" if spec.is_encoder_decoder else "causal", seq_len, target_len or 0)
    workload = Workload(global_batch=global_batch, seq_len=seq_len, target_len=tlen, train_tokens=train_tokens)
    if auto and not clus.groups and speeds and pp >= 2:
        auto = False  # equal --stage-speeds: nothing to balance, the even split is the balanced one
    if auto:
        if not clus.groups or pp < 2:
            raise ScalestudyError("--stage-layers auto needs --pp >= 2 on a cluster mixing devices (--cluster with "
                                  "groups) or with --stage-speeds")
        from scalestudy.plan.partition import resource_split
        from scalestudy.specs.strategy import resolve_layout

        lay = resolve_layout(strategy, clus.world_size, workload.global_batch, num_layers=spec.total_layers)
        strategy = strategy.replace(stage_layers=resource_split(spec, clus, strategy, workload, lay.dp,
                                                                lay.grad_accum))
    est = run_estimate(spec, clus, strategy, workload)
    if as_json:
        print(json.dumps(est.to_dict(), indent=2))
        return
    _print_estimate(est)


def _engine_meanings(est) -> dict[str, str]:
    """engine_meanings on the run's device; on a mixed cluster the attention kernel each device type runs in place
    of the engine's (terms.attention_kernel: a V100 stage runs SDPA's memory-efficient kernel), named per device
    where they differ."""
    from scalestudy.costmodel.comm import tp_overlap_priced
    from scalestudy.costmodel.engine_software import engine_meanings

    by_device = {g.device.name: engine_meanings(est.strategy, g.device) for g in est.cluster.rank_groups()}
    meanings = next(iter(by_device.values()))
    kernels = {name: m["attention_kernel"] for name, m in by_device.items() if "attention_kernel" in m}
    if len(set(kernels.values())) > 1:
        meanings = {**meanings, "attention_kernel": ", ".join(f"{k} on {name}" for name, k in kernels.items())}
    st, per_node = est.strategy, est.cluster.gpus_per_node
    if st.tp_comm_overlap and not tp_overlap_priced(st.tp_comm_overlap, st.tp, est.cluster):  # default on, priced off
        meanings = {**meanings, "tp_comm_overlap": f"priced off: tp {st.tp} spans nodes of {per_node}, and TP "
                                                   "overlap needs the group inside one"}
    return meanings


def _print_estimate(est) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from scalestudy.costmodel.breakdown import STEP_TERM_NAMES
    from scalestudy.specs.strategy import software_assumed

    d = est.to_dict()
    lay, mem, tm, thr = d["layout"], d["memory"], d["time"], d["throughput"]
    console = Console()
    where = (est.cluster.label if est.cluster.heterogeneous
             else f"{d['cluster']['world_size']} x {d['cluster']['device']}")
    title = f"{d['model']} ({d['params_total'] / 1e9:.3f} B params) on {where} - {est.strategy.label}"
    console.print(f"[bold]{escape(title)}[/]")  # model and device names are data: "[" is text
    assumed = software_assumed(est.strategy, _engine_meanings(est))
    console.print(f"software assumed: {assumed}; a flag each, defaults by engine and model: "
                  "docs/estimate-schema.md 'Software defaults'")
    cp = f" x cp {lay['cp']}" if "cp" in lay else ""  # context parallelism, only where set
    console.print(f"layout: dp {lay['dp']} x tp {lay['tp']}{cp} x pp {lay['pp']}, micro-batch {lay['micro_batch']}, "
                  f"grad accumulation {lay['grad_accum']}, global batch {d['workload']['global_batch']} sequences "
                  f"({d['workload']['tokens_per_step']:,} tokens/step"
                  f"{', encoder + decoder' if est.model.is_encoder_decoder else ''})")

    # CPU ranks have no CUDA context, caching allocator, NCCL or cuBLAS (memory.py: those terms are 0 there): the GPU
    # rows and their note would only repeat the total under names that do not apply
    cpu = all(g.device.kind == "cpu" for g in est.cluster.rank_groups())
    t = Table(title="Memory per rank (host RAM)" if cpu else "Memory per device", show_header=True)
    t.add_column("term")
    t.add_column("GiB", justify="right")
    for k, v in mem["parts"].items():
        t.add_row(k, _gib(v))
    t.add_row("[bold]total[/]", f"[bold]{_gib(mem['per_device_bytes'])}[/]")
    if not cpu:
        t.add_row("max_memory_reserved (tensors + allocator cache)", _gib(mem["reserved_bytes"]))
        t.add_row("nvidia-smi (+ context, cache, NCCL, cuBLAS)", _gib(mem["device_total_bytes"]))
    t.add_row("capacity (RAM / ranks per node)" if cpu else "capacity", _gib(mem["capacity_bytes"]))
    if mem["host_bytes_per_rank"]:
        t.add_row("host RAM per rank (offload)", _gib(mem["host_bytes_per_rank"]))
    if mem["nvme_bytes_per_rank"]:
        t.add_row("NVMe per rank (offload)", _gib(mem["nvme_bytes_per_rank"]))
    t.add_row("fits", "[green]yes[/]" if d["fits"] else "[red]NO (out of memory)[/]")
    console.print(t)
    if cpu:
        console.print("memory total = the rank's tensors at the step's peak + overhead (the rank process's own "
                      "memory: Python, torch and the engine); 'fits' compares this total with capacity, the machine's "
                      "RAM shared by its ranks. `train` reports the params + grads + optimizer rows as a CPU rank's "
                      "memory (metrics.jsonl peak_mem_bytes), its RSS beside them")
    else:
        console.print("memory total = tensors at the step's peak (torch max_memory_allocated) + overhead (CUDA "
                      "context, which nvidia-smi counts); 'fits' compares this total with capacity. The nvidia-smi row "
                      "adds NCCL's and cuBLAS's buffers (~0.7 GB per NCCL communicator within an NVSwitch node) and, as "
                      "the max_memory_reserved row, the caching allocator's blocks its allocation order fixes (not "
                      "'fits': the allocator frees them before an out-of-memory error)")

    t = Table(title="Step time (per optimizer step)", show_header=True)
    t.add_column("part")
    t.add_column("seconds", justify="right")
    t.add_column("share", justify="right")
    for k, v in tm["parts"].items():
        t.add_row(STEP_TERM_NAMES.get(k, k), f"{v:.4f}", f"{100 * v / tm['step_s']:.1f}%")
    t.add_row("[bold]step[/]", f"[bold]{tm['step_s']:.4f}[/]", "100%")
    t.add_row("data-parallel communication, total (incl. overlapped)", f"{tm['dp_comm_total_s']:.4f}", "")
    console.print(t)
    if est.stages:
        from scalestudy.cli.options import print_stages

        console.print(f"Pipeline stages on {escape(est.cluster.label)} (stage i on ranks [i W/pp, (i+1) W/pp), "
                      f"bound by its slowest device; step = sum of stage slots + ({lay['grad_accum']} micro-batches "
                      "- 1) x slowest slot + slowest tail; memory per rank on the stage's own device. Above: the "
                      "memory of the stage with the least free memory; step terms compute/tp/pp = micro-batches x the "
                      "slowest stage's, bubble = fill and drain, dp/opt/offload/framework = the longest tail's):",
                      highlight=False)
        print_stages(est, console)

    t = Table(title="Throughput", show_header=True)
    t.add_column("metric")
    t.add_column("value", justify="right")
    t.add_row("sequences/s (whole cluster)", f"{thr['samples_per_s']:,.2f}")
    if est.model.is_encoder_decoder:  # NeMo's T5/mT5 tables count input (encoder) tokens only
        t.add_row("tokens/s (whole cluster, encoder + decoder)", f"{thr['tokens_per_s']:,.0f}")
        t.add_row("input tokens/s (whole cluster, encoder only)", f"{thr['source_tokens_per_s']:,.0f}")
    else:
        t.add_row("tokens/s (whole cluster)", f"{thr['tokens_per_s']:,.0f}")
    per_device = "tokens/s per device (encoder + decoder)" if est.model.is_encoder_decoder else "tokens/s per device"
    t.add_row(per_device, f"{thr['tokens_per_s_per_device']:,.0f}")
    t.add_row("model TFLOP/s per device (no recompute)", f"{thr['model_tflops_per_device']:,.3f}")
    t.add_row("hardware TFLOP/s per device (incl. recompute)", f"{thr['hardware_tflops_per_device']:,.3f}")
    t.add_row("MFU (model FLOPs / dense peak)", f"{100 * d['mfu']:.1f}%")
    t.add_row("HFU (hardware FLOPs / dense peak)", f"{100 * d['hfu']:.1f}%")
    if tm["time_to_train_s"] is not None:
        t.add_row(f"time to train {d['workload']['train_tokens']:.3g} tokens", _duration(tm["time_to_train_s"]))
        t.add_row("device-hours", f"{tm['device_hours']:,.1f}")
    console.print(t)
    console.print(f"[dim]FLOPs convention: {d['flops']['convention']}. Peak: "
                  f"{d['cluster']['peak_flops_per_device'] / 1e12:g} TFLOP/s dense {_tf32_note(est)}"
                  f"{' (mean over the ranks)' if est.cluster.heterogeneous else ''}{_power_note(est)}"
                  f"{_alignment_note(est)}.[/]")


def _tf32_note(est) -> str:
    """The precision the peak is of, and why --tf32 changed nothing where it cannot act (torch ignores the flag
    outside fp32 matmuls and on GPUs without TF32 Tensor Cores)."""
    st = est.strategy
    if st.precision == "fp8":  # mfu.py: the FP8 peak of the linear GEMMs; tables quoting the bf16 peak read 2x
        return "fp8 (the blocks' linear GEMMs; against the bf16 peak MFU / HFU would read twice these)"
    if not st.tf32:
        return st.precision
    if st.precision != "fp32":
        return f"{st.precision} (--tf32 has no effect: the matmuls run in {st.precision})"
    lacking = sorted({g.effective.name for g in est.cluster.rank_groups() if "tf32" not in g.effective.peak_flops})
    if lacking:
        return (f"fp32 (--tf32 has no effect on {', '.join(lacking)}: no TF32 Tensor Cores, its fp32 matmuls run at "
                f"the fp32 peak)")
    return "tf32 (fp32 matmuls on TF32 Tensor Cores, --tf32)"


def _alignment_note(est) -> str:
    """Which GEMMs the cost model priced below the aligned rate (leading dims not multiples of 16 bytes)."""
    from scalestudy.costmodel.alignment import unaligned_gemms
    from scalestudy.specs.strategy import vocab_shards

    st = est.strategy
    found = unaligned_gemms(est.model, est.cluster.device, st.precision, est.layout.tp, est.workload.seq_len,
                            est.target_len, st.attention == "flash", st.engine, st.cublas,
                            head_tp=vocab_shards(st, est.layout.tp))  # --lm-head replicated: the whole V
    if not found:
        return ""
    parts = ", ".join(f"{name} {' x '.join(f'{x:g}' for x in dims)} ({a}-element) at {f:g}"
                      for name, dims, a, f in found)
    return f"; unaligned GEMMs (fraction of the aligned rate, costmodel/alignment.py): {parts}"


def _power_note(est) -> str:
    """What a board power limit below the vendor default does to the GEMMs (MFU keeps the datasheet peak)."""
    from scalestudy.costmodel.efficiency import sustained_clock_ratio

    dev = est.cluster.device
    ratio = sustained_clock_ratio(dev)
    if ratio >= 1.0:
        return ""
    return (f"; board power limit {dev.power_limit_w:g} W: GEMMs at {ratio:.3f} x the peak's clock "
            f"({ratio * dev.clock_mhz:.0f} of {dev.clock_mhz:g} MHz)")


@app.command()
def validate(as_json: bool = typer.Option(False, "--json", help="Print rows, headline and sources as JSON."),
             refit: bool = typer.Option(False, "--refit", help="Also print the constants fitted on every source "
                                                               "(the values calibration.yaml stores).")) -> None:
    """Compare the cost model with published runs. Headline: leave-one-source-out error (each source predicted
    by constants refitted without it); in-sample error with the stored constants alongside."""
    from rich.console import Console
    from rich.markup import escape

    from scalestudy.costmodel.constants import stored
    from scalestudy.costmodel.published import issue_flags_only, leave_one_source_out, load, summary, validation_rows

    # 20-60 s on a shared 2-core machine (a refit of the constants per source) before the first line: a terminal is
    # told what it is waiting for (on stderr, gone when done); files and pipes get only the tables
    err = Console(stderr=True)
    busy = err.status("validate: predicting the published rows, then each source held out...") if err.is_terminal \
        else contextlib.nullcontext()
    with busy:
        rows = validation_rows()
        summ = summary(rows)
        loso = leave_one_source_out()
        held_out = {r["id"]: r for r in loso["rows"]}
        refitted = loso["refitted_on_all"] if refit else None  # fit(fit_rows()), one of the folds' fits
        defaults = issue_flags_only()
    if as_json:
        print(json.dumps({"headline": {"leave_one_source_out_mean_abs_error": loso["mean_abs_error"],
                                       "leave_one_source_out_max_abs_error": loso["max_abs_error"],
                                       "sources": loso["sources"], "rows": loso["row_count"],
                                       "by_source": loso["by_source"]},
                          "in_sample": summ, "issue_flags_only": defaults, "constants": stored().values(),
                          "refitted_on_all": refitted,
                          "rows": [{"id": r.id, "kind": r.kind, "metric": r.metric, "unit": r.unit,
                                    "published": r.published, "predicted": r.predicted, "error": r.error,
                                    "held_out_predicted": held_out.get(r.id, {}).get("predicted"),
                                    "held_out_error": held_out.get(r.id, {}).get("error"), "fit": r.fit,
                                    "check": r.check, "config": r.config, "source": r.source,
                                    "source_key": r.source_key} for r in rows],
                          "sources": load()["sources"]}, indent=2))
        return
    console = Console()
    if os.environ.get("COLUMNS", "").isdigit():  # the width asked for wins, as in `plan`
        console = Console(width=int(os.environ["COLUMNS"]))
    elif not console.is_terminal:  # files and pipes: wide enough that every row stays on one line
        console = Console(width=190)
    for (kind, metric), group in _groups(rows).items():
        table, left_out = _validation_table(kind, metric, group, held_out, console.width)
        console.print(table)
        if left_out:
            console.print(f"[dim]({console.width}-column terminal: left out {', '.join(left_out)}; a wider terminal "
                          "or --json shows them)[/]")
        console.print()
    # the sources' notes (thousands of lines) first, the summary last: a terminal's last screen and `validate | tail`
    # show the headline, not the end of the last source's note
    console.print("[dim]Sources:[/]")
    from scalestudy.wrapped import fill

    for key, text in load()["sources"].items():
        # a hanging indent: wrapped by Rich, a source's later lines started at column 0, under the keys
        console.print(fill(f"{key}: {text}", console.width, initial_indent="  ", subsequent_indent="    "),
                      # paths and URLs whole, unless longer than a line; CJK quotes two columns a character
                      style="dim", markup=False, highlight=False, soft_wrap=True)  # texts quote "[...]"
    console.print()
    console.print("leave-one-source-out error by source (each predicted by constants refitted without it):")
    for source, b in loso["by_source"].items():
        rows = f"{b['rows']} row" + ("s" if b["rows"] != 1 else "")
        console.print(f"  {escape(source)}: {rows}, mean {100 * b['mean_abs_error']:.1f}%, "
                      f"max {100 * b['max_abs_error']:.1f}%")
    if refitted:
        console.print("constants refitted on every source: " +
                      ", ".join(f"{k} = {v:.4g}" for k, v in refitted.items()))
    console.print("[dim]* = never used to fit (issue 11 acceptance rows). Errors: (predicted - published) / "
                  "published. k, M, G = 1e3, 1e6, 1e9.[/]")
    console.print(f"in-sample (constants of calibration.yaml, fitted on all sources): mean |error| "
                  f"{100 * summ['throughput_mean_abs_error']:.1f}%, max {100 * summ['throughput_max_abs_error']:.1f}%"
                  f"; memory: {summ['memory_rows']} rows ({summ['measured_memory_rows']} measured, max |error| "
                  f"{100 * summ['measured_memory_max_abs_error']:.1f}%; the rest formula checks)")
    console.print(f"issue flags only (in-sample; each row's attention, sequence parallel, overlap, schedule and "
                  f"offload set, every other software option at its default): mean |error| "
                  f"{100 * defaults['mean_abs_error']:.1f}%, max {100 * defaults['max_abs_error']:.1f}%, "
                  f"{defaults['rows_over_20pct']} of {defaults['rows']} rows over 20%")
    console.print(f"[bold]headline (leave-one-source-out): {loso['row_count']} throughput rows from "
                  f"{loso['sources']} sources, mean |error| {100 * loso['mean_abs_error']:.1f}%, max |error| "
                  f"{100 * loso['max_abs_error']:.1f}%[/] (every fitted constant refitted without the source "
                  "it predicts)")


def _groups(rows) -> dict:
    groups: dict[tuple[str, str], list] = {}
    for r in rows:
        groups.setdefault((r.kind, r.metric), []).append(r)
    return groups


def _figure(value: float) -> str:
    """A published or predicted figure, 4 significant digits in one notation down a column: from 1,000 with k, M,
    G (= 1e3, 1e6, 1e9: 687.4k, 1.13M tokens/s; '.4g' wrote 7,598 beside 6.874e+05), narrower than whole numbers,
    which pushed the held-out error column past 80 columns. Rounded before the scale is chosen, so 999,999 is 1M,
    not 1000k."""
    value = float(f"{value:.4g}")
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.4g}{suffix}"
    return f"{value:.4g}"


def _validation_table(kind: str, metric: str, group: list, held_out: dict, width: int) -> tuple:
    """One metric's rows. In a narrow terminal the held-out prediction, the source key and then the in-sample
    columns are left out (the held-out error, the headline, stays) and the configuration wraps (or, last, goes when
    long row ids leave it no room): no number is cut."""
    from rich.markup import escape
    from rich.table import Table

    from scalestudy.cli.terminal import Column, fit_columns, table_width

    held = kind == "throughput"  # the headline: with held-out rows, the in-sample columns go before them
    columns = [Column("row", "left"), Column("configuration", "left", wrap=True, drop=1), Column("published"),
               Column("predicted", drop=3 if held else 0), Column("error", drop=2 if held else 0)]
    if held:
        columns += [Column("held out", drop=5), Column("held-out error")]
    columns.append(Column("source", "left", drop=4))
    fmt = (lambda v: f"{100 * v:.1f}%") if metric == "mfu" else _figure
    plain, marked = [], []
    for r in group:
        errors = [r.error] + ([held_out[r.id]["error"]] if kind == "throughput" else [])
        cells = [r.id + ("" if r.fit or kind != "throughput" else " *"), r.config, fmt(r.published),
                 fmt(r.predicted), f"{100 * errors[0]:+.1f}%"]
        if kind == "throughput":
            cells += [fmt(held_out[r.id]["predicted"]), f"{100 * errors[1]:+.1f}%"]
        cells.append(r.source_key)
        plain.append(cells)
        colours = ["green" if abs(e) < 0.10 else "yellow" if abs(e) < 0.20 else "red" for e in errors]
        shown = [escape(c) for c in cells]  # row ids, configurations and source keys are data: "[" is text
        for index, colour in zip((4, 6), colours):
            shown[index] = f"[{colour}]{shown[index]}[/]"
        marked.append(shown)
    sized = [[c if i != 1 else " " * 20 for i, c in enumerate(r)] for r in plain]
    keep = fit_columns(columns, sized, width, rules=False)  # box=None
    # ids longer than the terminal leaves beside the numbers fold onto a second line (Rich would cut the numbers)
    row_width = max(len(columns[0].header), *(len(r[0]) for r in plain))
    row_room = width - (table_width(columns, sized, keep, rules=False) - row_width)
    from scalestudy.costmodel.published import METRIC_NAMES

    name = METRIC_NAMES.get(metric, metric)  # the memory rows' metrics are words already
    table = Table(title=escape(f"{kind}: {name} [{group[0].unit}] - predicted vs published"), box=None,
                  title_justify="left")
    fold_ids = row_room < row_width
    for i in keep:
        folds = i == 0 and fold_ids
        table.add_column(columns[i].header, justify=columns[i].justify, no_wrap=not (columns[i].wrap or folds),
                         overflow="fold", min_width=20 if columns[i].wrap else None,
                         max_width=max(12, row_room) if folds else None)
    for r in marked:
        table.add_row(*(r[i] for i in keep))
    return table, [c.header for i, c in enumerate(columns) if i not in keep]


@app.command()
def presets() -> None:
    """List model presets with their parameter counts (equal to Transformers' counts)."""
    from rich.console import Console
    from rich.table import Table

    from scalestudy.costmodel.params import param_count
    from scalestudy.specs.model import COST_MODEL_TYPES
    from scalestudy.specs.presets import PRESETS

    # collapsed padding, no edge: one space between columns keeps every row whole at 80 columns (1T params: 17)
    t = Table(title="Model presets (params: Transformers' count, tied tensors once)", box=None, collapse_padding=True,
              pad_edge=False)
    for col in ("name", "params", "layers", "d_model", "heads", "d_ff", "vocab", "head"):
        t.add_column(col, justify="left" if col in ("name", "head") else "right", no_wrap=True)
    for name, s in PRESETS.items():
        layers = f"{s.num_layers}+{s.num_decoder_layers}" if s.is_encoder_decoder else str(s.num_layers)
        cost_only = "*" if s.hf_type in COST_MODEL_TYPES else ""
        t.add_row(name + cost_only, f"{param_count(s):,}", layers, str(s.d_model), str(s.num_heads), str(s.d_ff),
                  str(s.vocab_size), "tied" if s.tie_word_embeddings else "untied")
    console = Console()
    console.print(t)
    console.print("params = parameter count (Transformers' model, a tied embedding / LM head counted once); layers = "
                  "encoder + decoder blocks (one number: decoder-only); d_model, d_ff = hidden and feed-forward "
                  "widths; heads = attention heads; vocab = vocabulary size (tokens); head = LM head tied to the "
                  "input embedding or not; * = cost model only (estimate, plan; train builds none), params as the "
                  "cost model prices its block (specs/model.py says what it leaves out)", highlight=False)


@app.command()
def devices() -> None:
    """List device data files (peaks, memory, bandwidths)."""
    from rich.console import Console
    from rich.table import Table

    from scalestudy.specs.hardware import device_names, get_device

    t = Table(title="Devices (specs/hardware/*.yaml)", box=None)
    for col in ("name", "memory GiB", "dense peak TFLOP/s", "HBM GB/s", "intra GB/s", "inter GB/s"):
        t.add_column(col, justify="left" if col in ("name", "dense peak TFLOP/s") else "right")
    for name in device_names():
        d = get_device(name)
        peaks = " ".join(f"{k}:{v / 1e12:g}" for k, v in d.peak_flops.items())
        t.add_row(f"{name} ({d.kind})", f"{d.memory_bytes / GIB:,.1f}", peaks, f"{d.hbm_bytes_per_s / 1e9:,.0f}",
                  f"{d.intra_node_bytes_per_s / 1e9:,.1f}", f"{d.inter_node_bytes_per_s / 1e9:,.2f}")
    console = Console()
    console.print(t)
    # The bandwidth columns are model inputs (specs/hardware.Device), not link specs: say their convention.
    console.print("memory GiB = 2^30 bytes per device; dense peak = TFLOP/s per device without sparsity, per "
                  "precision; GB/s = 1e9 bytes/s per device, one direction: HBM = device memory (a CPU: its DRAM), "
                  "intra = to the other devices of its node (NVLink / NVSwitch / shared memory), inter = its share "
                  "of the node's NICs; intra / inter are the achievable collective (bus) rates the cost model "
                  "uses, below the links' nominal ones", highlight=False)
