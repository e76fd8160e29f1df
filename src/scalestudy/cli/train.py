"""CLI: `scalestudy train` — one Strategy, launched through torchrun on this machine (or printed for a cluster)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from scalestudy.cli import app
from scalestudy.cli.options import check_batch_fits_ram, check_cpu_ranks, flag_named_errors
from scalestudy.cli.options import machine_memory_bytes as _machine_memory_bytes
from scalestudy.cli.terminal import run_flag_defaults, show_defaults

console = Console()


@app.command()
@flag_named_errors(reads_keys=True)
def train(
    model: Optional[str] = typer.Option(None, help="Preset name (t5-tiny, gpt2-tiny, ...), a config.json path or a "
                                                   "model YAML (shape keys)."),
    engine: Optional[str] = typer.Option(None, help="deepspeed, fsdp or ddp."),
    zero: Optional[int] = typer.Option(None, help="ZeRO stage: deepspeed 0-3; ddp 0 (DDP) or 1 (ZeroRedundancy"
                                                  "Optimizer); fsdp 2 (keep gathered) or 3 (reshard after forward)."),
    tp: Optional[int] = typer.Option(None, help="Tensor-parallel degree (Llama/T5 blocks; must divide the heads "
                                                "and KV heads). tp/pp > 1 run --engine fsdp (zero 2|3) or ddp (0)."),
    pp: Optional[int] = typer.Option(None, help="Pipeline-parallel degree (stages over the layers; T5: encoder "
                                                "layers, then decoder layers)."),
    pp_schedule: Optional[str] = typer.Option(None, help="Pipeline schedule: 1f1b, gpipe or interleaved."),
    virtual_stages: Optional[int] = typer.Option(None, help="Model chunks per pipeline rank (interleaved, >= 2)."),
    sequence_parallel: Optional[bool] = typer.Option(None, "--sequence-parallel/--no-sequence-parallel",
                                                     help="With tp > 1, split norms and residuals along the "
                                                          "sequence (default on)."),
    stage_layers: Optional[str] = typer.Option(None, help="Layers per pipeline rank, e.g. 3,1 (T5: encoder then "
                                                          "decoder layers counted together), or auto (balanced "
                                                          "for --stage-speeds); default an even split."),
    stage_speeds: Optional[str] = typer.Option(None, help="With --stage-layers auto: relative speed of each "
                                                          "pipeline rank's device, e.g. 2,1 (measured FLOP/s)."),
    offload_optimizer: Optional[str] = typer.Option(None, help="none or cpu (DeepSpeed ZeRO >= 1)."),
    offload_params: Optional[str] = typer.Option(None, help="none or cpu (DeepSpeed ZeRO-3)."),
    nproc: Optional[int] = typer.Option(None, help="Ranks on this machine (torchrun --nproc-per-node)."),
    nnodes: Optional[int] = typer.Option(None, help="Nodes (> 1 only with --print-launch)."),
    steps: Optional[int] = typer.Option(None, help="Optimizer steps to train (in total, counting resumed ones)."),
    micro_batch: Optional[int] = typer.Option(None, help="Sequences per rank per micro-step."),
    global_batch: Optional[int] = typer.Option(None, help="Sequences per optimizer step (= micro-batch x "
                                                          "accumulation x dp); default micro-batch x dp."),
    seq_len: Optional[int] = typer.Option(None, help="Encoder (or decoder-only) length in tokens."),
    target_len: Optional[int] = typer.Option(None, help="Decoder target length in tokens (span, knowledge); "
                                                        "default: what span corruption of --seq-len needs "
                                                        "(512 -> 114)."),
    objective: Optional[str] = typer.Option(None, help="span, knowledge or causal."),
    data: Optional[list[str]] = typer.Option(None, help="Corpus file(s): .txt, .jsonl, .parquet (.txt.gz, "
                                                        ".jsonl.gz), or hf:NAME[:CONFIG], a Hugging Face dataset "
                                                        "streamed while the run starts (needs the network and the "
                                                        "`datasets` package: pip install 'scalestudy[hub]'; first "
                                                        "100,000 documents); repeatable; default: the bundled "
                                                        "corpus."),
    seed: Optional[int] = typer.Option(None, help="Seed of weights and data order."),
    output: Optional[str] = typer.Option(None, "--output", "-o", help="Run directory (metrics.jsonl, summary.json, "
                                                                      "tb/, checkpoints/)."),
    resume: bool = typer.Option(False, "--resume", help="Continue from DIR's latest checkpoint."),
    config: Optional[Path] = typer.Option(None, help="RunConfig YAML (sections model, strategy, workload, optimizer, "
                                                     "data, output; flat option names also read); flags override it."),
    lr: Optional[float] = typer.Option(None, help="Peak learning rate (AdamW)."),
    warmup_steps: Optional[int] = typer.Option(None, help="Learning-rate warm-up: steps of linear ramp up to --lr "
                                                          "(not --warmup, which only affects the timing medians)."),
    decay: Optional[str] = typer.Option(None, help="Learning-rate decay after warm-up: cosine, linear, constant."),
    warmup: Optional[int] = typer.Option(None, help="Timing warm-up: first steps left out of the summary's medians "
                                                    "(s/step, tokens/s); training is unchanged (the learning-rate "
                                                    "warm-up is --warmup-steps)."),
    precision: Optional[str] = typer.Option(None, help="fp32, bf16 or fp16. On a CPU, bf16/fp16 only where "
                                                       "measured fast (AVX-512 BF16/AMX: >= 0.5x fp32 matmul; "
                                                       "`scalestudy calibrate` shows it)."),
    recompute: Optional[str] = typer.Option(None, help="Activation checkpointing: none or full."),
    grad_clip: Optional[float] = typer.Option(None, help="Gradient-norm clipping (0: off)."),
    save_every: Optional[int] = typer.Option(None, help="Checkpoint every N steps (0: only at the end)."),
    lexicon: Optional[str] = typer.Option(None, help="Entity/phrase lexicon for the knowledge objective."),
    tokenizer: Optional[str] = typer.Option(None, help="tokenizer.json to use (default: train one on the corpus)."),
    text_field: Optional[str] = typer.Option(None, help="Text field of JSONL/Parquet corpora."),
    vocab_size: Optional[int] = typer.Option(None, help="Vocabulary of a tokenizer trained on the corpus."),
    no_progress: bool = typer.Option(False, "--no-progress", help="No progress bar (a line every 10%)."),
    print_launch: bool = typer.Option(False, "--print-launch", help="Write DIR/train_config.yaml and the launch "
                                                                    "scripts (single node, multi-node torchrun, "
                                                                    "Slurm) for this config, print them; run nothing."),
    device: Optional[str] = typer.Option(None, help="With --print-launch: what the nodes train on, gpu (one rank per "
                                                    "GPU, NCCL) or cpu (gloo ranks, no GPUs asked for); default: "
                                                    "this machine's (gpu when torch sees one), as a run here."),
    gpus_per_node: Optional[int] = typer.Option(None, help="With --print-launch on GPUs: ranks per node (default "
                                                           "--nproc)."),
    set_options: Optional[list[str]] = typer.Option(None, "--set", help="Any other run option as KEY=VALUE "
                                                                       "(repeatable; YAML value): weight_decay=0.1, "
                                                                       "beta2=0.95, dropout=0.1, attention=eager, ... "
                                                                       "(every key: docs/run-options.md)"),
) -> None:
    """Train a model with one Strategy; writes DIR/metrics.jsonl, DIR/tb, DIR/checkpoints and DIR/summary.json."""
    from scalestudy.errors import ScalestudyError
    from scalestudy.specs.run import RunConfig

    flags = {
        "model": model, "engine": engine, "zero": zero, "offload_optimizer": offload_optimizer,
        "offload_params": offload_params, "nproc": nproc, "nnodes": nnodes, "steps": steps,
        "micro_batch": micro_batch, "global_batch": global_batch, "seq_len": seq_len, "target_len": target_len,
        "objective": objective, "data": data or None, "seed": seed, "output": output, "lr": lr,
        "warmup_steps": warmup_steps, "decay": decay, "warmup": warmup, "precision": precision,
        "recompute": recompute, "grad_clip": grad_clip, "save_every": save_every, "lexicon": lexicon,
        "tokenizer": tokenizer, "text_field": text_field, "vocab_size": vocab_size,
        "resume": resume or None, "progress": False if no_progress else None, "tp": tp, "pp": pp,
        "pp_schedule": pp_schedule, "virtual_stages": virtual_stages, "sequence_parallel": sequence_parallel,
        "stage_layers": _layer_counts(stage_layers) if stage_layers is not None and stage_layers != "auto" else None,
    }
    # --set KEY=VALUE fills what the flags left unset (None); a flag given explicitly wins
    given = {k: v for k, v in flags.items() if v is not None}
    options, path = _set_options(set_options or []), str(config) if config else None
    cfg = RunConfig.merged(path, {**options, **given})
    _check_overridden_values(cfg, path, options, given)
    # a decoder-only model's causal run resolves it to 0: dropped (a T5 is refused for causal by validate)
    if target_len is not None and target_len > 0 and cfg.data.objective == "causal" and \
            not cfg.model_spec().is_encoder_decoder:
        raise ScalestudyError(f"--target-len {target_len} is the decoder length of the span and knowledge objectives; "
                              "--objective causal trains a decoder-only sequence of --seq-len: drop --target-len")
    if not print_launch and stage_layers != "auto":  # auto's split needs the device, known only through torch
        from scalestudy.engine.launch import check_before_start

        try:
            check_before_start(cfg)  # bad input refused before torch's import (2-15 s)
        except ScalestudyError as exc:
            # a resumed run's DIR/train_config.yaml records resume: true -- reused as --config for a new run, the
            # refusal names a --resume the user never typed
            if config is not None and not resume and cfg.output.resume and str(exc).startswith("--resume"):
                exc.args = (f"{exc} (resume: true comes from --config {config}; --set resume=false starts a new "
                            "run)",)
            raise
    cuda = _trains_on_gpu(device, gpus_per_node, print_launch)
    if cuda and not print_launch:
        _check_gpu_ranks(cfg.workload.nproc)
    if print_launch and gpus_per_node is not None:
        if nproc is not None and nproc != gpus_per_node:  # both say the ranks per node: one would be dropped
            raise ScalestudyError(f"--nproc {nproc} and --gpus-per-node {gpus_per_node} both set the ranks per "
                                  "node: give one")
        cfg = cfg.replace(nproc=gpus_per_node)
    if stage_layers == "auto":
        cfg = _balanced_stages(cfg, stage_speeds, cuda=cuda, local=not print_launch)
    elif stage_speeds is not None:
        raise ScalestudyError("--stage-speeds sets the split of --stage-layers auto: add --stage-layers auto (or give "
                              "the layers per stage with --stage-layers)")
    if print_launch:
        from scalestudy.plan.emit import emit

        # The scripts follow the run's device (as `plan --emit` follows the cluster's): GPU nodes get
        # --gpus-per-node and NCCL; CPU nodes get gloo ranks, one thread each, and CPUs instead of GPUs from Slurm.
        run = cfg.replace(output=str(Path(cfg.output.dir).resolve())).with_absolute_paths()
        run.validate()
        for path in emit(cfg.output.dir, run, cuda=cuda, origin="`scalestudy train --print-launch`").values():
            print(f"# ---- {path}")
            print(path.read_text(encoding="utf-8"), end="")
        return
    if not cuda:
        check_cpu_ranks(cfg.workload.nproc)
    _check_batch_fits_ram(cfg)
    if cfg.data.lexicon and cfg.data.objective == "knowledge":  # read before a tokenizer is trained on the corpus
        from scalestudy.engine.data.knowledge import load_lexicon

        load_lexicon(cfg.data.lexicon)
    from scalestudy.engine.launch import run_local

    summary = run_local(cfg.with_absolute_paths())  # the run records where its inputs are, not how they were typed
    _print_summary(summary, cfg.output.dir)


DEVICES = ("gpu", "cpu")


def _check_overridden_values(cfg, path: str | None, options: dict, given: dict) -> None:
    """Every value of the --config file and of --set on its own (RunConfig.check_values), also those a flag or a
    later --set overrides: steps: -3 in the file beside --steps 4 ran 4 steps without a word. The run's own values
    first, so that their refusals read as validate words them."""
    from scalestudy.errors import ScalestudyError
    from scalestudy.specs.run import RunConfig

    cfg.check_values()
    if path is not None:
        try:
            RunConfig.merged(path, {}).check_values()
        except ScalestudyError as exc:
            raise ScalestudyError(f"--config {path}: {exc} (overridden on the command line, still a wrong value in "
                                  "the file)") from None
    if {k.replace("-", "_") for k in options} & given.keys():  # a --set key a flag overrides is still checked
        try:
            RunConfig.merged(path, {**given, **options}).check_values()
        except ScalestudyError as exc:
            raise ScalestudyError(f"--set: {exc} (overridden by a flag, still a wrong value)") from None


def _trains_on_gpu(device: str | None, gpus_per_node: int | None, print_launch: bool) -> bool:
    """Whether the run's ranks drive GPUs: --device for printed cluster scripts, else this machine's (what a run
    here uses: engine/train.py joins NCCL when torch sees a GPU, gloo otherwise)."""
    from scalestudy.errors import ScalestudyError

    if device is not None and device not in DEVICES:
        raise ScalestudyError(f"--device {device!r}: choose gpu or cpu")
    if not print_launch and gpus_per_node is not None:
        raise ScalestudyError("--gpus-per-node is for --print-launch (cluster scripts); a run here starts --nproc "
                              "ranks")
    if device is None or not print_launch:
        import torch

        here = "gpu" if torch.cuda.is_available() else "cpu"
        if not print_launch and device not in (None, here):
            raise ScalestudyError(f"--device {device}: a run here trains on this machine's {here.upper()} (hide its "
                                  "GPUs with CUDA_VISIBLE_DEVICES= for a CPU run; --device chooses the device of "
                                  "--print-launch scripts)")
        device = here
    if device == "cpu" and gpus_per_node is not None:
        raise ScalestudyError("--gpus-per-node is for GPU nodes; CPU nodes run --nproc ranks each (add --device gpu "
                              "for a GPU cluster)")
    if gpus_per_node is not None and gpus_per_node < 1:
        raise ScalestudyError(f"--gpus-per-node must be >= 1, got {gpus_per_node}")
    return device == "gpu"


def _balanced_stages(cfg, speeds_text: str | None, *, cuda: bool, local: bool):
    """`cfg` with --stage-layers auto resolved: the planner's split (stage time and memory by the cost model) for a
    run on this machine's CPU ranks or GPUs (refused on a GPU the cost model has no figures for); by FLOPs / speed
    only for the nodes of --print-launch scripts (unknown here), said in the printed line."""
    from scalestudy.errors import ScalestudyError
    from scalestudy.plan.partition import auto_stage_layers

    if not speeds_text:
        raise ScalestudyError("--stage-layers auto needs --stage-speeds (a relative speed per pipeline rank, e.g. 2,1)")
    from scalestudy.cli.options import parse_speeds

    speeds = parse_speeds(speeds_text)  # positive finite numbers, at most 1e12x apart
    top = max(speeds)
    memory, gpu, why = None, None, ""
    if local and not cuda:
        memory = _machine_memory_bytes()
        why = "" if memory else "memory not checked (this machine's RAM is unknown)"
    elif local:
        gpu = _local_gpu_device(cfg.workload.nproc)
    else:
        why = ("memory not checked (the nodes of these scripts are unknown here; `scalestudy plan --cluster` with "
               "device groups splits by memory too)")
    split = auto_stage_layers(cfg, [v / top for v in speeds], memory, why, gpu=gpu)  # relative speeds: scale-free
    console.print(split.describe(speeds_text), soft_wrap=True, highlight=False)
    return split.run


def _local_gpus() -> list[tuple[str, int]]:
    """(name, memory in bytes) of each GPU torch sees on this machine, in rank order (rank i drives cuda:i)."""
    import torch

    return [(torch.cuda.get_device_name(i), torch.cuda.get_device_properties(i).total_memory)
            for i in range(torch.cuda.device_count())]


def _check_gpu_ranks(nproc: int) -> None:
    """A run here drives one GPU per rank (engine/train.py: rank i on cuda:i): --nproc beyond them is refused now,
    not as an invalid device ordinal inside a rank."""
    from scalestudy.errors import ScalestudyError

    count = len(_local_gpus())
    if nproc > count:
        raise ScalestudyError(f"--nproc {nproc}: this machine has {count} GPU(s) and a run here drives one per rank "
                              "(--print-launch writes scripts for more)")


def _local_gpu_device(nproc: int):
    """The device entry of the GPUs the run's ranks drive, with the memory of the smallest of them (what every rank
    may use); refused, in one line, where the cost model has no figures for them (the split could not know whether
    a stage fits)."""
    from dataclasses import replace

    from scalestudy.engine.probe import GPU_NAMES
    from scalestudy.errors import ScalestudyError
    from scalestudy.specs.hardware import get_device

    gpus = _local_gpus()[:nproc]
    known = [(memory, next((entry for needle, entry in GPU_NAMES if needle in name), "")) for name, memory in gpus]
    if not known or not all(entry for _, entry in known):
        names = ", ".join(sorted({name for name, _ in gpus})) or "none visible"
        raise ScalestudyError(f"--stage-layers auto on this machine's GPU(s) ({names}): the cost model has no figures "
                              "for them, so it cannot tell whether a stage fits their memory; give the layers per "
                              "stage with --stage-layers (e.g. 3,1)")
    memory, entry = min(known)  # the smallest GPU bounds every stage (the speeds say how fast each rank is)
    device = get_device(entry)
    return replace(device, memory_bytes=memory, host_memory_bytes=_machine_memory_bytes() or device.host_memory_bytes)


def _check_batch_fits_ram(cfg) -> None:
    """A run here: its ranks' micro-batch token ids must fit this machine's RAM (`check_batch_fits_ram`)."""
    w = cfg.resolved().workload
    check_batch_fits_ram(cfg.workload.nproc, cfg.strategy.micro_batch, w.seq_len + w.target_len)


def _layer_counts(text: str) -> list[int]:
    from scalestudy.errors import ScalestudyError
    from scalestudy.yamlfile import int_from_text

    try:
        return [int_from_text(part) for part in text.split(",")]
    except ValueError:
        raise ScalestudyError(f"--stage-layers takes comma-separated layer counts (e.g. 3,1), got {text!r}") from None


show_defaults(train, run_flag_defaults())  # --help shows RunConfig's defaults (the flags default to None)


def _print_summary(s: dict, output: str) -> None:
    def fmt(value, spec: str) -> str:
        return "n/a" if value is None else format(value, spec)

    mfu = None if s["median_mfu"] is None else 100 * s["median_mfu"]
    console.print(
        f"[bold]{s['strategy_label']}[/] {s['model']} on {s['world_size']} rank(s) ({s['device']}): "
        f"{s['steps']} steps, final loss {s['final_loss']:.4f} nats/token\n"
        f"  medians over {s['measured_steps']} steps (first {s['warmup_steps_excluded']} excluded): "
        f"{fmt(s['median_step_s'], '.3f')} s/step, {fmt(s['median_tokens_per_s'], ',.0f')} tokens/s, "
        f"{fmt(s['median_samples_per_s'], '.2f')} samples/s, {fmt(s['median_model_tflops'], '.4f')} model TFLOP/s "
        f"per rank, MFU {fmt(mfu, '.1f')}%\n"
        f"  {s['mfu_convention']}; peak: {s['mfu_peak_source']}\n"
        f"  peak memory per rank: {s['peak_mem_bytes'] / 2**20:,.1f} MiB ({s['memory_convention']}); "
        f"peak RSS {s['peak_rss_bytes'] / 2**20:,.1f} MiB",
        highlight=False,  # prose: wrapped at spaces to the terminal, so no unit is cut where the terminal folds it
    )
    console.print(f"  wrote {output}/metrics.jsonl, {output}/summary.json, {output}/tb", highlight=False,
                  soft_wrap=True)  # paths stay whole


def _set_options(items: list[str]) -> dict:
    """`--set KEY=VALUE` pairs as flat run options (values read as YAML scalars: 0.1, true, [1, 2])."""
    from scalestudy.errors import ScalestudyError
    from scalestudy.yamlfile import read_yaml_value

    options, typed = {}, {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ScalestudyError(f"--set takes KEY=VALUE, got {item!r}")
        name = key.strip().replace("-", "_")
        if name in typed:  # the last one silently won: a key twice in a YAML file is refused too
            raise ScalestudyError(f"--set gives {key.strip()} twice ({typed[name]!r} and {item!r}): keep one")
        typed[name] = item
        options[key.strip()] = read_yaml_value(value, f"--set {key.strip()}") if value.strip() else None
        if options[key.strip()] is None:  # `--set lr=` would silently keep the default
            raise ScalestudyError(f"--set {item!r} gives {key.strip()} no value")
    return options
