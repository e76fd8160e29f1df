"""The strategy search space: valid, complete for a hand-counted case, narrowed by constraints."""

import pytest

from scalestudy.errors import ScalestudyError
from scalestudy.plan.space import Constraints, divisors, engine_variants, enumerate_space, model_parallel_degrees
from scalestudy.specs.hardware import make_cluster
from scalestudy.specs.presets import get_model
from scalestudy.specs.strategy import Workload, resolve_layout


def test_divisors():
    assert divisors(1) == [1]
    assert divisors(12) == [1, 2, 3, 4, 6, 12]
    assert divisors(49) == [1, 7, 49]


def test_hand_counted_space_t5_tiny_two_ranks():
    # t5-tiny: 4 heads, 2+2 blocks. 1 node x 2 devices, global batch 4.
    # Layouts: (tp1,pp1,dp2) (tp1,pp2,dp1) (tp2,pp1,dp1).
    # Engine variants: DeepSpeed z0, z1, z1+opt, z2, z2+opt, z3, z3+opt, z3+opt+param (8) + DDP 2 + FSDP 2
    # + FSDP z2/z3 with CPU offload 2 = 14; with pp > 1 DeepSpeed only z0, z1, z1+opt (3), so 3 + 6 = 9
    # (FSDP/DDP pipelines: torch.distributed.pipelining, engine/backends/hybrid.py). Recompute 3.
    # Micro-batches: dp2 -> {1,2}; dp1 -> {1,2,4}. pp2: 1F1B (3 micro-batches) + interleaved v2 (4 blocks >= 2x2;
    # micro-batches per step 4, 2 are multiples of pp: 2).
    pts = enumerate_space(get_model("t5-tiny"), make_cluster("local-cpu", 1, 2), Workload(4, 64, 16))
    assert len(pts) == 14 * 3 * 2 + 9 * 3 * (3 + 2) + 14 * 3 * 3 == 345
    assert len({(p.strategy, p.nodes) for p in pts}) == len(pts)


def test_every_point_is_a_valid_layout_keeping_the_global_batch():
    model = get_model("mt5-xxl")
    cluster = make_cluster("a100-40gb", 4, 8)
    w = Workload(256, 512, 128)
    pts = enumerate_space(model, cluster, w)
    assert pts
    for p in pts:
        s = p.strategy
        layout = resolve_layout(s, 32, 256, gpus_per_node=8, num_heads=64, num_layers=48)
        assert (layout.dp, layout.grad_accum) == (p.dp, p.grad_accum)
        assert s.micro_batch * p.grad_accum * p.dp == 256
        assert s.tp <= 8 and 64 % s.tp == 0 and s.pp <= 48
        if s.pp_schedule == "interleaved":
            assert p.grad_accum % s.pp == 0 and 48 >= s.pp * s.virtual_stages
    assert {p.strategy.tp for p in pts} == {1, 2, 4, 8}
    assert {p.strategy.pp for p in pts} == {1, 2, 4, 8, 16, 32}  # divisors of 32/tp (layers need not divide)
    assert {(p.strategy.pp_schedule, p.strategy.virtual_stages) for p in pts if p.strategy.pp > 1} == {
        ("1f1b", 1), ("interleaved", 2), ("interleaved", 4)}
    assert {p.strategy.engine for p in pts} == {"deepspeed", "fsdp", "ddp"}
    assert {p.strategy.recompute for p in pts} == {"none", "selective", "full"}


def test_heads_limit_tp_and_encoder_decoder_pipeline_split():
    # t5-tiny has 4 heads: tp 8 is impossible even with 8 devices per node; 4 blocks in total -> pp in {1,2,4}.
    pts = enumerate_space(get_model("t5-tiny"), make_cluster("a100-40gb", 1, 8), Workload(64, 64, 16))
    assert {p.strategy.tp for p in pts} == {1, 2, 4}
    assert {p.strategy.pp for p in pts} == {1, 2, 4}


def test_constraints_narrow_the_space():
    model, cluster, w = get_model("mt5-xl"), make_cluster("a100-80gb", 2, 8), Workload(128, 512, 128)
    full = enumerate_space(model, cluster, w)
    z2 = enumerate_space(model, cluster, w, Constraints(zero=(2,), tp=(1,)))
    assert 0 < len(z2) < len(full)
    assert {p.strategy.zero for p in z2} == {2} and {p.strategy.tp for p in z2} == {1}
    assert {p.strategy.engine for p in z2} == {"deepspeed", "fsdp"}
    ddp = enumerate_space(model, cluster, w, Constraints(engines=("ddp",), recompute=("none",)))
    assert {(p.strategy.engine, p.strategy.zero) for p in ddp} == {("ddp", 0), ("ddp", 1)}
    assert {p.strategy.pp for p in ddp} > {1}  # DDP pipelines too (torch.distributed.pipelining in train)
    no_off = enumerate_space(model, cluster, w, Constraints(offload_optimizer=("none",), offload_params=("none",)))
    assert all(p.strategy.offload_optimizer == "none" for p in no_off)
    mb = enumerate_space(model, cluster, w, Constraints(micro_batch=(2,)))
    assert {p.strategy.micro_batch for p in mb} == {2}


def test_node_counts_max_nodes_and_vary():
    model, w = get_model("mt5-base"), Workload(64, 512, 128)
    cluster = make_cluster("a100-40gb", 4, 8)
    assert {p.nodes for p in enumerate_space(model, cluster, w)} == {4}
    assert {p.nodes for p in enumerate_space(model, cluster, w, Constraints(max_nodes=2))} == {2}
    assert {p.nodes for p in enumerate_space(model, cluster, w, Constraints(vary_nodes=True))} == {1, 2, 3, 4}
    big = make_cluster("a100-40gb", 100, 8)
    assert Constraints(vary_nodes=True).node_counts(big) == list(range(1, 17)) + [32, 64, 100]
    assert Constraints(vary_nodes=True, max_nodes=20).node_counts(big) == list(range(1, 17)) + [20]


def test_engine_variants_respect_strategy_rules():
    variants = engine_variants(Constraints())
    assert ("deepspeed", 3, "cpu", "cpu") in variants and ("fsdp", 3, "cpu", "cpu") in variants
    assert all(e == "deepspeed" or (o, p) in (("none", "none"), ("cpu", "cpu")) and (e == "fsdp" or o == "none")
               for e, _, o, p in variants)
    assert len(variants) == 14


def test_schedule_constraints_and_explicit_stage_layers():
    model, cluster, w = get_model("mt5-xl"), make_cluster("a100-80gb", 2, 8), Workload(128, 512, 128)
    only = enumerate_space(model, cluster, w, Constraints(pp=(4,), pp_schedules=("gpipe",)))
    assert {(p.strategy.pp_schedule, p.strategy.virtual_stages) for p in only} == {("gpipe", 1)}
    split = enumerate_space(model, make_cluster("a100-80gb", 3, 8), Workload(96, 512, 128),
                            Constraints(pp=(1, 3), stage_layers=(20, 14, 14),
                                                            pp_schedules=("1f1b",), attention="eager"))
    assert {p.strategy.stage_layers for p in split if p.strategy.pp == 3} == {(20, 14, 14)}
    assert all(p.strategy.attention == "eager" for p in split)


def test_bad_constraints_raise_clear_errors():
    with pytest.raises(ScalestudyError, match="unknown pp schedule"):
        Constraints(pp_schedules=("zb",))
    with pytest.raises(ScalestudyError, match="unknown recompute"):
        Constraints(recompute=("partial",))
    with pytest.raises(ScalestudyError, match="zero stage"):
        Constraints(zero=(4,))
    with pytest.raises(ScalestudyError, match="max_nodes must be >= 1, got 0"):
        Constraints(max_nodes=0)


def test_a_fixed_tp_over_whole_nodes_is_planned_as_estimate_prices_it():
    """The search keeps tp inside a node; a --tp the user fixes that fills whole nodes is taken (tp 16 on two
    8-GPU nodes), one that does not is still left out."""
    mt5, cluster = get_model("mt5-xxl"), make_cluster("a100-80gb", 2, 8)
    assert max(tp for tp, _ in model_parallel_degrees(mt5, cluster, 16, Constraints())) == 8
    assert {tp for tp, _ in model_parallel_degrees(mt5, cluster, 16, Constraints(tp=(16,)))} == {16}
    assert list(model_parallel_degrees(mt5, cluster, 16, Constraints(tp=(12,)))) == []
