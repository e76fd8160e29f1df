"""RunConfig: the one description of a training run, from `train` flags, `train --config`, study/tune/search trials
and `plan --emit` alike. Torch-free, so planning and study code build it without the engine.

Sections (YAML keys), in the spirit of torchtitan's job config:

    model:     {source: t5-tiny, dropout: 0.0}             # preset name or config.json path
    strategy:  {engine: deepspeed, zero: 0, ..., precision: fp32}   # the one frozen `Strategy`, every field
    workload:  {seq_len: 128, target_len: 0, global_batch: 0, nproc: 1, nnodes: 1, steps: 100}
    optimizer: {lr: 1.0e-3, min_lr_ratio: 0.1, warmup_steps: 10, decay: cosine, weight_decay: 0.01,
                beta1: 0.9, beta2: 0.999, grad_clip: 1.0, seed: 1234}
    data:      {objective: span, files: [], text_field: text, lexicon: null, tokenizer: null, vocab_size: 8192}
    output:    {dir: runs/train, resume: false, save_every: 0, timing_warmup: 2, progress: true}

Derived values are resolved in one place, `RunConfig.resolved()`:
- target_len 0 = the decoder length span corruption of seq_len needs (T5: density 0.15, mean span 3; 512 -> 114);
  causal models have none (0). `estimate`, `plan` and `train` all default --target-len this way.
- global_batch 0 = micro_batch x data-parallel degree (no gradient accumulation).
Flat option names (`lr`, `engine`, `seq_len`, `output`, ...: the `train` flags) map onto the sections through
`FLAT_KEYS` (run_options.py, with the sections); `train --config` also reads the older flat YAML files that way.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from scalestudy.errors import OptionError, ScalestudyError
from scalestudy.specs.hardware import MAX_WORLD_SIZE, WORLD_SIZE_LIMIT
from scalestudy.specs.model import ModelSpec, hf_attn_implementation
from scalestudy.specs.presets import get_model
from scalestudy.specs.parallel_layout import check_microbatches, check_parallel_layout, check_sequence_parallel
from scalestudy.specs.run_options import (FLAT_KEYS, FLAT_NAMES, RUN_OPTIONS_DOC, SECTION_ONLY, SECTIONS, DataSection,
                                          MIN_VOCAB_SIZE, ModelSection, OptimizerSection, OutputSection, WorkloadSection)
from scalestudy.specs.strategy import (COST_MODEL_ENGINES, TRAIN_VALUES, Layout, Strategy, Workload,
                                      resolve_layout, zero1_all_reduce_default)
from scalestudy.yamlfile import number_value, read_yaml

OBJECTIVES = ("span", "knowledge", "causal")
DECAYS = ("cosine", "linear", "constant")
SPAN_NOISE_DENSITY = 0.15  # T5 pre-training (Raffel et al. 2020); the data pipeline's defaults
SPAN_MEAN_LENGTH = 3.0
# AdamW's update is ~lr per weight per step (m / sqrt(v) is ~1): weights initialised at O(0.01-1) are overwritten
# by one step beyond lr 1, so a larger value is a typo (e.g. 1e308), not a schedule.
MAX_LR = 1.0
# Published LLM warm-ups run 100s to ~10k steps (GPT-3 375M tokens, PaLM 10k steps): beyond 1e6 the learning rate
# stays ~0 for any run this toolkit times
MAX_WARMUP_STEPS = 1_000_000
# a gradient-norm threshold (published runs clip at 0.3-5); 1e6 keeps any real setting, above it clipping never acts
MAX_GRAD_CLIP = 1.0e6
# The first line of every run configuration scalestudy writes (train's DIR, plan --emit, trials): how an output
# directory's train_config.yaml is told from a user's own, which plan --emit / --print-launch never replace.
WRITTEN_BY = "# Written by scalestudy"
WRITTEN_BY_JSON = {"written_by": "scalestudy"}  # the same mark in the JSON files a run writes (engine/data/pipeline)
CONFIG_HEADER = "# Written by scalestudy: a resolved run configuration (scalestudy train --config reads it).\n"

# The one default strategy of a run: Strategy's own defaults, in fp32 (the one precision every device runs at full
# speed: most CPUs emulate bf16; engine/cpu_precision.py measures it).
DEFAULT_STRATEGY = Strategy(precision="fp32")


@dataclass(frozen=True)
class RunConfig:
    model: ModelSection = field(default_factory=ModelSection)
    strategy: Strategy = DEFAULT_STRATEGY
    workload: WorkloadSection = field(default_factory=WorkloadSection)
    optimizer: OptimizerSection = field(default_factory=OptimizerSection)
    data: DataSection = field(default_factory=DataSection)
    output: OutputSection = field(default_factory=OutputSection)

    # ---- construction ------------------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, raw: dict | None) -> RunConfig:
        """Nested mapping (the YAML shape) or, for compatibility, the flat option names."""
        raw = dict(raw or {})
        for name in SECTION_ONLY & raw.keys():  # no flat option has these names: a section, whatever its value
            if raw[name] is not None and not isinstance(raw[name], dict):
                raise ScalestudyError(f"run-config section {name} must be a mapping, got {raw[name]!r}")
        if raw and not _is_nested(raw):
            return cls().with_flat(raw)
        unknown = set(raw) - {"strategy", *SECTIONS}
        if unknown:
            raise ScalestudyError(f"unknown run-config section(s): {', '.join(sorted(unknown))} "
                                  f"(sections: model, strategy, workload, optimizer, data, output)")
        parts = {}
        for name in ("strategy", *SECTIONS):
            value = raw.get(name)
            value = {} if value is None else value  # `model: []` is a list where a mapping goes, not an empty section
            if not isinstance(value, dict):
                raise ScalestudyError(f"run-config section {name} must be a mapping, got {value!r}")
            parts[name] = value
        return cls().with_flat({_flat_name(section, key): v for section, value in parts.items()
                                for key, v in value.items()})

    @classmethod
    def from_yaml(cls, path: str | Path) -> RunConfig:
        data = read_yaml(path, "config file")
        if data is not None and not isinstance(data, dict):
            raise ScalestudyError(f"config file {path} must hold a mapping of sections (model, strategy, workload, "
                                  "optimizer, data, output)")
        return cls.from_dict(data)

    @classmethod
    def merged(cls, yaml_path: str | None, flags: dict) -> RunConfig:
        """Defaults <- YAML file <- explicit flags (flat names; None means 'not given')."""
        # Input paths written in the file are taken from the file's folder (as in study and search specs); paths
        # given as flags are taken from the working directory by the caller.
        base = cls.from_yaml(yaml_path).with_absolute_paths(Path(yaml_path).parent) if yaml_path else cls()
        return base.with_flat({k: v for k, v in flags.items() if v is not None})

    def with_flat(self, options: dict) -> RunConfig:
        """A copy with flat options (`lr`, `engine`, `output`, ...) applied; unknown names are one-line errors."""
        options = {str(k).replace("-", "_"): v for k, v in options.items()}
        unknown = sorted(k for k in options if k not in FLAT_KEYS)
        if unknown:
            raise ScalestudyError(_unknown_keys_message(unknown))
        grouped: dict[str, dict] = {}
        for key, value in options.items():
            section, name = FLAT_KEYS[key]
            grouped.setdefault(section, {})[name] = value
        changes = {}
        for section, values in grouped.items():
            current = getattr(self, section)
            if section == "strategy":
                try:
                    changes[section] = Strategy.from_dict({**_plain(current.unresolved_dict()), **values})
                except TypeError as exc:
                    raise ScalestudyError(f"bad strategy options: {exc}") from None
                continue
            changes[section] = dataclasses.replace(current, **_typed(type(current), values, section))
        return dataclasses.replace(self, **changes)

    @classmethod
    def build(cls, model: str, strategy: Strategy, workload: Workload, *, nproc: int, nnodes: int = 1,
              objective: str | None = None, **flat) -> RunConfig:
        """The run of a planned point: a model (preset or config.json path), a Strategy and a Workload on
        nnodes x nproc ranks; `flat` sets any other option by its flat name (steps, output, tokenizer, ...)."""
        spec = get_model(model)
        objective = objective or ("span" if spec.is_encoder_decoder else "causal")
        base = cls(strategy=strategy)
        return base.with_flat({"model": model, "objective": objective, "seq_len": workload.seq_len,
                               "target_len": workload.target_len, "global_batch": workload.global_batch,
                               "nproc": nproc, "nnodes": nnodes, **flat})

    def with_absolute_paths(self, base: str | Path | None = None) -> RunConfig:
        """Model config.json, corpus files, tokenizer and lexicon as absolute paths (relative ones are taken from
        `base`, default the working directory), so the config runs from any directory; presets stay names."""
        from scalestudy.specs.presets import PRESETS

        root = Path(base or ".").resolve()

        def absolute(p: str | None) -> str | None:
            if p is None or p.startswith("hf:"):  # a hub dataset name, not a path
                return p
            return str((root / Path(p).expanduser()).resolve())

        d = self.data
        for key, value in [*(("files", f) for f in d.files), ("tokenizer", d.tokenizer), ("lexicon", d.lexicon)]:
            if isinstance(value, str) and not value.strip():  # resolved, it was the base folder itself (or 'base/ ')
                raise OptionError(f"{key} needs a file name, got {value!r}", key)
        source = self.model.source  # a preset, or a config.json file/folder; anything else stays as typed (its error)
        model = absolute(source) if source not in PRESETS and (root / Path(source).expanduser()).exists() else source
        return dataclasses.replace(
            self, model=dataclasses.replace(self.model, source=model),
            data=dataclasses.replace(d, files=tuple(absolute(f) for f in d.files), tokenizer=absolute(d.tokenizer),
                                     lexicon=absolute(d.lexicon)))

    def replace(self, **flat) -> RunConfig:
        """Shorthand for `with_flat`: cfg.replace(output="DIR", steps=4)."""
        return self.with_flat(flat)

    def to_dict(self) -> dict:
        """The nested YAML shape (plain lists and scalars)."""
        return {name: _plain(dataclasses.asdict(getattr(self, name)))
                for name in ("model", "strategy", "workload", "optimizer", "data", "output")}

    def to_yaml(self) -> str:
        import yaml

        return CONFIG_HEADER + yaml.safe_dump(self.to_dict(), sort_keys=False)

    def write_yaml(self, path: str | Path) -> Path:
        from scalestudy.atomicfile import write_text_atomic

        return write_text_atomic(Path(path), self.to_yaml())

    # ---- derived values (the one place) ------------------------------------------------------------------
    @property
    def world_size(self) -> int:
        return self.workload.nproc * self.workload.nnodes

    @property
    def is_causal(self) -> bool:
        return self.data.objective == "causal"

    def model_spec(self) -> ModelSpec:
        return get_model(self.model.source)

    @property
    def display_name(self) -> str:
        return self.model_spec().name

    def resolved(self) -> RunConfig:
        """Fill the derived values: target length and global batch (see the module docstring)."""
        target = resolve_target_len(self.data.objective, self.workload.seq_len, self.workload.target_len)
        gb = self.workload.global_batch or self.strategy.micro_batch * max(
            1, self.world_size // (self.strategy.tp * self.strategy.pp))
        return dataclasses.replace(self, workload=dataclasses.replace(self.workload, target_len=target,
                                                                      global_batch=gb))

    def to_workload(self) -> Workload:
        w = self.resolved().workload
        return Workload(global_batch=w.global_batch, seq_len=w.seq_len, target_len=w.target_len)

    def layout(self) -> Layout:
        return resolve_layout(self.strategy, self.world_size, self.to_workload().global_batch)

    # ---- validation --------------------------------------------------------------------------------------
    def check_values(self) -> None:
        """Each value on its own (ranges, known names, the model): what no other option can make right. `train`
        checks a --config file's and --set's values so even where a flag overrides them (steps: -3 beside
        --steps 4); `validate` runs it first, then the checks of values together."""
        w, o, d = self.workload, self.optimizer, self.data
        for name in ("steps", "nproc", "nnodes", "seq_len"):
            if getattr(w, name) < 1:
                raise OptionError(f"{name} must be >= 1, got {getattr(w, name)}", name)
        for section, name in (("workload", "global_batch"), ("workload", "target_len"),
                              ("optimizer", "warmup_steps"), ("output", "timing_warmup"),
                              ("output", "save_every"), ("output", "crash_after_step")):
            value = getattr(getattr(self, section), name)
            if value < 0:
                key = FLAT_NAMES[section, name]
                raise OptionError(f"{key} must be >= 0, got {value}", key)
        if d.objective not in OBJECTIVES:
            raise ScalestudyError(f"unknown objective {d.objective!r} (choose from {', '.join(OBJECTIVES)})")
        if o.decay not in DECAYS:
            raise ScalestudyError(f"unknown decay {o.decay!r} (choose from {', '.join(DECAYS)})")
        for name in ("lr", "min_lr_ratio", "weight_decay", "beta1", "beta2", "grad_clip"):
            if not math.isfinite(getattr(o, name)):  # nan passes every comparison below
                raise OptionError(f"{name} must be a finite number, got {getattr(o, name)}", name)
        if not 0 < o.lr <= MAX_LR:  # AdamW moves each weight by up to ~lr per step
            raise OptionError(f"lr must be in (0, {MAX_LR:g}], got {o.lr:g}", "lr")
        if not 0 <= o.min_lr_ratio <= 1:
            raise OptionError(f"min_lr_ratio must be within [0, 1], got {o.min_lr_ratio:g}", "min_lr_ratio")
        if not 0 <= o.grad_clip <= MAX_GRAD_CLIP:
            raise OptionError(f"grad_clip must be within [0, {MAX_GRAD_CLIP:g}] (0: no clipping), got {o.grad_clip:g}",
                              "grad_clip")
        if o.warmup_steps > MAX_WARMUP_STEPS:
            raise OptionError(f"warmup_steps must be at most {MAX_WARMUP_STEPS:,} (steps of learning-rate ramp), "
                              f"got {o.warmup_steps:,}", "warmup_steps")
        _check_optimizer_and_model(self)
        if d.vocab_size < 1:
            raise OptionError(f"vocab_size must be >= 1, got {d.vocab_size}", "vocab_size")
        if not d.text_field.strip():
            raise ScalestudyError("--text-field must name the text field of JSONL/Parquet records, got ''")
        out = str(self.output.dir)  # the name only (outputs.check_output_dir asks the filesystem): also when
        if not out.strip() or any(ord(c) < 0x20 or ord(c) == 0x7F for c in out):  # --output overrides it
            raise OptionError(f"output must name a directory (no control characters), got {out!r}", "output")
        self.model_spec()  # a model name or config.json that does not resolve

    def validate(self) -> tuple[ModelSpec, Strategy, Workload, Layout]:
        """Check everything checkable before any process starts; one-line ScalestudyError otherwise."""
        w, o, d = self.workload, self.optimizer, self.data
        self.check_values()
        check_world_size(w.nnodes, w.nproc)
        if o.lr * o.weight_decay >= 1:
            raise ScalestudyError(f"weight_decay {o.weight_decay:g} x lr {o.lr:g} must be below 1 (AdamW scales every "
                                  "weight by 1 - lr x weight_decay each step)")
        if d.lexicon is not None and d.objective != "knowledge":
            raise ScalestudyError(lexicon_message(d.objective))
        if self.output.timing_warmup >= w.steps:
            raise OptionError(f"warmup {self.output.timing_warmup} (step times left out of the medians) must be "
                              f"below steps {w.steps}", "warmup", "steps")
        check_data_fields(d.files, d.text_field, d.tokenizer, d.vocab_size)
        spec = self.model_spec()
        strategy = self.strategy
        # The trained tokenizer's ids index the model's embedding (a small corpus may learn fewer than the default)
        if d.tokenizer is None and d.vocab_size > max(spec.vocab_size, DataSection.vocab_size):
            raise ScalestudyError(f"--vocab-size {d.vocab_size} exceeds the {spec.vocab_size}-token vocabulary of model "
                                  f"{spec.name}")
        if spec.is_encoder_decoder and self.is_causal:
            raise ScalestudyError(f"model {spec.name} is encoder-decoder: use --objective span or knowledge")
        if not spec.is_encoder_decoder and not self.is_causal:
            raise ScalestudyError(f"model {spec.name} is decoder-only: use --objective causal")
        check_cost_model_only(strategy, spec)
        hf_attn_implementation(spec, strategy.attention)  # a model that cannot run the attention asked for
        check_parallel_layout(spec, strategy, self.world_size, dropout=self.model.dropout)  # heads, layers, mesh
        if strategy.recompute in ("selective", "op"):
            raise ScalestudyError(f"--recompute {strategy.recompute} is not available for Hugging Face models "
                                  "(they checkpoint whole layers): use none or full")
        if strategy.offload_optimizer == "nvme" or strategy.offload_params == "nvme":
            raise ScalestudyError("NVMe offload is not supported by `scalestudy train`: use --offload-optimizer cpu")
        # bf16/fp16 on a CPU: decided by measurement where the run starts (engine/cpu_precision.py, check_precision)
        if strategy.precision == "fp16" and strategy.engine != "deepspeed":
            raise ScalestudyError("fp16 needs loss scaling, which scalestudy runs through DeepSpeed: use --engine "
                                  "deepspeed, or bf16 with ddp/fsdp")
        if w.global_batch and w.global_batch < strategy.micro_batch:
            raise ScalestudyError(f"--global-batch {w.global_batch} is smaller than --micro-batch "
                                  f"{strategy.micro_batch}")
        workload = self.to_workload()
        layout = resolve_layout(strategy, self.world_size, workload.global_batch)
        check_microbatches(strategy, layout.grad_accum)
        check_sequence_parallel(strategy, workload.seq_len, workload.target_len)
        return spec, strategy, workload, layout


def check_not_users_files(out_dir: str | Path, flag: str, names: tuple[str, ...], anchor: str = "train_config.yaml",
                          *, owner: str | None = None, marked: tuple[str, ...] = ()) -> None:
    """An output DIR that holds any of `names` (what the command writes there) must be scalestudy's own: its
    `anchor` file begins with '# Written by scalestudy' (train_config.yaml: an earlier emit, run or trial;
    hardware_profile.yaml: a calibrate or tune) or it holds a run's metrics.jsonl. A user's own train_config.yaml,
    launch script, JSON or profile there is never replaced (plan --emit ., train --output ., calibrate --output .).
    With `owner` ("a tune"), a DIR holding anything must be that command's own (not a study's, a run's or a user's
    folder: tune --output). Any of `marked` written by scalestudy (a header line, or JSON carrying WRITTEN_BY_JSON)
    makes DIR scalestudy's too: a run killed while preparing its data has written no train_config.yaml yet."""
    out = Path(out_dir)
    taken = [name for name in names if (out / name).exists()]
    if owner is not None and out.is_dir():
        taken = taken or sorted(p.name for p in out.iterdir())
    if not taken or (out / "metrics.jsonl").is_file() and owner is None or written_by_scalestudy(out / anchor) or \
            any(written_by_scalestudy(out / name) or _json_marked(out / name) for name in marked):
        return
    mark = f"no {anchor} there begins with '# Written by scalestudy'"
    if owner is not None:
        shown = ", ".join(taken[:3]) + (", ..." if len(taken) > 3 else "")
        raise ScalestudyError(f"{flag} {out} is not {owner}'s folder (it holds {shown}; {mark}): its files would "
                              "be mixed with or replace what is there; choose a new or empty directory")
    them = "it" if len(taken) == 1 else "them"
    raise ScalestudyError(f"{flag} {out} holds {', '.join(taken)} that scalestudy did not write ({mark}): it would "
                          f"replace {them}; choose a new or empty directory")


def _json_marked(path: Path) -> bool:
    """A JSON object scalestudy wrote with WRITTEN_BY_JSON in it (data.json, tokenizer.meta.json)."""
    if not path.is_file():  # absent, a directory; a FIFO's read never ends
        return False
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):  # unreadable, not JSON (UnicodeDecodeError is one)
        return False
    return isinstance(data, dict) and data.get("written_by") == WRITTEN_BY_JSON["written_by"]


# what earlier versions wrote first in a hardware profile (costmodel/calibrate.save_profile): still scalestudy's
_OLD_HEADERS = ("# hardware profile from `scalestudy calibrate`", "# hardware profile used by `scalestudy tune`")


def written_by_scalestudy(path: Path) -> bool:
    """Whether the file's first line, or the second under a comment, is the one scalestudy writes (CONFIG_HEADER,
    calibrate.PROFILE_HEADER: a profile's note comes first)."""
    if not path.is_file():  # a FIFO where an output goes: open() waited for a writer forever (calibrate --output)
        return False
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            first, second = f.readline(4096), f.readline(4096)
    except OSError:  # absent, a directory, unreadable
        return False
    return first.startswith((WRITTEN_BY, *_OLD_HEADERS)) or first.startswith("#") and second.startswith(WRITTEN_BY)


def lexicon_message(objective: str, flag: str = "--objective") -> str:
    """Why a lexicon with another objective is refused (train, study train_options; plan --emit names its
    objective flag `--train-objective`)."""
    return (f"--lexicon is read only by {flag} knowledge (entity/phrase masking); objective {objective} would "
            f"ignore it: drop --lexicon or use {flag} knowledge")


def check_world_size(nnodes: int, nproc: int) -> None:
    """--nnodes x --nproc ranks that a launcher (torchrun, Slurm's srun of torchrun) can start: one line otherwise."""
    if nnodes * nproc > MAX_WORLD_SIZE:
        raise ScalestudyError(f"--nnodes {nnodes} x --nproc {nproc} = {nnodes * nproc:,} ranks: more than one "
                              f"rendezvous can join ({MAX_WORLD_SIZE:,}; {WORLD_SIZE_LIMIT})")


def _check_optimizer_and_model(cfg: RunConfig) -> None:
    """Values AdamW, the data order or the model would refuse only inside the ranks: here, in one line."""
    o = cfg.optimizer
    for name in ("beta1", "beta2"):
        if not 0 <= getattr(o, name) < 1:
            raise ScalestudyError(f"{name} must be in [0, 1) (AdamW's moment decay), got {getattr(o, name)}")
    if not math.isfinite(o.eps) or o.eps < 0:
        raise ScalestudyError(f"eps must be a finite number >= 0 (AdamW), got {o.eps}")
    if o.weight_decay < 0:
        raise ScalestudyError(f"weight_decay must be >= 0, got {o.weight_decay}")
    if not 0 <= o.seed < 2**62:  # numpy's generators take no negative seed; torch adds the rank to it
        raise ScalestudyError(f"--seed must be a whole number in [0, 2^62), got {o.seed}")
    if not (math.isfinite(cfg.model.dropout) and 0 <= cfg.model.dropout < 1):
        raise ScalestudyError(f"dropout must be in [0, 1), got {cfg.model.dropout}")


# Strategy fields that describe published runs' software for the cost model: `train` (and so a study trial) runs
# only their defaults. What each describes, for the one-line refusal.
COST_MODEL_OPTIONS = {"overlap_param_gather": "Megatron-Core / Transformer Engine overlap",
                      "tp_comm_overlap": "Megatron-Core / Transformer Engine overlap",
                      "zero1_all_reduce": "DeepSpeed ZeRO-1's gradient all-reduce, on by default",
                      "kernels": "published software's element-wise kernels",
                      "grad_reduce": "published software's gradient-reduction dtype",
                      "recompute_early_stop": "published software's activation-checkpoint implementation",
                      "cross_entropy": "published software's loss kernel",
                      "optimizer_dtype": "published software's optimizer state dtype",
                      "optimizer_loop": "published software's unfused optimizer loop",
                      "optimizer_kind": "published runs' optimizers other than AdamW (train steps torch AdamW)",
                      "attention_kernel": "published software's fused attention kernel",
                      "lm_head": "published software's vocabulary-parallel LM head",
                      "grad_accum_dtype": "published DeepSpeed runs' fp32 gradient accumulation",
                      "grad_buckets": "PyTorch DDP's gradient buckets beside the gradients, torch's default",
                      "zero3_fetch": "DeepSpeed before 0.5.5's per-parameter ZeRO-3 gathers",
                      "pipeline_scatter_gather": "Megatron-LM / DeepSpeed pipeline sends split over the tp ranks, "
                                                 "or Megatron-LM before April 2021's whole-tensor sends",
                      "tf32": "fp32 matmuls on TF32 Tensor Cores; train never sets torch's allow_tf32, off by default",
                      "fp8_params": "NeMo / Megatron-Core's Transformer Engine FP8 model parameters",
                      "distribute_saved_activations": "Megatron-LM / metaseq checkpointed inputs split over the "
                                                      "tensor-parallel ranks",
                      "gradient_sync": "FSDP2 gradients reduce-scattered once per step (set_requires_gradient_sync); "
                                       "train's FSDP reduce-scatters every micro-batch"}


# What `train` runs of the cost-model options, where that is not what the option's default means (the published
# software of the engine, specs/strategy.software_defaults), read from the code that runs:
# - recompute_early_stop "on": engine/settings.activation_checkpointing early-stops every engine's full recompute
#   (torch's non-reentrant checkpoint; DeepSpeed ZeRO-3 fails with it off); "engine" prices it on for fsdp only;
# - kernels "eager": engine/models.build_model runs the Transformers modules as they are (HF T5LayerNorm /
#   LlamaRMSNorm composed in fp32, GPT-2's gelu_new, rotary and residual ops as separate kernels), nothing calls
#   torch.compile; the hybrid backend (tp / pp) runs the same blocks (engine/parallel/stages.py);
# - cross_entropy: `model(**inputs).loss` on deepspeed / fsdp / ddp, i.e. the model's own loss -- T5 / mT5
#   T5ForConditionalGeneration's CrossEntropyLoss on the logits' view, in their dtype ("hf"; fp32 under ddp's
#   autocast); causal models transformers' ForCausalLMLoss on `logits.float()` ("torch"); the hybrid backend's
#   causal_lm_loss / seq2seq_loss upcast likewise ("torch");
# - optimizer_loop "foreach": torch AdamW (engine/backends/common.make_adamw, no foreach / fused argument), which
#   torch runs as foreach kernels on GPUs (optimizer._default_to_fused_or_foreach: fused only when asked), on every
#   engine -- DeepSpeed takes it as a client optimizer and steps its flat ZeRO partitions with it; at ZeRO-0 in 16
#   bits DeepSpeed wraps it in FP16_UnfusedOptimizer ("deepspeed-unfused": engine._configure_fp16_optimizer, not
#   its FusedAdam) -- but a bf16 DeepSpeed pipeline at ZeRO-0 in BF16_Optimizer ("deepspeed-bf16"), which steps it
#   on its 1/dp flat fp32 partition (deepspeed_optimizer_wrapper says which, from DeepSpeed 0.19.8's code); with the
#   optimizer offloaded DeepSpeed runs its own CPU Adam and FSDP2 steps on the host ("engine": the CPU Adam terms);
# - attention_kernel "mem-efficient" for T5 / mT5 under attention flash: engine/hf_model.py builds them with
#   attn_implementation "sdpa" and transformers 5.x's T5 (5.24 installed) passes its relative position bias to SDPA as
#   a float attn_mask, so torch dispatches the memory-efficient kernel, not FlashAttention (costmodel/attention_bias.py);
#   decoder-only models get no mask from train (is_causal): "engine" (SDPA's FlashAttention-2);
# - lm_head "replicated": engine/parallel/tensor_parallel.py shards the blocks only -- the embedding, the head and
#   the loss see the whole vocabulary on every tp rank (the blocks' output is whole there), and
#   engine/parallel/grads.py syncs those gradients over dp only (each tp rank forms the same one);
# - grad_accum_dtype "compute" on deepspeed: engine/settings.deepspeed_config sets data_types.grad_accum_dtype to the
#   compute dtype, so a bf16 run keeps no fp32 gradient accumulator (costmodel/memory.deepspeed_bf16_wrapper: ZeRO 1-2
#   on DeepSpeedZeroOptimizer, ZeRO-0 on FP16_UnfusedOptimizer or, in a pipeline, BF16_Optimizer with a bf16 buffer);
# - grad_buckets "view" on ddp without tp / pp: engine/settings.ddp_settings wraps the model in DistributedDataParallel
#   with gradient_as_bucket_view=True, so after the reduction the .grad tensors are views into DDP's buckets
#   (costmodel/memory.ddp_bucket_copy_bytes; tp / pp runs take the hybrid backend, no DDP);
# - left at their defaults, as train runs them: grad_reduce "engine"
#   (engine/settings.py), the Megatron-only switches off.
# plan, tune and study price train's runs with these values (as_trained) and write them into the configs they emit,
# so `estimate` of an emitted strategy prices the run `train` makes.
# the rest by model and layout (TRAIN_VALUES)
TRAIN_SOFTWARE = {"recompute_early_stop": "on", "kernels": "eager", "lm_head": "replicated"}


def deepspeed_optimizer_wrapper(fields: dict) -> str:
    """The optimizer DeepSpeed 0.19.8 (the version `train` runs) steps for a strategy of `fields` (zero, pp,
    precision; not offloaded) with the settings train hands it -- torch AdamW as the client optimizer, not its
    FusedAdam, and data_types.grad_accum_dtype the compute dtype (engine/settings.deepspeed_config) -- read in
    runtime/engine.py: _configure_optimizer takes _do_optimizer_sanity_check's answer. ZeRO 1-3: ZERO_OPTIMIZATION
    ("zero": DeepSpeedZeroOptimizer / Stage3 around the client optimizer; BFLOAT16 only for bf16 ZeRO-1 with fp32
    gradient accumulation, which train does not ask for), pipeline or not; ZeRO-0 in fp32: None, the client optimizer
    itself ("client"); ZeRO-0 in fp16: FP16 -> _configure_fp16_optimizer, FP16_UnfusedOptimizer as the client
    optimizer is no FusedAdam ("fp16-unfused"); ZeRO-0 in bf16: BFLOAT16 -> _configure_bf16_optimizer
    (BF16_Optimizer, "bf16") when self.pipeline_parallelism (a PipelineEngine: pp > 1), else DDP_BFLOAT16 ->
    _configure_fp16_optimizer with a bf16 low-precision dtype, FP16_UnfusedOptimizer again. (train itself runs tp /
    pp > 1 on its hybrid backend, not DeepSpeed -- specs/parallel_layout refuses engine deepspeed there -- so a
    DeepSpeed pipeline is what plan ranks for such a config and `plan --emit` passes over.)"""
    if fields["zero"] >= 1:
        return "zero"
    if fields["precision"] == "fp32":
        return "client"
    return "bf16" if fields["precision"] == "bf16" and fields["pp"] > 1 else "fp16-unfused"


# deepspeed_optimizer_wrapper -> the optimizer_loop it runs torch AdamW's foreach step in (costmodel/step.py)
DEEPSPEED_LOOPS = {"zero": "foreach", "client": "foreach", "fp16-unfused": "deepspeed-unfused",
                   "bf16": "deepspeed-bf16"}


def train_software(fields: dict, model: ModelSpec | None) -> dict:
    """The cost-model options `train` runs (TRAIN_SOFTWARE, the loss of `model` on that backend, the optimizer's
    loop, a T5's attention kernel under flash) for a strategy whose fields are `fields` (name -> value: engine,
    zero, tp, pp, precision, offload_optimizer, attention); {} for the cost-model engines (megatron, internlm),
    which train does not run."""
    engine = fields["engine"]
    if engine in COST_MODEL_ENGINES:
        return {}
    hf_loss = model is not None and model.is_encoder_decoder and fields["tp"] == 1 and fields["pp"] == 1
    if fields["offload_optimizer"] != "none":
        loop = "engine"  # DeepSpeed's CPU Adam / FSDP2's step on the host
    else:
        loop = DEEPSPEED_LOOPS.get(deepspeed_optimizer_wrapper(fields), "foreach") if engine == "deepspeed" else \
            "foreach"
    trained = {**TRAIN_SOFTWARE, "cross_entropy": "hf" if hf_loss else "torch", "optimizer_loop": loop}
    if engine == "deepspeed":  # data_types.grad_accum_dtype = the compute dtype (engine/settings.deepspeed_config)
        trained["grad_accum_dtype"] = "compute"
    if engine == "ddp" and fields["tp"] == 1 and fields["pp"] == 1:  # gradient_as_bucket_view (engine/settings.py)
        trained["grad_buckets"] = "view"
    if model is not None and model.is_encoder_decoder and fields["attention"] == "flash":
        trained["attention_kernel"] = "mem-efficient"  # HF T5's float position-bias mask (comment above)
    return trained


def _train_default(name: str):
    """The value a Strategy field left at its default has on train's engines: the field's default, but False for
    overlap_param_gather and tp_comm_overlap (default None: the engine's, strategy.param_gather_default /
    tp_comm_overlap_default, off on deepspeed / fsdp / ddp)."""
    default = Strategy.__dataclass_fields__[name].default
    return False if default is None and name in ("overlap_param_gather", "tp_comm_overlap") else default


def train_runs(name: str, value, model: ModelSpec | None = None, fields: dict | None = None) -> bool:
    """Whether `train` runs cost-model option `name` at `value`: its default, or what it runs for `model` and a
    strategy of `fields` (train_software; without them: for some model and layout)."""
    if name == "zero1_all_reduce":  # the engine's default: DeepSpeed 0.19's ZeRO-1 all-reduces, no effect elsewhere
        return value is None or fields is None or value == zero1_all_reduce_default(fields["engine"], fields["zero"])
    # lm_head at tp 1 (no effect: one vocabulary, however split) is refused as at tp > 1, as a study spec refuses
    # it for every tp: one rule for train, study and plan --emit, and no value written that changed nothing
    default = _train_default(name)
    if isinstance(value, bool) and name in ("recompute_early_stop", "pipeline_scatter_gather"):  # YAML: on -> true
        value = "on" if value else "off"
    if type(value) is type(default) and value == default:
        return True
    if fields is None or (name in ("cross_entropy", "attention_kernel") and model is None):
        return value in TRAIN_VALUES.get(name, (default,))
    return value == train_software(fields, model).get(name, default)


def as_trained(strategy: Strategy, model: ModelSpec) -> Strategy:
    """`strategy` with the values train runs (train_software) written in where it leaves them at their default, for
    train's engines (deepspeed, fsdp, ddp): the run `train` makes, as the cost model should price it. Cost-model
    engines (megatron, internlm) and values set explicitly are kept."""
    fill = trained_fill(strategy.engine, vars(strategy), model)
    return strategy.replace(**fill) if fill else strategy


def trained_fill(engine: str, fields: dict, model: ModelSpec) -> dict:
    """The values as_trained writes into a strategy of `engine` whose fields are `fields` (name -> value): a
    planner passes its keyword arguments before building the Strategy, so it is built and checked once."""
    return {name: value for name, value in train_software({**fields, "engine": engine}, model).items()
            if fields[name] == Strategy.__dataclass_fields__[name].default}


def cost_model_option_message(name: str) -> str:
    """Why `train` refuses a cost-model-only Strategy field set away from what it runs (train, study, plan --emit)."""
    default = _train_default(name)
    runs = str(default).lower() if isinstance(default, bool) else default
    if name == "zero1_all_reduce":
        runs = "unset (train's DeepSpeed ZeRO-1 all-reduces its gradients: true; no effect elsewhere)"
    if name == "cross_entropy":
        runs += " or the model's own loss train runs (hf: T5 / mT5 without tp / pp; torch otherwise)"
    elif name == "optimizer_loop":
        runs += (" or the torch AdamW train runs (foreach; deepspeed-unfused: DeepSpeed ZeRO-0 in 16 bits; "
                 "deepspeed-bf16: a DeepSpeed bf16 pipeline at ZeRO-0; engine with the optimizer offloaded)")
    elif name == "attention_kernel":
        runs += " or mem-efficient, what train runs for T5 / mT5 under attention flash (SDPA with its position bias)"
    elif name == "grad_accum_dtype":
        runs += " or compute, what train's DeepSpeed runs accumulate in (data_types.grad_accum_dtype)"
    elif name == "grad_buckets":
        runs += " or view, what train's DDP sets (gradient_as_bucket_view)"
    elif name in TRAIN_SOFTWARE:
        runs += f" or {TRAIN_SOFTWARE[name]} (what train runs)"
    return f"{name} is a cost-model option ({COST_MODEL_OPTIONS[name]}); train's engines do not run it: leave it {runs}"


def check_cost_model_only(strategy: Strategy, model: ModelSpec | None = None) -> None:
    """Strategy fields that describe published runs' software for the cost model, which `train` cannot run."""
    if strategy.engine in COST_MODEL_ENGINES:
        raise ScalestudyError(f"engine {strategy.engine} describes published runs for the cost model only; train runs "
                              "deepspeed, fsdp or ddp")
    if strategy.precision == "fp8":  # costmodel/fp8.py: Transformer Engine / torchao float8, not train's engines
        raise OptionError("precision fp8 is a cost-model option (Transformer Engine / torchao float8 runs); train's "
                          "engines run bf16, fp16 or fp32", "precision")
    if strategy.cp > 1:  # a layout degree, not a software option: train's engines have no sequence split
        raise OptionError(f"cp {strategy.cp}: context parallelism is a cost-model option (Megatron-Core / NeMo, "
                          "torchtitan runs); train's engines do not split sequences: leave cp at 1", "cp")
    for name in COST_MODEL_OPTIONS:
        if not train_runs(name, getattr(strategy, name), model, vars(strategy)):
            raise ScalestudyError(cost_model_option_message(name))


# Corpora whose records have named fields (engine/data/corpora.py): what --text-field picks from
FIELD_CORPORA = (".jsonl", ".jsonl.gz", ".parquet")


def check_data_fields(files, text_field: str, tokenizer: str | None, vocab_size: int) -> None:
    """Data options that would be dropped: a text field for corpora without fields (plain text, the bundled corpus),
    a vocabulary size for a tokenizer given ready-made (only a tokenizer trained on the data takes it); and one too
    small for the tokenizer train would learn, refused here rather than once its training started."""
    if tokenizer is None and vocab_size < MIN_VOCAB_SIZE:
        raise OptionError(f"vocab_size must be at least {MIN_VOCAB_SIZE} (3 specials, 100 sentinels, pieces), got "
                          f"{vocab_size}", "vocab_size")
    if text_field != DataSection.text_field and not any(
            str(f).startswith("hf:") or str(f).endswith(FIELD_CORPORA) for f in files or ()):
        raise OptionError(f"text_field {text_field} names the field of JSONL / Parquet records or of a hf: dataset; "
                          f"{'the corpus ' + ', '.join(map(str, files)) if files else 'the bundled corpus'} has "
                          "none (plain text: one document per line)", "text_field")
    if tokenizer is not None and drops_vocab_size(tokenizer, vocab_size):
        raise OptionError(f"vocab_size {vocab_size} sizes the vocabulary train learns from the data; tokenizer "
                          f"{tokenizer} is given ready-made: drop one", "vocab_size", "tokenizer")


def drops_vocab_size(tokenizer: str, vocab_size: int) -> bool:
    """Whether a run that reads the ready-made `tokenizer` would drop its `vocab_size`: one other than the default,
    unless train trained that tokenizer at exactly that size (trained_vocab_size)."""
    return vocab_size != DataSection.vocab_size and trained_vocab_size(tokenizer) != vocab_size


def trained_vocab_size(tokenizer: str) -> int | None:
    """The vocabulary size train trained `tokenizer` with (its tokenizer.meta.json), None for one made elsewhere:
    the run's own tokenizer, handed to its ranks and to a resume, keeps the vocab_size it was trained at."""
    meta = Path(tokenizer).with_name("tokenizer.meta.json")
    try:
        return int(json.loads(meta.read_text())["vocab_size"])
    except (OSError, ValueError, KeyError, TypeError, RecursionError):  # not the meta train writes
        return None


def resolve_target_len(objective: str, seq_len: int, target_len: int = 0) -> int:
    """The decoder length of a run: 0 for causal models, `target_len` when given, else what T5 span corruption of
    `seq_len` needs (the data pipeline builds exactly that length)."""
    if target_len < 0:  # refused for causal models too, which do not read it
        raise OptionError(f"target_len must be >= 0 (0: what span corruption needs), got {target_len}", "target_len")
    if objective == "causal":
        return 0
    if target_len:
        return target_len
    return span_target_len(seq_len)


def span_target_len(seq_len: int) -> int:
    """Targets length of T5 span corruption whose inputs fill `seq_len` (512 -> 114, as published)."""
    from scalestudy.specs.span_lengths import compute_input_and_target_lengths

    return compute_input_and_target_lengths(max(seq_len, 4), SPAN_NOISE_DENSITY, SPAN_MEAN_LENGTH)[1]


def _is_nested(raw: dict) -> bool:
    nested = {"strategy", *SECTIONS}
    return any(k in nested and isinstance(v, dict) for k, v in raw.items()) or (
        set(raw) <= nested and all(v is None or isinstance(v, dict) for v in raw.values()))


def _flat_name(section: str, key: str) -> str:
    """The flat option name of (section, key) (e.g. (output, dir) -> output)."""
    key = str(key).replace("-", "_")
    for flat, (sec, name) in FLAT_KEYS.items():
        if sec == section and name == key:
            return flat
    from scalestudy.specs.near_keys import nearest

    # the nearest key of this section, else of any section (learning_rate under strategy: lr, in optimizer)
    near = nearest(key, [n for sec, n in FLAT_KEYS.values() if sec == section])
    other = None if near else nearest(key, FLAT_KEYS)
    hint = (f" (did you mean {near}?)" if near else
            f" (did you mean {FLAT_KEYS[other][1]}, in section {FLAT_KEYS[other][0]}?)" if other else "")
    raise ScalestudyError(f"unknown key {key!r} in run-config section {section}{hint}")


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _unknown_keys_message(unknown: list[str]) -> str:
    """One short line: the unknown keys (the first three), the nearest known one of each (near_keys), and where
    every key is listed (the ~60 names inline made a 750-character line)."""
    from scalestudy.specs.near_keys import did_you_mean

    shown = unknown[:3] + ([f"and {len(unknown) - 3} more"] if len(unknown) > 3 else [])
    return f"unknown training option(s): {', '.join(shown)}{did_you_mean(unknown, FLAT_KEYS)}; every option: " \
           f"{RUN_OPTIONS_DOC}"


def _typed(cls: type, values: dict, section: str) -> dict:
    """Check and coerce one section's values against its field types; one-line errors naming the flat key (data,
    output: what the user wrote, not the field's name)."""
    out = {}
    types = {f.name: str(f.type) for f in fields(cls)}
    for name, value in values.items():
        kind, key = types[name], FLAT_NAMES.get((section, name), name)

        def refuse(what: str, shown: Any = value) -> OptionError:
            return OptionError(f"{key} must be {what}, got {shown!r}", key)

        if kind == "int" and (not isinstance(value, int) or isinstance(value, bool)):
            raise refuse("an integer")
        if kind == "int" and not -2**63 <= value < 2**63:  # numpy/torch hold them as int64
            raise refuse("a 64-bit integer")
        if kind == "float":
            if isinstance(value, bool):
                raise refuse("a number")
            try:  # YAML 1.1 reads `1e-3` (no dot) as a string
                value = number_value(value)
            except (TypeError, ValueError):
                raise refuse("a number") from None
            except OverflowError:  # an integer of hundreds of digits: beyond any float
                raise OptionError(f"{key} must be a finite number, got an integer of {len(str(value))} digits",
                                  key) from None
        if kind == "bool" and not isinstance(value, bool):
            raise refuse("true or false")
        if kind == "str" and not isinstance(value, str):
            raise refuse("a string")
        if kind == "str | None" and value is not None and not isinstance(value, str):
            raise refuse("a path")
        if kind.startswith("tuple"):
            value = (value,) if isinstance(value, str) else value
            if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
                raise refuse("a list of paths")
            value = tuple(value)
        out[name] = value
    return out
