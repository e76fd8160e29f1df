"""CLI commands `plan` (model-based strategy search), `tune` (measured search) and `calibrate` (hardware profile).

Thin: parse flags, call `scalestudy.plan` / `scalestudy.costmodel.calibrate`, print. Heavy imports stay inside
the command functions so `scalestudy --help` stays fast.
"""

from __future__ import annotations

import json
from typing import Optional

import typer

from scalestudy.cli import app
from scalestudy.cli.options import (PLAN_SOFTWARE_OPTIONS, cli_cluster, flag_named_errors, parse_speeds,
                                    print_stages, software_options)
from scalestudy.errors import ScalestudyError

GIB = 2**30


def _items(text: Optional[str], name: str) -> tuple[str, ...]:
    """A comma-separated constraint list; None (flag not given) = no constraint. An empty entry (`2,,4`, `4,`, or
    an empty value) is refused rather than dropped: it is a typo, and an empty list would search everything."""
    if text is None:
        return ()
    items = tuple(x.strip() for x in text.split(","))
    if not all(items):
        raise ScalestudyError(f"--{name} takes a comma-separated list without empty entries, got {text!r}")
    return items


def _ints(text: Optional[str], name: str) -> tuple[int, ...]:
    from scalestudy.yamlfile import int_from_text

    items = _items(text, name)
    try:
        values = tuple(int_from_text(x) for x in items)
    except ValueError:
        raise ScalestudyError(f"--{name} takes integers separated by commas, got {text!r}") from None
    low, high = (0, 3) if name == "zero" else (1, None) if name in ("tp", "pp", "micro-batch") else (None, None)
    bad = [v for v in values if (low is not None and v < low) or (high is not None and v > high)]
    if bad:
        raise ScalestudyError(f"--{name} values must be {f'{low}-{high}' if high is not None else f'>= {low}'}, "
                              f"got {bad[0]}")
    return values


def _strs(text: Optional[str], name: str) -> tuple[str, ...]:
    return _items(text, name)


def _offloads(text: Optional[str], name: str) -> tuple[str, ...]:
    """Default none,cpu; `any` adds nvme (which needs a local SSD path at run time)."""
    if text is None:
        return ("none", "cpu")
    return ("none", "cpu", "nvme") if text == "any" else _strs(text, name)


def build_constraints(*, engine, zero, tp, pp, micro_batch, recompute, offload, offload_params, precision, max_nodes,
                      vary_nodes=False, pp_schedule=None, virtual_stages=None, stage_layers=None, software=None):
    """plan's search space: the searched axes as comma-separated flags, and `software`, the execution options kept
    fixed over the search (attention, sequence_parallel, ..., attention_kernel: Constraints fields named as Strategy's;
    absent ones keep their defaults)."""
    from scalestudy.cli.options import parse_stage_layers
    from scalestudy.plan.space import Constraints

    schedule = {"pp_schedules": _strs(pp_schedule, "pp-schedule")} if pp_schedule is not None else {}
    if virtual_stages is not None:
        schedule["virtual_stages"] = _ints(virtual_stages, "virtual-stages")
    layers, pps = parse_stage_layers(stage_layers), _ints(pp, "pp")
    if layers and pps and len(layers) not in pps:
        raise ScalestudyError(f"--stage-layers {stage_layers} has {len(layers)} pipeline stages, --pp allows "
                              f"{','.join(map(str, pps))}")
    from scalestudy.specs.strategy import Strategy

    # Pipeline options that could only meet pp 1 would be ignored: Strategy's one rule refuses them, as estimate,
    # study and train do
    if pps and max(pps) < 2:
        for sched in schedule.get("pp_schedules", ()):
            Strategy(engine="ddp", pp_schedule=sched)
        if "virtual_stages" in schedule:
            raise ScalestudyError(f"--virtual-stages {virtual_stages} sets the interleaved pipeline schedule's model "
                                  f"chunks, which needs pp >= 2 (--pp {pp})")
    if "virtual_stages" in schedule and "interleaved" not in schedule.get("pp_schedules", ("interleaved",)):
        raise ScalestudyError(f"--virtual-stages {virtual_stages} sets the interleaved schedule's model chunks, which "
                              f"--pp-schedule {pp_schedule} leaves out: add interleaved or drop --virtual-stages")
    if layers:
        Strategy(engine="ddp", pp=len(layers), stage_layers=layers)
    return Constraints(engines=_strs(engine, "engine"), zero=_ints(zero, "zero"), tp=_ints(tp, "tp"), pp=pps,
                       micro_batch=_ints(micro_batch, "micro-batch"), recompute=_strs(recompute, "recompute"),
                       offload_optimizer=_offloads(offload, "offload-optimizer"),
                       offload_params=_offloads(offload_params, "offload-params"), precision=precision,
                       max_nodes=max_nodes, vary_nodes=vary_nodes, stage_layers=layers, **(software or {}),
                       **schedule)


SHORT = {"compute_s": "comp", "pipeline_bubble_s": "bubble", "tp_comm_s": "tp", "pp_comm_s": "pp",
         "dp_comm_exposed_s": "dp", "optimizer_s": "opt", "offload_s": "offl", "framework_s": "fw",
         "cp_comm_exposed_s": "cp"}


def _breakdown(estimate) -> str:
    from scalestudy.plan.planner import step_time_terms

    terms = sorted(step_time_terms(estimate).items(), key=lambda kv: -kv[1])[:3]
    return " ".join(f"{SHORT.get(k, k)} {v:.3f}" for k, v in terms if v > 0)


def print_plan(result, cluster, top: int) -> None:
    from rich.markup import escape

    from scalestudy.cli.terminal import Column, fitted_table, terminal_console
    from scalestudy.plan.planner import explain, seconds

    console = terminal_console()
    width = console.width
    w = result.workload
    title = (f"Top {min(top or len(result.candidates), len(result.candidates))} of {result.feasible} feasible "
             f"strategies ({result.evaluated} evaluated: {result.estimated} estimated, {result.pruned} pruned by "
             f"the memory bound; objective {result.objective}; {result.elapsed_s:.2f} s)")
    ttt = "train h" if w.train_tokens else "s/1M tok"
    # drop: which columns give way first in a narrow terminal (0 = key column, always shown whole)
    columns = [Column("#", drop=2), Column("strategy", "left", wrap=True), Column("nodes", drop=5), Column("dp", drop=4),
               Column("accum", drop=6), Column("GiB/dev"), Column("free GiB", drop=7), Column("step s"),
               Column("tokens/s"), Column("MFU %"), Column(ttt, drop=3),
               Column("largest step-time terms (s)", "left", drop=8)]
    rows = []
    for i, c in enumerate(result.candidates[:top or None], 1):  # --top 0: all
        e = c.estimate
        t = c.time_to_train_s / 3600 if w.train_tokens else c.time_to_train_s
        rows.append([str(i), c.strategy.label, str(c.nodes), str(c.point.dp), str(c.point.grad_accum),
                     f"{e.per_device_bytes / GIB:.1f}", f"{c.headroom_bytes / GIB:.1f}", seconds(e.step_s),
                     f"{e.tokens_per_s:,.0f}", f"{100 * e.mfu:.1f}", f"{t:.3g}", _breakdown(e)])
    table, hidden = fitted_table(title, columns, rows, width)
    console.print(table)
    if hidden:
        console.print(f"({width}-column terminal: left out {', '.join(hidden)}; a wider terminal or --json shows "
                      "them)", highlight=False)
    per_tokens = ("train h = hours to train --train-tokens" if w.train_tokens
                  else "s/1M tok = seconds per million tokens")
    tokens = "encoder + decoder tokens" if result.best.estimate.model.is_encoder_decoder else "tokens"
    console.print("Units: GiB = 2^30 bytes per device (estimated peak), free = device memory minus that; step s = "
                  f"seconds per optimizer step; tokens/s = {tokens} per second, whole job; "
                  f"{per_tokens}; MFU = model FLOPs (no recompute) / (devices x dense peak x step time); step-time "
                  "terms: comp(ute), tp/pp/dp (exposed communication), opt(imizer), offl(oad), bubble (pipeline), "
                  "fw (measured CPU framework time).", highlight=False)
    front = "; ".join(f"{c.strategy.label} {c.estimate.tokens_per_s:,.0f} tokens/s {c.headroom_bytes / GIB:.1f} GiB free"
                      for c in result.pareto[:6])
    more = f" (+{len(result.pareto) - 6} more)" if len(result.pareto) > 6 else ""
    console.print(f"Pareto front (tokens/s vs free memory per device), {len(result.pareto)} point(s): {front}{more}",
                  highlight=False)
    console.print("Why: " + explain(result), highlight=False)
    if result.best.estimate.stages:
        best = result.best.estimate
        m = best.layout.grad_accum
        console.print(f"Stages of the winner on {escape(cluster.label)} (stage i on ranks [i W/pp, (i+1) W/pp) in the "
                      f"cluster's order; step = sum of stage slots + ({m} micro-batches - 1) x slowest slot + "
                      f"slowest tail = {best.step_s:.4g} s):", highlight=False)
        print_stages(best, console)
        from scalestudy.costmodel.estimate import estimate

        even = estimate(best.model, best.cluster, best.strategy.replace(stage_layers=()), result.workload)
        split = best.strategy.stage_split(best.model.total_layers)  # () stage_layers = the even split itself
        if even.strategy.stage_split(best.model.total_layers) != split:
            console.print(f"  the even split {'/'.join(map(str, even.strategy.stage_split(best.model.total_layers)))}"
                          f" would take {even.step_s:.4g} s per step (the winner's "
                          f"{'/'.join(map(str, split))}: {best.step_s / even.step_s - 1:+.1%})"
                          f"{'' if even.fits else ' and does NOT fit'}", highlight=False)


def _flag(name: str, value) -> list[str]:
    """`estimate`'s flag(s) for one Strategy field at `value` (a switch: its --x or --no-x)."""
    from scalestudy.cli.options import SOFTWARE_OPTIONS

    decls = SOFTWARE_OPTIONS[name][1].param_decls if name in SOFTWARE_OPTIONS else ()
    if decls and "/" in decls[0]:
        on, off = decls[0].split("/")
        return [on if value else off]
    return [decls[0] if decls else "--" + name.replace("_", "-"), str(value).lower() if value in (True, False) else
            str(value)]


def estimate_args(best, model: str, gpu: str, cluster, cluster_file: Optional[str], stage_speeds: Optional[str],
                  workload) -> list[str] | None:
    """The `scalestudy estimate` arguments that print the winner's figures: its strategy and, of the software
    options, those where plan's value (what `train` runs, or a flag given to plan) changes estimate's figures from
    estimate's default (the engine's published software) -- so a newcomer comparing the two commands compares the
    same run. None where no estimate line states it (a --cluster file of which plan used fewer nodes)."""
    from scalestudy.cli.options import SOFTWARE_OPTIONS
    from scalestudy.costmodel.estimate import estimate
    from scalestudy.specs.presets import get_model

    est, st = best.estimate, best.estimate.strategy
    if cluster_file is not None:
        if best.nodes != cluster.nodes:
            return None
        where = ["--cluster", cluster_file]
    else:
        where = ["--gpu", gpu, "--nodes", str(best.nodes), "--gpus-per-node", str(cluster.gpus_per_node)]
    args = ["--model", model, *where, "--engine", st.engine, "--zero", str(st.zero), "--tp", str(st.tp),
            "--pp", str(st.pp), *(["--cp", str(st.cp)] if st.cp != 1 else []), "--micro-batch", str(st.micro_batch),
            "--global-batch", str(workload.global_batch), "--seq-len", str(workload.seq_len)]
    spec = get_model(model)
    if spec.is_encoder_decoder:
        args += ["--target-len", str(workload.target_len)]
    args += ["--precision", st.precision, "--recompute", st.recompute]
    for name, default in (("offload_optimizer", "none"), ("offload_params", "none"), ("attention", "flash")):
        if getattr(st, name) != default:
            args += _flag(name, getattr(st, name))
    if st.pp > 1:
        args += ["--pp-schedule", st.pp_schedule] + (["--virtual-stages", str(st.virtual_stages)]
                                                      if st.virtual_stages > 1 else [])
    if st.stage_layers:
        args += ["--stage-layers", ",".join(map(str, st.stage_layers))]
    if stage_speeds:
        args += ["--stage-speeds", stage_speeds]
    if workload.train_tokens:
        args += ["--train-tokens", f"{workload.train_tokens:g}"]
    # estimate's own defaults, resolved as estimate resolves them; then each differing option kept only where it
    # moves a figure (a label such as recompute_early_stop 'on' vs 'engine' without recompute changes nothing)
    defaults = {name: option.default for name, (_, option) in SOFTWARE_OPTIONS.items()}

    def priced(names):
        """estimate of the winner with `names` at plan's values, every other software option at estimate's default;
        None where estimate refuses that mix (its default sequence parallelism over a length tp does not divide,
        which plan's winner avoids: that flag must then stay on the line)."""
        try:
            return estimate(est.model, est.cluster, st.replace(**{**defaults, **{n: getattr(st, n) for n in names}}),
                            est.workload)
        except ScalestudyError:
            return None

    plain = priced(())  # where refused, the defaults as written (unresolved): the figures decide below
    differ = [name for name in SOFTWARE_OPTIONS
              if getattr(st, name) != (getattr(plain.strategy, name) if plain is not None else defaults[name])]

    def figures(names) -> dict | None:
        e = priced(names)
        return None if e is None else {k: v for k, v in e.to_dict().items() if k in ("memory", "time")}
    target = figures(differ)
    for name in list(differ):
        if target is not None and figures([n for n in differ if n != name]) == target:
            differ.remove(name)
    for name in differ:
        args += _flag(name, getattr(st, name))
    return args


@app.command()
@flag_named_errors()
@software_options(PLAN_SOFTWARE_OPTIONS)
def plan(
    model: str = typer.Option(..., help="Model preset, config.json path or model YAML (shape keys)."),
    gpu: str = typer.Option("a100-40gb", help="Device name or a hardware profile YAML (e.g. from `calibrate`)."),
    nodes: int = typer.Option(1, help="Nodes in the cluster."),
    gpus_per_node: int = typer.Option(8, help="Devices per node."),
    cluster: Optional[str] = typer.Option(None, help="Cluster YAML (overrides --gpu/--nodes/--gpus-per-node)."),
    global_batch: int = typer.Option(..., help="Global batch in sequences per optimizer step."),
    seq_len: int = typer.Option(..., help="Encoder (or decoder-only) sequence length in tokens."),
    target_len: Optional[int] = typer.Option(None, help="Decoder target length (enc-dec); default: what T5 span "
                                                        "corruption of --seq-len needs (512 -> 114)."),
    train_tokens: float = typer.Option(0.0, help="Tokens to train, for time-to-train and device-hours."),
    objective: str = typer.Option("throughput", help="throughput | time | cost (device-hours) | min-nodes."),
    min_throughput: Optional[float] = typer.Option(None, help="Tokens/s the plan must reach (min-nodes)."),
    engine: Optional[str] = typer.Option(None, help="Constraint: engines, comma-separated (default: deepspeed,fsdp,"
                                                    "ddp; the cost-model-only megatron, internlm only when named)."),
    zero: Optional[str] = typer.Option(None, help="Constraint: ZeRO stages, comma-separated (default: every stage "
                                                  "of each engine: deepspeed 0-3, fsdp 2-3, ddp 0-1)."),
    tp: Optional[str] = typer.Option(None, help="Constraint: tensor-parallel degrees (the search keeps tp a divisor "
                                     "of --gpus-per-node: inside a node; a multiple of it named here is priced "
                                     "over whole nodes, as estimate prices it; default: every divisor of "
                                     "--gpus-per-node that divides the heads)."),
    pp: Optional[str] = typer.Option(None, help="Constraint: pipeline-parallel degrees (default: every divisor of "
                                                "the devices left by tp, up to the layer count)."),
    cp: int = typer.Option(1, "--cp", help="Context-parallel degree of every candidate, held fixed, not searched "
                           "(each sequence split over cp ranks: engines megatron, fsdp; --seq-len divisible by 2 x "
                           "cp); default 1, no context parallelism. Cost model only."),
    micro_batch: Optional[str] = typer.Option(None, help="Constraint: micro-batch sizes in sequences (default: "
                                                         "every divisor of each data-parallel rank's share of "
                                                         "--global-batch)."),
    recompute: Optional[str] = typer.Option(None, help="Constraint: activation recomputation, comma-separated "
                                                       "none,selective,full (default: all three)."),
    offload: Optional[str] = typer.Option(None, "--offload-optimizer", help="Optimizer offload, comma-separated "
                                                                          "none,cpu,nvme or any (default none,cpu)."),
    offload_old: Optional[str] = typer.Option(None, "--offload", hidden=True),  # the older name, still accepted
    offload_params: Optional[str] = typer.Option(None, help="Parameter offload, comma-separated none,cpu,nvme or "
                                                            "any (default none,cpu)."),
    precision: Optional[str] = typer.Option(None, help="bf16 | fp16 | fp32 | fp8 (FP8 linear GEMMs, with --engine "
                                                       "fsdp and/or megatron; default: bf16 where supported, else "
                                                       "fp16; fp32 on CPUs)."),
    max_nodes: Optional[int] = typer.Option(None, help="Use at most this many of the cluster's nodes (<= --nodes); "
                                                       "the node count is searched."),
    top: int = typer.Option(10, help="Strategies to show (and to put in --json; 0 = all feasible)."),
    emit_dir: Optional[str] = typer.Option(None, "--emit", help="Write configs + launch commands for the winner "
                                            "into DIR: new, empty or an earlier emit (files scalestudy did not write "
                                            "are never replaced)."),
    train_steps: Optional[int] = typer.Option(None, help="With --emit: optimizer steps written into the emitted "
                                                         "train config (default: 1000)."),
    data: Optional[list[str]] = typer.Option(None, help="With --emit: corpus file(s) the emitted run trains on "
                                                        "(as train --data: files or hf:NAME[:CONFIG])."),
    tokenizer: Optional[str] = typer.Option(None, help="With --emit: tokenizer.json of the emitted run."),
    text_field: Optional[str] = typer.Option(None, help="With --emit: text field of JSONL/Parquet corpora."),
    lexicon: Optional[str] = typer.Option(None, help="With --emit: lexicon of the knowledge objective."),
    vocab_size: Optional[int] = typer.Option(None, help="With --emit: vocabulary of a tokenizer trained on the data."),
    train_objective: Optional[str] = typer.Option(None, help="With --emit: span, knowledge or causal (default: span "
                                                             "for encoder-decoder, causal for decoder-only)."),
    as_json: bool = typer.Option(False, "--json", help="Print the JSON result (schema: docs/plan-schema.md)."),
    no_prune: bool = typer.Option(False, "--no-prune", help="Estimate every strategy (no memory-bound pruning)."),
    pp_schedule: Optional[str] = typer.Option(None, "--pp-schedule", help="Pipeline schedules to search, "
                                              "comma-separated 1f1b,gpipe,interleaved (default 1f1b,interleaved)."),
    virtual_stages: Optional[str] = typer.Option(None, "--virtual-stages", help="Model chunks per device the "
                                                 "interleaved schedule tries, comma-separated (default 2,4)."),
    stage_layers: Optional[str] = typer.Option(None, "--stage-layers", help="Explicit layers per pipeline stage, "
                                               "e.g. 13,11,11,13 (only that pipeline depth is searched; default: "
                                               "even, or resource-aware on a cluster mixing devices or with --stage-speeds), or auto "
                                               "(that resource-aware split, as estimate)."),
    stage_speeds: Optional[str] = typer.Option(None, "--stage-speeds", help="Measured relative speed of each "
                                               "pipeline stage's ranks, e.g. 2,1 (searches pp = their count; "
                                               "layers split by speed and memory)."),
    attention: str = typer.Option("flash", "--attention", help="flash | eager (kept fixed, not searched)."),
    software: Optional[dict] = None,  # one flag each, declared once for estimate and plan: SOFTWARE_OPTIONS
) -> None:
    """Rank every parallelism strategy with the cost model; show the best, the Pareto front, and why."""
    offload = offload if offload is not None else offload_old  # '' given is an (empty) value, refused below
    emit_only = {"--data": data, "--tokenizer": tokenizer, "--text-field": text_field, "--lexicon": lexicon,
                 "--vocab-size": vocab_size, "--train-objective": train_objective, "--train-steps": train_steps}
    unused = [flag for flag, value in emit_only.items() if value is not None]
    if unused and emit_dir is None:
        raise ScalestudyError(f"{', '.join(unused)} describe(s) the run --emit writes: add --emit DIR")
    from scalestudy.plan.planner import OBJECTIVES, default_precision, plan as run_plan
    from scalestudy.specs.presets import get_model
    from scalestudy.specs.run import resolve_target_len
    from scalestudy.specs.strategy import Workload

    if objective not in OBJECTIVES:
        raise ScalestudyError(f"unknown objective {objective!r} (choose from {', '.join(OBJECTIVES)})")
    if top < 0:
        raise ScalestudyError(f"--top must be >= 0 (0 = all feasible strategies), got {top}")
    if min_throughput is not None and not 0 < min_throughput < float("inf"):
        raise ScalestudyError(f"--min-throughput must be a positive number of tokens/s, got {min_throughput}")
    train_steps = 1000 if train_steps is None else train_steps
    if train_steps < 1:
        raise ScalestudyError(f"--train-steps must be >= 1, got {train_steps}")
    if emit_dir is not None:
        from scalestudy.outputs import check_output_dir

        from scalestudy.plan.emit import EMITTED_NAMES, check_input_files
        from scalestudy.specs.run import check_not_users_files

        check_output_dir(emit_dir, "--emit", files=EMITTED_NAMES)
        check_not_users_files(emit_dir, "--emit", EMITTED_NAMES)

        check_input_files(data, tokenizer, lexicon, text_field)  # before the search, not after it
        from scalestudy.specs.run import DataSection, check_data_fields

        check_data_fields(data, text_field or DataSection.text_field, tokenizer, vocab_size or DataSection.vocab_size)
    speeds = parse_speeds(stage_speeds)
    if speeds:
        if max_nodes is not None or objective in ("cost", "min-nodes"):
            raise ScalestudyError("--stage-speeds describes the stages of the whole cluster: not with --max-nodes "
                                  "or objective cost/min-nodes (which search fewer nodes)")
        if pp and _ints(pp, "pp") != (len(speeds),):
            raise ScalestudyError(f"--stage-speeds gives {len(speeds)} stage(s) but --pp is {pp}")
        pp = str(len(speeds))
    spec = get_model(model)
    from scalestudy.cli.options import check_target_len

    check_target_len(spec, target_len)
    run_objective = train_objective or ("span" if spec.is_encoder_decoder else "causal")
    if lexicon is not None and run_objective != "knowledge":  # train would refuse every emitted run for it
        from scalestudy.specs.run import lexicon_message

        raise ScalestudyError(lexicon_message(run_objective, "--train-objective"))
    clus = cli_cluster(gpu, nodes, gpus_per_node, cluster, speeds)
    if max_nodes is not None and max_nodes > clus.nodes:  # Constraints.node_counts caps it at the cluster's nodes
        raise ScalestudyError(f"--max-nodes {max_nodes} exceeds the cluster's {clus.nodes} node(s): plan searches "
                              f"node counts up to the nodes it has (--nodes, or the --cluster file's)")
    if stage_layers == "auto":  # estimate's resource-aware split: what plan runs on a mixed-speed cluster anyway
        if not clus.heterogeneous and not speeds:
            raise ScalestudyError("--stage-layers auto needs a cluster mixing devices (--cluster with groups) or "
                                  "--stage-speeds")
        stage_layers = None
    tlen = resolve_target_len("span" if spec.is_encoder_decoder else "causal", seq_len, target_len or 0)
    workload = Workload(global_batch=global_batch, seq_len=seq_len, target_len=tlen, train_tokens=train_tokens)
    from scalestudy.specs.strategy import PRECISIONS

    if precision is not None and precision not in PRECISIONS:
        raise ScalestudyError(f"unknown precision {precision!r} (choose from {', '.join(PRECISIONS)})")
    prec = precision if precision is not None else default_precision(clus)
    for g in clus.rank_groups():
        g.device.peak(prec)  # clear error when a device lacks the precision
    cons = build_constraints(engine=engine, zero=zero, tp=tp, pp=pp, micro_batch=micro_batch, recompute=recompute,
                             offload=offload, offload_params=offload_params, precision=prec, max_nodes=max_nodes,
                             vary_nodes=max_nodes is not None, pp_schedule=pp_schedule, virtual_stages=virtual_stages,
                             stage_layers=stage_layers,
                             software={"attention": attention, **software})
    if cp != 1:  # a statement about the run, held fixed (Constraints.cp)
        import dataclasses

        cons = dataclasses.replace(cons, cp=cp)
    if emit_dir is not None:  # what train could run for no candidate: refused before the search, not after it
        from scalestudy.plan.emit import check_emittable

        check_emittable(spec, precision=prec, engines=cons.engines, cp=cp, software=software)
    from scalestudy.cli.options import check_attention_kernel_runs, check_tp_comm_overlap

    check_tp_comm_overlap(software["tp_comm_overlap"], cons.tp, clus)
    check_attention_kernel_runs(attention, software["attention_kernel"], clus)
    if virtual_stages is not None and max(cons.virtual_stages) * 2 > spec.total_layers:
        # interleaving needs pp >= 2 stages of virtual_stages layers each: a larger value could only be skipped
        raise ScalestudyError(f"--virtual-stages {max(cons.virtual_stages)} exceeds what {spec.name}'s "
                              f"{spec.total_layers} layers allow (pp >= 2 stages x virtual stages <= layers)")
    result = run_plan(spec, clus, workload, cons, objective=objective, min_throughput=min_throughput,
                      prune=not no_prune)
    note = None
    if emit_dir is not None:
        from scalestudy.plan.emit import emit_best_runnable

        options = {"steps": train_steps, "data": data or None, "tokenizer": tokenizer, "text_field": text_field,
                   "lexicon": lexicon, "vocab_size": vocab_size, "objective": train_objective}
        note = emit_best_runnable(emit_dir, model, clus, result, **{k: v for k, v in options.items() if v is not None})
    if as_json:
        print(plan_json(result.to_json(top)))
        return
    print_plan(result, clus, top)
    _print_software(result.best, estimate_args(result.best, model, gpu, clus, cluster, stage_speeds, workload))
    if note:
        _print_emit_note(note, emit_dir)


def _print_software(best, args: list[str] | None) -> None:
    """The software the winner is priced with and the `estimate` line that prints its figures: plan prices what
    `train` runs (eager Hugging Face models, torch AdamW's foreach step), estimate the engine's published software,
    so the same strategy typed into estimate without these flags prints other figures."""
    import shlex

    from scalestudy.cli.terminal import terminal_console
    from scalestudy.costmodel.engine_software import engine_meanings
    from scalestudy.specs.strategy import COST_MODEL_ENGINES, software_assumed

    st = best.estimate.strategy
    device = next(iter(best.estimate.cluster.rank_groups())).device
    # what the flags left unset mean (a flag given to plan is priced as given): train's software, estimate's default
    # the engine's published one
    whose = (f"unset flags: {st.engine}'s published software, as in estimate -- a cost-model-only engine"
             if st.engine in COST_MODEL_ENGINES else "unset flags: what `scalestudy train` runs, where estimate's "
             "default is the engine's published software")
    console = terminal_console()
    console.print(f"Software priced for the winner: {software_assumed(st, engine_meanings(st, device))} ({whose}; "
                  "docs/plan-schema.md).", highlight=False, markup=False)
    if args is None:
        return
    console.print("The winner's figures from estimate:", highlight=False)
    lines, line = [], "  scalestudy estimate"  # a shell command wrapped at the terminal's width, " \\" continued
    words = []  # a flag and its value stay on one line
    for arg in map(shlex.quote, args):
        words.append(arg) if arg.startswith("--") or not words else words.__setitem__(-1, f"{words[-1]} {arg}")
    for word in words:
        if len(line) + 1 + len(word) + 2 > console.width and line.strip():
            lines.append(line + " \\")
            line = "    "
        line += ("" if line == "    " else " ") + word
    console.print("\n".join(lines + [line]), highlight=False, markup=False, soft_wrap=True)


def _print_emit_note(note: str, emit_dir: str) -> None:
    """The --emit note: its prose wrapped at spaces to the terminal, the directory it ends in on a line of its own,
    never split (Rich hard-breaks a word longer than the width, which would break copying the path)."""
    from scalestudy.cli.terminal import terminal_console

    console = terminal_console()
    prose, path = (note[:-len(emit_dir)].rstrip(), emit_dir) if note.endswith(f" {emit_dir}") else (note, "")
    console.print(prose, highlight=False, markup=False)
    if path:
        console.print(f"  {path}", highlight=False, markup=False, soft_wrap=True)


def plan_json(data: dict) -> str:
    """The plan's JSON: indented, one candidate per line. json's indenting encoder is pure Python and took most of
    `plan --json --top 0` (thousands of candidates); each candidate line is written by its C encoder."""
    rest = json.dumps({k: v for k, v in data.items() if k != "candidates"}, indent=2)
    rows = ",\n".join(f"    {json.dumps(c)}" for c in data["candidates"])
    return '{\n  "candidates": [\n' + rows + "\n  ],\n" + rest[2:]


# what calibrate and tune write in their --output DIR (plan/tuner.py, plan/tune_report.py)
CALIBRATE_NAMES = ("microbench.json", "hardware_profile.yaml")
TUNE_NAMES = (*CALIBRATE_NAMES, "tuned_profile.yaml", "tune.json", "tune.md", "trials")


@app.command()
def calibrate(
    nproc: int = typer.Option(2, help="Ranks to measure with (collectives need >= 2)."),
    output: str = typer.Option(..., help="Directory for microbench.json and hardware_profile.yaml (a "
                                         "hardware_profile.yaml scalestudy did not write there is never replaced)."),
    base: str = typer.Option("local-cpu", help="Device whose unmeasured fields the profile keeps."),
    name: str = typer.Option("local-calibrated", help="Name of the profile."),
    full: bool = typer.Option(False, help="More sizes (slower)."),
) -> None:
    """Micro-benchmark this machine (matmul, copy, Adam, collectives) and save a hardware profile YAML."""
    from pathlib import Path

    from scalestudy.plan.tuner import calibrate as run_calibrate
    from scalestudy.specs.hardware import get_device

    from scalestudy.outputs import check_output_dir

    if nproc < 1:
        raise ScalestudyError(f"--nproc must be >= 1, got {nproc}")
    from scalestudy.cli.options import check_cpu_ranks

    check_cpu_ranks(nproc)  # the micro-benchmarks start --nproc ranks on this machine
    if not name.strip():
        raise ScalestudyError("--name must name the profile (it is the device name in estimates), got ''")
    check_output_dir(output)
    from scalestudy.specs.run import check_not_users_files

    check_not_users_files(output, "--output", CALIBRATE_NAMES, "hardware_profile.yaml")  # a user's own profile
    device, path, secs = run_calibrate(Path(output), nproc, get_device(base), name, quick=not full)
    print_profile(device, secs)
    if device.kind == "cpu":
        print_cpu_precision()
    print(f"Wrote {path} (use it as --gpu {path})")


def print_cpu_precision() -> None:
    """Measure bf16/fp16 vs fp32 matmul (refreshing the cache `train` decides with) and say what train allows."""
    from scalestudy.engine.cpu_precision import cache_file, cpu_flags, measured_matmul, summary

    for line in summary(measured_matmul(refresh=True), cpu_flags()):
        _say(line)
    _say(f"(measurement cached in {cache_file()}; `scalestudy train --precision` follows it)")


def _say(text: str) -> None:
    """A sentence of figures, wrapped at spaces to the terminal (printed whole, a terminal folds it mid-word)."""
    from scalestudy.cli.terminal import terminal_console

    terminal_console().print(text, highlight=False, markup=False)


def print_profile(device, secs: float) -> None:
    curve = ", ".join(f"{int(n)}: {f:.2f}" for n, f in device.matmul_efficiency)
    peaks = ", ".join(f"{k} {v / 1e9:.2f}" for k, v in device.peak_flops.items())
    _say(f"Calibrated in {secs:.1f} s: peak matmul GFLOP/s per rank ({peaks}); fp32 efficiency vs matrix size "
         f"(fraction of peak) {curve}; link {device.intra_node_bytes_per_s / 1e9:.3f} GB/s per rank one direction "
         f"(ring all-reduce fit), latency {device.intra_node_latency_s * 1e6:.0f} us per hop; copy "
         f"{device.hbm_bytes_per_s / 1e9:.2f} GB/s; Adam {device.cpu_adam_params_per_s / 1e6:.0f} M params/s per node")


@app.command()
@flag_named_errors()
def tune(
    model: str = typer.Option(..., help="Model preset, config.json path or model YAML (shape keys)."),
    nproc: int = typer.Option(2, help="Ranks on this machine."),
    global_batch: int = typer.Option(..., help="Global batch in sequences per optimizer step."),
    seq_len: int = typer.Option(128, help="Encoder (or decoder-only) length in tokens."),
    target_len: Optional[int] = typer.Option(None, help="Decoder target length (enc-dec); default: what T5 span "
                                                        "corruption of --seq-len needs (512 -> 114)."),
    output: str = typer.Option(..., help="Directory for the profile, trials, tune.json and tune.md: new, empty or "
                                         "an earlier tune's."),
    budget_s: float = typer.Option(900.0, help="Wall-clock budget for calibration + trials (s)."),
    steps: int = typer.Option(8, help="Optimizer steps per trial."),
    warmup: int = typer.Option(3, help="First steps of each trial excluded from its median."),
    max_trials: int = typer.Option(0, help="Cap on trials (0: budget only)."),
    screen: int = typer.Option(3, help="Strategies screened before model-guided trials: the best predicted of "
                                       "each engine, then of further engine/ZeRO families."),
    margin: float = typer.Option(0.0, help="Run a candidate only if predicted faster than the best measured by this "
                                            "fraction."),
    profile: Optional[str] = typer.Option(None, help="Use this hardware profile YAML instead of calibrating."),
    engine: Optional[str] = typer.Option(None, help="Constraint: engines, comma-separated (default: deepspeed,fsdp,"
                                                    "ddp, what train runs)."),
    zero: Optional[str] = typer.Option(None, help="Constraint: ZeRO stages, comma-separated (default: every stage "
                                                  "of each engine: deepspeed 0-3, fsdp 2-3, ddp 0-1)."),
    micro_batch: Optional[str] = typer.Option(None, help="Constraint: micro-batch sizes in sequences (default: "
                                                         "every divisor of each data-parallel rank's share of "
                                                         "--global-batch)."),
    tp: str = typer.Option("1", help="Constraint: tensor-parallel degrees, e.g. 1,2 (train runs tp with fsdp or "
                                     "ddp)."),
    pp: str = typer.Option("1", help="Constraint: pipeline-parallel degrees, e.g. 1,2."),
    pp_schedule: Optional[str] = typer.Option(None, help="Pipeline schedules to try when pp > 1 (default "
                                                         "1f1b,interleaved)."),
    recompute: Optional[str] = typer.Option(None, help="Constraint: activation recomputation, none,full (default: "
                                                       "both; train runs no selective recomputation)."),
    offload: str = typer.Option("none", "--offload-optimizer", help="Optimizer offload: none | cpu | none,cpu (cpu "
                                                                    "JIT-builds CPU-Adam once, ~75 s)."),
    offload_old: Optional[str] = typer.Option(None, "--offload", hidden=True),  # the older name, still accepted
    trial_timeout_s: float = typer.Option(300.0, help="Per-trial time limit (s)."),
    budget_fraction: float = typer.Option(0.15, help="Trials after the screen stop at this fraction of the "
                                                     "estimated trial time of measuring every strategy, but always "
                                                     "allow one identification trial and one re-measurement round "
                                                     "of two; a trial counts its steps + a typical start-up "
                                                     "(0 = no cap)."),
    contenders: int = typer.Option(2, help="Most close contenders re-measured per interleaved round (1 = none)."),
    memory_limit_gib: float = typer.Option(0.0, help="Address-space cap (RLIMIT_AS) of each trial process in GiB "
                                                     "(2^30 bytes); a trial beyond it ends as OOM. 0 = no cap."),
) -> None:
    """Calibrate, then run few short real trials guided by the refit cost model; pick the fastest strategy."""
    offload = offload_old or offload

    from scalestudy.plan import tuner
    from scalestudy.specs.presets import get_model
    from scalestudy.specs.run import resolve_target_len
    from scalestudy.specs.strategy import Workload

    spec = get_model(model)
    from scalestudy.cli.options import check_target_len
    from scalestudy.specs.model import check_trainable

    try:  # before calibrating: 'no strategy ... is runnable here' after the measurement said nothing of why
        check_trainable(spec)
    except ScalestudyError as exc:
        raise ScalestudyError(f"--model {model}: {exc} (tune measures trials of train)") from None
    check_target_len(spec, target_len)
    tlen = resolve_target_len("span" if spec.is_encoder_decoder else "causal", seq_len, target_len or 0)
    workload = Workload(global_batch=global_batch, seq_len=seq_len, target_len=tlen)
    _check_tune_counts(budget_s, trial_timeout_s, max_trials=max_trials, screen=screen, contenders=contenders)
    if not 0 <= memory_limit_gib < 2.0**33:  # 8 Gi GiB: beyond any machine, and int(bytes) stays finite
        raise ScalestudyError(f"--memory-limit-gib must be a number >= 0 (0: no cap), got {memory_limit_gib}")
    from scalestudy.specs.strategy import COST_MODEL_ENGINES

    for item in _strs(engine, "engine"):  # plan searches them when named; tune measures trials of train
        if item in COST_MODEL_ENGINES:
            raise ScalestudyError(f"--engine {item} is cost model only: `scalestudy train` does not run it (tune "
                                  f"measures trials; `plan --engine {item}` predicts it)")
    for flag, value, allowed in (("--recompute", recompute, ("none", "full")), ("--offload-optimizer", offload,
                                                                              ("none", "cpu"))):
        for item in _strs(value, flag.lstrip("-")):
            if item in ("selective", "op", "nvme"):  # known to the cost model, not run by `scalestudy train`
                raise ScalestudyError(f"{flag} {item} is not run by `scalestudy train` (tune measures trials): "
                                      f"choose from {', '.join(allowed)}")
    settings = tuner.TuneSettings(steps=steps, warmup=warmup, budget_s=budget_s, max_trials=max_trials,
                                  screen=screen, margin=margin, trial_timeout_s=trial_timeout_s,
                                  memory_limit_bytes=int(memory_limit_gib * GIB), budget_fraction=budget_fraction,
                                  contenders=contenders)
    cons = build_constraints(engine=engine, zero=zero, tp=tp, pp=pp, micro_batch=micro_batch,
                             recompute=recompute or "none,full", offload=offload, offload_params=offload,
                             precision="fp32", max_nodes=None, pp_schedule=pp_schedule)  # precision: the tuner's
    # default for the device; layouts train cannot run here are left out by tuner.local_candidates
    from scalestudy.outputs import check_output_dir
    from scalestudy.specs.hardware import get_device

    if nproc < 1:
        raise ScalestudyError(f"--nproc must be >= 1, got {nproc}")
    if profile is not None and not profile.strip():  # '' is not "no profile": tune would calibrate unasked
        raise ScalestudyError(f"--profile needs a hardware profile YAML (or device name), got {profile!r}")
    from scalestudy.cli.options import check_batch_fits_ram, check_cpu_ranks

    check_cpu_ranks(nproc)  # calibration and every trial start --nproc CPU ranks on this machine
    check_batch_fits_ram(nproc, 1, seq_len + tlen)  # even micro-batch 1's token ids must fit its RAM
    out = check_output_dir(output)
    from scalestudy.specs.run import check_not_users_files

    # a tune's DIR is its own: not a study's or run's folder, nor a user's (its trials/, profiles, tune.json)
    check_not_users_files(out, "--output", TUNE_NAMES, "hardware_profile.yaml", owner="a tune")
    if profile:
        from dataclasses import replace

        from scalestudy.plan.planner import default_precision

        device = get_device(profile)  # a bad profile fails before anything is written (cached for tuning_device)
        # so do constraints that leave nothing to try (run_tune repeats this cheap check)
        tuner.local_candidates(spec, device, nproc, workload, replace(cons, precision=default_precision(device)))
    if not profile:  # the CPU profile tuning_device measures is cached: an unwritable cache, before `out` is made
        from scalestudy.costmodel.cpu_profile import check_profile_cache

        check_profile_cache()
    out.mkdir(parents=True, exist_ok=True)
    device, calib_s = tuner.tuning_device(out, nproc, profile)
    if not profile:
        print_profile(device, calib_s)
    result = tuner.run_tune(spec, device, workload, nproc, out, settings, cons, calibration_s=calib_s)
    print_tune(result, out)


# A tune is a search of short trials on one machine: a budget or trial time limit beyond 30 days is a typo (and
# Python's waits refuse timeouts past ~2^31 s: threading.TIMEOUT_MAX), not a plan.
MAX_TUNE_S = 30 * 24 * 3600.0


def _check_tune_counts(budget_s: float, trial_timeout_s: float, **counts: int) -> None:
    """--budget-s and --trial-timeout-s in (0, 30 days]; the trial counts (--max-trials, --screen, --contenders) at
    most the trials the budget can hold: each is a process that takes at least tuner.MIN_TRIAL_S."""
    from scalestudy.plan.tuner import MIN_TRIAL_S

    for flag, value in (("--budget-s", budget_s), ("--trial-timeout-s", trial_timeout_s)):
        if not 0 < value <= MAX_TUNE_S:  # nan fails too
            raise ScalestudyError(f"{flag} must be a positive number of seconds up to {MAX_TUNE_S:,.0f} (30 days), "
                                  f"got {value:g}")
    most = int(budget_s // MIN_TRIAL_S)
    for name, value in counts.items():
        if value > most:
            raise ScalestudyError(f"--{name.replace('_', '-')} {value}: --budget-s {budget_s:g} holds at most {most:,} "
                                  f"trials (each trial process takes >= {MIN_TRIAL_S:g} s)")


def print_tune(result, out) -> None:
    from scalestudy.plan.tune_report import report_rows

    def f(v, fmt):
        return "n/a" if v is None or v != v else format(v, fmt)

    from scalestudy.cli.terminal import Column, fitted_table, terminal_console

    title = (f"tune: {len(result.trials)} trial(s), calibration {result.calibration_s:.1f} s + trials "
             f"{result.trials_s:.1f} s; stop: {result.stop_reason}")
    # drop: which columns give way first in a narrow terminal (0 = always shown whole)
    columns = [Column("#", drop=6), Column("strategy", "left", wrap=True), Column("status", "left"),
               Column("measured s/step"), Column("predicted before s", drop=4), Column("err % before", drop=3),
               Column("after calib. s", drop=2), Column("err % after"), Column("wall s", drop=5)]
    rows = [[str(r["trial"]), r["strategy"], r["status"], f(r["measured_step_s"], ".3f"),
             f(r["predicted_before_s"], ".3f"), f(r["error_before_pct"], "+.1f"), f(r["predicted_final_s"], ".3f"),
             f(r["error_final_pct"], "+.1f"), f(r["wall_s"], ".1f")] for r in report_rows(result)]
    console = terminal_console()
    table, hidden = fitted_table(title, columns, rows, console.width)
    console.print(table)
    if hidden:
        print(f"({console.width}-column terminal: left out {', '.join(hidden)}; all of them are in {out}/tune.md)")
    print("Step times: seconds per optimizer step, median over the measured steps of each trial (warm-up "
          "excluded); 'before' = model fitted on the earlier trials only; 'after calib.' = final predictions.")
    from scalestudy.plan.tune_report import budget_line, efficiency_line, pick_line, prediction_line

    print(efficiency_line(result.model.fit_))
    factor = getattr(result.model, "residual", None)  # what tune's predictions apply to the cost model
    if factor is not None:
        print(prediction_line(factor.to_dict()) + ".")
    budget = budget_line(getattr(result, "budget", None) or {})  # none before any trial ran
    if budget:
        print(budget)
    if result.best:
        print(f"{pick_line(result.pick)} Results: {out}/tune.json, {out}/tune.md")
    else:
        print(f"No trial succeeded; see {out}/trials/*/train.log")
