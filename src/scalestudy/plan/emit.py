"""Emit a planned strategy as the files that run it: `plan --emit DIR`.

Written to DIR (each to a temporary name first, then renamed: DIR never holds half-written files):
- train_config.yaml      the resolved RunConfig (scalestudy.specs.run): what every worker reads;
- ds_config.json         (engine deepspeed) the exact JSON `scalestudy train` hands to deepspeed.initialize for
                         this config (engine/settings.py builds both; the run records it again in its DIR);
  fsdp_config.json / ddp_config.json  likewise for FSDP2 / DDP;
- launch_single_node.sh, launch_multi_node.sh, launch_slurm.sbatch  (scalestudy.launch.commands);
- plan.json              the strategy, layout and estimate the files were made from.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from pathlib import Path

from scalestudy.atomicfile import write_text_atomic
from scalestudy.engine.settings import FILE_NAMES, engine_settings
from scalestudy.errors import ScalestudyError
from scalestudy.outputs import check_output_dir
from scalestudy.launch.commands import CONFIG_NAME, RUN_DIRS, SCRIPT_NAMES, launch_scripts
from scalestudy.specs.run import RunConfig, as_trained, check_not_users_files

# every name emit may write, whatever the engine
EMITTED_NAMES = (CONFIG_NAME, *FILE_NAMES.values(), *SCRIPT_NAMES, "plan.json")


def trainable(run: RunConfig) -> str | None:
    """None when `scalestudy train` accepts this run, else its one-line reason (e.g. no tensor parallelism)."""
    try:
        run.validate()
    except ScalestudyError as exc:
        return str(exc)
    return None


def check_emittable(spec, *, precision: str, engines: tuple[str, ...], cp: int, software: dict) -> None:
    """Before plan's search: one line where `scalestudy train` could run none of the candidates --emit is asked to
    write -- a cost-model-only model type, fp8, only cost-model engines, context parallelism, or a software option
    at a value train runs for no model or layout (`software`: plan's fixed options, "train" = train's own value).
    A value train runs for some candidates only is left to emit_best_runnable (it emits the best of those)."""
    from scalestudy.specs.model import COST_MODEL_TYPES, SDPA_TYPES
    from scalestudy.specs.run import COST_MODEL_OPTIONS, train_runs
    from scalestudy.specs.strategy import COST_MODEL_ENGINES, ENGINES, TRAIN_VALUES, Strategy

    refused = []  # "what the user asked for (what train runs instead)"
    kind = spec.hf_type or spec.family
    if kind in COST_MODEL_TYPES:
        refused.append(f"model {spec.name} (type {kind}, cost model only: train builds {', '.join(SDPA_TYPES)})")
    if engines and all(e in COST_MODEL_ENGINES for e in engines):
        refused.append(f"--engine {','.join(engines)} (cost model only: train runs {', '.join(ENGINES)})")
    if precision == "fp8":
        refused.append("--precision fp8 (cost model only: train runs bf16, fp16 or fp32)")
    if cp > 1:
        refused.append(f"--cp {cp} (train splits no sequences: cp 1)")
    for name, value in software.items():
        # None: the engine's default, resolved per candidate; "train": what train runs, filled per candidate
        if name not in COST_MODEL_OPTIONS or value in (None, "train") or train_runs(name, value):
            continue
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):  # --tf32 / --no-tf32: train runs the other
            on, off = flag, flag.replace("--", "--no-", 1)
            refused.append(f"{on if value else off} (cost model only: train runs {off if value else on})")
        else:
            runs = TRAIN_VALUES.get(name, (Strategy.__dataclass_fields__[name].default,))
            refused.append(f"{flag} {value} (cost model only: train runs {' or '.join(runs)})")
    if refused:
        raise ScalestudyError(f"--emit writes a run for `scalestudy train`, which cannot run {'; '.join(refused)}: "
                              f"drop --emit (plan without it, and estimate, price this)")


def check_inputs_exist(run: RunConfig) -> None:
    """The corpus, tokenizer and lexicon an emitted config names (absolute paths) exist here and read as `train`
    reads them; a typo or a wrong file is a one-line error now, not a failed job on the cluster later. Hub datasets
    (hf:) pass."""
    d = run.data
    check_input_files(d.files, d.tokenizer, d.lexicon, d.text_field)


def check_input_files(data, tokenizer: str | None, lexicon: str | None, text_field: str | None = None) -> None:
    """Corpus files (hf: datasets pass), tokenizer and lexicon exist as files here and read as `train` reads them
    (a corpus: its first document only): `plan --emit` checks them before its search, `emit` again by the absolute
    paths it writes."""
    from scalestudy.engine.data.corpora import check_hf_spec, read_corpus
    from scalestudy.engine.data.knowledge import load_lexicon
    from scalestudy.engine.data.tokenizer import load_tokenizer
    from scalestudy.specs.run import DataSection, check_data_fields

    check_data_fields(data, text_field or DataSection.text_field, None, DataSection.vocab_size)

    for spec in [f for f in data or () if f.startswith("hf:")]:
        check_hf_spec(spec)  # the written form only: the nodes reach the dataset
    named = [("--data", f) for f in data or () if not f.startswith("hf:")]
    named += [(flag, p) for flag, p in (("--tokenizer", tokenizer), ("--lexicon", lexicon)) if p]
    for flag, path in named:
        path = str(Path(path).absolute())
        if Path(path).is_dir():
            raise ScalestudyError(f"{flag} {path} is a directory: {flag} takes a file"
                                  f"{' (repeat --data for several corpus files)' if flag == '--data' else ''}")
        if Path(path).exists() and not Path(path).is_file():  # a FIFO or a device: its read blocks or never ends
            raise ScalestudyError(f"{flag} {path} is not a regular file (a FIFO, a socket or a device): {flag} "
                                  "takes a file")
        if not Path(path).is_file():
            raise ScalestudyError(f"{flag} {path}: no such file (the emitted config names it by this path)")
        if flag == "--data":
            read_corpus(path, text_field or "text", max_docs=1)
        elif flag == "--tokenizer":
            load_tokenizer(path)
        else:
            load_lexicon(path)


def default_output(run: RunConfig) -> str:
    # one folder: the label's spaces and the stage split's slashes ("stages 3/1") become dashes
    return f"runs/{run.display_name}-{run.strategy.label.replace(' ', '-').replace('/', '-')}"


def emit(out_dir: str | Path, run: RunConfig, *, cuda: bool, plan_record: dict | None = None,
         origin: str = "`scalestudy plan --emit`") -> dict[str, Path]:
    """Write the run's config, its engine settings and launch scripts; return {name: path}."""
    flag = "--emit" if "plan" in origin else "--output"
    out = check_output_dir(out_dir, flag)
    if (out / "metrics.jsonl").exists() and not run.output.resume:  # as `train` refuses to run into it
        resume = " (or add --resume to continue that run)" if flag == "--output" else ""
        raise ScalestudyError(f"{flag} {out} already holds a run (metrics.jsonl): its {CONFIG_NAME} would be "
                              f"replaced; choose a new directory{resume}")
    check_inputs_exist(run)
    run = run.resolved()
    run = dataclasses.replace(run, strategy=as_trained(run.strategy, run.model_spec()))  # what train runs, for estimate
    engine_file, settings = engine_settings(run, cuda=cuda)
    files = {CONFIG_NAME: run.to_yaml(), engine_file: json.dumps(settings, indent=2) + "\n"}
    env = {} if cuda else {"OMP_NUM_THREADS": "1", "DS_ACCELERATOR": "cpu"}
    files.update(launch_scripts(out / CONFIG_NAME, nproc=run.workload.nproc, nnodes=run.workload.nnodes, cuda=cuda,
                                env=env, origin=origin))
    if plan_record is not None:
        files["plan.json"] = json.dumps(plan_record, indent=2) + "\n"
    for name in files:
        if (out / name).exists() and not (out / name).is_file():
            raise ScalestudyError(f"cannot write {out / name}: it exists and is not a file")
    # none half-replaced; where the run trains into DIR (train --print-launch), its ranks' folders too: a file at
    # DIR/tb failed in torchrun's ranks after the scripts were written
    same = Path(run.output.dir).resolve() == out.resolve()
    check_output_dir(out, flag, files=tuple(files), dirs=RUN_DIRS if same else ())
    check_not_users_files(out, flag, EMITTED_NAMES)
    made = [p for p in (out, *(out / name for name in files)) if not p.exists()]  # taken back on a failed write
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, text in files.items():
        try:
            paths[name] = write_text_atomic(out / name, text, executable=name.endswith((".sh", ".sbatch")))
        except OSError as exc:  # a full disk: no half set of configs and scripts (which a launch would mix up)
            for p in reversed(made):
                with contextlib.suppress(OSError):
                    p.rmdir() if p.is_dir() else p.unlink()
            raise ScalestudyError(f"{flag} {out}: cannot write {name}: {exc.strerror or exc}") from None
    return paths


def emit_best_runnable(out_dir: str | Path, model: str, cluster, result, **options) -> str:
    """Emit the best planned strategy `scalestudy train` can run (usually the winner); return a line saying which.

    `model` is the preset name or config.json path (carried into the config, not the display name); `options` are
    further flat RunConfig options (steps, data, tokenizer, text_field, lexicon, vocab_size, objective, output).
    """
    cuda = cluster.device.kind != "cpu"
    steps = options.get("steps", RunConfig().workload.steps)
    if steps < 1:
        raise ScalestudyError(f"--train-steps must be >= 1, got {steps}")
    # Short emitted runs still report medians: exclude at most all but the last step from them.
    options.setdefault("warmup", min(RunConfig().output.timing_warmup, steps - 1))
    chosen, reasons = None, []
    for rank, c in enumerate(result.candidates, 1):
        run = RunConfig.build(model, c.strategy, result.workload, nproc=cluster.gpus_per_node, nnodes=c.nodes,
                              **options).with_absolute_paths()
        reason = trainable(run)
        if reason is None:
            chosen = (rank, c, run)
            break
        reasons.append(reason)
    if chosen is None:
        raise ScalestudyError(f"no feasible strategy is runnable by `scalestudy train` ({reasons[0]})")
    rank, best, run = chosen
    if "output" not in options:
        run = run.replace(output=default_output(run))
    record = {"model": run.display_name, "model_source": run.model.source, "cluster": cluster.to_dict(),
              "rank": rank, **best.to_dict()}
    emit(out_dir, run, cuda=cuda, plan_record=record)
    if rank == 1:
        return f"Wrote configs and launch commands for the winner, {best.strategy.label}, to {out_dir}"
    slower = (1 - best.estimate.tokens_per_s / result.best.estimate.tokens_per_s) * 100
    return (f"The winner is not runnable by `scalestudy train` ({reasons[0]}); wrote configs and launch commands "
            f"for the best runnable strategy, #{rank} {best.strategy.label} ({slower:.1f}% fewer tokens/s), "
            f"to {out_dir}")
