"""FSDP's data-parallel terms as the engines run them: the dtype gradients are reduced in (Strategy.grad_reduce,
terms.main_grad_bytes) and the traffic at the two ends of a micro-batch that prefetch cannot hide
(terms._fsdp_unit_ends: the root unit's and the first block's gathers before the forward, their reduce-scatters
after the backward)."""

import dataclasses

import pytest

from scalestudy.costmodel.comm import gather_time, links
from scalestudy.costmodel.engines import engine_comm
from scalestudy.costmodel.estimate import estimate
from scalestudy.costmodel.published import _setup, load
from scalestudy.costmodel.terms import _root_elems, main_grad_bytes
from scalestudy.errors import ScalestudyError
from scalestudy.specs.strategy import Strategy


def _mpt(row_id: str):
    (r,) = [r for r in load()["throughput"] if r["id"] == row_id]
    return _setup(r)


_row = _mpt  # any published row's (model, cluster, strategy, workload)


@pytest.mark.parametrize("engine,zero,precision,grad_reduce,expected", [
    ("fsdp", 3, "bf16", "engine", 4),  # scalestudy's FSDP2 MixedPrecisionPolicy reduce_dtype fp32
    ("fsdp", 2, "bf16", "compute", 2),  # fms-fsdp bfSixteen, Composer PURE
    ("deepspeed", 3, "bf16", "engine", 2),
    ("deepspeed", 2, "fp16", "fp32", 4),
    ("megatron", 1, "bf16", "engine", 4),
    ("megatron", 1, "bf16", "compute", 2),  # NeMo grad_sync_dtype bf16
    ("ddp", 0, "fp32", "compute", 4),  # the compute dtype of an fp32 run is fp32
])
def test_gradient_reduction_dtype(engine, zero, precision, grad_reduce, expected):
    st = Strategy(engine=engine, zero=zero, precision=precision, grad_reduce=grad_reduce)
    assert main_grad_bytes(st) == expected


def test_grad_reduce_is_validated_and_labelled():
    with pytest.raises(ScalestudyError, match="unknown grad_reduce 'bf16'"):
        Strategy(engine="fsdp", zero=3, grad_reduce="bf16")
    assert "grad-reduce-compute" in Strategy(engine="fsdp", zero=3, grad_reduce="compute").label
    assert "grad-reduce" not in Strategy(engine="fsdp", zero=3).label


def test_fsdp_fp32_reduce_scatter_moves_twice_the_gradient_bytes():
    """The gathers are bf16 either way; only the per-block reduce-scatters carry 4 instead of 2 bytes per
    gradient (7B, FULL_SHARD, 16 nodes: Composer 'DEFAULT' vs 'PURE')."""
    model, cluster, st, workload = _mpt("mpt-7b-s2048-128xh100")
    est = {g: estimate(model, cluster, st.replace(grad_reduce=g), workload) for g in ("engine", "compute")}
    eng, lk, psi = engine_comm("fsdp"), links(cluster), est["engine"].params_per_device
    rs = {b: gather_time(psi * b, 128, 8, lk, eng.collective_efficiency, eng.gather_rails, model.num_layers)
          for b in (2, 4)}
    assert est["engine"].dp_comm_total_s - est["compute"].dp_comm_total_s == pytest.approx(rs[4] - rs[2], rel=1e-9)
    assert est["engine"].dp_comm_s > est["compute"].dp_comm_s  # the exposed tail's reduce-scatters too


def test_fsdp_unhidden_ends_grow_with_data_parallel_size():
    """1B, SHARD_GRAD_OP, no recompute (llm-foundry's large-scale table): per-layer compute hides every block's
    traffic, but the root unit (embedding + positions + final norm) and the first block gather before any
    compute and reduce-scatter after the last, each a ring through all ranks -- exposed, and longer at 512
    ranks than at 128."""
    exposed = {}
    for gpus in (128, 512):
        model, cluster, st, workload = _mpt(f"mpt-1b-s2048-{gpus}xh100")
        est = estimate(model, cluster, st, workload)
        lk, dp = links(cluster), est.layout.dp
        root = _root_elems(model, 1)
        block = (est.params_per_device - root) / model.num_layers
        eng = engine_comm("fsdp")
        ends = sum(gather_time(n * b, dp, 8, lk, eng.collective_efficiency, eng.gather_rails, 1)
                   for n in (root, block) for b in (2, 4))  # bf16 gathers, fp32 reduce-scatters
        assert est.dp_comm_s >= ends  # at least the two ends, per micro-batch (one here)
        flat = dataclasses.replace(cluster, intra_node_latency_s=0.0, inter_node_latency_s=0.0, net_post_overhead_s=0.0)
        latency = est.dp_comm_total_s - estimate(model, flat, st, workload).dp_comm_total_s
        # the blocks' bytes in between stay hidden; every ring's latency is exposed (comm.exposed_latency)
        assert est.dp_comm_s < 0.2 * est.dp_comm_total_s + ends + latency
        exposed[gpus] = est.dp_comm_s
    assert exposed[512] > 1.5 * exposed[128]


@pytest.mark.parametrize("compute,comm,expected", [
    (10.0, 2.0, 2.0 * 0.189 / 1.189),  # compute-bound: the compute runs 18.9% slower while the 2 s of comm run
    (1.0, 3.0, 2.0 + 0.1 * 1.0),  # comm-bound: the excess, plus the comm slowed beside the 1 s of compute
    (1.0, 1.1, 0.1 + 0.1 * 1.0),  # just past the crossover: the comm side is the longer one
    (5.0, 0.0, 0.0),
])
def test_overlap_slows_both_sides_and_the_longer_one_is_exposed(compute, comm, expected):
    """terms._exposed (ZeRO-3 / FSDP passes): a pass lasts the longer of compute slowed by the collectives beside
    it (the device YAML's compute_slowdown_under_comm, measured) and the collectives slowed by the compute
    (interference)."""
    from scalestudy.costmodel.terms import _exposed
    from scalestudy.specs.hardware import get_device

    slow = get_device("h100-80gb").compute_slowdown_under_comm
    assert slow == pytest.approx(0.189)
    assert _exposed(compute, comm, 0.1, slow) == pytest.approx(expected)


def test_small_fsdp_micro_batches_expose_more_of_their_traffic():
    """MPT 13B at seq 2048 on 8 H100 (llm-foundry table): micro-batch 2 without recompute moves the same FSDP
    traffic per micro-batch as micro-batch 40 at seq 1024, over a tenth of the compute: its exposed share is the
    measured compute slowdown's, s/(1+s) of the traffic at least."""
    model, cluster, st, workload = _mpt("mpt-13b-s2048-8xh100")
    est = estimate(model, cluster, st, workload)
    assert est.dp_comm_s >= 0.189 / 1.189 * est.dp_comm_total_s
    model, cluster, st, workload = _mpt("mpt-13b-s1024-8xh100")
    big = estimate(model, cluster, st, workload)
    assert big.dp_comm_total_s / big.compute_s < 0.1 * est.dp_comm_total_s / est.compute_s


@pytest.mark.parametrize("zero", [2, 3])
def test_fsdp_reduce_scatters_every_micro_batch_as_train_runs(zero):
    """`train`'s FSDP reduce-scatters each micro-batch's gradients into the sharded .grad (engine/settings.py
    fsdp_settings gradient_sync every_micro_batch: FSDP2's default, torchtitan's and Composer's), so the GPU terms
    price one reduce-scatter per unit and micro-batch -- the fp32-vs-bf16 reduction difference (the reduce-scatters
    alone) grows with the accumulation count -- the gloo path counts the calls tests/multiproc/
    test_engine_equivalence.py counts in train, and memory holds sharded gradients whatever the accumulation. DDP
    defers its all-reduce to the last micro-batch (no_sync; its gradients are whole anyway): once per step."""
    from scalestudy.costmodel.cpu_collectives import fsdp_calls_per_step
    from scalestudy.engine.settings import ddp_settings, fsdp_settings
    from scalestudy.specs.hardware import ClusterSpec, get_device
    from scalestudy.specs.presets import get_model
    from scalestudy.specs.run import RunConfig
    from scalestudy.specs.strategy import Workload

    model, cluster = get_model("t5-large"), ClusterSpec(device=get_device("a100-80gb"), nodes=2, gpus_per_node=8)
    st = Strategy(engine="fsdp", zero=zero, micro_batch=2)

    def est(s, ga, grad_reduce="engine"):
        return estimate(model, cluster, s.replace(grad_reduce=grad_reduce), Workload(2 * 16 * ga, 512, 128))

    reduce_scatters = {ga: est(st, ga).dp_comm_total_s - est(st, ga, "compute").dp_comm_total_s for ga in (1, 4)}
    assert reduce_scatters[1] > 0 and reduce_scatters[4] == pytest.approx(4 * reduce_scatters[1], rel=1e-9)
    assert est(st, 4).dp_comm_total_s == pytest.approx(4 * est(st, 1).dp_comm_total_s, rel=1e-9)
    psi = est(st, 4).params_per_device
    assert est(st, 4).memory.grads == est(st, 1).memory.grads == pytest.approx(4.0 * psi / 16)  # fp32, sharded
    assert fsdp_calls_per_step(zero, 5, 2) == {"all_gather": 2 * (2 if zero == 3 else 1) * 5, "reduce_scatter": 10}
    ddp = Strategy(engine="ddp", zero=0, micro_batch=2)
    assert est(ddp, 4).dp_comm_total_s == pytest.approx(est(ddp, 1).dp_comm_total_s, rel=1e-9)
    run = RunConfig.build("t5-large", st, Workload(2 * 16 * 4, 512, 128), nproc=16)
    assert fsdp_settings(run)["gradient_sync"] == "every_micro_batch"
    assert ddp_settings(RunConfig.build("t5-large", ddp, Workload(2 * 16 * 4, 512, 128), nproc=16)
                        )["gradient_sync"] == "last_micro_batch"


def test_comm_bound_fsdp2_step_carries_every_collective_in_series():
    """FSDP2 as _fully_shard runs it (pytorch 002a76fb _fsdp_param_group.py): all-gathers and reduce-scatters share
    the shard process group (one NCCL stream), issued RS(i+1), AG(i-1), RS(i) ... in the backward, so a comm-bound
    step is the SUM of its collectives, not the max of gathers and reduce-scatters. KempnerForge 175B, TP 4 x FSDP 90
    (one rank per node: one NIC share each), batch 1, full recompute: two bf16 gathers (the pre-backward unshard
    serves the recompute) and one fp32 reduce-scatter per block, and compute + exposed >= that whole traffic."""
    model, cluster, st, workload = _row("kforge-175b-h200-360g-tp4-fsdp90-mb1")
    est = estimate(model, cluster, st, workload)
    eng, lk, psi = engine_comm("fsdp"), links(cluster), est.params_per_device
    assert est.layout.grad_accum == 1 and est.layout.dp == 90
    gather, reduce = (gather_time(psi * b, 90, 1, lk, eng.collective_efficiency, eng.gather_rails, model.num_layers)
                      for b in (2, 4))
    assert est.dp_comm_total_s == pytest.approx(2 * gather + reduce, rel=1e-9)
    assert gather == pytest.approx(psi * 2 * 89 / 90 / (45e9 * 0.95) + model.num_layers * 89 * 12e-6, rel=1e-9)
    assert est.compute_s + est.dp_comm_s >= est.dp_comm_total_s
