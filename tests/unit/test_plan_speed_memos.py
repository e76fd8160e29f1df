"""The planner's speed devices change no number: the stage collectives memoised across a layout's optimizer variants
(stage_terms._stage_comm), the position-bias mask elements per stage (attention_bias._saved_and_grad) and
per distinct blocks of a split (priced_stage_bias_memory), ZeRO-3's reuse walk (zero3.zero3_reuse, cached once for
the recomputes that walk the same trace), the software fills made once per layout's engine variant
(space._filled_fields), a group's strategy checked once for every recompute (Strategy.with_recompute) and the
collector paused during plan() (planner._gc_paused), its allocations left in the oldest generation after."""

import gc
import itertools

from scalestudy.costmodel import activation_cache_clear, stage_terms
from scalestudy.costmodel import zero3
from scalestudy.costmodel.attention_bias import (BIAS_ELEMENT_BYTES, GRAD_ALIGN, _calls, bias_memory_bytes,
                                                 priced_bias_memory, priced_stage_bias_memory)
from scalestudy.costmodel.engines import engine_comm
from scalestudy.costmodel.memory import stage_in_flight
from scalestudy.costmodel.estimate import estimate
from scalestudy.errors import ScalestudyError
from scalestudy.plan.planner import plan
from scalestudy.plan.space import Constraints, enumerate_space
from scalestudy.specs.hardware import make_cluster
from scalestudy.specs.presets import get_model
from scalestudy.specs.run import trained_fill
from scalestudy.specs.strategy import ZERO_STAGES, Strategy, Workload, hf_decoder, software_fill


def _strategies(pp: int, engines: dict = ZERO_STAGES, **software) -> list[Strategy]:
    out = []
    for engine, zeros in engines.items():
        for zero, off_o, off_p, loop, mb in itertools.product(zeros, ("none", "cpu"), ("none", "cpu"),
                                                              ("engine", "foreach"), (1, 2)):
            try:
                out.append(Strategy(engine=engine, zero=zero, offload_optimizer=off_o, offload_params=off_p, tp=2,
                                    pp=pp, micro_batch=mb, optimizer_loop=loop, **software))
            except ScalestudyError:
                pass
    return out


def test_memoised_stage_collectives_equal_a_fresh_evaluation():
    """Each strategy priced after its optimizer siblings (memo hits) equals it priced with every cache empty; the
    siblings do hit (fewer memo entries than estimates)."""
    cluster = make_cluster("a100-40gb", nodes=2, gpus_per_node=8)
    # a GPT on eager kernels in 16 bits: ddp's autocast casts and megatron's separate bias adds are priced too
    gpt = _strategies(2, {**ZERO_STAGES, "megatron": (0, 1)}, kernels="eager", precision="fp16")
    cases = [(get_model("llama-7b"), Workload(global_batch=64, seq_len=2048), _strategies(1)),
             (get_model("mt5-small"), Workload(global_batch=64, seq_len=512, target_len=114), _strategies(2)),
             (get_model("gpt2"), Workload(global_batch=64, seq_len=1024), gpt)]
    for model, work, strategies in cases:
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


def test_plan_leaves_what_it_allocated_in_the_oldest_generation():
    """Back on, the collector does not scan the plan's allocations in a young-generation collection (tens of ms after
    a large plan): they are in the oldest generation when plan() returns; a caller's frozen objects stay frozen."""
    model, cluster = get_model("gpt2"), make_cluster("a100-40gb", nodes=1, gpus_per_node=8)
    work = Workload(global_batch=64, seq_len=512)
    gc.collect()  # generation counts at 0: the first collection after plan() is a young one
    result = plan(model, cluster, work, Constraints(engines=("ddp",)))
    oldest = {id(o) for o in gc.get_objects(generation=2)}
    assert id(result.candidates[0]) in oldest and id(result.candidates[-1].estimate) in oldest
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        plan(model, cluster, work, Constraints(engines=("ddp",)))
        assert gc.get_freeze_count() >= frozen > 0
    finally:
        gc.unfreeze()


def test_stage_masks_equal_each_stage_priced_on_its_own():
    """priced_stage_bias_memory (one lookup per distinct blocks of a split) equals priced_bias_memory of each stage's
    (encoder, decoder) blocks with its in-flight micro-batches, as the per-stage loop priced them; 0 per stage where
    the kernel takes no mask."""
    model = get_model("t5-small")  # 6 + 6 blocks
    gpu, cpu = make_cluster("a100-40gb", 1, 8).device, make_cluster("local-cpu", 1, 2).device
    splits = [(6, 6), (4, 4, 4), (3, 3, 3, 3), (4, 3, 3, 2), (5, 2, 5), (2,) * 6, (1, 2, 3, 3, 2, 1), (1,) * 12]
    for split, mb, tp, recompute, (sched, m, v) in itertools.product(
            splits, (1, 4), (1, 2), ("none", "selective", "full"), (("1f1b", 8, 1), ("gpipe", 4, 1),
                                                                      ("interleaved", 12, 2))):
        flight = stage_in_flight(sched, len(split), m, v)
        expected, start = [], 0
        for n, f in zip(split, flight):
            n_enc = max(0, min(start + n, model.num_layers) - start)
            expected.append(priced_bias_memory(model, "mem-efficient", True, gpu, mb, 512, 114, tp, recompute,
                                               (n_enc, n - n_enc), f))
            start += n
        assert priced_stage_bias_memory(model, "mem-efficient", True, gpu, mb, 512, 114, tp, recompute, split,
                                        flight) == tuple(expected)
        for kernel, flash, device in (("fa2", True, gpu), ("mem-efficient", False, gpu), ("mem-efficient", True, cpu)):
            assert priced_stage_bias_memory(model, kernel, flash, device, mb, 512, 114, tp, recompute, split,
                                            flight) == (0.0,) * len(split)


def test_zero3_reuse_walks_one_trace_for_every_recompute_but_full():
    """none, selective and op run no recompute forward in the module trace: one cached walk, equal to a fresh one;
    full walks its own (the recompute's gathers are held into the backward)."""
    reuse = engine_comm("deepspeed").stage3_max_reuse_elems
    for name, tp in (("mt5-small", 1), ("llama-7b", 2), ("gpt2", 1)):
        model = get_model(name)
        zero3._zero3_reuse.cache_clear()
        walks = {rc: zero3.zero3_reuse(model, tp, rc, reuse) for rc in ("none", "selective", "op", "full")}
        assert zero3._zero3_reuse.cache_info().currsize == 2
        for rc, walk in walks.items():
            assert walk == zero3._zero3_reuse.__wrapped__(model, tp, rc == "full", reuse)
        assert walks["none"] == walks["selective"] == walks["op"]


def test_enumerated_strategies_equal_those_filled_group_by_group():
    """_filled_fields fills a layout's engine variant once for all its recomputes, schedules and micro-batches, and
    a group at a later recompute reuses the first one's checked strategy (with_recompute): every point's strategy
    equals the one built from its own complete fields, filled as plan filled each group (trained_fill, then
    software_fill), and checked by Strategy itself (a new rule that refused some of them would fail here)."""
    cases = [(get_model("mt5-small"), Workload(global_batch=64, seq_len=512, target_len=114), Constraints()),
             (get_model("gpt2"), Workload(global_batch=64, seq_len=1024),
              Constraints(engines=("deepspeed", "fsdp", "ddp", "megatron"))),
             (get_model("llama-7b"), Workload(global_batch=64, seq_len=2048), Constraints(kernels="fused"))]
    cluster = make_cluster("a100-40gb", nodes=2, gpus_per_node=8)
    for model, work, constraints in cases:
        points = enumerate_space(model, cluster, work, constraints)
        assert len({p.strategy.recompute for p in points}) > 1 and len({p.strategy.pp_schedule for p in points}) > 1
        named = {"kernels"} if constraints.kernels == "fused" else set()
        for point in points:
            fields = {name: getattr(point.strategy, name) for name in Strategy.__dataclass_fields__
                      if name not in TRAINED_FILLS or name in named}
            for name in TRAINED_FILLS - named:
                fields[name] = Strategy.__dataclass_fields__[name].default
            fields.update({k: v for k, v in trained_fill(fields["engine"], fields, model).items() if k not in named})
            fields.update(software_fill(fields, model.is_encoder_decoder, hf_decoder(model)))
            assert Strategy(**fields) == point.strategy, point.strategy.label


# the fields plan fills from train's software or the engine's kernels (the rest are the constraints' own)
TRAINED_FILLS = {"kernels", "recompute_early_stop", "cross_entropy", "attention_kernel", "optimizer_loop", "lm_head",
                 "grad_accum_dtype"}


def test_with_recompute_is_the_checked_replace():
    base = Strategy(engine="deepspeed", zero=1, tp=2, pp=4, pp_schedule="interleaved", virtual_stages=2,
                    micro_batch=2, offload_optimizer="cpu")
    for recompute in ("none", "selective", "full", "op"):
        assert base.with_recompute(recompute) == base.replace(recompute=recompute)
        assert base.with_recompute(recompute).__dict__ == base.replace(recompute=recompute).__dict__
    try:
        base.with_recompute("some")
    except ScalestudyError as exc:
        assert "unknown recompute 'some'" in str(exc)
    else:
        raise AssertionError("with_recompute took an unknown recompute")


def test_a_second_plan_on_the_same_cluster_reuses_the_first_ones_memos():
    """A cluster cut to all of its nodes is the cluster itself (ClusterSpec.with_nodes), so the stage collectives
    memoised by the cluster's identity in one plan serve the next plan on it: no new entry, the same ranking."""
    cluster = make_cluster("a100-40gb", nodes=2, gpus_per_node=8)
    assert cluster.with_nodes(2) is cluster and cluster.with_nodes(1) is not cluster
    model, work = get_model("gpt2"), Workload(global_batch=64, seq_len=1024)
    activation_cache_clear()
    first = plan(model, cluster, work)
    entries = len(stage_terms._COMM)
    second = plan(model, cluster, work)
    assert entries > 0 and len(stage_terms._COMM) == entries
    assert [c.estimate.to_dict() for c in second.candidates] == [c.estimate.to_dict() for c in first.candidates]


def test_a_layouts_zero_stages_share_one_tensor_parallel_price():
    """terms._tp_comm is priced once for the ZeRO stages and offloads of a layout (stage_terms._stage_tp_comm):
    fewer entries than the stage collectives' memo holds, and every estimate equals it priced with empty caches."""
    cluster = make_cluster("a100-40gb", nodes=2, gpus_per_node=8)
    model, work = get_model("llama-7b"), Workload(global_batch=64, seq_len=2048)
    strategies = _strategies(1)
    activation_cache_clear()
    warm = [estimate(model, cluster, s, work).to_dict() for s in strategies]
    assert 0 < len(stage_terms._TP) < len(stage_terms._COMM)
    for s, expected in zip(strategies, warm):
        activation_cache_clear()
        assert estimate(model, cluster, s, work).to_dict() == expected, s.label


def test_recompute_and_pipeline_shared_terms_equal_a_fresh_evaluation():
    """compute_times' recompute-free passes (step._passes), a micro-batch's stored activations (memory.
    _stored_working_logits) and their split over the stages (memory._stage_stored_bytes) are memoised on fewer inputs
    than their callers: a strategy priced after its recompute, pipeline and schedule siblings (memo hits) equals it
    priced with every cache empty, and the siblings do hit."""
    from scalestudy.costmodel import memory, step

    cluster = make_cluster("a100-40gb", nodes=2, gpus_per_node=8)
    cases = [(get_model("mt5-small"), Workload(global_batch=64, seq_len=512, target_len=114)),
             (get_model("gpt2"), Workload(global_batch=64, seq_len=1024))]
    for model, work in cases:
        strategies = []
        for engine, zero, pp, sched, rc, sp, kernels, mb in itertools.product(
                ("megatron", "fsdp"), (0, 1, 2), (1, 2, 4), ("1f1b", "gpipe"), ("none", "selective", "full"),
                (True, False), ("engine", "eager"), (1, 2)):
            try:
                strategies.append(Strategy(engine=engine, zero=zero, tp=2, pp=pp, pp_schedule=sched, recompute=rc,
                                           sequence_parallel=sp, kernels=kernels, micro_batch=mb))
            except ScalestudyError:
                pass
        activation_cache_clear()
        warm = [estimate(model, cluster, s, work).to_dict() for s in strategies]
        assert 0 < len(step._PASSES) < len(step._CACHE)
        assert 0 < len(memory._STORED) < len(strategies) and 0 < len(memory._STAGE_STORED) < len(strategies)
        for s, expected in zip(strategies[::7], warm[::7]):
            activation_cache_clear()
            assert estimate(model, cluster, s, work).to_dict() == expected, s.label
