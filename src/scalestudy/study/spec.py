"""Study spec (YAML): a grid of training trials, expanded and validated into `Trial`s.

Format (every axis takes a scalar or a list; the grid is the Cartesian product of all lists):

    name: cpu-zero-sweep
    model: [t5-tiny, t5-mini]           # presets or config.json paths
    strategies:                          # optional; each entry expands its own lists
      - {engine: deepspeed, zero: [0, 1, 2, 3]}
      - {engine: fsdp, zero: [2, 3]}
      - {engine: ddp, tp: 2, sequence_parallel: [true, false]}
      - {engine: fsdp, zero: 3, pp: 2, pp_schedule: [1f1b, gpipe], stage_layers: ["3,1", "2,2"]}
    nproc: [1, 2]                        # ranks per node (GPUs per node on a cluster)
    nodes: 1
    micro_batch: 2
    global_batch: 8
    precision: fp32
    lr: [1.0e-3, 3.0e-3]
    steps: 12
    warmup_steps: 2                      # learning-rate warm-up
    warmup: 2                            # timing warm-up: first steps excluded from the medians
    train_options: {weight_decay: 0.01}  # any other `scalestudy train` option, the same for every trial
    timeout_s: 600                       # per trial
    include:                             # extra trials; unlisted axes take the grid's (first) value
      - {model: t5-tiny, engine: ddp, zero: 1, memory_limit_bytes: 400000000}

Strategy execution keys (axes too, at the top level or per strategy; defaults = `scalestudy train`'s):
`attention` (flash | eager), `sequence_parallel` (true | false; tp > 1 only), `overlap_grad_comm` (true | false),
`pp_schedule` (1f1b | gpipe | interleaved; pp > 1 only), `virtual_stages` (interleaved only), `stage_layers`
(layers per pipeline stage, one layout as "3,1" or [3, 1], several as ["3,1", "2,2"]). FSDP CPU offload is
`offload_optimizer: cpu` with `offload_params: cpu`. A value of the wrong type or outside its choices is rejected;
a combination train cannot run (an option that has no effect in that layout, e.g. sequence_parallel false at tp 1,
is a duplicate run) is filtered with its reason.

Invalid combinations produced by the grid (e.g. `fsdp` with `zero: 1`, a global batch that does not divide by
micro-batch x data-parallel degree) are *filtered*, each with its reason (see `Expansion.skipped`; the CLI prints
them). A spec whose grid yields no valid trial, an unknown key or a value of the wrong type is *rejected* with a
one-line `ScalestudyError`.

Trial identity is a stable hash of the resolved training parameters (not of run control such as the timeout or a
memory cap), so re-running a study skips finished trials and never duplicates a row. The strategy execution keys
enter the hash only when they differ from their defaults, so the ids of specs written before those keys existed
do not change.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import re
import shlex
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from scalestudy.errors import ScalestudyError
from scalestudy.specs.hardware import MAX_WORLD_SIZE
from scalestudy.specs.presets import get_model
from scalestudy.specs.near_keys import did_you_mean
from scalestudy.specs.parallel_layout import check_microbatches, check_parallel_layout, check_sequence_parallel
from scalestudy.specs.run import (COST_MODEL_OPTIONS, FLAT_KEYS, RUN_OPTIONS_DOC, RunConfig, as_trained,
                                  check_cost_model_only, cost_model_option_message, train_runs)
from scalestudy.specs.strategy import Strategy, Workload, check_field_choice, resolve_layout
from scalestudy.yamlfile import number_from_text, read_yaml

# Training parameters of one trial (they define its identity), with their type and default.
_RUN = RunConfig()  # the one set of run defaults; a study grid differs only where short CPU trials need it
AXES: dict[str, tuple[type, Any]] = {
    "model": (str, _RUN.model.source),
    "engine": (str, _RUN.strategy.engine),
    "zero": (int, _RUN.strategy.zero),
    "offload_optimizer": (str, _RUN.strategy.offload_optimizer),
    "offload_params": (str, _RUN.strategy.offload_params),
    "tp": (int, _RUN.strategy.tp),
    "pp": (int, _RUN.strategy.pp),
    "recompute": (str, _RUN.strategy.recompute),
    "precision": (str, _RUN.strategy.precision),
    "micro_batch": (int, _RUN.strategy.micro_batch),
    "global_batch": (int, 8),  # study grids: a fixed global batch, so trials of one grid train the same workload
    "nodes": (int, _RUN.workload.nnodes),
    "nproc": (int, _RUN.workload.nproc),
    "seq_len": (int, 64),  # study grids: short CPU trials
    "target_len": (int, 16),
    "objective": (str, _RUN.data.objective),
    "lr": (float, _RUN.optimizer.lr),
    "warmup_steps": (int, 2),  # learning-rate warm-up (optimizer steps), scaled to the short trials
    "warmup": (int, _RUN.output.timing_warmup),  # measured steps excluded from the summary medians
    "steps": (int, 10),
    "seed": (int, 0),
}
# Strategy execution keys (issue 11/12), typed as Strategy has them; a trial's identity includes one only when it
# differs from its default (stage_layers: "" = even split), so trials of older specs keep their ids.
_STRAT = _RUN.strategy
EXEC_AXES: dict[str, tuple[type, Any]] = {
    "attention": (str, _STRAT.attention),
    "sequence_parallel": (bool, _STRAT.sequence_parallel),
    "overlap_grad_comm": (bool, _STRAT.overlap_grad_comm),
    "pp_schedule": (str, _STRAT.pp_schedule),
    "virtual_stages": (int, _STRAT.virtual_stages),
    "stage_layers": (str, ",".join(map(str, _STRAT.stage_layers))),
}
AXES.update(EXEC_AXES)
STRATEGY_KEYS = ("engine", "zero", "offload_optimizer", "offload_params", "tp", "pp", "recompute", *EXEC_AXES)
MAX_TIMEOUT_S = 365 * 24 * 3600.0  # per trial: beyond a year it is a typo, not a limit
# Run control: per trial, but not part of its identity (changing a timeout does not re-run finished trials).
CONTROL: dict[str, tuple[type, Any]] = {
    "timeout_s": (float, 900.0),
    "memory_limit_bytes": (int, 0),  # 0 = no cap; else RLIMIT_AS of each trial process (forces OOM in tests)
}
STUDY_KEYS = {
    "name", "description", "strategies", "include", "train_options", "device", "data", "executor", "concurrency", "max_ranks",
    "command_template", "env", "extra_args", "slurm", "skip_unfit", "keep_checkpoints",
}
EXECUTORS = ("local", "slurm")
SLURM_KEYS = {"partition", "account", "time", "gpus_per_node", "cpus_per_task", "setup", "sbatch_args", "qos",
              "constraint", "poll_s", "lost_grace_s"}


@dataclass(frozen=True)
class Trial:
    """One fully resolved training run of a study."""

    model: str
    engine: str
    zero: int
    offload_optimizer: str
    offload_params: str
    tp: int
    pp: int
    recompute: str
    precision: str
    micro_batch: int
    global_batch: int
    nodes: int
    nproc: int
    seq_len: int
    target_len: int
    objective: str
    lr: float
    warmup_steps: int
    warmup: int
    steps: int
    seed: int
    timeout_s: float = 900.0
    memory_limit_bytes: int = 0
    train_options: str = ""  # canonical JSON of extra `scalestudy train` options (weight_decay, decay, ...)
    attention: str = EXEC_AXES["attention"][1]
    sequence_parallel: bool = EXEC_AXES["sequence_parallel"][1]
    overlap_grad_comm: bool = EXEC_AXES["overlap_grad_comm"][1]
    pp_schedule: str = EXEC_AXES["pp_schedule"][1]
    virtual_stages: int = EXEC_AXES["virtual_stages"][1]
    stage_layers: str = EXEC_AXES["stage_layers"][1]  # "3,1": layers per pipeline stage; "" = even split

    def params(self) -> dict:
        """The training parameters (identity); run control excluded. Execution keys only when not at their default
        (the ids of trials written before those keys existed stay the same)."""
        params = {k: getattr(self, k) for k in AXES if k not in EXEC_AXES or getattr(self, k) != EXEC_AXES[k][1]}
        if self.train_options:
            params["train_options"] = self.train_options
        return params

    def options(self) -> dict:
        return json.loads(self.train_options) if self.train_options else {}

    @property
    def trial_id(self) -> str:
        blob = json.dumps(self.params(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    @property
    def world_size(self) -> int:
        return self.nodes * self.nproc

    def run_config(self, *, data: tuple[str, ...] | list[str] = (), output: str | Path) -> RunConfig:
        """The trial as the one run configuration `scalestudy train --config` reads (train_options included)."""
        flat = {k: getattr(self, k) for k in ("model", "objective", "precision", "nproc", "global_batch", "seq_len",
                                              "target_len", "steps", "lr", "warmup_steps", "warmup", "seed")}
        flat.update(nnodes=self.nodes, data=list(data), output=str(output), progress=False)
        return RunConfig(strategy=self.strategy).with_flat({**flat, **self.options()})

    @property
    def strategy(self) -> Strategy:
        values = {k: getattr(self, k) for k in STRATEGY_KEYS}
        values["stage_layers"] = _stage_tuple(self.stage_layers)
        # as_trained: priced (study/predict.py) with the software train runs (kernels, loss, early stop)
        return as_trained(Strategy(**values, micro_batch=self.micro_batch, precision=self.precision),
                          get_model(self.model))

    @property
    def workload(self) -> Workload:
        """Global batch and lengths; decoder-only (causal) trials have no separate target length."""
        target = 0 if self.objective == "causal" else self.target_len
        return Workload(global_batch=self.global_batch, seq_len=self.seq_len, target_len=target)

    @property
    def label(self) -> str:
        """Short name, e.g. 't5-tiny ds-z2 ws2 mb2 gb8 lr0.001' ('... ddp tp2 no-sp ws2 ...' for tp/pp layouts)."""
        st = self.strategy
        layout = "".join(f" {k}{n}" for k, n in (("tp", st.tp), ("pp", st.pp)) if n > 1) + st._options_label()
        return (f"{self.model} {st.label.split(' ')[0]}{layout} ws{self.world_size} mb{self.micro_batch} "
                f"gb{self.global_batch} lr{self.lr:g}")

    def to_dict(self) -> dict:
        """Every field, but the execution keys only when not at their default (as in `params`): trials of specs
        without them keep the stored form (trial_json, store columns) they always had."""
        return {k: v for k, v in asdict(self).items() if k not in EXEC_AXES or v != EXEC_AXES[k][1]}

    @classmethod
    def from_dict(cls, data: dict) -> Trial:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass(frozen=True)
class StudySpec:
    """A validated study: its trials plus how to run them."""

    name: str
    trials: tuple[Trial, ...]
    skipped: tuple[str, ...] = ()  # "combination: reason" for each filtered grid point
    description: str = ""
    device: str = "local-cpu"  # cost-model device for predictions (local CPU trials: local-cpu)
    data: tuple[str, ...] = ()  # corpus paths for `scalestudy train --data`; empty = bundled corpus
    executor: str = "local"
    concurrency: int = 1  # local: trials run at once (bounded by max_ranks)
    max_ranks: int = 0  # local: ranks running at once, 0 = number of CPU cores
    command_template: str = ""  # general override of the trial command (see `runner.trial_command`)
    env: dict = field(default_factory=dict)
    extra_args: tuple[str, ...] = ()  # appended to every `scalestudy train` command
    slurm: dict = field(default_factory=dict)
    skip_unfit: bool = False  # drop trials the cost model predicts not to fit in memory
    keep_checkpoints: bool = False  # local: delete each trial's final checkpoint once its result is stored
    source: dict = field(default_factory=dict)  # the YAML as given

    def to_json(self) -> str:
        return json.dumps(self.source, sort_keys=True)


def _type_name(tp: type) -> str:
    return {int: "an integer", float: "a number", str: "a string", bool: "true or false"}[tp]


def _stage_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(n) for n in text.split(",")) if text else ()


def _stage_layers(value: Any, where: str) -> str:
    """One stage layout, "3,1" or [3, 1], as its canonical text "3,1"."""
    parts = value.replace(" ", "").split(",") if isinstance(value, str) else value
    if isinstance(parts, list) and (parts == [""] or not parts):
        return ""
    if (isinstance(parts, list)
            and all(isinstance(n, int) and not isinstance(n, bool) or isinstance(n, str) and n.isdigit()
                    for n in parts)):
        return ",".join(str(int(n)) for n in parts)
    raise ScalestudyError(f"{where}: stage_layers must be layers per pipeline stage, \"3,1\" or [3, 1] "
                          f"(several layouts: [\"3,1\", \"2,2\"]), got {value!r}")


def _check_value(key: str, value: Any, tp: type, where: str) -> Any:
    if key == "stage_layers":
        return _stage_layers(value, where)
    if tp is bool:
        if not isinstance(value, bool):
            raise ScalestudyError(f"{where}: {key} must be true or false (or a list of them), got {value!r}")
        return value
    if tp is str and isinstance(value, str):  # (a number where a name goes: the type's line below)
        _check_choice(key, value, where)
    ok = (isinstance(value, tp) and not isinstance(value, bool)) or (
        tp is float and isinstance(value, int) and not isinstance(value, bool))
    if tp is float and isinstance(value, str):
        try:  # YAML reads `1e-3` (no dot) as a string
            value, ok = number_from_text(value), True
        except ValueError:
            pass
    if not ok:
        raise ScalestudyError(f"{where}: {key} must be {_type_name(tp)} (or a list of them), got {value!r}")
    if tp is float and isinstance(value, int) and not -1e308 < value < 1e308:  # float() of it overflows
        raise ScalestudyError(f"{where}: {key} must be a finite number, got an integer of {len(str(value))} digits")
    if tp is float and not math.isfinite(value):
        raise ScalestudyError(f"{where}: {key} must be a finite number, got {value!r}")
    return float(value) if tp is float else value


def _check_choice(key: str, value: Any, where: str) -> None:
    """Strategy's own unknown-value line for a key that takes one of a list of names (recompute, precision,
    attention, lm_head, optimizer_kind, ...): a typo is named as one, before any rule about what train runs."""
    try:
        check_field_choice(key, value)
    except ScalestudyError as exc:
        raise ScalestudyError(f"{where}: {exc}") from None


def _as_list(key: str, value: Any, tp: type, where: str) -> list:
    if key == "stage_layers" and isinstance(value, list) and not any(isinstance(v, (list, str)) for v in value):
        value = [value]  # [3, 1] is one layout; ["3,1", [2, 2]] several
    values = value if isinstance(value, list) else [value]
    if not values:
        raise ScalestudyError(f"{where}: {key} is an empty list")
    return [_check_value(key, v, tp, where) for v in values]


def _without_cost_model_options(mapping: dict, where: str) -> dict:
    """`mapping` without the cost-model-only Strategy keys (kernels, tp_comm_overlap, ...) at the values `train`
    runs (their defaults, or specs/run.train_runs: kernels eager, the loss hf / torch, optimizer_loop foreach /
    deepspeed-unfused, recompute_early_stop on -- Trial.strategy writes in what train runs for its model); any other
    value is refused with train's own message (not as an unknown key)."""
    out = dict(mapping)
    for key in COST_MODEL_OPTIONS.keys() & out.keys():
        values = out.pop(key)
        values = values if isinstance(values, list) else [values]
        for v in values:
            _check_choice(key, v, where)
        if not all(train_runs(key, v) for v in values):
            raise ScalestudyError(f"{where}: {cost_model_option_message(key)}")
    return out


def _expand(mapping: dict, schema: dict[str, tuple[type, Any]], where: str) -> list[dict]:
    """Cartesian product of one mapping's values (scalars are one-element lists)."""
    for key in mapping:
        if key not in schema:
            raise ScalestudyError(f"{where}: unknown key {key!r}{did_you_mean([key], schema)} (known: "
                                  f"{', '.join(sorted(schema))})")
    keys = list(mapping)
    lists = [_as_list(k, mapping[k], schema[k][0], where) for k in keys]
    return [dict(zip(keys, combo)) for combo in itertools.product(*lists)]


def _describe(point: dict) -> str:
    shown = " ".join(f"{k}={point[k]}" for k in ("model", "engine", "zero", "nodes", "nproc", "micro_batch",
                                                  "global_batch", "tp", "pp") if k in point)
    return shown + "".join(f" {k}={point[k]}" for k, (_, default) in EXEC_AXES.items()
                           if k in point and point[k] != default)


def _no_effect(point: dict) -> str:
    """Why a non-default execution key changes nothing in this layout (the trial would duplicate another)."""
    # (pipeline options at pp 1 are refused by Strategy itself, for every surface alike)
    if point["tp"] == 1 and point["sequence_parallel"] != EXEC_AXES["sequence_parallel"][1]:
        return "sequence_parallel only applies with tp > 1"
    return ""


def _validate(point: dict, data: list[str]) -> str:
    """Empty string if the trial is runnable on the study's `data`, else the reason it is not."""
    try:
        trial = Trial(**point)
        check_cost_model_only(trial.strategy)  # engine megatron: the cost model's, not train's
        model = get_model(trial.model)
        resolve_layout(trial.strategy, trial.world_size, trial.global_batch, gpus_per_node=trial.nproc,
                       num_heads=model.num_heads, num_layers=model.total_layers)
        check_parallel_layout(model, trial.strategy, trial.world_size)  # tp/pp layouts train can run
        workload = trial.workload
        layout = resolve_layout(trial.strategy, trial.world_size, trial.global_batch)
        check_microbatches(trial.strategy, layout.grad_accum)
        check_sequence_parallel(trial.strategy, workload.seq_len, workload.target_len)
        trial.run_config(data=data, output="trial").validate()  # the options a trial's `train` would refuse (e.g. train_options)
    except ScalestudyError as exc:
        return str(exc)
    if _no_effect(point):
        return _no_effect(point)
    for key in ("steps", "nodes", "nproc"):
        if point[key] < 1:
            return f"{key} must be >= 1"
    if point["warmup"] < 0 or point["warmup"] >= point["steps"]:
        return f"warmup {point['warmup']} (timed steps excluded) must be >= 0 and below steps {point['steps']}"
    if point["warmup_steps"] < 0:
        return f"warmup_steps must be >= 0, got {point['warmup_steps']}"
    if point["objective"] not in ("span", "knowledge", "causal"):
        return f"unknown objective {point['objective']!r} (span, knowledge, causal)"
    if point["objective"] != "causal" and point["target_len"] < 1:
        return f"target_len must be >= 1 for objective {point['objective']} (tokens and FLOPs count it)"
    if (point["objective"] == "causal") == model.is_encoder_decoder:
        return f"objective {point['objective']} does not suit {model.name} ({model.family})"
    if point["lr"] <= 0 or not 0 <= point["memory_limit_bytes"] < 2**63:
        return "lr must be positive and memory_limit_bytes in [0, 2^63) (RLIMIT_AS takes 64 bits)"
    if not 0 < point["timeout_s"] <= MAX_TIMEOUT_S:  # nan and inf fail too
        return (f"timeout_s must be a positive number of seconds up to {MAX_TIMEOUT_S:,.0f} (a year; Slurm's time "
                f"limit and Python's waits take no more), got {point['timeout_s']}")
    return ""


# Options a study sets itself (per trial or per run); train_options must not override them.
_OWN_OPTIONS = set(AXES) | {"nnodes", "output", "resume", "progress", "crash_after_step"}


def _train_options(raw: Any, where: str) -> str:
    if raw is None:
        return ""
    if not isinstance(raw, dict):
        raise ScalestudyError(f"{where}: train_options must be a mapping of `scalestudy train` options, got {raw!r}")
    if not raw:
        return ""
    clash = sorted(set(raw) & _OWN_OPTIONS)
    if clash:
        raise ScalestudyError(f"{where}: train_options may not set {', '.join(clash)} (use the study's axes)")
    unknown = set(raw) - set(FLAT_KEYS)
    if unknown:
        raise ScalestudyError(f"{where}: unknown train option(s) {', '.join(sorted(map(str, unknown)))}"
                              f"{did_you_mean(unknown, FLAT_KEYS)} (every option: {RUN_OPTIONS_DOC})")
    return json.dumps(raw, sort_keys=True)


def _given(raw: dict, key: str, empty: Any) -> Any:
    """raw[key], or `empty` where the key is absent or left blank (`env:`). Another falsy value (`env: []`,
    `include: 0`) is kept: it is a value of the wrong type, for the check that follows to refuse."""
    value = raw.get(key)
    return empty if value is None else value


def _study_field(raw: dict, key: str, tp: type, default: Any, where: str) -> Any:
    if key not in raw or raw[key] is None:
        return default
    return _check_value(key, raw[key], tp, where)


def _is_preset_or_device(value: str) -> bool:
    from scalestudy.specs.hardware import device_names
    from scalestudy.specs.presets import PRESETS

    return value in PRESETS or value.lower() in device_names()


def resolve_user_path(value: Any, base: Path) -> Any:
    """A relative file path given in a spec, made absolute against `base` (the spec file's directory); preset and
    device names, `hf:` datasets and non-strings pass through. Trials run in their own directory, so a path left
    relative would resolve against the wrong one."""
    if not isinstance(value, str) or not value or value.startswith("hf:") or _is_preset_or_device(value):
        return value
    path = Path(value).expanduser()
    return value if path.is_absolute() else str((base / path).resolve())


def _looks_like_path(value: Any, base: Path) -> bool:
    """A model/device value naming a file rather than a (possibly misspelt) preset: keeps 'unknown model' errors
    about the name the user typed."""
    return isinstance(value, str) and ("/" in value or Path(value).suffix in (".json", ".yaml", ".yml")
                                       or (base / value).exists())


def _resolve_axis(value: Any, base: Path, *, named: bool = False) -> Any:
    """`named`: the axis also takes preset/device names; only values that look like paths are resolved."""
    def one(v: Any) -> Any:
        return resolve_user_path(v, base) if not named or _looks_like_path(v, base) else v

    return [one(v) for v in value] if isinstance(value, list) else one(value)


_PATH_OPTIONS = ("data", "lexicon", "tokenizer")  # train_options that name files


def resolve_spec_paths(raw: dict, base: Path) -> dict:
    """A copy of a spec mapping whose file paths (model config.json, data, device profile, lexicon, tokenizer)
    are absolute, relative ones taken against `base`."""
    raw = dict(raw)
    for key in ("model", "device", "data"):
        if key in raw:
            raw[key] = _resolve_axis(raw[key], base, named=key != "data")
    if isinstance(raw.get("include"), list):
        raw["include"] = [{**e, "model": _resolve_axis(e["model"], base, named=True)}
                          if isinstance(e, dict) and "model" in e else e for e in raw["include"]]
    if isinstance(raw.get("train_options"), dict):
        raw["train_options"] = {k: (_resolve_axis(v, base) if k in _PATH_OPTIONS else v)
                                for k, v in raw["train_options"].items()}
    return raw


def parse_spec(raw: Any, where: str = "study spec", base: Path | None = None) -> StudySpec:
    """Validate a loaded YAML mapping and expand it into trials. Relative file paths in it resolve against `base`
    (the spec file's directory; default the current directory)."""
    if not isinstance(raw, dict):
        raise ScalestudyError(f"{where}: must be a YAML mapping of keys to values")
    if not raw:  # not a grid of defaults: an empty file is a mistake
        raise ScalestudyError(f"{where}: is empty (give at least `model:`; see examples/study-cpu.yaml)")
    raw = _without_cost_model_options(resolve_spec_paths(raw, Path.cwd() if base is None else base), where)
    schema = {**AXES, **CONTROL}
    unknown = set(raw) - set(schema) - STUDY_KEYS
    if unknown:
        raise ScalestudyError(f"{where}: unknown key(s) {', '.join(sorted(map(str, unknown)))}"
                              f"{did_you_mean(unknown, {*schema, *STUDY_KEYS})} (axes: {', '.join(AXES)}; see "
                              "scalestudy.study.spec)")
    base = {k: raw[k] for k in schema if k in raw}
    strategies = [{}] if raw.get("strategies") in (None, []) else raw["strategies"]
    if not isinstance(strategies, list) or not all(isinstance(s, dict) for s in strategies):
        raise ScalestudyError(f"{where}: strategies must be a list of mappings")
    strategies = [_without_cost_model_options(s, f"{where}: strategies[{i}]") for i, s in enumerate(strategies)]
    strategy_schema = {k: AXES[k] for k in STRATEGY_KEYS}
    include = _given(raw, "include", [])
    if not isinstance(include, list) or not all(isinstance(s, dict) for s in include):
        raise ScalestudyError(f"{where}: include must be a list of mappings")
    include = [_without_cost_model_options(s, f"{where}: include[{i}]") for i, s in enumerate(include)]
    empty = [i for i, s in enumerate(include) if not s]
    if empty:  # it sets no axis: the grid's first trial again, which runs once anyway
        raise ScalestudyError(f"{where}: include[{empty[0]}] is empty: an include entry adds a trial by the axes it "
                              "sets (e.g. {engine: ddp, zero: 1}); an empty one only repeats the grid's first trial")

    defaults = {k: v[1] for k, v in schema.items()}
    points: list[dict] = []
    for i, strat in enumerate(strategies):
        for s in _expand(strat, strategy_schema, f"{where}: strategies[{i}]"):
            for g in _expand({k: v for k, v in base.items() if k not in s}, schema, where):
                points.append({**defaults, **g, **s})
    if "include" in raw:
        # Axes an include entry leaves out take the grid's value (its first one, for a list).
        firsts = {k: _as_list(k, v, schema[k][0], where)[0] for k, v in base.items()}
        firsts = {k: v for k, v in _expand(firsts, schema, where)[0].items()}
        for i, extra in enumerate(include):
            for g in _expand(extra, schema, f"{where}: include[{i}]"):
                points.append({**defaults, **firsts, **g})

    data = _given(raw, "data", [])
    data = [data] if isinstance(data, str) else data
    if not isinstance(data, list) or not all(isinstance(d, str) and d for d in data):
        raise ScalestudyError(f"{where}: data must be a corpus path (or hf:NAME) or a list of them, got {data!r}")
    options = _train_options(raw.get("train_options"), where)
    trials: dict[str, Trial] = {}
    skipped: list[str] = []
    for point in points:
        point["train_options"] = options
        reason = _validate(point, data)
        if reason:
            skipped.append(f"{_describe(point)}: {reason}")
            continue
        trial = Trial(**point)
        trials.setdefault(trial.trial_id, trial)  # the same trial listed twice runs once
    if not trials:
        first = f" (first: {skipped[0]})" if skipped else ""
        raise ScalestudyError(f"{where}: no valid trial in the grid{first}")

    executor = _study_field(raw, "executor", str, "local", where)
    if executor not in EXECUTORS:
        raise ScalestudyError(f"{where}: executor must be one of {', '.join(EXECUTORS)}, got {executor!r}")
    slurm = _given(raw, "slurm", {})
    if not isinstance(slurm, dict) or set(slurm) - SLURM_KEYS:
        bad = sorted(set(slurm) - SLURM_KEYS) if isinstance(slurm, dict) else slurm
        raise ScalestudyError(f"{where}: slurm must be a mapping with keys {', '.join(sorted(SLURM_KEYS))}; "
                              f"unknown {bad}")
    _check_slurm(slurm, where)
    _check_slurm_gpus(slurm, trials.values(), where)
    extra_args = _given(raw, "extra_args", [])
    try:
        if not isinstance(extra_args, (str, list)) or any(isinstance(a, (dict, list)) for a in extra_args):
            raise TypeError("not a list of arguments")
        extra_args = shlex.split(extra_args) if isinstance(extra_args, str) else [str(a) for a in extra_args]
    except (TypeError, ValueError) as exc:  # a number, or text a shell could not split
        raise ScalestudyError(f"{where}: extra_args must be a list of arguments or one command line, got "
                              f"{extra_args!r} ({exc})") from None
    for key in ("skip_unfit", "keep_checkpoints"):
        if not isinstance(raw.get(key, False), bool):
            raise ScalestudyError(f"{where}: {key} must be true or false, got {raw[key]!r}")
    env = _given(raw, "env", {})
    if not isinstance(env, dict):
        raise ScalestudyError(f"{where}: env must be a mapping of variable names to values")
    for key, value in env.items():  # exported in trial scripts and processes: names and plain values only
        if not isinstance(key, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key) or \
                isinstance(value, (dict, list)) or value is None:
            raise ScalestudyError(f"{where}: env {key!r}: {value!r} is not an environment variable (a NAME of "
                                  "letters, digits, _ and a plain value)")
    from scalestudy.launch.process import check_environment

    check_environment({str(k): str(v) for k, v in env.items()}, f"{where}: env")  # what the trials will read
    device = _study_field(raw, "device", str, "local-cpu", where)
    from scalestudy.specs.hardware import get_device

    get_device(device)  # predictions need it: an unknown device is an error now, not a missing column later
    concurrency = _study_field(raw, "concurrency", int, 1, where)
    if concurrency < 1:
        raise ScalestudyError(f"{where}: concurrency must be >= 1, got {concurrency}")
    if _study_field(raw, "max_ranks", int, 0, where) < 0:
        raise ScalestudyError(f"{where}: max_ranks must be >= 0 (0: no cap), got {raw['max_ranks']}")
    name = raw.get("name")
    if name is None:  # absent or `name:` left empty
        name = "study"
    if not isinstance(name, (str, int)) or isinstance(name, bool) or not str(name).strip():
        raise ScalestudyError(f"{where}: name must be text (non-empty), got {name!r}")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in str(name)):  # Slurm's #SBATCH --job-name line ends at a newline
        raise ScalestudyError(f"{where}: name must be one line of text without control characters, got {name!r}")
    if not isinstance(_given(raw, "description", ""), str):
        raise ScalestudyError(f"{where}: description must be text, got {raw['description']!r}")
    template = _study_field(raw, "command_template", str, "", where)
    for trial in trials.values() if template else ():  # every placeholder fills now, before anything is written
        fill_command_template(template, template_values(trial, python="python", output="TRIAL_DIR",
                                                        train_args="--config TRIAL_DIR/trial.yaml"), where)
    return StudySpec(
        name=str(name),
        trials=tuple(trials.values()),
        skipped=tuple(skipped),
        description=str(raw.get("description") or ""),
        device=device,
        data=tuple(str(d) for d in data),
        executor=executor,
        concurrency=concurrency,
        max_ranks=_study_field(raw, "max_ranks", int, 0, where),
        command_template=template,
        env={str(k): str(v) for k, v in env.items()},
        extra_args=tuple(extra_args),
        slurm=dict(slurm),
        skip_unfit=bool(raw.get("skip_unfit", False)),
        keep_checkpoints=bool(raw.get("keep_checkpoints", False)),
        source=raw,
    )


def template_values(trial: Trial, *, python: str, output: str, train_args: str) -> dict:
    """What `command_template` may name: the trial's fields plus {python}, {output}, {trial_id}, {train_args}."""
    return {**asdict(trial), "python": python, "output": output, "trial_id": trial.trial_id, "train_args": train_args}


def fill_command_template(template: str, values: dict, where: str = "study spec") -> list[str]:
    """The trial command `command_template` makes of `values`, split as a shell would; one-line errors."""
    try:
        command = shlex.split(template.format(**values))
    except KeyError as exc:  # a name that is not a placeholder
        raise ScalestudyError(f"{where}: command_template cannot fill {{{exc.args[0]}}} (placeholders: "
                              f"{', '.join(sorted(values))})") from None
    except (IndexError, AttributeError, TypeError, ValueError) as exc:  # {0}, {lr.x}, {lr[0]}, a lone brace, a
        # format code the value does not take ({lr:d}), an unclosed quote
        raise ScalestudyError(f"{where}: command_template {template!r}: {exc}") from None
    if not command:
        raise ScalestudyError(f"{where}: command_template {template!r} is an empty command")
    return command


# sbatch --time's formats (sbatch(1), "Acceptable time formats"; Slurm's time_str2mins also takes UNLIMITED/INFINITE)
SLURM_TIME = re.compile(r"\d+(:\d+){0,2}|\d+-\d+(:\d+){0,2}|unlimited|infinite", re.IGNORECASE)
_SLURM_TYPES = {"partition": str, "account": str, "time": str, "qos": str, "constraint": str, "gpus_per_node": int,
                "cpus_per_task": int, "poll_s": float, "lost_grace_s": float, "setup": list, "sbatch_args": list}


def _check_slurm(slurm: dict, where: str) -> None:
    """Each slurm key's value as the job script writes it: text, a whole count >= 1, seconds > 0, a list of lines."""
    for key, value in slurm.items():
        kind = _SLURM_TYPES[key]
        if kind is str:
            ok = isinstance(value, str) and value.strip() and "\n" not in value
        elif kind is int:  # Slurm holds CPUs per task in 16 bits (0xfffe, 0xffff reserved); GPUs per node are
            # ranks of one rendezvous (MAX_WORLD_SIZE), whatever the 64 bits Slurm would accept
            top = 0xfffd if key == "cpus_per_task" else MAX_WORLD_SIZE
            ok = isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= top
        elif kind is float:  # poll_s 0 would ask squeue in a loop without a pause
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < float("inf") and \
                (value > 0 or key != "poll_s")
        else:
            ok = isinstance(value, list) and all(isinstance(v, str) and "\n" not in v for v in value)
        if ok and key == "time" and not SLURM_TIME.fullmatch(value):
            raise ScalestudyError(f"{where}: slurm.time {value!r} is no Slurm time limit (minutes, minutes:seconds, "
                                  "hours:minutes:seconds, days-hours, days-hours:minutes, days-hours:minutes:seconds "
                                  "or UNLIMITED): sbatch would refuse every trial's job")
        if not ok:
            want = {str: "one line of text", int: f"a whole number in [1, {top}]" if kind is int else "",
                    float: f"a number of seconds {'> 0' if key == 'poll_s' else '>= 0'}", list: "a list of lines"}[kind]
            hint = ' (YAML reads 01:30:00 as a number: quote it, time: "01:30:00")' if key == "time" else ""
            raise ScalestudyError(f"{where}: slurm.{key} must be {want}, got {value!r}{hint}")


def _check_slurm_gpus(slurm: dict, trials, where: str) -> None:
    """slurm.gpus_per_node asks for each node's GPUs while torchrun starts a trial's `nproc` ranks per node, one
    GPU each (engine/train.py: rank i on cuda:LOCAL_RANK): fewer GPUs than a trial's ranks is refused now."""
    gpus = slurm.get("gpus_per_node")
    short = [t for t in trials if gpus is not None and t.nproc > gpus]
    if short:
        raise ScalestudyError(f"{where}: slurm.gpus_per_node {gpus} is below nproc {short[0].nproc} of trial "
                              f"{short[0].label}: its ranks would have no GPU of their own")


def load_spec(path: str | Path) -> StudySpec:
    """Read and validate a study spec YAML file."""
    raw = read_yaml(path, "study spec")
    return parse_spec(raw, f"study spec {Path(path).name}", base=Path(path).resolve().parent)
