"""Measured strategy search on the machine at hand (`scalestudy tune`).

1. Calibrate: micro-benchmarks (matmul rate vs size and dtype, copy bandwidth, Adam rate, gloo collectives vs
   message size; `scalestudy.engine.microbench` under torchrun) -> a hardware profile YAML
   (`scalestudy.costmodel.calibrate.profile_from_microbench`), usable as `--gpu PATH.yaml` by estimate and plan.
2. Rank every strategy `scalestudy train` can run here with the cost model on that profile.
3. Trials: short real `scalestudy train` runs (the first `warmup` steps excluded from the median step time).
   After every trial the efficiency terms are refit (`EfficiencyModel`) and every candidate is re-predicted.
   Order of trials: first a screen of each engine (DeepSpeed, FSDP, DDP) in its lowest ZeRO stage, the
   best-predicted such strategy (framework overheads differ most between engines and grow with the stage; the
   model cannot know them unmeasured; `screen` caps it), then
   model-guided elimination: run the best-predicted unmeasured strategy while its prediction beats the best
   measured step time by more than `margin`; stop when none does (the top choice is stable), or at the budget.
   Failed / OOM / timed-out trials are recorded and the search goes on.

Efficiency model (refit from the trials, least squares on relative error with a ridge prior toward the
uncalibrated model): step = a * compute + b * data-parallel communication + c * optimizer/offload + o_step
+ micro-steps * (o + o_engine + o_family). On one-thread gloo ranks nothing overlaps, so communication counts in
full (`dp_comm_total_s`); `o` is the framework time per micro-step (Python, hooks, launches) the analytical model
has no term for (`o_step` its per-optimizer-step part), `o_engine` / `o_family` its engine- and
engine/ZeRO-specific parts (0 until measured).
"""

from __future__ import annotations

import math
import shutil
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from scalestudy.costmodel.calibrate import EfficiencyFit, StepTerms, fit_efficiency
from scalestudy.errors import ScalestudyError
from scalestudy.launch.process import TrialResult, kill_marked, start_trial, trial_environment
from scalestudy.launch.commands import CONFIG_NAME
from scalestudy.plan.emit import trainable
from scalestudy.plan.planner import Candidate, evaluate
from scalestudy.plan.space import Constraints
from scalestudy.specs.hardware import ClusterSpec, DeviceSpec
from scalestudy.specs.model import ModelSpec
from scalestudy.specs.run import RunConfig
from scalestudy.specs.strategy import Workload

# ---------------------------------------------------------------------------------------------- efficiency model


def family(c: Candidate) -> str:
    s = c.strategy
    fam = {"deepspeed": f"ds-z{s.zero}", "ddp": "ddp" if s.zero == 0 else "ddp-zero1", "fsdp": f"fsdp-z{s.zero}"}
    return fam[s.engine] + ("+opt" if s.offload_optimizer != "none" else "") + \
        ("+param" if s.offload_params != "none" else "")


def terms(c: Candidate) -> StepTerms:
    """The estimate's step time split into the parts the refit scales."""
    e = c.estimate
    return StepTerms(compute_s=e.compute_s + e.bubble_s + e.tp_comm_s + e.pp_comm_s, comm_s=e.dp_comm_total_s,
                     optimizer_s=e.optimizer_s + e.offload_s, micro_steps=c.point.grad_accum, family=family(c),
                     engine=c.strategy.engine)


class EfficiencyModel:
    """`EfficiencyFit` over candidates (caches each candidate's step terms)."""

    def __init__(self, fit: EfficiencyFit | None = None) -> None:
        self.fit_ = fit or EfficiencyFit()
        self._terms: dict[int, StepTerms] = {}

    def _t(self, c: Candidate) -> StepTerms:
        t = self._terms.get(id(c))
        if t is None:
            t = self._terms[id(c)] = terms(c)
        return t

    def predict(self, c: Candidate) -> float:
        return self.fit_.predict(self._t(c))

    def refit(self, observed: list[tuple[Candidate, float]]) -> EfficiencyModel:
        model = EfficiencyModel(fit_efficiency([(self._t(c), m) for c, m in observed]))
        model._terms = self._terms
        return model

    def to_dict(self) -> dict:
        return self.fit_.to_dict()


# ---------------------------------------------------------------------------------------------- trials


@dataclass
class TuneTrial:
    """One measured `tune` trial: a strategy, how its process ended, and the step time predicted for it."""

    index: int
    label: str
    strategy: dict
    grad_accum: int
    status: str  # OK | OOM | FAILED | TIMEOUT
    measured_step_s: float | None
    predicted_before_s: float  # prediction of the efficiency model fitted on the trials before this one
    predicted_uncalibrated_s: float  # the cost model on the calibrated profile, no refit
    wall_s: float
    steps: int
    run_dir: str
    reason: str = ""
    predicted_final_s: float | None = None  # prediction of the final fit (after all trials)

    def to_dict(self) -> dict:
        return asdict(self)


def trial_run_config(model: ModelSpec, strategy, workload: Workload, nproc: int, **flat) -> RunConfig:
    """The RunConfig of one tune trial on this machine (fixed seed and data: trials differ only in strategy)."""
    run = RunConfig.build(model.ref, strategy, workload, nproc=nproc, nnodes=1, seed=1234,
                          progress=False, **flat)
    return run.with_absolute_paths()  # the trial process runs in its own directory (launch.process.start_trial)


def train_command(run: RunConfig, output: Path) -> list[str]:
    """Write the trial's RunConfig to OUTPUT/train_config.yaml; `python -m scalestudy train --config` on it."""
    output.mkdir(parents=True, exist_ok=True)
    path = run.replace(output=str(output)).write_yaml(output / CONFIG_NAME)
    return [sys.executable, "-m", "scalestudy", "train", "--config", str(path)]


def measured_step(result: TrialResult) -> tuple[str, float | None, str]:
    """(status, median step time, reason) of a finished trial; an OK run without a measured step failed."""
    if result.status != "OK":
        return result.status, None, result.failure_line
    step = (result.summary or {}).get("median_step_s")
    if not isinstance(step, (int, float)) or isinstance(step, bool) or not step > 0:
        return "FAILED", None, "summary.json has no median step time (more steps than warm-up steps?)"
    return "OK", float(step), result.reason


def run_trial(index: int, cand: Candidate, model: ModelSpec, workload: Workload, nproc: int, out_dir: Path, *,
              steps: int, warmup: int, timeout_s: float, predicted_before_s: float = float("nan"),
              predicted_uncalibrated_s: float = float("nan"), extra_env: dict | None = None,
              tokenizer: str | None = None, memory_limit_bytes: int = 0) -> TuneTrial:
    """Run one real `scalestudy train` trial process; never raises for a failed run (it is recorded).

    `tokenizer`: a tokenizer.json from an earlier trial, so later trials skip training it (same data either way).
    """
    label = cand.strategy.label
    run_dir = (out_dir / "trials" / f"{index:03d}-{label.replace(' ', '_')}").resolve()
    shutil.rmtree(run_dir, ignore_errors=True)  # an earlier tune into the same directory
    run = trial_run_config(model, cand.strategy, workload, nproc, steps=steps,
                           warmup=warmup, tokenizer=tokenizer)
    cmd = train_command(run, run_dir)
    env = trial_environment({"OMP_NUM_THREADS": "1", **(extra_env or {})})  # one thread per rank, as calibrated
    process = start_trial(cmd, run_dir, trial_id=run_dir.name, owner_dir=out_dir, env=env, timeout_s=timeout_s,
                          memory_limit_bytes=memory_limit_bytes)
    result = process.watch()
    status, measured, reason = measured_step(result)
    return TuneTrial(index=index, label=label, strategy=cand.strategy.to_dict(), grad_accum=cand.point.grad_accum,
                     status=status, measured_step_s=measured, predicted_before_s=predicted_before_s,
                     predicted_uncalibrated_s=predicted_uncalibrated_s, wall_s=result.wall_s, steps=steps,
                     run_dir=str(run_dir), reason=reason)


# ---------------------------------------------------------------------------------------------- the search


@dataclass
class TuneSettings:
    steps: int = 8
    warmup: int = 3
    budget_s: float = 900.0
    max_trials: int = 0  # 0 = no cap besides the budget
    screen: int = 3  # strategies screened first: the best of each engine, then of further families
    margin: float = 0.0  # run a candidate only if predicted faster than the best measured by more than this
    trial_timeout_s: float = 300.0
    memory_limit_bytes: int = 0  # 0 = none; else the address-space cap (RLIMIT_AS) of each trial process

    def __post_init__(self) -> None:
        if self.steps <= self.warmup or self.warmup < 0:
            raise ScalestudyError(f"--steps ({self.steps}) must be larger than --warmup ({self.warmup}) >= 0: the "
                                  "median step time is taken over the steps after the warm-up")
        if not 0 < self.trial_timeout_s < float("inf") or self.memory_limit_bytes < 0:  # nan fails too
            raise ScalestudyError("the trial timeout (--trial-timeout-s) must be positive and the memory limit >= 0")
        if not 0 < self.budget_s < float("inf"):
            raise ScalestudyError(f"--budget-s must be a positive number of seconds, got {self.budget_s}")
        if self.max_trials < 0 or self.screen < 0:
            raise ScalestudyError(f"--max-trials and --screen must be >= 0, got {self.max_trials} and {self.screen}")
        if not 0 <= self.margin < 1:
            raise ScalestudyError(f"--margin must be a fraction in [0, 1), got {self.margin}")


@dataclass
class TuneResult:
    candidates: list[Candidate]
    trials: list[TuneTrial]
    model: EfficiencyModel
    best: TuneTrial | None
    stop_reason: str
    calibration_s: float
    trials_s: float
    total_s: float

    def to_dict(self) -> dict:
        return {"best": self.best.to_dict() if self.best else None, "stop_reason": self.stop_reason,
                "trials": [t.to_dict() for t in self.trials], "efficiency": self.model.to_dict(),
                "candidates": len(self.candidates), "calibration_s": self.calibration_s, "trials_s": self.trials_s,
                "total_s": self.total_s}


def local_candidates(model: ModelSpec, device: DeviceSpec, nproc: int, workload: Workload,
                     constraints: Constraints) -> list[Candidate]:
    """Feasible strategies on this machine (one node of `nproc` ranks) that `scalestudy train` can run."""
    from scalestudy.costmodel.estimate import estimate

    cluster = ClusterSpec(device=device, nodes=1, gpus_per_node=nproc, name=device.name)
    feasible, _ = evaluate(model, cluster, workload, constraints, estimate)
    cuda = device.kind != "cpu"
    out = []
    for c in feasible:
        run = trial_run_config(model, c.strategy, workload, nproc)
        if trainable(run, cuda=cuda) is None:
            out.append(c)
    if not out:
        raise ScalestudyError(f"no strategy for {model.name} on {nproc} rank(s) both fits and is runnable here")
    return out


def _screen_order(cands: list[Candidate], eff: EfficiencyModel, k: int) -> list[Candidate]:
    """Per engine (DeepSpeed, FSDP, DDP) the best-predicted candidate of its lowest ZeRO stage, best first, then
    the best of further families up to k.

    Engines differ most in framework overhead, which the model cannot know unmeasured, and that overhead grows
    with the ZeRO stage (more hooks and collectives per step; FACTS.md: DDP < ZeRO-0 < 1 < 2 < 3 on CPU), so each
    engine is first measured in its simplest form; the refit's engine term carries over to its other stages.
    """
    ranked = sorted(cands, key=eff.predict)
    lowest = {}
    for c in cands:
        lowest[c.strategy.engine] = min(lowest.get(c.strategy.engine, 9), c.strategy.zero)
    by_engine: dict[str, Candidate] = {}
    by_family: dict[str, Candidate] = {}
    for c in ranked:
        if c.strategy.zero == lowest[c.strategy.engine]:
            by_engine.setdefault(c.strategy.engine, c)
        by_family.setdefault(family(c), c)
    order = sorted(by_engine.values(), key=eff.predict)
    order += [c for c in sorted(by_family.values(), key=eff.predict) if c not in order]
    return order[:k]


def search_strategies(cands: list[Candidate], model: ModelSpec, workload: Workload, nproc: int, out_dir: Path,
                      settings: TuneSettings, *, calibration_s: float = 0.0, log=print
                      ) -> TuneResult:
    """Screen, then model-guided elimination (module docstring); returns every trial and the pick."""
    start = time.perf_counter()
    eff = EfficiencyModel()
    base = {id(c): eff.predict(c) for c in cands}
    trials: list[TuneTrial] = []
    observed: list[tuple[Candidate, float]] = []
    measured_ids: set[int] = set()
    screen = _screen_order(cands, eff, settings.screen)
    stop = ""

    def budget_left() -> bool:
        spent = calibration_s + (time.perf_counter() - start)
        typical = max((t.wall_s for t in trials), default=0.0)
        return spent + typical <= settings.budget_s

    while True:
        if settings.max_trials and len(trials) >= settings.max_trials:
            stop = f"reached --max-trials {settings.max_trials}"
            break
        if not budget_left():
            stop = f"budget of {settings.budget_s:.0f} s would be exceeded by another trial"
            break
        pending = [c for c in screen if id(c) not in measured_ids]
        if pending:
            nxt = pending[0]
        else:
            rest = sorted((c for c in cands if id(c) not in measured_ids), key=eff.predict)
            if not rest:
                stop = "every candidate measured"
                break
            incumbent = min((m for _, m in observed), default=math.inf)
            nxt = rest[0]
            if eff.predict(nxt) >= incumbent * (1 - settings.margin):
                stop = (f"top choice stable: the best unmeasured prediction ({nxt.strategy.label}, "
                        f"{eff.predict(nxt):.3f} s) does not beat the best measured step ({incumbent:.3f} s)")
                break
        trial = run_trial(len(trials) + 1, nxt, model, workload, nproc, out_dir, steps=settings.steps,
                          warmup=settings.warmup, timeout_s=settings.trial_timeout_s,
                          memory_limit_bytes=settings.memory_limit_bytes,
                          predicted_before_s=eff.predict(nxt), predicted_uncalibrated_s=base[id(nxt)],
                          tokenizer=shared_tokenizer(trials))
        trials.append(trial)
        measured_ids.add(id(nxt))
        if trial.status == "OK":
            observed.append((nxt, trial.measured_step_s))
            eff = eff.refit(observed)
        shown = f"{trial.measured_step_s:.3f} s" if trial.measured_step_s else trial.reason
        log(f"trial {trial.index}: {trial.label}: {trial.status} {shown} (predicted {trial.predicted_before_s:.3f} s; "
            f"{trial.wall_s:.0f} s wall)")
    for t, c in zip(trials, _trial_cands(trials, cands)):
        t.predicted_final_s = eff.predict(c)
    ok = [t for t in trials if t.status == "OK"]
    best = min(ok, key=lambda t: t.measured_step_s) if ok else None
    trials_s = time.perf_counter() - start
    return TuneResult(cands, trials, eff, best, stop or "done", calibration_s, trials_s, calibration_s + trials_s)


def shared_tokenizer(trials: list[TuneTrial]) -> str | None:
    """The tokenizer.json an earlier trial trained (all trials read the same corpus with the same settings)."""
    for t in trials:
        path = Path(t.run_dir) / "tokenizer.json"
        if path.is_file():
            return str(path.resolve())
    return None


def _trial_cands(trials: list[TuneTrial], cands: list[Candidate]) -> list[Candidate]:
    by_label = {c.strategy.label: c for c in cands}
    return [by_label[t.label] for t in trials]


# ---------------------------------------------------------------------------------------------- calibration + report


def calibrate(out_dir: Path, nproc: int, base: DeviceSpec, name: str = "local-calibrated", *, quick: bool = True
              ) -> tuple[DeviceSpec, Path, float]:
    """Run the micro-benchmarks on `nproc` ranks; save DIR/hardware_profile.yaml; return (device, path, seconds)."""
    from scalestudy.costmodel.calibrate import profile_from_microbench, save_profile
    from scalestudy.engine.microbench import launch

    t0 = time.perf_counter()
    out_dir.mkdir(parents=True, exist_ok=True)
    meas = launch(str(out_dir / "microbench.json"), nproc, quick=quick)
    device = profile_from_microbench(meas, base, name)
    path = save_profile(device, out_dir / "hardware_profile.yaml",
                        "hardware profile from `scalestudy calibrate`; use as --gpu PATH in estimate/plan")
    return device, path, time.perf_counter() - t0


def tuning_device(out_dir: Path, nproc: int, profile: str | None) -> tuple[DeviceSpec, float]:
    """(device, seconds spent): the hardware profile YAML `profile`, or a fresh calibration of this machine."""
    from scalestudy.specs.hardware import get_device

    if nproc < 1:
        raise ScalestudyError(f"--nproc must be >= 1, got {nproc}")
    if profile:
        return get_device(profile), 0.0
    device, _, seconds = calibrate(out_dir, nproc, get_device("local-cpu"))
    return device, seconds


def run_tune(model: ModelSpec, device: DeviceSpec, workload: Workload, nproc: int, out_dir: Path,
             settings: TuneSettings, constraints: Constraints, *, calibration_s: float = 0.0, log=print) -> TuneResult:
    """`scalestudy tune` after calibration: candidates, trials, the pick; writes tune.json, tune.md and the
    profiles (hardware_profile.yaml as used, tuned_profile.yaml with the refit factors) into `out_dir`."""
    from scalestudy.costmodel.calibrate import apply_efficiency, save_profile
    from scalestudy.plan.planner import default_precision
    from scalestudy.plan.tune_report import save_results

    if nproc < 1:
        raise ScalestudyError(f"--nproc must be >= 1, got {nproc}")
    start = time.perf_counter()
    kill_marked(out_dir)  # leftovers of a tune that was killed (trial processes carry the directory as a marker)
    constraints = replace(constraints, precision=default_precision(device))
    cands = local_candidates(model, device, nproc, workload, constraints)
    log(f"{len(cands)} runnable strategies fit; trials of {settings.steps} steps ({settings.warmup} warm-up "
        "excluded)")
    result = search_strategies(cands, model, workload, nproc, out_dir, settings, calibration_s=calibration_s,
                               log=log)
    meta = {"model": model.name, "nproc": nproc, "workload": workload.__dict__, "device": device.name,
            "elapsed_s": calibration_s + time.perf_counter() - start}
    save_results(out_dir, result, asdict(settings), meta)
    save_profile(device, out_dir / "hardware_profile.yaml", "hardware profile used by `scalestudy tune`")
    save_profile(apply_efficiency(device, result.model.fit_), out_dir / "tuned_profile.yaml",
                 "hardware profile with the refit compute/communication factors (overheads: tune.json)")
    return result
