"""`tune` on a noisy machine (issue 15): noise estimation, load-adjusted comparison, successive halving of close
contenders, the budget, and predictions of strategies tune did not run. Synthetic, seeded measurements: a machine
whose load drifts from trial to trial (shared cores) answers the trials instead of real runs."""

import math
import random
import statistics

import pytest

from scalestudy.costmodel.calibrate import EfficiencyFit, StepTerms, fit_efficiency
from scalestudy.plan import noise, tune_report, tuner
from scalestudy.plan.space import Constraints
from scalestudy.specs.hardware import get_device
from scalestudy.specs.presets import get_model
from scalestudy.specs.strategy import Workload

TRUE_BEST, RUNNER_UP = "ddp tp1 pp1 mb8 fp32", "ds-z0 tp1 pp1 mb8 fp32"  # 3% apart; every other one >= 12% slower
STEPS, WARMUP, STARTUP_S = 8, 3, 25.0


def candidates():
    """The issue's shape of space: 8 engine/ZeRO families x micro-batch 1-8 on 2 ranks, global batch 16 (32)."""
    spec, w = get_model("t5-tiny"), Workload(16, 64, 16)
    return tuner.local_candidates(spec, get_device("local-cpu"), 2, w, Constraints(
        tp=(1,), pp=(1,), recompute=("none",), precision="fp32", micro_batch=(1, 2, 4, 8), offload_optimizer=("none",),
        offload_params=("none",)))


ENGINE_S = {"ddp": 0.0, "deepspeed": 0.01, "fsdp": 0.04}  # framework time per micro-step the model does not know
FAMILY_S = {"ds-z1": 0.02, "ds-z2": 0.03, "ds-z3": 0.06, "ddp-zero1": 0.015, "fsdp-z3": 0.03}


def true_steps(cands) -> dict[str, float]:
    """A machine 30x slower than modelled plus per-micro-step framework time (the issue's t5-micro: ~3.5 s per
    step, ~25 s of process start-up per trial); the top two set 3% apart."""
    truth = {}
    for c in cands:
        over = 0.5 + 10 * ENGINE_S[c.strategy.engine] + 10 * FAMILY_S.get(tuner.family(c), 0.0)
        truth[c.strategy.label] = 30 * c.estimate.step_s + 0.8 + c.point.grad_accum * over
    best = truth[TRUE_BEST]
    for k in truth:
        truth[k] = max(truth[k], 1.12 * best)
    truth[TRUE_BEST], truth[RUNNER_UP] = best, 1.03 * best
    return truth


class NoisyMachine:
    """Answers trials like a shared machine: a load factor drifting from trial to trial (log AR(1), marginal sd
    `load_sd`, correlation `rho` between consecutive trials), per-trial noise and per-step noise."""

    def __init__(self, seed, cands, load_sd=0.10, rho=0.9, trial_sd=0.02, step_sd=0.05):
        self.rng = random.Random(seed)
        self.truth = true_steps(cands)
        self.load_sd, self.rho, self.trial_sd, self.step_sd = load_sd, rho, trial_sd, step_sd
        self.log_load = self.rng.gauss(0, load_sd)

    def run_trial(self, index, cand, model, workload, nproc, out_dir, **kw):
        self.log_load = self.rho * self.log_load + math.sqrt(1 - self.rho ** 2) * self.rng.gauss(0, self.load_sd)
        level = self.truth[cand.strategy.label] * math.exp(self.log_load + self.rng.gauss(0, self.trial_sd))
        steps = [level * math.exp(self.rng.gauss(0, self.step_sd)) for _ in range(STEPS)]
        measured = steps[WARMUP:]
        return tuner.TuneTrial(index, cand.strategy.label, cand.strategy.to_dict(), cand.point.grad_accum, "OK",
                               statistics.median(measured), kw["predicted_before_s"], kw["predicted_uncalibrated_s"],
                               STARTUP_S + sum(steps), STEPS, "", step_times_s=measured, startup_s=STARTUP_S)

    def grid_s(self) -> float:
        return sum(STARTUP_S + STEPS * t for t in self.truth.values())


def tune(monkeypatch, seed, cands, **settings):
    machine = NoisyMachine(seed, cands)
    monkeypatch.setattr(tuner, "run_trial", machine.run_trial)
    s = tuner.TuneSettings(steps=STEPS, warmup=WARMUP, budget_s=1e9, **settings)
    return tuner.search_strategies(cands, None, None, 2, None, s, log=lambda m: None), machine


# ---------------------------------------------------------------------------------------------- plan/noise.py


def test_comparison_takes_the_load_of_each_round_out():
    true = {"a": 1.0, "b": 1.03, "c": 1.2}
    loads = [1.0, 1.5, 0.8]  # the machine 50% slower in round 1, 20% faster in round 2
    ms = [noise.Measurement(k, r, v * load) for r, load in enumerate(loads) for k, v in true.items()]
    comp = noise.compare(ms)
    assert comp.best() == "a" and comp.ranked() == ["a", "b", "c"]
    assert comp.estimate_s["b"] / comp.estimate_s["a"] == pytest.approx(1.03, rel=1e-9)
    # no scatter left after the rounds: the noise is the prior, pooled with 4 residual degrees of freedom
    assert comp.noise_repeats == pytest.approx(0.0, abs=1e-9)
    assert comp.noise == pytest.approx(noise.PRIOR_TRIAL_NOISE * math.sqrt(noise.PRIOR_DOF / (noise.PRIOR_DOF + 4)))
    # The same numbers without rounds: the load swamps the 3% and c "wins" its fast round.
    flat = noise.compare([noise.Measurement("a", 0, 1.5), noise.Measurement("b", 0, 1.03),
                          noise.Measurement("c", 0, 1.2 * 0.8)])
    assert flat.best() == "c"
    assert noise.step_spread([1.0, 1.1, 0.9, 1.0, 1.0]) == pytest.approx(0.0)
    assert noise.step_spread([1.0, 1.1, 0.9, 1.05, 0.95]) == pytest.approx(1.4826 * 0.05, rel=1e-6)
    assert noise.step_spread([1.0, 2.0]) is None


def test_contenders_and_halving():
    ms = [noise.Measurement("a", 0, 1.00, 0.10), noise.Measurement("b", 0, 1.05, 0.10),
          noise.Measurement("c", 0, 1.40, 0.10)]
    comp = noise.compare(ms)
    assert comp.noise == pytest.approx(0.10)  # the steps' spread, above the 8% prior
    # b is within 2 x 10% x sqrt(2) of a, c is not; an unmeasured d predicted 8% above a with 10% prediction error
    # is within one combined sd, e predicted 30% above is not.
    got = noise.contenders(comp, {"d": (1.08, 0.10), "e": (1.30, 0.10)}, limit=3)
    assert got == ["a", "b", "d"]
    assert noise.contenders(comp, {"d": (1.08, 0.10)}, limit=2) == ["a", "b"]
    # After a round where a and b measure equally noisy and close: neither is clearly worse -> halving keeps one.
    comp2 = noise.compare(ms + [noise.Measurement("a", 1, 1.1, 0.10), noise.Measurement("b", 1, 1.14, 0.10),
                                noise.Measurement("d", 1, 2.0, 0.10)])
    assert noise.survivors(comp2, ["a", "b", "d"]) == ["a", "b"]  # d clearly worse, dropped; a and b stay
    assert noise.survivors(comp2, ["a", "b", "c"]) == ["a", "b"]  # c clearly worse
    assert noise.survivors(comp2, ["a", "b"]) == ["a", "b"]  # the last two stay head to head
    assert noise.interleaved(["a", "b", "c"], 1) == ["a", "b", "c"]
    assert noise.interleaved(["a", "b", "c"], 2) == ["c", "b", "a"]


# ---------------------------------------------------------------------------------------------- the search


SEEDS = range(40)


def test_close_contenders_re_measured_pick_the_true_best_under_drifting_load(monkeypatch):
    """Two strategies 3% apart on a machine whose load moves ~10% (drifting from trial to trial): re-measuring
    the close contenders head to head, within the default budget (15% of the grid), finds the true best far
    more often than one sample each (screen + model-guided trials alone), and never picks one >5% off."""
    cands = candidates()
    robust = naive = 0
    for seed in SEEDS:
        r, machine = tune(monkeypatch, seed, cands)
        robust += r.pick["label"] == TRUE_BEST
        assert machine.truth[r.pick["label"]] <= 1.05 * machine.truth[TRUE_BEST]
        r1, _ = tune(monkeypatch, seed, cands, contenders=1)
        naive += r1.pick["label"] == TRUE_BEST
    # measured: 30 of 40 (33 while the candidates were priced with fused kernels; the scenario's truth is 30 x each
    # candidate's estimate, now of the eager Hugging Face T5 train runs: every miss is the runner-up, 3% off)
    assert robust >= 0.75 * len(SEEDS), (robust, naive)
    assert naive < robust, (robust, naive)  # measured: 28 of 40 -- the test can tell the two apart


def test_pick_carries_its_uncertainty_and_the_budget_holds(monkeypatch):
    cands = candidates()
    shares, hits = [], 0
    for seed in SEEDS:
        r, machine = tune(monkeypatch, seed, cands)  # the default budget: 15% of the estimated grid
        p = r.pick
        lo, hi = p["ci95_s"]
        assert lo < p["step_s"] < hi and p["trials"] >= 1 and 0.01 <= p["noise_rel"] < 0.5
        assert p["runner_up"] and isinstance(p["distinguishable"], bool)
        # no family here leans IDENTIFY_MIN_SHARE more on unverified collectives/hooks than its engine's screened one:
        # an identification trial (when the model cannot rule it out) is a screened family at another micro-batch
        fam = {c.strategy.label: tuner.family(c) for c in cands}
        screened = {fam[t.label] for t in r.trials if t.phase == "screen"}
        assert all(fam[t.label] in screened for t in r.trials if t.phase == "identify")
        b = r.budget  # what the trials were charged stays within 15% of the estimated grid or the floor (the
        # estimate moves a little with each trial: the limit checked before the last trial was this one +-2%)
        assert b["charged_s"] <= b["limit_s"] * 1.02 and b["limit_s"] >= b["fraction_of_grid_s"]
        assert b["charged_s"] == pytest.approx(sum(t.wall_s for t in r.trials))  # no slow start-up here
        shares.append(sum(t.wall_s for t in r.trials) / machine.grid_s())
        hits += r.pick["label"] == TRUE_BEST
    assert max(shares) <= 0.20 and statistics.median(shares) <= 0.16  # against the machine's true grid time
    assert hits >= 0.7 * len(SEEDS)
    rows = r.candidate_rows
    assert len(rows) == len(cands) and {x["strategy"] for x in rows} == {c.strategy.label for c in cands}
    assert any(x["measured"] for x in rows) and any(not x["measured"] for x in rows)
    assert all(x["predicted_s"] > 0 for x in rows)
    assert all(x["predicted_uncertainty_rel"] > 0 for x in rows)
    # Noise: per-step 5% and ~10% drifting load; the estimate must see it, not the floor.
    assert 0.03 <= p["noise_rel"] <= 0.25


class Scripted:
    """Trials answered from a script: label -> step time per round (the last repeats), start-up per trial index;
    a refit stub whose predictions rule every unmeasured strategy out (1.5x)."""

    def __init__(self, cands, steps: dict[str, list[float]], startup: dict[int, float] | None = None):
        self.steps, self.startup, self.search = steps, startup or {}, None
        self.model = self

    def predict(self, c):
        return self.steps.get(c.strategy.label, [1.5])[0]

    def prediction_uncertainty(self, observed):
        return 0.10

    def factor_sd(self, c):
        return 0.10

    def refit(self, observed):
        return self

    def run_one(self, index, cand, before, uncal):
        label = cand.strategy.label
        seq = self.steps[label]
        step = seq[min(self.search.round, len(seq) - 1)]
        start = self.startup.get(index, 10.0)
        times = [step * (1 + 0.01 * (i % 3 - 1)) for i in range(STEPS - WARMUP)]
        return tuner.TuneTrial(index, label, cand.strategy.to_dict(), cand.point.grad_accum, "OK",
                               statistics.median(times), before, uncal, start + STEPS * step, STEPS, "",
                               step_times_s=times, startup_s=start)


def scripted_search(steps, startup=None, screen=None, **settings):
    cands = candidates()
    script = Scripted(cands, steps, startup)
    search = tuner._Search(cands, script.run_one, tuner.TuneSettings(steps=STEPS, warmup=WARMUP, budget_s=1e9,
                                                                     **settings), 0.0, lambda m: None)
    script.search, search.eff = search, script
    for label in screen or steps:
        search.run(search.by_label[label], "screen")
    return search


A, B = "ddp tp1 pp1 mb8 fp32", "ds-z0 tp1 pp1 mb8 fp32"


@pytest.mark.parametrize("b_steps, rounds, separated", [
    ([1.12], 2, True),  # 12% apart: within the noise after the screen, apart after two rounds
    ([1.02], noise.MAX_ROUNDS, False),  # 2% apart: re-measured to the last round, then said inseparable
    ([1.00, 1.60], 2, True),  # lucky in the screen, 60% slower in the rounds: the race stops once that is sure
])
def test_racing_re_measures_close_contenders_until_separated(b_steps, rounds, separated):
    search = scripted_search({A: [1.0], B: b_steps}, budget_fraction=0)
    stop = tuner._confirm(search)
    confirm = [t for t in search.trials if t.phase == "confirm"]
    assert search.round == rounds and len(confirm) == 2 * rounds  # both, every round
    assert [t.label for t in confirm[:2]] == [A, B] and [t.label for t in confirm[2:4]][:2] in ([B, A], [])
    pick = tuner.pick_summary(search.comparison(), search.medians(), search.round)
    assert pick["label"] == A and pick["distinguishable"] is separated
    assert pick["inseparable"] == ([] if separated else [B]) and "lowest load-adjusted" in pick["rule"]
    assert ("still within the noise" in stop) is not separated
    line = tune_report.pick_line(pick)
    assert ("Not separated from " + B in line) is not separated and "95% interval" in line


@pytest.mark.parametrize("fsdp_predicted, screened", [(1.05, True), (1.20, False)])
def test_the_screen_skips_an_engine_the_first_trials_rule_out(fsdp_predicted, screened):
    """After DDP and DeepSpeed (1.00 and 1.05 s), FSDP is screened only while its prediction stays within one
    combined sd (noise ~8%, prediction error 10%) of the best measured step: 5% above is run, 20% above is not
    (replayed on the recorded grids: the share of the grid's trial time falls, no pick lost; RESULTS.md)."""
    fsdp = "fsdp-z2 tp1 pp1 mb8 fp32"
    cands = candidates()
    script = Scripted(cands, {A: [1.0], B: [1.05], fsdp: [fsdp_predicted]})
    search = tuner._Search(cands, script.run_one, tuner.TuneSettings(steps=STEPS, warmup=WARMUP, budget_s=1e9),
                           0.0, lambda m: None)
    script.search, search.eff = search, script
    assert tuner._screen(search) == ""
    assert [t.label for t in search.trials] == [A, B] + ([fsdp] if screened else [])


def test_a_slow_start_up_is_reported_not_charged_and_does_not_starve_the_race():
    """The 19:55 live repeat: one DeepSpeed start took 41 s among 9-10 s ones and, charged in full, left no budget
    for the identification trial. Its start-up is charged at most STARTUP_CAP x the typical one, and the budget
    always holds one identification trial and one round of two beyond the screen (15% of this flat grid is less)."""
    fsdp, mb4 = "fsdp-z2 tp1 pp1 mb8 fp32", "ddp tp1 pp1 mb4 fp32"
    search = scripted_search({A: [1.0], B: [1.05], fsdp: [1.3], mb4: [1.2]}, startup={2: 45.0},
                             screen=[A, B, fsdp], budget_fraction=0.15)
    slow = search.trials[1]
    assert slow.wall_s == pytest.approx(45 + 8 * 1.05)
    assert slow.charged_s == pytest.approx(8 * 1.05 + tuner.STARTUP_CAP * 10.0)  # typical start-up: 10 s
    typical_trial = 10.0 + STEPS * 1.3  # the screen's dearest strategy
    assert search.budget_limit() == pytest.approx(search.charged("screen") + tuner.FLOOR_TRIALS * typical_trial)
    assert search.budget_limit() > 0.15 * search.grid_estimate()
    search.run(search.by_label[mb4], "identify")  # then the race of the top two still fits
    assert search.affordable(search.race_reserve(), trials=2) and search.race_reserve() > 0
    assert not search.affordable(search.race_reserve() + 1.2 * typical_trial)  # and not much more
    tuner._confirm(search)
    assert search.round == 1 and search.charged() <= search.budget_limit()
    b = tuner.budget_summary(search)
    assert b["startup_not_charged_s"] == pytest.approx(45.0 - 20.0) and b["typical_startup_s"] == 10.0
    assert "not charged" in tune_report.budget_line(b)


# ---------------------------------------------------------------------------------------------- the refit


def test_a_uniformly_slower_machine_moves_every_prediction_alike():
    """Trials at one micro-batch (the screen) cannot tell per-micro-step overhead from compute: a machine 1.6x
    slower than modelled must come out 1.6x everywhere, including strategies with 4x the accumulation."""
    cands = candidates()
    by_fam = {}
    for c in sorted(cands, key=lambda c: c.estimate.step_s):
        if c.point.grad_accum == 1:
            by_fam.setdefault(c.strategy.engine, c)
    terms = {c.strategy.label: tuner.terms(c) for c in cands}
    fit = fit_efficiency([(terms[c.strategy.label], 1.6 * terms[c.strategy.label].modelled_s)
                          for c in by_fam.values()])
    for c in cands:
        t = terms[c.strategy.label]
        assert fit.predict(t) == pytest.approx(1.6 * t.modelled_s, rel=0.02), c.strategy.label


def test_engine_excess_carries_to_the_engines_other_stages():
    ddp = StepTerms(0.4, 0.05, 0.01, 1, "ddp", "ddp", framework_s=0.2)
    ds0 = StepTerms(0.4, 0.05, 0.01, 1, "ds-z0", "deepspeed", framework_s=0.2)
    fsdp = StepTerms(0.4, 0.08, 0.01, 1, "fsdp-z2", "fsdp", framework_s=0.2)
    fit = fit_efficiency([(ddp, 0.66), (ds0, 0.86), (fsdp, 0.70)])  # DeepSpeed 0.2 s slower than the others
    ds1 = StepTerms(0.4, 0.05, 0.01, 1, "ds-z1", "deepspeed", framework_s=0.2)
    zero1 = StepTerms(0.4, 0.05, 0.01, 1, "ddp-zero1", "ddp", framework_s=0.2)
    assert fit.predict(ds1) > 0.76  # most of DeepSpeed's 0.2 s excess is the engine's, not ZeRO-0's (0.80)
    assert fit.predict(zero1) == pytest.approx(0.66, rel=0.05)
    assert EfficiencyFit().predict(ds1) == pytest.approx(ds1.modelled_s)  # no trials: the uncalibrated model


def test_an_identification_trial_when_a_family_leans_on_unverified_collectives(monkeypatch):
    """The same space on a machine whose calibration measured reduce_scatter 4x and all_gather 1.4x the all_reduce
    fit (this 2-core machine's numbers): ZeRO-3 then rests on ~10 points more unverified time than ZeRO-0 and
    gets one trial right after the screen, counted in the budget; a machine whose ZeRO-3 collectives really run
    that slow is then predicted with them, a space without such a family gets none (test above)."""
    from dataclasses import replace

    device = replace(get_device("local-cpu"), collective_time_ratio={"all_reduce": 1.0, "all_gather": 1.4,
                                                                     "reduce_scatter": 4.0})
    spec, w = get_model("t5-tiny"), Workload(16, 64, 16)
    cands = tuner.local_candidates(spec, device, 2, w, Constraints(
        tp=(1,), pp=(1,), recompute=("none",), precision="fp32", micro_batch=(1, 2, 4, 8), offload_optimizer=("none",),
        offload_params=("none",)))
    r, _ = tune(monkeypatch, 0, cands)
    phases = [t.phase for t in r.trials]
    n = phases.count("screen")  # the third engine (FSDP, 0.4 s per micro-step slower here) may be ruled out
    assert n >= 2 and phases[:n + 1] == ["screen"] * n + ["identify"] and phases.count("identify") == 1
    assert tuner.family(next(c for c in cands if c.strategy.label == r.trials[n].label)) == "ds-z3"
    assert sum(t.wall_s for t in r.trials) <= 0.15 * r.grid_estimate_s * 1.001
    assert tune(monkeypatch, 0, cands, identify=0)[0].trials[n].phase != "identify"


@pytest.mark.parametrize("predicted_mb4, runs", [(1.05, True), (1.30, False)])
def test_the_best_family_at_another_micro_batch_when_the_model_cannot_rule_it_out(predicted_mb4, runs):
    """After the screen (every family at one accumulation): the best-measured family's best-predicted other
    micro-batch gets one trial when predicted within one combined sd (noise 5%, refit error 10%) of the best
    measured step -- gpt2-tiny's micro-batch 4 ran 14% faster than 8, which the model had 5% slower."""
    cands = candidates()
    best, other = "ddp tp1 pp1 mb8 fp32", "ddp tp1 pp1 mb4 fp32"
    pred = {c.strategy.label: 1.5 for c in cands} | {best: 1.0, other: predicted_mb4}

    class Model:  # a refit whose predictions and leave-one-out error are given
        def predict(self, c):
            return pred[c.strategy.label]

        def prediction_uncertainty(self, observed):
            return 0.10

        def refit(self, observed):
            return self

    def run_one(index, cand, before, uncal):
        steps = [pred[cand.strategy.label]] * (STEPS - WARMUP)
        return tuner.TuneTrial(index, cand.strategy.label, cand.strategy.to_dict(), cand.point.grad_accum, "OK",
                               steps[0], before, uncal, STARTUP_S, STEPS, "", step_times_s=steps, startup_s=STARTUP_S)

    search = tuner._Search(cands, run_one, tuner.TuneSettings(budget_s=1e9, budget_fraction=0), 0.0, lambda m: None)
    search.eff = Model()
    for label in (best, "ds-z0 tp1 pp1 mb8 fp32", "fsdp-z2 tp1 pp1 mb8 fp32"):
        search.run(search.by_label[label], "screen")
    tuner._identify_accumulation(search)
    assert [t.label for t in search.trials if t.phase == "identify"] == ([other] if runs else [])


@pytest.mark.parametrize("unc, identified", [(0.05, "ddp tp1 pp1 mb4 fp32"), (0.30, "ds-z0 tp1 pp1 mb4 fp32")])
def test_identification_follows_the_pooled_evidence_not_one_screen_sample(unc, identified):
    """The 22:28 live gpt2-tiny miss: the screen measured ds-z0 1% below ddp (one sample each, ~8% noise) and the
    identification trial went to ds-z0's other micro-batch. The refit from the other trials puts DeepSpeed 6%
    above DDP: with a leave-one-out error of 5% that outweighs the 1% sample and DDP's family is identified; when
    the refit is known to be 30% off, the measurement decides."""
    cands = candidates()
    ddp, ds0, fsdp = "ddp tp1 pp1 mb8 fp32", "ds-z0 tp1 pp1 mb8 fp32", "fsdp-z2 tp1 pp1 mb8 fp32"
    measured = {ddp: 1.01, ds0: 1.00, fsdp: 1.3}
    pred = {c.strategy.label: 1.5 for c in cands} | {ddp: 1.0, ds0: 1.06, fsdp: 1.3,
                                                       "ddp tp1 pp1 mb4 fp32": 1.02, "ds-z0 tp1 pp1 mb4 fp32": 1.05}

    class Model:  # a refit whose predictions (from the other strategies' trials) and leave-one-out error are given
        def predict(self, c):
            return pred[c.strategy.label]

        def prediction_uncertainty(self, observed):
            return unc

        def refit(self, observed):
            return self

    def run_one(index, cand, before, uncal):
        steps = [measured.get(cand.strategy.label, pred[cand.strategy.label])] * (STEPS - WARMUP)
        return tuner.TuneTrial(index, cand.strategy.label, cand.strategy.to_dict(), cand.point.grad_accum, "OK",
                               steps[0], before, uncal, STARTUP_S, STEPS, "", step_times_s=steps, startup_s=STARTUP_S)

    search = tuner._Search(cands, run_one, tuner.TuneSettings(budget_s=1e9, budget_fraction=0), 0.0, lambda m: None)
    search.eff = Model()
    for label in (ddp, ds0, fsdp):
        search.run(search.by_label[label], "screen")
    assert min(search.medians(), key=search.medians().get) == ds0  # the one sample
    tuner._identify_accumulation(search)
    assert [t.label for t in search.trials if t.phase == "identify"] == [identified]


def test_halving_three_contenders_and_a_contender_that_fails(monkeypatch):
    cands = candidates()
    # --contenders 3, no budget cap: round 1 measures three, later rounds fewer (halving), never more; only
    # survivors run again. A round can also settle it (the other two clearly worse): not in most seeds.
    several = 0
    for seed in range(4):
        r, _ = tune(monkeypatch, seed, cands, budget_fraction=0, contenders=3)
        rounds = {}
        for t in r.trials:
            if t.phase == "confirm":
                rounds.setdefault(t.round, []).append(t.label)
        assert len(rounds[1]) == 3 and all(len(rounds[k]) <= len(rounds[k - 1]) for k in rounds if k > 1)
        assert all(set(rounds[k]) <= set(rounds[k - 1]) for k in rounds if k > 1)
        if len(rounds) >= 2:
            several += 1
            assert len(rounds[max(rounds)]) <= 2
    assert several >= 3  # measured: 3 of 4

    # Every re-measurement except the true best's runs out of memory: recorded, left out of the comparison, and
    # the search still ends with a pick.
    machine = NoisyMachine(2, cands)
    seen = set()

    def flaky(index, cand, *a, **kw):
        trial = machine.run_trial(index, cand, *a, **kw)
        if cand.strategy.label != TRUE_BEST and cand.strategy.label in seen:
            trial.status, trial.measured_step_s, trial.reason = "OOM", None, "ran out of memory"
        seen.add(cand.strategy.label)
        return trial

    monkeypatch.setattr(tuner, "run_trial", flaky)
    r = tuner.search_strategies(cands, None, None, 2, None, tuner.TuneSettings(steps=STEPS, warmup=WARMUP,
                                budget_s=1e9, budget_fraction=0), log=lambda m: None)
    assert any(t.status == "OOM" and t.phase == "confirm" for t in r.trials)
    assert r.pick["label"] and r.best.status == "OK"


@pytest.mark.parametrize("kw, words", [(dict(budget_fraction=1.5), "--budget-fraction"),
                                       (dict(budget_fraction=float("nan")), "--budget-fraction"),
                                       (dict(contenders=0), "--contenders"), (dict(identify=-1), "identify"),
                                       # too small to run even the screen: refused before any calibration starts
                                       (dict(budget_s=1e-300), "cannot run even the screen"),
                                       (dict(budget_s=2.5, screen=3), "3 trial"),
                                       (dict(steps=10**12), "not a short trial"),
                                       (dict(budget_s=0.5, screen=0), "1 trial")])
def test_bad_settings_are_one_line_errors(kw, words):
    from scalestudy.errors import ScalestudyError

    with pytest.raises(ScalestudyError, match=words):
        tuner.TuneSettings(**kw)
