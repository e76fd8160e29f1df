"""Planner logic: ranking, Pareto front, pruning that never changes the answer, explanation, errors.

Logic tests use a small analytical stand-in estimator (memory and time formulas stated below) so every expected
number can be derived by hand; the planner against the real cost model is tested
in tests/e2e/test_cli_plan.py (every proposal fits, pruning agrees with estimating everything).
"""

from dataclasses import dataclass, replace

import pytest

from scalestudy.errors import ScalestudyError
from scalestudy.plan.planner import explain, pareto_front, plan
from scalestudy.plan.space import Constraints
from scalestudy.specs.hardware import make_cluster
from scalestudy.specs.presets import get_model
from scalestudy.specs.strategy import Workload

GIB = 2**30


@dataclass
class FakeEstimate:
    fits: bool
    step_s: float
    tokens_per_s: float
    mfu: float
    per_device_bytes: int

    def to_dict(self):
        return {"fits": self.fits, "time": {"step_s": self.step_s, "compute_s": 0.8 * self.step_s,
                                            "comm_s": 0.2 * self.step_s}}


def fake_estimate(model, cluster, s, w):
    """Memory: 30 GiB of states / (zero-sharding) + 2 GiB x micro-batch x recompute factor; time falls with dp."""
    world = cluster.world_size
    dp = world // (s.tp * s.pp)
    states = 30 * GIB / (s.tp * s.pp) / (dp if s.zero == 3 else 1)
    act = 2 * GIB * s.micro_batch * {"none": 1.0, "selective": 0.5, "full": 0.1}[s.recompute] / s.tp
    mem = states + act
    step = w.tokens_per_step / (world * 1e4) * (1 + 0.1 * s.zero + 0.3 * (s.recompute == "full")) / s.micro_batch ** 0.1
    return FakeEstimate(mem <= cluster.device.memory_bytes, step, w.tokens_per_step / step, 0.4, int(mem))


MODEL = get_model("mt5-large")
CLUSTER = make_cluster("a100-40gb", 2, 8)
WORK = Workload(64, 512, 128)


def test_pruning_never_changes_the_answer_and_saves_estimates():
    pruned = plan(MODEL, CLUSTER, WORK, estimator=fake_estimate)
    full = plan(MODEL, CLUSTER, WORK, estimator=fake_estimate, prune=False)
    assert [c.strategy for c in pruned.candidates] == [c.strategy for c in full.candidates]
    assert pruned.feasible == full.feasible and pruned.evaluated == full.evaluated
    assert pruned.estimated < full.estimated and pruned.pruned == full.estimated - pruned.estimated


def test_every_candidate_fits_and_ranking_is_by_throughput():
    r = plan(MODEL, CLUSTER, WORK, estimator=fake_estimate)
    assert all(c.estimate.fits for c in r.candidates)
    tps = [c.estimate.tokens_per_s for c in r.candidates]
    assert tps == sorted(tps, reverse=True)
    assert r.best.strategy.zero == 0 and r.best.strategy.recompute != "full"


def test_pareto_front_is_exactly_the_non_dominated_set():
    r = plan(MODEL, CLUSTER, WORK, estimator=fake_estimate)
    front = pareto_front(r.candidates)
    for c in r.candidates:
        dominated = any(o.estimate.tokens_per_s >= c.estimate.tokens_per_s and o.headroom_bytes >= c.headroom_bytes
                        and (o.estimate.tokens_per_s > c.estimate.tokens_per_s or o.headroom_bytes > c.headroom_bytes)
                        for o in r.candidates)
        assert (c in front) == (not dominated)
    heads = [c.headroom_bytes for c in front]
    assert heads == sorted(heads)  # throughput falls along the front, headroom rises


def test_constraints_and_min_nodes_objective():
    r = plan(MODEL, CLUSTER, WORK, Constraints(zero=(3,)), estimator=fake_estimate)
    assert {c.strategy.zero for c in r.candidates} == {3}
    best2 = plan(MODEL, CLUSTER, WORK, estimator=fake_estimate).best.estimate.tokens_per_s
    # Needing 60% of the 2-node best is reachable on 2 nodes but not on 1 (half the devices -> ~half the rate).
    r = plan(MODEL, CLUSTER, WORK, objective="min-nodes", min_throughput=0.6 * best2, estimator=fake_estimate)
    assert r.best.nodes == 2
    r = plan(MODEL, CLUSTER, WORK, objective="min-nodes", min_throughput=0.3 * best2, estimator=fake_estimate)
    assert r.best.nodes == 1 and r.best.estimate.tokens_per_s >= 0.3 * best2
    with pytest.raises(ScalestudyError, match="needs --min-throughput"):
        plan(MODEL, CLUSTER, WORK, objective="min-nodes", estimator=fake_estimate)
    with pytest.raises(ScalestudyError, match="no strategy reaches"):
        plan(MODEL, CLUSTER, WORK, objective="min-nodes", min_throughput=10 * best2, estimator=fake_estimate)


def test_cost_objective_prefers_fewer_device_hours():
    r = plan(MODEL, CLUSTER, Workload(64, 512, 128, train_tokens=1e9), objective="cost", estimator=fake_estimate)
    hours = [c.device_hours for c in r.candidates]
    assert hours == sorted(hours)
    assert r.best.device_hours == pytest.approx(r.best.world_size * 1e9 / r.best.estimate.tokens_per_s / 3600)


def test_nothing_fits_is_a_clear_error():
    # One 16 GiB device: 30 GiB of states never fit (nothing to shard over, no model parallelism).
    small = make_cluster("a100-40gb", 1, 1)
    small = replace(small, device=replace(small.device, memory_bytes=16 * GIB))
    with pytest.raises(ScalestudyError, match="no strategy fits"):
        plan(MODEL, small, Workload(8, 512, 128), estimator=fake_estimate)


def test_explain_gives_numbers_for_winner_and_runner_up():
    r = plan(MODEL, CLUSTER, WORK, estimator=fake_estimate)
    text = explain(r)
    a, b = r.candidates[:2]
    assert a.strategy.label in text and b.strategy.label in text
    assert f"{a.estimate.tokens_per_s:,.0f}" in text and "tokens/s" in text and "GiB" in text
    assert len(text.splitlines()) <= 2


@dataclass
class PartsEstimate(FakeEstimate):
    """FakeEstimate with a step-time breakdown: 80% compute, 20% exposed data-parallel communication."""

    def time_parts(self):
        return {"compute_s": 0.8 * self.step_s, "dp_comm_exposed_s": 0.2 * self.step_s}


def test_explain_names_step_terms_in_words_with_units():
    # ZeRO 0 vs 1 on one layout: steps that differ (other layouts of the stand-in tie)
    one_layout = Constraints(zero=(0, 1), tp=(1,), pp=(1,), micro_batch=(4,), recompute=("none",))
    r = plan(MODEL, CLUSTER, WORK, one_layout, estimator=lambda *a: PartsEstimate(**vars(fake_estimate(*a))))
    a, b = r.candidates[:2]
    line = explain(r).splitlines()[1]
    assert line.startswith("Largest differences (winner vs runner-up): ")
    assert (f"compute {0.8 * a.estimate.step_s:.4g} vs {0.8 * b.estimate.step_s:.4g} s per step" in line
            and "exposed data-parallel communication " in line)
    assert "compute_s" not in line and "dp_comm_exposed_s" not in line  # the --json keys are not words


def test_json_schema_keys():
    r = plan(MODEL, CLUSTER, WORK, estimator=fake_estimate)
    js = r.to_json(top=3)
    assert set(js) >= {"candidates", "evaluated", "feasible"}
    assert len(js["candidates"]) == 3
    c = js["candidates"][0]
    assert set(c) >= {"strategy", "estimate", "layout"}
    assert c["strategy"] == r.best.strategy.to_dict()
    assert c["layout"]["dp"] * c["layout"]["tp"] * c["layout"]["pp"] == c["layout"]["world_size"]
