"""Measured strategy search on the machine at hand (`scalestudy tune`).

1. Calibrate: micro-benchmarks (matmul rate vs size and dtype, copy bandwidth, Adam rate, gloo collectives vs
   message size; `scalestudy.engine.microbench` under torchrun) -> a hardware profile YAML
   (`scalestudy.costmodel.calibrate.profile_from_microbench`), usable as `--gpu PATH.yaml` by estimate and plan.
2. Rank every strategy `scalestudy train` can run here with the cost model on that profile.
3. Trials: short real `scalestudy train` runs (the first `warmup` steps excluded from the median step time).
   After every trial the efficiency terms are refit (`EfficiencyModel`) and every candidate is re-predicted.
   Order of trials: first a screen of each engine (DeepSpeed, FSDP, DDP) in its lowest ZeRO stage, the
   best-predicted such strategy (framework overheads differ most between engines and grow with the stage; the
   model cannot know them unmeasured; `screen` caps it; after the first two, an engine the trials so far rule out
   -- predicted beyond one combined sd of noise and prediction error above the best measured step -- is not
   screened, `SCREEN_RULE_SD`), then up to two identification trials (the leading
   family at another micro-batch, the family leaning most on unverified collectives; `identify`), then
   model-guided elimination: run the best-predicted unmeasured strategy while its prediction beats the best
   measured step time by more than `margin`; stop when none does (the top choice is stable), or at the budget.
   Then the close contenders are re-measured before a pick is declared (`plan/noise.py`): measured strategies
   within the noise of the best (noise estimated from the spread of steps within trials and of repeated
   trials) and unmeasured ones predicted within noise + prediction error, at most `contenders`, run interleaved
   in rounds (A B C, then C B A) and compared within each round (the load of a round cancels); after each round
   the clearly worse, or else the worse half, are dropped (successive halving). The pick carries its step time
   with a 95% interval, its gap to the runner-up and the contenders it could not be told from (the pick then
   follows PICK_RULE, said so). Every trial after the screen must fit in `budget_fraction` of the estimated trial
   time of the full grid (screen counted, calibration not), but the budget always allows one identification
   trial and one interleaved round of two (`budget_limit`); a trial counts its steps plus its start-up up to
   STARTUP_CAP x the typical one (a machine's slow start is reported, not charged: it must not starve the trials
   that decide the pick); the model-guided trials keep the cost of that round in reserve.
   Failed / OOM / timed-out trials are recorded and the search goes on.

Predictions (`EfficiencyModel`): the cost model's step on the calibrated profile times a factor the trials set
(`calibrate.fit_residual`): log(measured / modelled) = level + engine + ZeRO family + per doubling of the
micro-steps, each term a Gaussian prior (RESIDUAL_TAU) updated by the per-strategy medians (noise
REFIT_TRIAL_NOISE): one trial of an engine moves its term only part of the way (shrinkage toward the model), an
engine or family never measured keeps the model's own difference, and the change per doubling carries beyond the
measured accumulations at half (RESIDUAL_BEYOND). Replayed on recorded grids under this machine's noise this
predicts the strategies tune did not run better than the efficiency refit below, which moves the model's parts to
match few noisy trials and extrapolates that several-fold (benchmarks/RESULTS.md, 2026-12-02); the refit still
writes tuned_profile.yaml and the efficiency line. Which strategy the identification trial measures at another
micro-batch follows the pooled evidence (`_Search.pooled_estimates`: each measured strategy's load-adjusted step
and its leave-one-out prediction, inverse-variance weighted), not one screen sample.

Efficiency refit (from the per-strategy medians, least squares on relative error; `fit_efficiency`):
step = a * compute + (b + b_engine + b_family) * data-parallel communication + c * optimizer/offload
+ f * framework + h * engine hooks + o_step (+ engine, family parts) + micro-steps * (o + o_engine + o_family).
`framework` / `engine hooks` are the measured CPU profile's framework time and its engines' part (0 with the
static profile). The factors are pulled toward one overall scale (median measured / modelled), the overheads
toward 0 (the family terms harder than the engine terms); an engine's or family's excess goes first to its
communication factor (priced per second it moves, overheads 3x dearer), which extrapolates with the family's
pattern of collectives (ZeRO-2 / ZeRO-3 / FSDP every micro-step, the others once per step): what the few trials
cannot identify stays at the uncalibrated model, scaled. Communication is costed at the calibration's measured
rate of each collective (`comm_ratio`). With trials at two micro-batch sizes the compute factor gets a slope per
doubling. After the screen two identification trials (`_identify_accumulation`, `_identify`) measure the leading
family at another micro-batch and the family whose prediction leans most on unverified collectives/hooks, each
only when the model cannot settle it and the budget allows. On one-thread gloo ranks nothing overlaps, so
communication counts in full (`dp_comm_total_s`). Predictions of strategies not run carry the leave-one-out error
of the predictions (`EfficiencyModel.prediction_uncertainty`); tune.json lists every candidate with its final
prediction.
"""

from __future__ import annotations

import math
import shutil
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from scalestudy.costmodel.calibrate import (RESIDUAL_BEYOND, EfficiencyFit, ResidualFit, StepTerms, fit_efficiency,
                                            fit_residual)
from scalestudy.costmodel.cpu_collectives import fsdp_calls_per_step, measured as rates_measured
from scalestudy.errors import ScalestudyError
from scalestudy.launch.process import TrialResult, has_gpu, kill_marked, start_trial, trial_environment
from scalestudy.launch.commands import CONFIG_NAME, drop_checkpoints
from scalestudy.plan.emit import trainable
from scalestudy.plan.noise import (MAX_ROUNDS, REFIT_TRIAL_NOISE, Z, Comparison, Measurement, compare, contenders,
                                    interleaved, step_spread, survivors)
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


def collective_mix(s, ga: int) -> dict[str, float]:
    """Which collectives a strategy's data-parallel communication is made of, as shares of the modelled time (the
    pattern of the CPU cost model's gloo paths, costmodel/cpu_collectives.gloo_dp_comm, where tune reads measured
    rates; equal bytes per call, an all-reduce moving twice): DDP and ZeRO-0 all-reduce; DDP's ZeRO-1 all-reduces
    then re-broadcasts the shards; DeepSpeed 0.19's ZeRO-1/2 all-reduce the whole gradient bucket (ZeRO-2 after
    every micro-batch) and all-gather the weights once; its ZeRO-3 gathers the model once and reduce-scatters the
    gradients per micro-batch; FSDP gathers per micro-batch for the forward (and the backward, zero 3) and
    reduce-scatters in every micro-batch's backward (cpu_collectives.fsdp_calls_per_step). `s`: the Strategy,
    `ga`: its accumulation."""
    if s.engine == "fsdp":
        calls = fsdp_calls_per_step(s.zero, 1, ga)
        return {op: n / sum(calls.values()) for op, n in calls.items()}
    if s.zero == 3:
        return {"all_gather": 0.5, "reduce_scatter": 0.5}
    if s.zero == 0:
        return {"all_reduce": 1.0}
    if s.engine == "ddp":
        return {"all_reduce": 2 / 3, "all_gather": 1 / 3}
    reduces = 2 * (ga if s.zero == 2 else 1)
    return {"all_reduce": reduces / (reduces + 1), "all_gather": 1 / (reduces + 1)}


def comm_ratio(c: Candidate) -> float:
    """Measured / modelled time of the strategy's collectives (DeviceSpec.collective_time_ratio, by
    `collective_mix`); 1 where the calibration did not measure them."""
    measured = c.estimate.cluster.device.collective_time_ratio
    return sum(w * measured.get(op, 1.0) for op, w in collective_mix(c.strategy, c.point.grad_accum).items())


def terms(c: Candidate) -> StepTerms:
    """The estimate's step time split into the parts the refit scales. The engine's own framework time (the CPU
    profile's engine_overhead_s, what estimate adds beyond its per-step and per-micro-step framework time) is kept
    apart from the rest of framework_s: it was measured on a small model, per micro-step. On CPU devices estimate
    costs each collective at its measured rate (costmodel/cpu_collectives.py) and takes that excess out of the
    profile's multi-rank overhead; comm_s is reported at the all_reduce fit's rate, comm_ratio carries the rest."""
    e = c.estimate
    dev = e.cluster.device
    plain = dev.step_overhead_s + c.point.grad_accum * dev.microstep_overhead_s
    engine_s = min(e.framework_s, max(0.0, e.framework_s - plain))
    ratio = comm_ratio(c) if rates_measured(dev) else 1.0
    return StepTerms(compute_s=e.compute_s + e.bubble_s + e.tp_comm_s + e.pp_comm_s,
                     comm_s=e.dp_comm_total_s / ratio, optimizer_s=e.optimizer_s + e.offload_s,
                     micro_steps=c.point.grad_accum, family=family(c), engine=c.strategy.engine,
                     framework_s=e.framework_s, engine_s=engine_s, comm_ratio=ratio,
                     micro_batch=c.strategy.micro_batch)


class EfficiencyModel:
    """Tune's predictions: the cost model's step on the calibrated profile (`StepTerms.modelled_s`) times the factor
    the measured trials set (`ResidualFit`: one level, an engine and a ZeRO-family term shrunk toward the model,
    a change per doubling of the micro-steps), and the efficiency refit (`EfficiencyFit`, fitted on demand) that
    writes tuned_profile.yaml and the report's efficiency terms. Why a factor on the model and not the refit's
    prediction: the refit moves the parts of the model (communication factors that grow with a family's
    collectives, overheads per micro-step) to match few trials and extrapolates that several-fold to strategies it
    did not measure; replayed on the recorded grids it predicted those worse than the model scaled by the trials
    (benchmarks/RESULTS.md, 2026-12-02). Caches each candidate's step terms."""

    def __init__(self, residual: ResidualFit | None = None, observed: list[tuple[StepTerms, float]] | None = None
                 ) -> None:
        self.residual = residual or ResidualFit()
        self._observed = observed or []
        self._fit: EfficiencyFit | None = None
        self._terms: dict[int, StepTerms] = {}

    @property
    def fit_(self) -> EfficiencyFit:
        """The efficiency refit of the same trials (tuned_profile.yaml, the efficiency line)."""
        if self._fit is None:
            self._fit = fit_efficiency(self._observed)
        return self._fit

    def _t(self, c: Candidate) -> StepTerms:
        t = self._terms.get(id(c))
        if t is None:
            t = self._terms[id(c)] = terms(c)
        return t

    def predict(self, c: Candidate) -> float:
        t = self._t(c)
        return t.modelled_s * math.exp(self.residual.log_factor(t))

    def factor_sd(self, c: Candidate) -> float:
        """sd (log) of the factor on the model for this strategy: the posterior's, plus the prior of an engine or
        family no trial measured (`ResidualFit.log_sd`)."""
        return self.residual.log_sd(self._t(c))

    def refit(self, observed: list[tuple[Candidate, float]]) -> EfficiencyModel:
        obs = [(self._t(c), m) for c, m in observed]
        residual = fit_residual([(t, t.modelled_s, m, 1) for t, m in obs], REFIT_TRIAL_NOISE,
                                beyond=RESIDUAL_BEYOND)
        model = EfficiencyModel(residual, obs)
        model._terms = self._terms
        return model

    def prediction_uncertainty(self, observed: list[tuple[Candidate, float]]) -> float | None:
        """Relative error of predicting a strategy tune did not run: the RMS of leave-one-out log errors (each
        measured strategy predicted by a refit without it); None with fewer than two measured strategies."""
        if len(observed) < 2:
            return None
        errs = []
        for i, (c, m) in enumerate(observed):
            errs.append(math.log(self.refit(observed[:i] + observed[i + 1:]).predict(c) / m))
        return math.sqrt(sum(e * e for e in errs) / len(errs))

    def to_dict(self) -> dict:
        return {**self.fit_.to_dict(), "prediction_factor": self.residual.to_dict()}


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
    step_times_s: list = field(default_factory=list)  # the measured steps (warm-up excluded), s each
    startup_s: float | None = None  # wall time besides all steps (process start, imports, set-up, exit)
    phase: str = ""  # screen | identify | explore | confirm
    round: int = 0  # 0 = before re-measurement; r = the r-th interleaved re-measurement round
    charged_s: float | None = None  # what the trial counts against the budget: its steps + its start-up up to
    #                                 STARTUP_CAP x the typical start-up (`_Search.charge`), s

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
    # CPU ranks: one thread each, as the CPU profile was calibrated; GPU ranks split the host's cores (worker_env)
    env = trial_environment({**({} if has_gpu() else {"OMP_NUM_THREADS": "1"}), **(extra_env or {})})
    process = start_trial(cmd, run_dir, trial_id=run_dir.name, owner_dir=out_dir, env=env, timeout_s=timeout_s,
                          memory_limit_bytes=memory_limit_bytes)
    result = process.watch()
    drop_checkpoints(run_dir)  # a trial is a measurement (15 GB of final checkpoints over a 32-trial grid)
    status, measured, reason = measured_step(result)
    steps_s = [float(r["step_s"]) for r in result.metrics if isinstance(r.get("step_s"), (int, float))]
    return TuneTrial(index=index, label=label, strategy=cand.strategy.to_dict(), grad_accum=cand.point.grad_accum,
                     status=status, measured_step_s=measured, predicted_before_s=predicted_before_s,
                     predicted_uncalibrated_s=predicted_uncalibrated_s, wall_s=result.wall_s, steps=steps,
                     run_dir=str(run_dir), reason=reason, step_times_s=steps_s[warmup:],
                     startup_s=result.wall_s - sum(steps_s) if steps_s else None)


# ---------------------------------------------------------------------------------------------- the search


# No trial process (Python + torch imports, a process group, `steps` steps) ends sooner than this: a --budget-s
# below the screen's count of it is refused before any calibration starts.
MIN_TRIAL_S = 1.0


MAX_TRIAL_STEPS = 10_000  # median step times settle in tens of steps; beyond this a trial is a training run


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
    budget_fraction: float = 0.15  # trials after the screen stop at this fraction of the estimated full grid's
    #                                trial time (calibration and screen counted); 0 = no such cap
    identify: int = 1  # identification trials after the screen, within the budget (`_identify_accumulation`: the
    #                    best family at another micro-batch; `_identify`: the family leaning most on unverified
    #                    collectives/hooks); 0 = none
    contenders: int = 2  # most strategies in one interleaved re-measurement round (1 = never re-measure; more
    #                      than 2 are halved round by round, but under a tight budget the head-to-head of the top two
    #                      decides best: tests/unit/test_plan_tune_noise.py)

    def __post_init__(self) -> None:
        if self.steps > MAX_TRIAL_STEPS:  # a trial is a short measurement; 1e12 steps would only end at its timeout
            raise ScalestudyError(f"--steps {self.steps} is not a short trial: tune measures at most "
                                  f"{MAX_TRIAL_STEPS} steps per trial (use `scalestudy train` for long runs)")
        if self.steps <= self.warmup or self.warmup < 0:
            raise ScalestudyError(f"--steps ({self.steps}) must be larger than --warmup ({self.warmup}) >= 0: the "
                                  "median step time is taken over the steps after the warm-up")
        if not 0 < self.trial_timeout_s < float("inf") or self.memory_limit_bytes < 0:  # nan fails too
            raise ScalestudyError("the trial timeout (--trial-timeout-s) must be positive and the memory limit >= 0")
        if not 0 < self.budget_s < float("inf"):
            raise ScalestudyError(f"--budget-s must be a positive number of seconds, got {self.budget_s}")
        screened = max(1, min(self.screen, self.max_trials) if self.max_trials else self.screen)
        if self.budget_s < screened * MIN_TRIAL_S:
            raise ScalestudyError(f"--budget-s {self.budget_s:g} s cannot run even the screen: its {screened} trial "
                                  f"process(es) take at least {MIN_TRIAL_S:g} s each (start-up alone took 8-40 s "
                                  "on the 2-core machine tune was measured on)")
        if self.max_trials < 0 or self.screen < 0:
            raise ScalestudyError(f"--max-trials and --screen must be >= 0, got {self.max_trials} and {self.screen}")
        if not 0 <= self.margin < 1:
            raise ScalestudyError(f"--margin must be a fraction in [0, 1), got {self.margin}")
        if not 0 <= self.budget_fraction <= 1:
            raise ScalestudyError(f"--budget-fraction must be in [0, 1] (0 = no cap), got {self.budget_fraction}")
        if self.identify < 0:
            raise ScalestudyError(f"identify must be >= 0, got {self.identify}")
        if self.contenders < 1:
            raise ScalestudyError(f"--contenders must be >= 1 (1 = no re-measurement), got {self.contenders}")


@dataclass
class TuneResult:
    candidates: list[Candidate]
    trials: list[TuneTrial]
    model: EfficiencyModel
    best: TuneTrial | None  # a trial of the pick (the one nearest its median)
    stop_reason: str
    calibration_s: float
    trials_s: float
    total_s: float
    pick: dict = field(default_factory=dict)  # the pick's step time with its uncertainty (`pick_summary`)
    candidate_rows: list[dict] = field(default_factory=list)  # every candidate: final prediction, measured or not
    grid_estimate_s: float = 0.0  # estimated trial time of measuring every candidate once
    budget: dict = field(default_factory=dict)  # what the trials cost against the budget (`budget_summary`)

    def to_dict(self) -> dict:
        return {"best": self.best.to_dict() if self.best else None, "pick": self.pick,
                "stop_reason": self.stop_reason, "trials": [t.to_dict() for t in self.trials],
                "efficiency": self.model.to_dict(), "candidates": self.candidate_rows,
                "calibration_s": self.calibration_s, "trials_s": self.trials_s, "total_s": self.total_s,
                "grid_estimate_s": self.grid_estimate_s, "budget": self.budget}


def local_candidates(model: ModelSpec, device: DeviceSpec, nproc: int, workload: Workload,
                     constraints: Constraints) -> list[Candidate]:
    """Feasible strategies on this machine (one node of `nproc` ranks) that `scalestudy train` can run."""
    from scalestudy.costmodel.estimate import estimate

    cluster = ClusterSpec(device=device, nodes=1, gpus_per_node=nproc, name=device.name)
    feasible, _ = evaluate(model, cluster, workload, constraints, estimate)
    out = []
    for c in feasible:
        run = trial_run_config(model, c.strategy, workload, nproc)
        if trainable(run) is None:
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


# A trial's start-up beyond this multiple of the typical one is not charged to the budget: on this 2-core machine
# start-ups run 8-13 s (gpt2-tiny) and 9-30 s (t5-micro, DeepSpeed ZeRO-2/3 the slowest), but one DeepSpeed start
# took 41 s and ate the budget of the identification trial (RESULTS.md 19:55 row).
STARTUP_CAP = 2.0
# Trials after the screen the budget always allows: one identification trial + one interleaved round of two.
FLOOR_TRIALS = 3


class _Search:
    """The state of one search: trials so far, the refit model, the time spent and the budget."""

    def __init__(self, cands: list[Candidate], run_one, settings: TuneSettings, calibration_s: float, log) -> None:
        self.cands, self.settings, self.calibration_s, self.log = cands, settings, calibration_s, log
        self.run_one = run_one  # (index, candidate, predicted_before_s, predicted_uncalibrated_s) -> TuneTrial
        self.eff = EfficiencyModel()
        self.base = {c.strategy.label: self.eff.predict(c) for c in cands}
        self.by_label = {c.strategy.label: c for c in cands}
        self.trials: list[TuneTrial] = []
        self.round = 0

    # -- what was measured
    def ok(self) -> list[TuneTrial]:
        return [t for t in self.trials if t.status == "OK"]

    def tried(self) -> set[str]:
        return {t.label for t in self.trials}

    def medians(self) -> dict[str, float]:
        """Per measured strategy, the median of its trials' median step times."""
        runs: dict[str, list[float]] = {}
        for t in self.ok():
            runs.setdefault(t.label, []).append(t.measured_step_s)
        return {k: statistics.median(v) for k, v in runs.items()}

    def comparison(self) -> Comparison | None:
        ms = [Measurement(t.label, t.round, t.measured_step_s, step_spread(t.step_times_s)) for t in self.ok()]
        return compare(ms) if ms else None

    def observed(self) -> list[tuple[Candidate, float]]:
        return [(self.by_label[k], m) for k, m in self.medians().items()]

    def pooled_estimates(self) -> dict[str, float]:
        """Per measured strategy, all the evidence on its step time: its load-adjusted measurement (`compare`) and
        the refit's prediction of it from every other strategy's trials (leave-one-out), averaged in logs with
        inverse-variance weights (noise^2 / its trials; the refit's leave-one-out error^2). One noisy sample then
        no longer outranks the model and the other trials when two strategies measure within the noise (the
        22:28 live gpt2-tiny miss: a 1% screen sample sent the identification trial to the wrong engine); a model
        that the trials show to be far off gets little weight."""
        comp = self.comparison()
        if comp is None:
            return {}
        observed = self.observed()
        unc = self.eff.prediction_uncertainty(observed)
        if unc is None:
            return dict(comp.estimate_s)
        out = {}
        for i, (c, _) in enumerate(observed):
            key = c.strategy.label
            loo = self.eff.refit(observed[:i] + observed[i + 1:]).predict(c)
            var_m = comp.noise ** 2 / comp.trials[key]
            w = unc ** 2 / (unc ** 2 + var_m)  # weight of the measurement
            out[key] = math.exp(w * math.log(comp.estimate_s[key]) + (1 - w) * math.log(loo))
        return out

    # -- time
    def spent(self) -> float:
        """Wall time so far, calibration included (what --budget-s caps)."""
        return self.calibration_s + sum(t.wall_s for t in self.trials)

    def charged(self, phase: str | None = None) -> float:
        """What the trials so far (of `phase`, or all) count against --budget-fraction (`charge`, at the typical
        start-up known now; calibration not counted: the cap compares trial time with the grid's trial time)."""
        return sum(self.charge(t) for t in self.trials if phase in (None, t.phase))

    def startup_s(self) -> float:
        """Typical time of a trial besides its steps (process start, imports, engine set-up, exit): the median
        over the trials so far, so one slow start does not move it."""
        parts = [t.startup_s for t in self.trials if t.startup_s is not None]
        parts = parts or [t.wall_s - t.steps * t.measured_step_s for t in self.ok()]
        return max(0.0, statistics.median(parts)) if parts else 0.0

    def charge(self, t: TuneTrial) -> float:
        """A trial's cost against the budget: its steps in full, its start-up up to STARTUP_CAP x the typical one
        (the rest is the machine's hiccup, not the strategy's cost: reported, not charged); a trial without
        measured steps (failed, timed out) in full."""
        if t.startup_s is None:
            return t.wall_s
        return max(0.0, t.wall_s - t.startup_s) + min(t.startup_s, STARTUP_CAP * self.startup_s())

    def trial_cost(self, c: Candidate) -> float:
        step = self.medians().get(c.strategy.label) or self.eff.predict(c)
        return self.startup_s() + self.settings.steps * step

    def grid_estimate(self) -> float:
        """Estimated trial time of measuring every candidate once (what an exhaustive grid would take): a typical
        start-up each plus its steps, measured where measured, else the lower of the refit's prediction and the
        uncalibrated prediction times the measured / uncalibrated ratio of its family (of all trials where its
        family has none). The lower: a refit on few trials can extrapolate one family's excess several-fold to
        strategies never run, and the budget must stay a fraction of the real grid."""
        medians = self.medians()
        ratios: dict[str, list[float]] = {}
        for k, m in medians.items():
            ratios.setdefault(family(self.by_label[k]), []).append(m / self.base[k])
        overall = statistics.median([r for v in ratios.values() for r in v]) if ratios else 1.0
        steps = 0.0
        for c in self.cands:
            k = c.strategy.label
            if k in medians:
                steps += medians[k]
                continue
            fam = ratios.get(family(c))
            steps += min(self.eff.predict(c), (statistics.median(fam) if fam else overall) * self.base[k])
        return len(self.cands) * self.startup_s() + self.settings.steps * steps

    def budget_limit(self) -> float:
        """The trial time --budget-fraction allows (charged, `charge`): that fraction of the grid estimate, but
        never less than the screen plus FLOOR_TRIALS trials at the screen's dearest typical cost (one identification
        trial and one interleaved round of the top two: less cannot make a pick that survives this machine's
        run-to-run spread; it binds on grids of few, cheap strategies), identification trials counted at what they
        cost. Infinite without a fraction."""
        s = self.settings
        if not s.budget_fraction:
            return math.inf
        screened = [self.by_label[t.label] for t in self.trials if t.phase == "screen"]
        typical = max(map(self.trial_cost, screened), default=0.0)
        identified = sum(t.phase == "identify" for t in self.trials)
        floor = (self.charged("screen") + self.charged("identify")
                 + max(2, FLOOR_TRIALS - identified) * typical)  # a dear identification never starves the race
        return max(s.budget_fraction * self.grid_estimate(), floor)

    def affordable(self, cost: float, trials: int = 1, reserve: float = 0.0) -> bool:
        """Another `trials` trials of `cost` seconds in all stay within --max-trials, --budget-s (wall) and
        --budget-fraction (charged), leaving `reserve` seconds for a later re-measurement round."""
        s = self.settings
        if s.max_trials and len(self.trials) + trials > s.max_trials:
            return False
        return (self.spent() + cost + reserve <= s.budget_s
                and self.charged() + cost + reserve <= self.budget_limit())

    def race_reserve(self) -> float:
        """Trial time to keep for one interleaved round of the top two contenders, when there are two within
        the noise (`contenders`); 0 otherwise or with --contenders 1."""
        comp = self.comparison()
        if comp is None or self.settings.contenders < 2:
            return 0.0
        keys = contenders(comp, self.unmeasured_predictions(), 2)
        return sum(self.trial_cost(self.by_label[k]) for k in keys) if len(keys) >= 2 else 0.0

    def unmeasured_predictions(self) -> dict[str, tuple[float, float]]:
        """Strategy not tried yet -> (predicted step s, relative prediction uncertainty of the refit)."""
        unc = self.eff.prediction_uncertainty(self.observed())
        unc = unc if unc is not None else DEFAULT_PREDICTION_ERROR
        return {c.strategy.label: (self.eff.predict(c), unc) for c in self.cands
                if c.strategy.label not in self.tried()}

    def ruled_out_by(self, c: Candidate) -> float | None:
        """How far (%) the refit predicts `c` above the best measured step, when that is beyond SCREEN_RULE_SD
        combined sds (noise; the larger of the leave-one-out error and the factor's sd for `c`, which holds the
        prior of an engine or family no trial measured); None while `c` cannot be ruled out."""
        comp = self.comparison()
        if comp is None:
            return None
        unc = self.eff.prediction_uncertainty(self.observed())
        sd = math.hypot(comp.noise, max(unc if unc is not None else DEFAULT_PREDICTION_ERROR, self.eff.factor_sd(c)))
        gap = math.log(self.eff.predict(c) / min(comp.estimate_s.values()))
        return 100 * math.expm1(gap) if gap > SCREEN_RULE_SD * sd else None

    # -- trials
    def run(self, c: Candidate, phase: str) -> TuneTrial:
        trial = self.run_one(len(self.trials) + 1, c, self.eff.predict(c), self.base[c.strategy.label])
        trial.phase, trial.round = phase, self.round
        self.trials.append(trial)
        for t in self.trials:  # the typical start-up moved: a slow first start is seen as such only now
            t.charged_s = self.charge(t)
        if trial.status == "OK":
            self.eff = self.eff.refit(self.observed())
        shown = f"{trial.measured_step_s:.3f} s" if trial.measured_step_s else trial.reason
        slow_start = (f"; start-up {trial.startup_s:.0f} s, {trial.wall_s - trial.charged_s:.0f} s of it not "
                      "charged" if trial.wall_s - trial.charged_s > 0.5 else "")
        self.log(f"trial {trial.index} ({phase}{f' round {self.round}' if self.round else ''}): {trial.label}: "
                 f"{trial.status} {shown} (predicted {trial.predicted_before_s:.3f} s; {trial.wall_s:.0f} s wall"
                 f"{slow_start})")
        return trial


# A screen trial after the first two runs only when the trials so far cannot rule its strategy out: predicted
# within SCREEN_RULE_SD combined sds (measurement noise; the larger of the refit's leave-one-out error and the
# factor's sd for an engine no trial measured) of the best measured step. 0: every screen trial runs.
SCREEN_RULE_SD = 1.0


def _screen(search: _Search) -> str:
    s = search.settings
    for i, c in enumerate(_screen_order(search.cands, search.eff, s.screen)):
        typical = max((t.wall_s for t in search.trials), default=0.0)
        if s.max_trials and len(search.trials) >= s.max_trials:
            return f"reached --max-trials {s.max_trials}"
        if search.spent() + typical > s.budget_s:
            return f"budget of {s.budget_s:.0f} s would be exceeded by another trial"
        gap = search.ruled_out_by(c) if i >= 2 and SCREEN_RULE_SD else None
        if gap is not None:
            search.log(f"screen: {c.strategy.label} not run: predicted {gap:+.0f}% over the best measured step, "
                       f"beyond {SCREEN_RULE_SD:g} combined sd of noise and prediction error")
            continue
        search.run(c, "screen")
    return ""


def unverified_share(t: StepTerms) -> float:
    """The share of a strategy's modelled step that rests on terms a small-model profile and <= 16 MB
    micro-benchmarks extrapolate most: its data-parallel collectives and its engine's hooks."""
    return (t.comm_measured_s + t.engine_s) / t.modelled_s if t.modelled_s > 0 else 0.0


# The identification trial is worth its budget when a family leans on at least this much more unverified time
# (share of its modelled step) than its engine's measured families: off by a factor ~2 (the calibration's gloo
# reduce_scatter took 4x the all_reduce fit, DeepSpeed's ZeRO-2/3 per-micro-step work 3-5x the model), that share
# moves the prediction by about the 15% the predictions are asked to hold.
IDENTIFY_MIN_SHARE = 0.10


def _identify_accumulation(search: _Search) -> None:
    """One trial of the best-measured strategy's family at its best-predicted other micro-batch, when no family
    has been measured at two accumulations yet and the model cannot rule that micro-batch out (predicted within
    one combined sd, measurement noise and the refit's leave-one-out error, of the best measured step; the
    contenders' rule, plan/noise.py). Which micro-batch a family runs fastest at is where the model knows least:
    per-micro-step framework time against GEMM efficiency and memory traffic that outgrows the caches (gpt2-tiny
    on this machine: micro-batch 4 14% faster than 8, the model says 5% slower); and only trials at two
    accumulations tell per-step from per-micro-step time."""
    ok = search.ok()
    comp = search.comparison()
    if not ok or comp is None:
        return
    seen: dict[str, set] = {}
    for t in ok:
        seen.setdefault(family(search.by_label[t.label]), set()).add(t.grad_accum)
    if any(len(v) > 1 for v in seen.values()):
        return
    pooled = search.pooled_estimates()  # not the best single sample: measurement and model pooled
    best = min(pooled, key=pooled.get)
    fam, ga = family(search.by_label[best]), search.by_label[best].point.grad_accum
    others = sorted((c for c in search.cands if family(c) == fam and c.point.grad_accum != ga
                     and c.strategy.label not in search.tried()), key=search.eff.predict)
    if not others:
        return
    unc = search.eff.prediction_uncertainty(search.observed())
    sd = math.hypot(comp.noise, unc if unc is not None else DEFAULT_PREDICTION_ERROR)
    c = others[0]
    if (math.log(search.eff.predict(c) / pooled[best]) <= sd
            and search.affordable(search.trial_cost(c), reserve=search.race_reserve())):
        search.run(c, "identify")


def _identify(search: _Search) -> None:
    """One trial of the unmeasured family whose prediction leans most on unverified terms beyond what its engine's
    measured families cover (`unverified_share`, at the family's best-predicted micro-batch), when that is at least
    IDENTIFY_MIN_SHARE and the trial fits the budget. Why: a ZeRO-2/3 family's collectives and hooks run every
    micro-step, so an error there grows with the accumulation, and only a trial of such a family lets the refit's
    communication factors of that engine see it (`fit_efficiency`); the screen measures each engine's simplest
    form only."""
    s = search.settings
    if s.identify < 1 or not search.ok():
        return
    measured = [search.by_label[k] for k in {t.label for t in search.ok()}]
    covered: dict[str, float] = {}
    for c in measured:
        covered[c.strategy.engine] = max(covered.get(c.strategy.engine, 0.0), unverified_share(search.eff._t(c)))
    tried = search.tried()
    fams_tried = {family(search.by_label[k]) for k in tried}
    best: dict[str, Candidate] = {}
    for c in sorted(search.cands, key=search.eff.predict):
        if family(c) not in fams_tried and c.strategy.engine in covered:
            best.setdefault(family(c), c)
    gain = {f: unverified_share(search.eff._t(c)) - covered[c.strategy.engine] for f, c in best.items()}
    for f in sorted(gain, key=gain.get, reverse=True)[:s.identify]:
        c = best[f]
        if gain[f] < IDENTIFY_MIN_SHARE or not search.affordable(search.trial_cost(c),
                                                                 reserve=search.race_reserve()):
            return
        search.run(c, "identify")


def _explore(search: _Search) -> str:
    """Model-guided: run the best-predicted unmeasured strategy while it beats the best measured step."""
    s = search.settings
    while True:
        rest = sorted((c for c in search.cands if c.strategy.label not in search.tried()), key=search.eff.predict)
        if not rest:
            return "every candidate measured"
        incumbent = min(search.medians().values(), default=math.inf)
        nxt = rest[0]
        if search.eff.predict(nxt) >= incumbent * (1 - s.margin):
            return (f"top choice stable: the best unmeasured prediction ({nxt.strategy.label}, "
                    f"{search.eff.predict(nxt):.3f} s) does not beat the best measured step ({incumbent:.3f} s)")
        reserve = search.race_reserve()
        if not search.affordable(search.trial_cost(nxt), reserve=reserve):
            return ("budget reached while the model still predicted faster strategies"
                    + (f" ({reserve:.0f} s kept to re-measure the close contenders)" if reserve else ""))
        search.run(nxt, "explore")


def _confirm(search: _Search) -> str:
    """Re-measure the close contenders in interleaved rounds, halving them after each (module docstring)."""
    s = search.settings
    comp = search.comparison()
    if comp is None or s.contenders < 2:
        return ""
    keys = contenders(comp, search.unmeasured_predictions(), s.contenders)
    if len(keys) < 2:
        return f"no contender within the noise ({100 * comp.noise:.1f}% per trial) of {keys[0]}"
    search.log(f"close contenders (noise {100 * comp.noise:.1f}% per trial): {', '.join(keys)}")
    while True:
        while len(keys) >= 2 and not search.affordable(sum(search.trial_cost(search.by_label[k]) for k in keys),
                                                       len(keys)):
            keys = keys[:-1]
        if len(keys) < 2:
            return (f"re-measured in {search.round} interleaved round(s); budget reached" if search.round else
                    "no budget left to re-measure the close contenders")
        search.round += 1
        for key in interleaved(keys, search.round):
            search.run(search.by_label[key], "confirm")
        comp = search.comparison()
        keys = survivors(comp, [k for k in keys if k in comp.estimate_s]) if comp else []
        if len(keys) < 2:
            left = f"{keys[0]} left" if keys else "no contender left (re-measurements failed)"
            return f"re-measured in {search.round} interleaved round(s); {left}"
        if search.round >= MAX_ROUNDS:
            return f"re-measured in {search.round} interleaved rounds (the most); still within the noise: {keys}"


DEFAULT_PREDICTION_ERROR = 0.25  # relative, before two strategies are measured (cannot be estimated yet)


PICK_RULE = ("the lowest load-adjusted estimate (per-strategy effect of log step = strategy + round, "
             "plan/noise.py compare); strategies it cannot tell from the pick (gap <= 2 s.e.) are listed as "
             "inseparable")


def pick_summary(comp: Comparison, medians: dict[str, float], rounds: int) -> dict:
    """The pick (best load-adjusted estimate, PICK_RULE) with its step time, 95% interval, the gap to the runner-up
    and the strategies it cannot be told from."""
    ranked = comp.ranked()
    pick = ranked[0]
    n = comp.trials[pick]
    half = 1.96 * comp.noise / math.sqrt(n)
    step = medians[pick]
    out = {"label": pick, "step_s": step, "trials": n, "ci95_s": [step * math.exp(-half), step * math.exp(half)],
           "noise_rel": comp.noise, "noise_steps_rel": comp.noise_steps, "noise_repeats_rel": comp.noise_repeats,
           "rounds": rounds, "runner_up": None, "runner_up_gap_pct": None, "gap_se_pct": None,
           "distinguishable": None, "inseparable": [], "rule": PICK_RULE,
           "convention": "step_s: median over the pick's trials of each trial's median step time (s per optimizer "
                         "step); ci95_s: +-1.96 x noise / sqrt(trials); runner-up gap: load-adjusted (same rounds)"}
    if len(ranked) > 1:
        second = ranked[1]
        gap = math.log(comp.estimate_s[second] / comp.estimate_s[pick])
        se = comp.se_diff(second, pick)
        out.update(runner_up=second, runner_up_gap_pct=100 * math.expm1(gap), gap_se_pct=100 * se,
                   distinguishable=gap > Z * se)
        out["inseparable"] = [k for k in ranked[1:]
                              if math.log(comp.estimate_s[k] / comp.estimate_s[pick]) <= Z * comp.se_diff(k, pick)]
    return out


def candidate_rows(search: _Search) -> list[dict]:
    """Every candidate: its final prediction (with uncertainty), whether and how it was measured."""
    comp = search.comparison()
    unc = search.eff.prediction_uncertainty(search.observed())
    noise = comp.noise if comp else None
    medians = search.medians()
    status = {}
    for t in search.trials:
        status[t.label] = "OK" if t.status == "OK" or status.get(t.label) == "OK" else t.status
    rows = []
    for c in sorted(search.cands, key=lambda c: medians.get(c.strategy.label, search.eff.predict(c))):
        label = c.strategy.label
        measured = label in medians
        # the larger of what the held-out trials showed (leave-one-out) and what the factor's posterior allows for
        # this strategy (wider for an engine or family never measured), with the noise of the step it is compared
        # with: replayed, 94% of the strategies tune did not run fell inside +-1.96 of it (LOO alone: 84%)
        pred_unc = None if unc is None else math.hypot(max(unc, search.eff.factor_sd(c)), noise or 0.0)
        rows.append({"strategy": label, "family": family(c), "micro_batch": c.strategy.micro_batch,
                     "grad_accum": c.point.grad_accum, "measured": measured, "status": status.get(label, "not run"),
                     "trials": comp.trials.get(label, 0) if comp else 0, "measured_step_s": medians.get(label),
                     "load_adjusted_step_s": comp.estimate_s.get(label) if comp else None,
                     "measured_uncertainty_rel": (noise / math.sqrt(comp.trials[label])) if measured else None,
                     "predicted_s": search.eff.predict(c), "predicted_uncertainty_rel": pred_unc,
                     "predicted_uncalibrated_s": search.base[label]})
    return rows


def search_strategies(cands: list[Candidate], model: ModelSpec, workload: Workload, nproc: int, out_dir: Path,
                      settings: TuneSettings, *, calibration_s: float = 0.0, log=print
                      ) -> TuneResult:
    """Screen, model-guided trials, then interleaved re-measurement of close contenders (module docstring)."""
    start = time.perf_counter()

    def run_one(index, cand, predicted_before_s, predicted_uncalibrated_s):
        return run_trial(index, cand, model, workload, nproc, out_dir, steps=settings.steps, warmup=settings.warmup,
                         timeout_s=settings.trial_timeout_s, memory_limit_bytes=settings.memory_limit_bytes,
                         predicted_before_s=predicted_before_s, predicted_uncalibrated_s=predicted_uncalibrated_s,
                         tokenizer=shared_tokenizer(search.trials))

    search = _Search(cands, run_one, settings, calibration_s, log)
    stop = _screen(search)
    if not stop:
        if settings.identify:  # what the screen cannot show: the best family's micro-batch, a ZeRO family's excess
            _identify_accumulation(search)
            _identify(search)
        stop = _explore(search)
    if not stop.startswith(("reached", "budget of")):
        stop = "; ".join(x for x in (stop, _confirm(search)) if x)
    eff = search.eff
    for t in search.trials:
        t.predicted_final_s = eff.predict(search.by_label[t.label])
    comp = search.comparison()
    pick, best = {}, None
    if comp is not None:
        pick = pick_summary(comp, search.medians(), search.round)
        runs = [t for t in search.ok() if t.label == pick["label"]]
        best = min(runs, key=lambda t: abs(t.measured_step_s - pick["step_s"]))
    trials_s = time.perf_counter() - start
    return TuneResult(cands, search.trials, eff, best, stop or "done", calibration_s, trials_s,
                      calibration_s + trials_s, pick, candidate_rows(search), search.grid_estimate(),
                      budget_summary(search))


def budget_summary(search: _Search) -> dict:
    """What the trials cost against the budget (`_Search.charge`, `budget_limit`), s of wall time."""
    s = search.settings
    limit = search.budget_limit()
    return {"charged_s": search.charged(), "limit_s": limit if math.isfinite(limit) else None,
            "fraction_of_grid_s": s.budget_fraction * search.grid_estimate() if s.budget_fraction else None,
            "trials_wall_s": sum(t.wall_s for t in search.trials),
            "startup_not_charged_s": sum(t.wall_s - search.charge(t) for t in search.trials),
            "typical_startup_s": search.startup_s(),
            "convention": f"charged: each trial's steps + its start-up up to {STARTUP_CAP:g}x the typical (median) "
                          "start-up; limit: --budget-fraction x the estimated grid, at least the screen + one "
                          "identification trial + one interleaved round of two (calibration not counted)"}


def shared_tokenizer(trials: list[TuneTrial]) -> str | None:
    """The tokenizer.json an earlier trial trained (all trials read the same corpus with the same settings)."""
    for t in trials:
        path = Path(t.run_dir) / "tokenizer.json"
        if path.is_file():
            return str(path.resolve())
    return None


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
    from scalestudy.costmodel.cpu_profile import local_cpu_profile
    from scalestudy.specs.hardware import get_device

    if nproc < 1:
        raise ScalestudyError(f"--nproc must be >= 1, got {nproc}")
    if profile:
        return get_device(profile), 0.0
    t0 = time.perf_counter()
    # The base carries what the micro-benchmarks do not measure: on a CPU, this machine's measured framework
    # overheads (costmodel/cpu_profile.py, measured once and cached), without which the uncalibrated model misses
    # most of a small model's step and the refit has nothing to regularise toward.
    base = local_cpu_profile(log=print) or get_device("local-cpu")
    device, _, _ = calibrate(out_dir, nproc, base)
    return device, time.perf_counter() - t0


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
    # first: the profile marks DIR as a tune's (a rerun after a kill is let in: cli tune's check_not_users_files)
    save_profile(device, out_dir / "hardware_profile.yaml", "hardware profile used by `scalestudy tune`")
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
    save_profile(apply_efficiency(device, result.model.fit_), out_dir / "tuned_profile.yaml",
                 "hardware profile with the refit compute/communication factors (overheads: tune.json)")
    return result
