"""estimate()'s busiest pipeline rank holds the vocabulary tensors of the chunks it runs (params.chunk_vocab_params via
terms._in_flight_free), its memos keep one strategy's tables from another's, and plan's pruning stays a true bound
of what estimate() computes (a schedule's memory bounds only its own lighter settings)."""

import pytest

from scalestudy.costmodel import activation_cache_clear
from scalestudy.costmodel.estimate import MicroBatchGroup, estimate, estimate_if_fits
from scalestudy.plan.planner import plan
from scalestudy.plan.space import Constraints
from scalestudy.specs.hardware import make_cluster
from scalestudy.specs.presets import get_model
from scalestudy.specs.strategy import Strategy, Workload


def test_interleaved_t5_base_estimate_holds_rank_0s_two_tables_as_train_measured():
    # newcomer3's run (test_costmodel_pipeline_embeddings has the count by hand): t5-base, ddp, pp 2 interleaved x 4
    # chunks, fp32 -- rank 0 holds the encoder's embedding (chunk 0) and the decoder's copy (chunk 4): 148,464,384
    # parameters; train measured 2,375,418,384 B of fp32 weights + gradients + Adam's two moments (16 B each).
    # estimate() counted the even split's single table (123,790,080: 1,980,641,280 B, -16.6%).
    st = Strategy(engine="ddp", pp=2, pp_schedule="interleaved", virtual_stages=4, precision="fp32")
    est = estimate(get_model("t5-base"), make_cluster("local-cpu", 1, 2), st,
                   Workload(global_batch=4, seq_len=128, target_len=32))
    states = est.to_dict()["memory"]["model_states_bytes"]
    assert states == 16 * 148_464_384
    assert states == pytest.approx(2_375_418_384, rel=1e-5)


def test_an_autocast_engine_is_not_lent_another_engines_activations():
    # DDP over eager kernels keeps fp32 weights under autocast, so a T5's own casts add to each in-flight
    # micro-batch's activations (autocast_memory.t5_cast_bytes); FSDP's bf16 weights add none. terms._derived_shape
    # keyed neither the engine nor autocast_weights: FSDP priced first lent DDP its smaller activations.
    model, cluster = get_model("t5-base"), make_cluster("a100-80gb", 1, 4)
    work = Workload(global_batch=16, seq_len=512, target_len=128)
    ddp = Strategy(engine="ddp", pp=2, micro_batch=2, kernels="eager")
    fsdp = Strategy(engine="fsdp", zero=2, pp=2, micro_batch=2, kernels="eager")

    activation_cache_clear()
    alone = estimate(model, cluster, ddp, work).per_device_bytes
    activation_cache_clear()
    estimate(model, cluster, fsdp, work)
    assert estimate(model, cluster, ddp, work).per_device_bytes == alone


def test_a_planner_group_is_not_lent_another_chunk_counts_tables():
    # t5-base at pp 4 (24 blocks): interleaved x 2 (chunks of 3) puts decoder block 0 on chunk 4, rank 0, beside the
    # embedding: two tables; x 4 (chunks of 2, 2, 1, 1 per rank) on chunk 6, rank 2: one table per rank. A planner
    # group's shape memo (terms.shape_group of _shape_fields) must key virtual_stages, or the second group's
    # strategies read the first's shapes where their in-flight micro-batches agree (global batch 16, mb 2 here).
    model, cluster = get_model("t5-base"), make_cluster("a100-80gb", 1, 8)
    work = Workload(global_batch=16, seq_len=512, target_len=128)
    v2 = Strategy(engine="ddp", pp=4, micro_batch=2, kernels="eager", pp_schedule="interleaved", virtual_stages=2)
    v4 = v2.replace(virtual_stages=4)
    for first, second in ((v2, v4), (v4, v2)):
        activation_cache_clear()
        alone = estimate_if_fits(model, cluster, second, work).per_device_bytes
        activation_cache_clear()
        shared: dict = {}  # as the planner prices: one MicroBatchGroup per group, `shared` per cluster
        MicroBatchGroup(model, cluster, work, shared=shared)(first)
        assert MicroBatchGroup(model, cluster, work, shared=shared)(second).per_device_bytes == alone


def test_pruning_keeps_what_estimating_everything_finds_where_schedules_hold_other_tables():
    # mt5-large (untied head, 24 + 24 blocks) at pp 4 on 8 x V100-16GB: interleaved x 2 and x 4 put decoder block 0
    # on a chunk of rank 0 (the embedding and the decoder's copy: two 250,112 x 1,024 tables), 1F1B on stage 2 (one
    # table per rank). DDP's interleaved full-recompute micro-batch 1 needs 16.5 GiB (does not fit), 1F1B's 10.7 GiB,
    # and the planner took the first as a bound for 1F1B's lighter settings too (4 fitting 1F1B strategies pruned,
    # micro-batch 1 and 2 without and with selective recompute): a schedule's memory bounds only its own
    # (planner.evaluate's family holds the schedule).
    model, cluster = get_model("mt5-large"), make_cluster("v100-16gb", 1, 8)
    work = Workload(global_batch=64, seq_len=512, target_len=128)
    constraints = Constraints(engines=("ddp",), tp=(1,), pp=(4,), precision="fp16")
    pruned = plan(model, cluster, work, constraints, prune=True)
    everything = plan(model, cluster, work, constraints, prune=False)
    assert pruned.pruned > 0
    assert [c.strategy.label for c in pruned.candidates] == [c.strategy.label for c in everything.candidates]
    assert pruned.feasible == everything.feasible
    assert any(c.strategy.pp_schedule == "1f1b" and c.strategy.recompute == "none" for c in everything.candidates)
