"""The planner's speed devices change no number: the stage collectives memoised across a layout's optimizer variants
(stage_terms._stage_comm), the position-bias mask elements per stage (attention_bias._saved_and_grad), ZeRO-3's
reuse walk (zero3.zero3_reuse) and the collector paused during plan() (planner._gc_paused)."""

import gc
import itertools

from scalestudy.costmodel import activation_cache_clear, stage_terms
from scalestudy.costmodel.attention_bias import BIAS_ELEMENT_BYTES, GRAD_ALIGN, _calls, bias_memory_bytes
from scalestudy.costmodel.estimate import estimate
from scalestudy.errors import ScalestudyError
from scalestudy.plan.planner import plan
from scalestudy.plan.space import Constraints
from scalestudy.specs.hardware import make_cluster
from scalestudy.specs.model import get_model
from scalestudy.specs.strategy import ZERO_STAGES, Strategy, Workload


def _strategies(pp: int) -> list[Strategy]:
    out = []
    for engine, zeros in ZERO_STAGES.items():
        for zero, off_o, off_p, loop, mb in itertools.product(zeros, ("none", "cpu"), ("none", "cpu"),
                                                              ("engine", "foreach"), (1, 2)):
            try:
                out.append(Strategy(engine=engine, zero=zero, offload_optimizer=off_o, offload_params=off_p, tp=2,
                                    pp=pp, micro_batch=mb, optimizer_loop=loop))
            except ScalestudyError:
                pass
    return out


def test_memoised_stage_collectives_equal_a_fresh_evaluation():
    """Each strategy priced after its optimizer siblings (memo hits) equals it priced with every cache empty; the
    siblings do hit (fewer memo entries than estimates)."""
    cluster = make_cluster("a100-40gb", nodes=2, gpus_per_node=8)
    cases = [(get_model("llama-7b"), Workload(global_batch=64, seq_len=2048), 1),
             (get_model("mt5-small"), Workload(global_batch=64, seq_len=512, target_len=114), 2)]
    for model, work, pp in cases:
        strategies = _strategies(pp)
        activation_cache_clear()
        warm = [estimate(model, cluster, s, work).to_dict() for s in strategies]
        assert 0 < len(stage_terms._COMM) < len(strategies)
        for s, expected in zip(strategies, warm):
            activation_cache_clear()
            assert estimate(model, cluster, s, work).to_dict() == expected, s.label


def test_bias_memory_is_the_per_call_formula_at_every_in_flight_count():
    model = get_model("t5-small")
    for mb, tp, recompute, blocks, flight in itertools.product((1, 3), (1, 2), ("none", "selective", "full"),
                                                               (None, (3, 0), (2, 1), (0, 3)), (1, 2, 5)):
        calls = [c for c in _calls(model, 512, 114, tp, recompute, blocks) if c.calls]
        rebuilt = recompute in ("full", "selective")
        saved = sum(c.calls * c.elems if c.copied and not rebuilt else c.elems for c in calls)
        grad = max((mb * c.heads * c.q * -(-c.k // GRAD_ALIGN) * GRAD_ALIGN + c.elems for c in calls if c.trained),
                   default=0)
        assert bias_memory_bytes(model, mb, 512, 114, tp, recompute, blocks, flight) == \
            (saved * flight + grad) * BIAS_ELEMENT_BYTES


def test_plan_pauses_the_collector_only_while_it_runs():
    model, cluster = get_model("gpt2"), make_cluster("a100-40gb", nodes=1, gpus_per_node=8)
    work = Workload(global_batch=64, seq_len=512)
    seen = []

    def estimator(*args):
        seen.append(gc.isenabled())
        return estimate(*args)

    assert gc.isenabled()
    plan(model, cluster, work, Constraints(engines=("ddp",)), estimator=estimator)
    assert seen and not any(seen) and gc.isenabled()
    gc.disable()
    try:
        plan(model, cluster, work, Constraints(engines=("ddp",)), estimator=estimator)
        assert not gc.isenabled()  # left as the caller had it
    finally:
        gc.enable()
