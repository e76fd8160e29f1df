"""Predictions of strategies `tune` did not run (issue 15), on a recorded grid: tests/unit/data/tune_grid_t5micro.json
holds, for the issue's case (t5-micro, 2 gloo ranks, global batch 16, seq 128+32, micro-batch 1-8, 8 engine/ZeRO
families), every strategy's cost-model step terms and its measured median step (written by
`benchmarks/bench_tune.py --grid-from RUN/bench_tune.json --export-terms`). The refit sees what tune measures first
(each engine's lowest ZeRO stage at the largest micro-batch, then the identification trials) and predicts the rest.

The mechanism the refit has to express: DeepSpeed's ZeRO-2 reduces gradients every micro-step and ZeRO-3 gathers
parameters every micro-step, and on one-thread gloo ranks that work costs several times what the cost model's
collectives (fitted on all_reduce messages <= 16 MB; the calibration's reduce_scatter took 4x that fit's time,
its all_gather 1.4x: `comm_ratio`) and the CPU profile's engine overheads (measured on a smaller model) say;
ZeRO-1's extra is once per optimizer step. A trial of ZeRO-0, DDP and FSDP cannot show it.
"""

import json
import statistics
from pathlib import Path

import pytest

from scalestudy.costmodel.calibrate import StepTerms, fit_efficiency
from scalestudy.plan.tuner import IDENTIFY_MIN_SHARE, unverified_share

DATA = Path(__file__).parent / "data"
GRID = DATA / "tune_grid_t5micro.json"
LOWEST = ("ds-z0", "fsdp-z2", "ddp")  # each engine's lowest ZeRO stage: tune's screen


def load(grid=GRID):
    rows = json.loads(grid.read_text())["strategies"]
    fields = set(StepTerms.__dataclass_fields__)
    terms = {r["strategy"]: StepTerms(**{k: v for k, v in r.items() if k in fields}) for r in rows}
    return terms, {r["strategy"]: r["measured_step_s"] for r in rows}, {r["strategy"]: r["micro_batch"] for r in rows}


def unmeasured_errors(terms, measured, ran):
    fit = fit_efficiency([(terms[k], measured[k]) for k in ran])
    return {k: 100 * (fit.predict(t) / measured[k] - 1) for k, t in terms.items() if k not in ran}


def test_predictions_of_strategies_tune_did_not_run_on_a_recorded_grid():
    terms, measured, mb = load()
    assert len(terms) == 32
    top = max(mb.values())
    screen = [k for k, t in terms.items() if mb[k] == top and t.family in LOWEST]
    covered = {terms[k].engine: unverified_share(terms[k]) for k in screen}
    gain = {k: unverified_share(t) - covered[t.engine] for k, t in terms.items() if mb[k] == top and k not in screen}
    identified = max(gain, key=gain.get)
    assert terms[identified].family == "ds-z3"  # leans most on collectives + hooks the screen did not see
    assert gain[identified] >= IDENTIFY_MIN_SHARE  # so tune runs it (tuner._identify): 19 points here
    blind = unmeasured_errors(terms, measured, screen)
    seen = unmeasured_errors(terms, measured, screen + [identified])
    # what tune runs: also the leading family (DDP) at another micro-batch, which the model cannot rule out here
    # (predicted 3% above micro-batch 8; measured 9%)
    full = unmeasured_errors(terms, measured, screen + ["ddp tp1 pp1 mb4 fp32", identified])
    z3 = "ds-z3 tp1 pp1 mb1 fp32"  # 8 micro-steps of ZeRO-3: 17.2 s measured
    assert blind[z3] < -50  # from the screen alone: half the step (the collectives at the calibration's rates)
    assert seen[z3] > -25  # one ZeRO-3 trial at 1 micro-step: its communication factor carries to 8
    # Pinned (measured with this refit, this grid): median / max |error| 23.3% / 53.1% over the 28 strategies
    # not run (the max: ds-z0 mb2, a trial whose steps jumped from 2.1 to 5.6 s under load); before (per-micro-step
    # overheads, no communication factors, no collective ratios): 40.0% / 96.5% with the same four trials. The
    # issue's 15% is not met on this grid: it ran at load 1.8-5.2 on 2 cores (see benchmarks/RESULTS.md).
    # Re-pinned after the cost model's ZeRO-3 persistence threshold, per-op gloo rates and ZeroRedundancyOptimizer's
    # per-tensor broadcasts (tune2): seen 23.4% / 53.1%, full 23.4% / 50.4% (was 21.4% / 50.1%: the ddp-zero1 rows
    # now carry the broadcasts per step and lose the profile's per-micro-step share of them; their -45..-51% gap is
    # not the broadcasts -- 70-110 ms measured for t5-micro's 144 tensors -- and stays open).
    errs = [abs(e) for e in seen.values()]
    assert statistics.median(errs) <= 25 and max(errs) <= 56
    errs = [abs(e) for e in full.values()]  # 23.4% / 50.4% over 27 (before issue-15 work: 35% / 124%)
    assert statistics.median(errs) <= 25 and max(errs) <= 53


def test_a_decoder_grid_held_out_the_same_way():
    """gpt2-tiny (tests/unit/data/tune_grid_gpt2tiny.json, the lead's grid of 18:47, load 0.7-2.3), the trials tune
    runs there: the screen, the best family at another micro-batch (ddp mb4: the model cannot rule it out, and it
    is the grid's best, 14% faster than mb8) and ZeRO-3. Its errors are the other way round: the model puts too
    much on every micro-step of a 1.5M-parameter model (sharded engines' tiny collectives, hooks), which the
    refit learns from DDP's two accumulations for every engine (global per-micro-step overhead)."""
    terms, measured, mb = load(DATA / "tune_grid_gpt2tiny.json")
    ran = [k for k, t in terms.items() if mb[k] == 8 and t.family in LOWEST] + ["ddp tp1 pp1 mb4 fp32",
                                                                              "ds-z3 tp1 pp1 mb8 fp32"]
    errs = [abs(e) for e in unmeasured_errors(terms, measured, ran).values()]
    # Pinned: median / max 9.1% / 61.9% over the 27 not run, 15 within 15% (the max: ddp-zero1 mb1, 0.35 s
    # measured, twice its mb2's: one noisy trial). Was 11.2% / 63.1% (max ds-z3 mb1, the model gathering the
    # parameters DeepSpeed keeps whole under 1e5 elements: now modelled, costmodel/zero3.py).
    assert statistics.median(errs) <= 10.5 and max(errs) <= 65 and sum(e <= 15 for e in errs) >= 15


def test_a_family_excess_extrapolates_with_its_own_collectives():
    """ZeRO-1 reduces once per step, ZeRO-2/3 every micro-step; both measured ~6x slower collectives than modelled
    at one micro-step. The refit reads a family's excess as its communication running slow, so at 8 micro-steps
    ZeRO-1 stays one step's worth and ZeRO-3 (never measured, DeepSpeed's) gets its engine's factor x 8 gathers;
    engines without the excess stay where they were."""

    def terms(fam, engine, ga, per_micro, per_step):
        return StepTerms(0.3 + 0.04 * ga, per_step + ga * per_micro, 0.01, ga, fam, engine, framework_s=0.02 * ga)

    def truth(t, slow):
        return t.compute_s + slow * t.comm_s + t.optimizer_s + t.framework_s

    ddp, ds0 = terms("ddp", "ddp", 1, 0, 0.04), terms("ds-z0", "deepspeed", 1, 0, 0.04)
    fsdp = terms("fsdp-z2", "fsdp", 1, 0.05, 0)
    z1, z2 = terms("ds-z1", "deepspeed", 1, 0, 0.08), terms("ds-z2", "deepspeed", 1, 0.04, 0.04)
    fit = fit_efficiency([(ddp, truth(ddp, 1)), (ds0, truth(ds0, 1)), (fsdp, truth(fsdp, 1)), (z1, truth(z1, 6)),
                          (z2, truth(z2, 6))])
    z1_8 = terms("ds-z1", "deepspeed", 8, 0, 0.08)
    assert fit.predict(z1_8) == pytest.approx(truth(z1_8, 6), rel=0.05)  # per-micro-step overheads said +66%
    z3_8 = terms("ds-z3", "deepspeed", 8, 0.12, 0)
    assert fit.predict(z3_8) > 1.9 * truth(z3_8, 1)  # the engine's slow collectives carry to an unmeasured stage
    for t in (terms("ddp", "ddp", 8, 0, 0.04), terms("fsdp-z2", "fsdp", 8, 0.05, 0)):
        assert fit.predict(t) == pytest.approx(truth(t, 1), rel=0.12)


def test_collectives_at_the_calibrations_measured_rates():
    """Each strategy's communication is costed at the measured rate of the collectives it is made of: DDP and
    ZeRO-0 all-reduce; DeepSpeed 0.19's ZeRO-2 all-reduces its bucket every micro-step and all-gathers once; its
    ZeRO-3 gathers the model once and reduce-scatters per micro-step; FSDP gathers per micro-step (twice at zero 3)
    and reduce-scatters per micro-step too (costmodel/cpu_collectives.gloo_dp_comm)."""
    from dataclasses import replace

    from scalestudy.plan import tuner
    from scalestudy.plan.space import Constraints
    from scalestudy.specs.hardware import get_device
    from scalestudy.specs.presets import get_model
    from scalestudy.specs.strategy import Workload

    device = replace(get_device("local-cpu"), collective_time_ratio={"all_reduce": 1.0, "all_gather": 1.5,
                                                                     "reduce_scatter": 4.0})
    cands = tuner.local_candidates(get_model("t5-tiny"), device, 2, Workload(16, 64, 16), Constraints(
        tp=(1,), pp=(1,), recompute=("none",), precision="fp32", micro_batch=(1, 8), offload_optimizer=("none",),
        offload_params=("none",)))
    ratio = {(tuner.family(c), c.point.grad_accum): tuner.terms(c).comm_ratio for c in cands}
    assert ratio[("ddp", 8)] == ratio[("ds-z0", 1)] == pytest.approx(1.0)
    # DeepSpeed 0.19 all-reduces the whole bucket (ZeRO-2 per micro-batch; an all-reduce moves twice a gather's bytes)
    assert ratio[("ds-z2", 8)] == pytest.approx((16 * 1.0 + 1.5) / 17)
    assert ratio[("ds-z2", 1)] == ratio[("ds-z1", 8)] == ratio[("ds-z1", 1)] == pytest.approx(3.5 / 3)  # Z1: per step
    assert ratio[("ds-z3", 1)] == ratio[("ds-z3", 8)] == pytest.approx((1.5 + 4.0) / 2)  # one gather pass + reduce
    # FSDP: two gathers and a reduce-scatter every micro-step, whatever the accumulation
    assert ratio[("fsdp-z3", 1)] == ratio[("fsdp-z3", 8)] == pytest.approx((2 * 1.5 + 4.0) / 3)
    assert ratio[("fsdp-z2", 1)] == pytest.approx((1.5 + 4.0) / 2)
    t = tuner.terms(next(c for c in cands if tuner.family(c) == "ds-z2" and c.point.grad_accum == 8))
    assert t.modelled_s == pytest.approx(t.compute_s + t.comm_s * t.comm_ratio + t.optimizer_s + t.framework_s)


def test_collectives_at_measured_rates_are_not_counted_twice_with_the_profiles_multi_rank_overhead():
    """The CPU profile's "<engine>@multi" overhead is what the engine cost on 2 ranks beyond the model with the
    all_reduce fit's rates: at the profile's own configuration (t5-tiny, micro-batch 2, accumulation 2, seq
    64+16), costing the collectives at their measured rates must predict the same step, not add the excess twice."""
    from dataclasses import replace

    from scalestudy.plan import tuner
    from scalestudy.plan.space import Constraints
    from scalestudy.specs.hardware import ClusterSpec, get_device
    from scalestudy.specs.presets import get_model
    from scalestudy.specs.strategy import Workload

    base = replace(get_device("local-cpu"), engine_overhead_s={"deepspeed-3": 0.002, "deepspeed-3@multi": 0.01})
    measured = replace(base, collective_time_ratio={"all_reduce": 1.0, "all_gather": 1.5, "reduce_scatter": 4.0})

    def ds3(device):
        cands = tuner.local_candidates(get_model("t5-tiny"), device, 2, Workload(8, 64, 16), Constraints(
            tp=(1,), pp=(1,), recompute=("none",), precision="fp32", micro_batch=(2,), offload_optimizer=("none",),
            offload_params=("none",)))
        return tuner.terms(next(c for c in cands if tuner.family(c) == "ds-z3"))

    plain, rated = ds3(base), ds3(measured)
    assert rated.comm_ratio > 2 and rated.engine_s < plain.engine_s  # the excess moved from hooks to collectives
    assert rated.modelled_s == pytest.approx(plain.modelled_s, rel=1e-6)
    # estimate itself (plan, estimate on the CPU profile) costs the rates: same step at the profile's configuration,
    # more collective time; GPU devices never read the ratios
    from scalestudy.costmodel.estimate import estimate
    from scalestudy.specs.strategy import Strategy

    def est(device, nproc=2):
        return estimate(get_model("t5-tiny"), ClusterSpec(device=device, nodes=1, gpus_per_node=nproc),
                        Strategy(engine="deepspeed", zero=3, precision="fp32", micro_batch=2),
                        Workload(4 * nproc, 64, 16))

    assert est(measured).step_s == pytest.approx(est(base).step_s, rel=1e-6)
    assert est(measured).dp_comm_total_s > 2 * est(base).dp_comm_total_s
    gpu = get_device("a100-80gb")
    assert est(replace(gpu, collective_time_ratio={"all_gather": 1.5, "reduce_scatter": 4.0}), 8).step_s == \
        est(gpu, 8).step_s


def test_compute_efficiency_moves_with_the_micro_batch_once_two_sizes_ran():
    """gpt2-tiny's steps at micro-batch 8 ran slower per sequence than at 4 (logits outgrow the caches), the
    model's the other way round: trials at both sizes give the refit a compute-factor slope per doubling, which
    carries to the other engines; trials at one size leave it at 0."""
    def t(fam, engine, mb):
        return StepTerms(0.1 * (1 + 0.02 * (8 // mb)), 0.0, 0.001, 8 // mb, fam, engine, micro_batch=mb)

    def truth(x):  # 25% more compute time per doubling of the micro-batch above 2
        return x.compute_s * (1 + 0.25 * (x.micro_batch.bit_length() - 2)) + x.optimizer_s

    ran = [t("ddp", "ddp", 8), t("ddp", "ddp", 4), t("ds-z0", "deepspeed", 8)]
    fit = fit_efficiency([(x, truth(x)) for x in ran])
    assert fit.compute_slope > 0.1
    for x in (t("ds-z0", "deepspeed", 4), t("ds-z0", "deepspeed", 2)):
        assert fit.predict(x) == pytest.approx(truth(x), rel=0.06)
    assert fit_efficiency([(x, truth(x)) for x in ran if x.micro_batch == 8]).compute_slope == 0.0


# tensors and gathered elements as the built models have them (engine.models.build_model on the meta device:
# gpt2-tiny 28 tensors, 1 over 1e5 elements; t5-micro 144, 110 over)
@pytest.mark.parametrize("name, gathered, fetches, tensors", [
    # every gpt2-tiny block tensor is <= 65,536 elements (d 128): only the tied 8192 x 128 embedding is gathered
    ("gpt2-tiny", 8192 * 128, 1, 28),
    # t5-micro (d 384): q/k/v/o 147,456 and FFN 589,824 elements are partitioned, only the norms stay whole;
    # 12 blocks x 4 fetches + the embedding and the untied head
    ("t5-micro", 38_154_752 - 6 * 2 * 384 - 6 * 3 * 384 - 1280, 12 * 4 + 2, 144),
])
def test_deepspeed_zero3_gathers_only_tensors_over_the_persistence_threshold(name, gathered, fetches, tensors):
    """DeepSpeed keeps parameters of <= stage3_param_persistence_threshold (1e5) elements whole on every rank
    (engine/settings.py leaves the default): the model gathers only the partitioned ones, FSDP gathers all.
    ZeroRedundancyOptimizer (ddp zero 1) broadcasts every parameter tensor on its own after the step: on gloo
    ranks with measured rates each pays the link latency and, the owners in turn, the whole fp32 buffer crosses
    the link once (in place, cpu_collectives.zero_redundancy_dp_comm), where the GPU (NCCL) model keeps one
    all-gather of it."""
    from dataclasses import replace

    from scalestudy.costmodel.estimate import estimate
    from scalestudy.costmodel.params import params_per_device
    from scalestudy.costmodel.zero3 import zero3_gathers
    from scalestudy.specs.hardware import ClusterSpec, get_device
    from scalestudy.specs.presets import get_model
    from scalestudy.specs.strategy import Strategy, Workload

    m = get_model(name)
    z = zero3_gathers(m, 1, 1, m.total_layers, params_per_device(m, 1, 1))
    assert z.gathered_elems == gathered and z.layer_fetches * 4 + z.other_fetches == fetches
    assert z.tensors == tensors
    cluster, w = ClusterSpec(device=get_device("local-cpu"), nodes=1, gpus_per_node=2), Workload(16, 128, 0)
    ds3, fsdp3 = (estimate(m, cluster, Strategy(engine=e, zero=3, precision="fp32", micro_batch=1), w)
                  for e in ("deepspeed", "fsdp"))
    ratio = ds3.dp_comm_total_s / fsdp3.dp_comm_total_s  # same gathers and reduce-scatter otherwise
    assert (ratio < 0.8) if name == "gpt2-tiny" else (ratio == pytest.approx(1.0, rel=0.02))
    zero1 = Strategy(engine="ddp", zero=1, precision="fp32", micro_batch=1)
    rated = replace(cluster, device=replace(cluster.device, collective_time_ratio={"all_gather": 1.0}))
    extra = estimate(m, rated, zero1, w).dp_comm_total_s - estimate(m, cluster, zero1, w).dp_comm_total_s
    dev = cluster.device
    half_buffer = 4 * params_per_device(m, 1, 1) / 2 / (dev.intra_node_bytes_per_s * 0.95)  # the all-gather's
    assert extra == pytest.approx((tensors - 1) * dev.intra_node_latency_s + half_buffer)


@pytest.mark.parametrize("grid, pinned", [("tune_grid_t5micro_quiet.json", 9.6), ("tune_grid_t5micro_quiet2.json", 9.1),
                                          ("tune_grid_gpt2tiny.json", 8.3)])
def test_predictions_of_strategies_not_run_hold_up_under_trial_noise(grid, pinned):
    """What tune predicts for the strategies it did not run (`EfficiencyModel`: the cost model times the factor the
    trials set, `fit_residual`) when each of its trials is one noisy sample (8% per trial, this machine's noise):
    tune's trial set (the screen, DDP at another micro-batch, ZeRO-3) on two recorded grids -- the quiet t5-micro
    grid of 2026-12-02 00:34 (tests/unit/data/tune_grid_t5micro_quiet.json) and gpt2-tiny's -- 20 noisy draws each.
    The efficiency refit, which moves the model's parts to match the trials, follows their noise further."""
    import math
    import random

    from scalestudy.costmodel.calibrate import fit_residual
    from scalestudy.plan.noise import PRIOR_TRIAL_NOISE

    terms, measured, mb = load(DATA / grid)
    ran = [k for k, t in terms.items() if mb[k] == 8 and t.family in LOWEST] + ["ddp tp1 pp1 mb4 fp32",
                                                                              "ds-z3 tp1 pp1 mb8 fp32"]
    factor_med, refit_med = [], []
    for seed in range(20):
        rng = random.Random(seed)
        noisy = {k: measured[k] * math.exp(rng.gauss(0, PRIOR_TRIAL_NOISE)) for k in ran}
        res = fit_residual([(terms[k], terms[k].modelled_s, noisy[k], 1) for k in ran], PRIOR_TRIAL_NOISE)
        fit = fit_efficiency([(terms[k], noisy[k]) for k in ran])
        rest = [k for k in terms if k not in ran]
        factor_med.append(statistics.median(
            abs(terms[k].modelled_s * math.exp(res.log_factor(terms[k])) / measured[k] - 1) for k in rest))
        refit_med.append(statistics.median(abs(fit.predict(terms[k]) / measured[k] - 1) for k in rest))
    # Pinned (median over the draws of the median |error| over the 27 strategies not run, %): t5-micro quiet 9.6
    # (refit 11.2), gpt2-tiny 8.3 (refit 14.9); worst draw 16.1 / 19.4 (refit 26.3 / 26.0). Measured 2026-12-02 01:42
    # with the engine prior at 5% (calibrate.RESIDUAL_TAU; at 15%: 9.2 / 8.4, worst 18.8 / 22.6); the fixtures hold
    # the cost model's terms of 01:12 (before the CPU DeepSpeed/FSDP paths of e986609).
    # tune_grid_t5micro_quiet2.json: each strategy's median over the two quiet grids (00:34 and 03:48, the second
    # grid's profile and HEAD 47b41a0's model; `bench_tune.py --grid-from A --grid-from B --export-terms`): 9.1
    # (refit 11.5), worst draw 22.3 (31.6).
    assert 100 * statistics.median(factor_med) <= pinned + 1.5
    assert statistics.median(factor_med) < statistics.median(refit_med)


def test_the_factor_shrinks_an_engines_excess_toward_the_model_and_widens_for_what_no_trial_saw():
    """One trial per engine: DDP 1.3x the model, DeepSpeed ZeRO-0 1.3 x 1.2x. The factor gives ZeRO-1 (never run)
    part of DeepSpeed's 20% excess (its engine's term; the rest is read as ZeRO-0's own or noise), FSDP (no trial)
    the overall level only; its sd is widest for the engine no trial measured, then the unmeasured stage."""
    import math

    from scalestudy.costmodel.calibrate import fit_residual

    def t(fam, engine, ga=1):
        return StepTerms(1.0, 0.1, 0.05, ga, fam, engine, micro_batch=8 // ga)

    ddp, ds0, ds1, fsdp = t("ddp", "ddp"), t("ds-z0", "deepspeed"), t("ds-z1", "deepspeed"), t("fsdp-z2", "fsdp")
    res = fit_residual([(ddp, ddp.modelled_s, 1.3 * ddp.modelled_s, 1),
                        (ds0, ds0.modelled_s, 1.3 * 1.2 * ds0.modelled_s, 1)], 0.08)
    factor = {x.family: math.exp(res.log_factor(x)) for x in (ddp, ds0, ds1, fsdp)}
    assert factor["ddp"] == pytest.approx(1.3, rel=0.05) and factor["ds-z0"] == pytest.approx(1.56, rel=0.05)
    assert factor["ddp"] < factor["ds-z1"] < factor["ds-z0"]  # shrunk toward the model, not all of the excess
    assert min(factor["ddp"], factor["ds-z0"]) <= factor["fsdp-z2"] <= max(factor["ddp"], factor["ds-z0"])
    sd = {x.family: res.log_sd(x) for x in (ds0, ds1, fsdp)}
    assert sd["ds-z0"] < sd["ds-z1"] < sd["fsdp-z2"]
