"""Hyperparameter search on a family of small proxies, with early stopping of bad trials (ASHA).

For each proxy model, Optuna (TPE sampler, seeded) proposes learning rate, global batch, warm-up and precision;
every trial is a real `scalestudy train` run: a study trial (`scalestudy.study.trials`: same config, command and
store row as `scalestudy study run`) run as the one trial process (`scalestudy.launch.process`: memory cap, outcome
classification, kill of the whole tree). Trials get the same token budget whatever their batch size, and report
their loss against the fraction of that budget they have seen; Optuna's SuccessiveHalvingPruner (asynchronous
successive halving, ASHA: Li et al. 2020, arXiv 1810.05934) stops the worst ones at each rung: the watcher's
callback (`LossReporter`) says stop and the trial process is killed with its ranks. Results:
- DIR/study.sqlite: the finished (not pruned) trials as study-store rows (`scalestudy fit DIR`, `scalestudy report`);
- DIR/search.sqlite: Optuna's RDB storage, one Optuna study per proxy (all trials with their intermediate values;
  re-running the search resumes it);
- DIR/search.json: best setting per proxy and the power-law trend of the best learning rate and batch size vs
  parameters, extrapolated to the target model;
- DIR/best_runs.csv: the best trial of each proxy at several fractions of its budget (params, tokens, flops, loss),
  for a scaling-law fit.

Search spec (YAML): a study spec (see scalestudy.study.spec; its `model` list is the proxy family and its other axes
are the fixed settings of every trial) plus a `search:` block:

    search:
      target_model: mt5-xxl           # extrapolate the trends to this model's parameter count
      trials_per_model: 8
      budget_tokens: 40000            # per trial, encoder + decoder tokens; steps = budget / (batch x tokens/seq)
      min_resource: 0.11              # first rung, as a fraction of the budget
      reduction_factor: 3             # keep the best 1/3 at each rung
      seed: 0
      space:
        lr: {low: 1.0e-4, high: 1.0e-2, log: true}
        global_batch: [4, 8]
        warmup_steps: [0, 2]
        precision: [fp32]
"""

from __future__ import annotations

import csv
import json
import math
import os
import shutil
import socket
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from scalestudy.atomicfile import write_text_atomic
from scalestudy.errors import ScalestudyError
from scalestudy.launch.commands import drop_checkpoints
from scalestudy.launch.process import kill_marked, start_trial, trial_environment
from scalestudy.specs.run import MAX_LR
from scalestudy.study.trials import trial_command, trial_dir, trial_row, write_train_config
from scalestudy.yamlfile import number_value, read_yaml

SPACE_KEYS = ("lr", "global_batch", "warmup_steps", "precision")
SEARCH_KEYS = {"target_model", "trials_per_model", "budget_tokens", "min_resource", "reduction_factor", "seed",
               "space", "checkpoints"}
PCT = 100  # progress is reported in percent of the token budget (Optuna steps are integers)
# Each trial is a training process run one after another: beyond this a search of one proxy never ends.
MAX_TRIALS_PER_MODEL = 10_000


def check_trials_per_model(count: int, name: str = "--trials-per-model") -> None:
    if not 1 <= count <= MAX_TRIALS_PER_MODEL:
        raise ScalestudyError(f"{name} must be a whole number in [1, {MAX_TRIALS_PER_MODEL:,}] (each trial is a "
                              f"training run, one after another), got {count}")


class Pruned(Exception):
    """The pruner stopped this trial."""


class TrialFailed(Exception):
    """The trial ended without a usable final loss (OOM, crash, timeout, NaN)."""


@dataclass(frozen=True)
class SearchConfig:
    budget_tokens: int
    trials_per_model: int = 8
    target_model: str | None = None
    min_resource: float = 1 / 9
    reduction_factor: int = 3
    seed: int = 0
    lr: tuple[float, float, bool] = (1e-4, 1e-2, True)  # low, high, log
    global_batch: tuple[int, ...] = (8,)
    warmup_steps: tuple[int, ...] = (2,)
    precision: tuple[str, ...] = ("fp32",)
    checkpoints: tuple[float, ...] = (0.25, 0.5, 0.75, 1.0)  # budget fractions written to best_runs.csv


@dataclass
class SearchSpec:
    name: str
    study: object  # StudySpec: fixed settings, one base trial per proxy model
    config: SearchConfig
    source: dict = field(default_factory=dict)

    @property
    def models(self) -> list[str]:
        return list(dict.fromkeys(t.model for t in self.study.trials))


def _choices(space: dict, key: str, tp: type, default: tuple, low: int | None = None) -> tuple:
    value = space.get(key, list(default))
    values = value if isinstance(value, list) else [value]
    if not values:
        raise ScalestudyError(f"search space: {key} needs at least one value")
    try:
        if any(isinstance(v, bool) or tp is int and not _whole(v) or tp is str and not isinstance(v, str)
               for v in values):
            raise TypeError  # 2.5 sequences, true warm-up steps, a number for a precision
        out = tuple(tp(v) for v in values)
    except (TypeError, ValueError, OverflowError):
        raise ScalestudyError(f"search space: {key} values must be {tp.__name__}, got {values!r}") from None
    if low is not None and any(v < low for v in out):
        raise ScalestudyError(f"search space: {key} values must be >= {low}, got {list(out)}")
    return out


def _whole(value) -> bool:
    """An integer, or a float holding one (YAML reads 1.0e+3 as a float); not a bool, nan or inf."""
    return not isinstance(value, bool) and (isinstance(value, int) or isinstance(value, float) and value.is_integer())


def _setting(block: dict, key: str, tp: type, default, where: str):
    """One scalar of the search block as `tp` (int/float: finite; int: whole), or a one-line error naming it."""
    value = block.get(key, default)
    try:
        if isinstance(value, bool) or tp is int and isinstance(value, float) and not _whole(value):
            raise TypeError
        out = tp(value)
        if not math.isfinite(out) or abs(out) >= 2**63:
            raise ValueError
        return out
    except (TypeError, ValueError, OverflowError):
        kind = "a whole number" if tp is int else "a finite number"
        raise ScalestudyError(f"{where}: search.{key} must be {kind}, got {value!r}") from None


def parse_search(raw: dict, where: str = "search spec", base: Path | None = None) -> SearchSpec:
    """Validate a search spec mapping (a study spec plus a `search:` block); relative file paths in it resolve
    against `base` (the spec file's directory; default the current directory)."""
    from scalestudy.study.spec import parse_spec, resolve_spec_paths

    if not isinstance(raw, dict) or not isinstance(raw.get("search"), dict):
        raise ScalestudyError(f"{where}: needs a `search:` mapping (budget_tokens, space, ...)")
    base = Path.cwd() if base is None else base
    block = dict(raw["search"])
    if block.get("target_model") is not None:
        if not isinstance(block["target_model"], str):
            raise ScalestudyError(f"{where}: search.target_model must be a model preset or config.json path, got "
                                  f"{block['target_model']!r}")
        block["target_model"] = resolve_spec_paths({"model": block["target_model"]}, base)["model"]
    unknown = set(block) - SEARCH_KEYS
    if unknown:
        raise ScalestudyError(f"{where}: unknown search key(s) {', '.join(sorted(unknown))} "
                              f"({', '.join(sorted(SEARCH_KEYS))})")
    study_raw = {k: v for k, v in raw.items() if k != "search"}
    for key in SPACE_KEYS:  # searched axes are set per trial; the study grid takes one placeholder value
        if isinstance(study_raw.get(key), list):
            raise ScalestudyError(f"{where}: {key} is searched: give its choices under search.space, not as a list")
    space = {} if block.get("space") is None else block["space"]
    if not isinstance(space, dict) or set(space) - set(SPACE_KEYS):
        bad = ", ".join(sorted(map(str, set(space) - set(SPACE_KEYS)))) if isinstance(space, dict) else space
        raise ScalestudyError(f"{where}: search.space takes {', '.join(SPACE_KEYS)}, not {bad}")
    lr = space.get("lr", {"low": 1e-4, "high": 1e-2, "log": True})
    if isinstance(lr, dict) and set(lr) - {"low", "high", "log"}:  # step: 2 (another tool's key) or a typo was ignored
        raise ScalestudyError(f"{where}: search.space.lr takes low, high and log, not "
                              f"{', '.join(sorted(map(str, set(lr) - {'low', 'high', 'log'})))}")
    try:
        if not isinstance(lr.get("log", True), bool) or any(isinstance(lr[k], bool) for k in ("low", "high")):
            raise TypeError
        lr_range = (number_value(lr["low"]), number_value(lr["high"]), lr.get("log", True))
    except (TypeError, KeyError, ValueError, AttributeError, OverflowError):
        raise ScalestudyError(f"{where}: search.space.lr must be {{low: .., high: .., log: true}}") from None
    if not 0 < lr_range[0] < lr_range[1] <= MAX_LR:  # nan and inf fail too
        raise ScalestudyError(f"{where}: search.space.lr needs finite 0 < low < high <= {MAX_LR:g} (train's --lr "
                              f"range), got {lr_range[:2]}")
    try:
        budget = int(float(block["budget_tokens"]))
    except (KeyError, TypeError, ValueError, OverflowError):
        raise ScalestudyError(f"{where}: search.budget_tokens (tokens per trial) is required") from None
    if budget < 1:
        raise ScalestudyError(f"{where}: search.budget_tokens (tokens per trial) must be >= 1, got {budget}")
    checkpoints = block.get("checkpoints", (0.25, 0.5, 0.75, 1.0))
    if not isinstance(checkpoints, (list, tuple)) or not checkpoints:
        raise ScalestudyError(f"{where}: search.checkpoints are budget fractions in (0, 1], got {checkpoints!r}")
    cfg = SearchConfig(
        budget_tokens=budget, trials_per_model=_setting(block, "trials_per_model", int, 8, where),
        target_model=block.get("target_model"), min_resource=_setting(block, "min_resource", float, 1 / 9, where),
        reduction_factor=_setting(block, "reduction_factor", int, 3, where),
        seed=_setting(block, "seed", int, 0, where), lr=lr_range,
        global_batch=_choices(space, "global_batch", int, (study_raw.get("global_batch", 8),), low=1),
        warmup_steps=_choices(space, "warmup_steps", int, (study_raw.get("warmup_steps", 2),), low=0),
        precision=_choices(space, "precision", str, (str(study_raw.get("precision", "fp32")),)),
        checkpoints=tuple(_setting({"checkpoints": c}, "checkpoints", float, None, where) for c in checkpoints),
    )
    check_trials_per_model(cfg.trials_per_model, f"{where}: search.trials_per_model")
    if cfg.trials_per_model < 1 or cfg.reduction_factor < 2 or not 0 < cfg.min_resource <= 1:
        raise ScalestudyError(f"{where}: need trials_per_model >= 1, reduction_factor >= 2, 0 < min_resource <= 1")

    if not all(0 < c <= 1 for c in cfg.checkpoints):
        raise ScalestudyError(f"{where}: search.checkpoints are budget fractions in (0, 1]")
    study_raw.setdefault("global_batch", cfg.global_batch[0])
    study_raw.setdefault("name", "search")
    study = parse_spec(study_raw, where, base=base)
    spec = SearchSpec(name=study.name, study=study, config=cfg, source=raw)
    if cfg.target_model is not None:
        from scalestudy.specs.presets import get_model

        get_model(cfg.target_model)  # a clear error now rather than after the search
    top_seed = 2**32 - 1000 * len(spec.models)  # Optuna's sampler seeds numpy (< 2^32) with seed + 1000 per proxy
    if not 0 <= cfg.seed < top_seed:
        raise ScalestudyError(f"{where}: search.seed must be a whole number in [0, {top_seed}), got {cfg.seed}")
    for base in _base_trials(spec).values():  # every combination must be a runnable trial
        for gb in cfg.global_batch:
            for warm in cfg.warmup_steps:
                for precision in cfg.precision:
                    trial = make_trial(spec, base, lr=cfg.lr[0], global_batch=gb, warmup_steps=warm,
                                       precision=precision)
                    trial.run_config(output="trial").validate()  # what its `train` would refuse, refused now
    return spec


def load_search(path: str | Path) -> SearchSpec:
    raw = read_yaml(path, "search spec")
    return parse_search(raw, str(path), base=Path(path).resolve().parent)


def _base_trials(spec: SearchSpec) -> dict:
    return {m: next(t for t in spec.study.trials if t.model == m) for m in spec.models}


def make_trial(spec: SearchSpec, base, *, lr: float, global_batch: int, warmup_steps: int, precision: str):
    """The study Trial of one suggestion: same token budget whatever the batch size."""
    from scalestudy.specs.strategy import resolve_layout

    tokens_per_step = global_batch * (base.workload.tokens_per_step // base.global_batch)
    steps = max(1, round(spec.config.budget_tokens / tokens_per_step))
    if warmup_steps >= steps:
        raise ScalestudyError(f"warm-up {warmup_steps} steps >= {steps} steps of a batch-{global_batch} trial: "
                              "raise search.budget_tokens or lower warmup_steps")
    micro = min(base.micro_batch, global_batch)
    trial = replace(base, lr=float(lr), global_batch=global_batch, micro_batch=micro, warmup_steps=warmup_steps,
                    precision=precision, steps=steps, warmup=min(base.warmup, steps - 1))
    resolve_layout(trial.strategy, trial.world_size, trial.global_batch)  # raises when the batch does not divide
    return trial


# ---- running one trial ---------------------------------------------------------------------------------------
class TrainRunner:
    """Runs a trial as a real `scalestudy train` trial process; `report(pct, loss) -> bool` says whether to stop it."""

    def __init__(self, spec: SearchSpec, out: Path, store, *, poll_s: float = 0.5, smooth: int = 5) -> None:
        self.spec, self.out, self.store = spec, out, store
        self.env = trial_environment(spec.study.env)
        self.poll_s, self.smooth = poll_s, smooth

    def __call__(self, trial, report: Callable[[int, float], bool]) -> float:
        done = {r["trial_id"]: r for r in self.store.trials("OK")}
        if trial.trial_id in done and done[trial.trial_id].get("loss") is not None:
            return float(done[trial.trial_id]["loss"])  # resumed search: this exact trial already finished
        tdir = trial_dir(self.out, trial)
        shutil.rmtree(tdir, ignore_errors=True)  # a pruned or interrupted earlier attempt
        tdir.mkdir(parents=True)
        write_train_config(self.spec.study, trial, tdir)
        process = start_trial(trial_command(self.spec.study, trial, tdir), tdir, trial_id=trial.trial_id,
                              owner_dir=self.out, env=self.env, timeout_s=trial.timeout_s,
                              memory_limit_bytes=trial.memory_limit_bytes)
        self.store.record_attempt(trial.trial_id, process.pid, socket.gethostname())
        reporter = LossReporter(trial.steps, report, self.smooth)
        result = process.watch(reporter, poll_s=self.poll_s)
        drop_checkpoints(tdir)
        if result.pruned:
            raise Pruned(f"pruned at {reporter.pct}% of the token budget")
        row, metrics = trial_row(self.spec.study, trial, result, self.env)
        self.store.record_trial(row, metrics)
        loss = row.get("loss")
        if row["status"] != "OK" or loss is None or not math.isfinite(loss):
            reason = (row.get("error_tail") or "no final loss").strip().splitlines()[0]
            raise TrialFailed(f"{row['status']}: {reason}")
        return float(loss)


class LossReporter:
    """The trial watcher's callback: per metrics row, the smoothed loss at each new percent of the token budget
    goes to `report(pct, loss)`; True (the pruner says stop) stops the trial, and `pct` says where."""

    def __init__(self, steps: int, report: Callable[[int, float], bool], smooth: int) -> None:
        self.steps, self.report, self.smooth = steps, report, smooth
        self.losses: list[float] = []
        self.pct = 0

    def __call__(self, row: dict) -> bool:
        if not isinstance(row.get("loss"), (int, float)):
            return False
        self.losses.append(float(row["loss"]))
        pct = min(PCT, int(PCT * int(row["step"]) / self.steps))
        window = self.losses[-self.smooth:]
        value = sum(window) / len(window)
        if pct <= self.pct or not math.isfinite(value):
            return False
        self.pct = pct
        return pct < PCT and self.report(pct, value)


# ---- the search ------------------------------------------------------------------------------------------------
def _optuna():
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


def search_model(spec: SearchSpec, model: str, base, runner, storage, *, index: int = 0,
                 warm_start: dict | None = None, n_trials: int | None = None,
                 log: Callable[[str], None] = lambda s: None):
    """Run (or resume) the Optuna study of one proxy until it holds `trials_per_model` trials.

    warm_start: the previous (smaller) proxy's best setting, tried first: good settings move slowly with size.
    """
    optuna = _optuna()
    cfg = spec.config
    pruner = optuna.pruners.SuccessiveHalvingPruner(
        min_resource=max(1, round(cfg.min_resource * PCT)), reduction_factor=cfg.reduction_factor)
    # A different seed per proxy: the same seed would propose the same points to every size.
    sampler = optuna.samplers.TPESampler(seed=cfg.seed + 1000 * index,
                                         n_startup_trials=max(2, min(4, cfg.trials_per_model // 2)))
    study = optuna.create_study(study_name=f"{spec.name}/{model}", storage=storage, direction="minimize",
                                sampler=sampler, pruner=pruner, load_if_exists=True)
    left = (n_trials or cfg.trials_per_model) - len(study.trials)
    if warm_start and not study.trials:
        study.enqueue_trial(warm_start)  # runs as the first of the `left` trials

    def objective(ot):
        params = {
            "lr": ot.suggest_float("lr", cfg.lr[0], cfg.lr[1], log=cfg.lr[2]),
            "global_batch": ot.suggest_categorical("global_batch", list(cfg.global_batch)),
            "warmup_steps": ot.suggest_categorical("warmup_steps", list(cfg.warmup_steps)),
            "precision": ot.suggest_categorical("precision", list(cfg.precision)),
        }
        trial = make_trial(spec, base, **params)
        ot.set_user_attr("trial_id", trial.trial_id)
        ot.set_user_attr("steps", trial.steps)

        def report(pct: int, value: float) -> bool:
            ot.report(value, pct)
            return ot.should_prune()

        try:
            loss = runner(trial, report)
        except Pruned as exc:
            log(f"{model} trial {ot.number}: lr {params['lr']:.3g}, global batch {params['global_batch']} sequences: "
                f"{exc}")
            raise optuna.TrialPruned(str(exc)) from None
        except TrialFailed as exc:
            log(f"{model} trial {ot.number}: failed ({exc})")
            ot.set_user_attr("error", str(exc))
            raise
        log(f"{model} trial {ot.number}: lr {params['lr']:.3g}, global batch {params['global_batch']} sequences, "
            f"warm-up {params['warmup_steps']} steps, {params['precision']}: final loss {loss:.4g} nats/token")
        return loss

    if left > 0:
        study.optimize(objective, n_trials=left, catch=(TrialFailed,))
    return study


def _best(study) -> dict | None:
    optuna = _optuna()
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE and t.value is not None]
    if not done:
        return None
    best = min(done, key=lambda t: t.value)
    return {"params": dict(best.params), "loss": float(best.value), "trial": best.number,
            "trial_id": best.user_attrs.get("trial_id"), "steps": best.user_attrs.get("steps")}


def _states(study) -> dict:
    counts: dict[str, int] = {}
    for t in study.trials:
        counts[t.state.name.lower()] = counts.get(t.state.name.lower(), 0) + 1
    return counts


def summarize(spec: SearchSpec, studies: dict, sizes: dict[str, float], level: float = 0.95) -> dict:
    """Best setting per proxy, and power-law trends of the best lr and batch size vs N extrapolated to the target."""
    from scalestudy.scaling.trend import power_trend

    models = []
    for model, study in studies.items():
        models.append({"model": model, "params": sizes[model], "best": _best(study), "trials": _states(study)})
    target = None
    if spec.config.target_model:
        from scalestudy.costmodel.params import param_count
        from scalestudy.specs.presets import get_model

        target = float(param_count(get_model(spec.config.target_model)))
    found = [m for m in models if m["best"]]
    trends = {}
    for key in ("lr", "global_batch"):
        try:
            trends[key] = power_trend([m["params"] for m in found], [m["best"]["params"][key] for m in found],
                                      target=target, level=level)
        except ScalestudyError as exc:
            trends[key] = {"error": str(exc)}
    return {
        "name": spec.name,
        "objective": f"final training loss (nats/token) after {spec.config.budget_tokens} tokens "
                     "(encoder + decoder) per trial",
        "sampler": f"Optuna TPE (seed {spec.config.seed})",
        "pruner": (f"Optuna SuccessiveHalvingPruner (ASHA): first rung at {spec.config.min_resource:.0%} of the "
                   f"token budget, reduction factor {spec.config.reduction_factor}"),
        "target_model": spec.config.target_model, "target_params": target,
        "models": models, "trends": trends,
    }


def _atomic_text(path: Path, text: str) -> None:
    write_text_atomic(path, text)


def write_best_runs(spec: SearchSpec, result: dict, store, out: Path) -> Path | None:
    """The best trial of each proxy at several budget fractions (smoothed loss), as a runs CSV for `fit`."""
    from scalestudy.study.predict import run_flops

    rows = []
    by_id = {r["trial_id"]: r for r in store.trials("OK")}
    for m in result["models"]:
        best = m["best"]
        row = by_id.get(best["trial_id"]) if best else None
        if row is None:
            continue
        losses = [x["loss"] for x in store.metrics(row["trial_id"]) if x.get("loss") is not None]
        if not losses:
            continue
        from scalestudy.study.spec import Trial

        trial = Trial.from_dict(json.loads(row["trial_json"]) if isinstance(row["trial_json"], str)
                                else row["trial_json"])
        for frac in spec.config.checkpoints:
            k = max(1, round(frac * len(losses)))
            window = losses[max(0, k - 5):k]
            rows.append({"model": m["model"], "params": m["params"], "tokens": row["tokens"] * k / len(losses),
                         "flops": (run_flops(trial) or math.nan) * k / len(losses),
                         "loss": sum(window) / len(window)})
    if not rows:
        return None
    path = out / "best_runs.csv"
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=["model", "params", "tokens", "flops", "loss"])
        writer.writeheader()
        writer.writerows(rows)
    os.replace(tmp, path)
    return path


def run_search(spec: SearchSpec | str | Path, out: str | Path, *, runner=None,
               log: Callable[[str], None] = lambda s: None) -> dict:
    """Run (or resume) the search into `out`; return (and write to DIR/search.json) the summary.

    `runner(trial, report) -> final loss` runs one trial (default: a real `scalestudy train` process); it raises
    `Pruned` when `report(pct, loss)` returns True, `TrialFailed` when the trial has no usable loss.
    """
    from scalestudy.study.predict import trial_param_count
    from scalestudy.study.runner import check_local_inputs, check_study_dir, open_study

    if not isinstance(spec, SearchSpec):
        spec = load_search(spec)
    out = Path(out).resolve()  # trials run with their own directory as working directory
    check_study_dir(out, spec.study.name)  # before anything is written
    if runner is None:  # real `scalestudy train` trials: the files each one reads, checked once here
        check_local_inputs(spec.study)
    out.mkdir(parents=True, exist_ok=True)
    storage = f"sqlite:///{out / 'search.sqlite'}"
    started = time.time()
    kill_marked(out)  # leftovers of a search that was killed (trial processes carry the directory as a marker)
    store = open_study(spec.study, out)
    try:
        store.set_meta("search", spec.source)
        trial_runner = runner or TrainRunner(spec, out, store)
        studies, sizes, previous = {}, {}, None
        bases = sorted(_base_trials(spec).items(), key=lambda kv: trial_param_count(kv[1]))  # small to large
        for index, (model, base) in enumerate(bases):
            sizes[model] = float(trial_param_count(base))
            studies[model] = search_model(spec, model, base, trial_runner, storage, index=index,
                                          warm_start=previous, log=log)
            previous = (_best(studies[model]) or {}).get("params")
        result = summarize(spec, studies, sizes)
        result["wall_s"] = time.time() - started
        best_csv = write_best_runs(spec, result, store, out) if runner is None else None
        result["best_runs_csv"] = str(best_csv) if best_csv else None
    finally:
        store.close()
    _atomic_text(out / "search.json", json.dumps(result, indent=2) + "\n")
    return result
