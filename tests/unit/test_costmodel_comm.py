"""Communication: ring volumes, hierarchical clusters, ZeRO-3 = 1.5x ZeRO-2, TP and PP terms."""

import dataclasses
import pytest

from scalestudy.costmodel.comm import allgather_time, allreduce_time, dp_comm_volume, p2p_time, reduce_scatter_time
from scalestudy.costmodel.estimate import estimate
from scalestudy.specs.hardware import ClusterSpec, get_device, make_cluster
from scalestudy.specs.presets import get_model
from scalestudy.specs.strategy import Strategy, Workload

PSI = 1e9


def _ring_bytes(vol: dict, n: int) -> float:
    """Bytes each rank sends for the volume dict under ring algorithms."""
    f = (n - 1) / n
    return 2 * f * vol["grad_allreduce"] + f * vol["grad_reduce_scatter"] + f * vol["param_allgather"]


def test_zero3_moves_1_5x_zero2_and_dp_equals_zero2():
    n = 64
    dp = _ring_bytes(dp_comm_volume(PSI, "deepspeed", 0, 1, 2, 2), n)
    z1 = _ring_bytes(dp_comm_volume(PSI, "deepspeed", 1, 1, 2, 2), n)
    z2 = _ring_bytes(dp_comm_volume(PSI, "deepspeed", 2, 1, 2, 2), n)
    z3 = _ring_bytes(dp_comm_volume(PSI, "deepspeed", 3, 1, 2, 2), n)
    # ZeRO paper Sec. 7.2: baseline DP 2 psi (in 16-bit bytes: 4 psi), ZeRO-1/2 the same, ZeRO-3 3 psi
    assert dp == pytest.approx(2 * (n - 1) / n * 2 * PSI)
    assert z1 == pytest.approx(dp) and z2 == pytest.approx(dp)
    assert z3 == pytest.approx(1.5 * z2)
    assert _ring_bytes(dp_comm_volume(PSI, "fsdp", 3, 1, 2, 2), n) == pytest.approx(z3)


def test_zero3_comm_time_is_1_5x_zero2_through_estimate():
    # latency-free links: the bandwidth terms alone (ZeRO-3 issues many more, smaller collectives than ZeRO-2);
    # one rank per node, so ZeRO-3's per-rank gather rate and ZeRO-2's pooled NICs are the same one NIC share
    cluster = dataclasses.replace(make_cluster("a100-40gb", nodes=32, gpus_per_node=1), inter_node_latency_s=0.0,
                                  intra_node_latency_s=0.0)
    # micro-batch 8: the passes' compute outlasts DeepSpeed's per-module hook chain on the host thread (at micro-batch
    # 1 the hooks bound the pass and the path's time is at least theirs, test_costmodel_zero3_scaling)
    spec, work = get_model("mt5-xl"), Workload(global_batch=256, seq_len=512, target_len=114)  # grad_accum 1
    z2 = estimate(spec, cluster, Strategy(zero=2, micro_batch=8), work)
    z3 = estimate(spec, cluster, Strategy(zero=3, micro_batch=8), work)
    assert z3.layout.grad_accum == 1
    assert z3.dp_comm_total_s == pytest.approx(1.5 * z2.dp_comm_total_s, rel=0.01)


def test_zero2_reduces_every_micro_batch():
    v1 = dp_comm_volume(PSI, "deepspeed", 2, 1, 2, 2)
    v4 = dp_comm_volume(PSI, "deepspeed", 2, 4, 2, 2)
    assert v4["grad_reduce_scatter"] == 4 * v1["grad_reduce_scatter"]
    assert dp_comm_volume(PSI, "deepspeed", 1, 4, 2, 2) == dp_comm_volume(PSI, "deepspeed", 1, 1, 2, 2)


def test_ring_and_nic_pooled_bus_bandwidth():
    c = ClusterSpec(device=get_device("a100-40gb"), nodes=4, gpus_per_node=8)
    nbytes = 1e9
    intra = allreduce_time(nbytes, 8, 8, c)
    assert intra == pytest.approx(2 * 7 / 8 * nbytes / c.intra_bw + 2 * 7 * c.intra_latency)
    assert allgather_time(nbytes, 8, 8, c) == pytest.approx(intra / 2)
    assert reduce_scatter_time(nbytes, 8, 8, c) == allgather_time(nbytes, 8, 8, c)
    cross = allreduce_time(nbytes, 32, 8, c)
    flat_over_nics = 2 * 31 / 32 * nbytes / c.inter_bw
    assert intra < cross < flat_over_nics  # the node's 8 NIC shares pooled by NCCL's channels
    assert allreduce_time(nbytes, 1, 1, c) == 0 and allreduce_time(0, 8, 8, c) == 0
    assert p2p_time(1e6, True, c) > p2p_time(1e6, False, c)


@pytest.mark.parametrize("nic_per_gpu, per_node, bus", [
    (23e9, 8, 8 * 23e9),  # DGX A100, 8 HDR NICs: nccl-tests busbw ~ the node's NIC total
    (6.25e9, 8, 50e9),  # 4 x 100 Gb/s per 8 A100s (InternLM's cluster): 50 GB/s, not one NIC's 6.25
    (6.25e9, 2, 12.5e9),  # tp 4: the group's 2 ranks of a node pool 2 NIC shares (the other groups use the rest)
    (40e9, 8, 240e9),  # NICs faster than NVLink: the NVLink hops bound the pipelined ring
])
def test_bus_bandwidth_across_nodes_is_the_pooled_nic_share_of_the_group(nic_per_gpu, per_node, bus):
    from scalestudy.costmodel.comm import bus_time

    lk = (240e9, 0.0, nic_per_gpu, 0.0)
    # the same at every node count (comm.bus_time: only the ring's latency grows with it, NVIDIA/nccl #1712)
    for nodes in (2, 4, 32, 128, 1024):
        n = nodes * per_node
        assert bus_time(2.0, 1e9, n, per_node, lk) == pytest.approx(2 * (n - 1) / n * 1e9 / bus)
    assert bus_time(1.0, 1e9, 8, 8, lk) == pytest.approx(7 / 8 * 1e9 / 240e9)  # one node: NVLink only


def test_tensor_and_pipeline_terms_and_bubble():
    cluster = make_cluster("a100-80gb", nodes=2, gpus_per_node=8)
    spec, work = get_model("llama-13b"), Workload(global_batch=64, seq_len=2048)
    tp = estimate(spec, cluster, Strategy(tp=8, zero=1), work)
    assert tp.tp_comm_s > 0 and tp.pp_comm_s == 0 and tp.bubble_s == 0
    pp = estimate(spec, cluster, Strategy(pp=4, tp=2, zero=1), work)
    m = pp.layout.grad_accum
    # 1F1B bubble (Narayanan et al. 2021): (pp - 1) / m of the ideal pipeline time when the stages are equal; here
    # the last stage also runs the LM head, so the fill and drain's other three stages are lighter than its slot
    # (tests/unit/test_costmodel_pipeline.py: the per-stage sum exactly)
    slot = (pp.compute_s + pp.tp_comm_s + pp.pp_comm_s) / m
    assert 0.9 * (4 - 1) * slot < pp.bubble_s < (4 - 1) * slot
    assert pp.pp_comm_s > 0


def test_overlap_hides_ddp_gradient_allreduce():
    cluster = make_cluster("a100-40gb", nodes=2, gpus_per_node=8)
    spec, work, st = get_model("gpt2-xl"), Workload(global_batch=64, seq_len=1024), Strategy(engine="ddp", micro_batch=4)
    over = estimate(spec, cluster, st, work)
    sync = estimate(spec, cluster, st.replace(overlap_grad_comm=False), work)
    assert sync.dp_comm_s == pytest.approx(sync.dp_comm_total_s)
    assert over.dp_comm_s < sync.dp_comm_s and over.step_s < sync.step_s


def test_nothing_overlaps_on_cpu_ranks():
    cpu = make_cluster("local-cpu", nodes=1, gpus_per_node=2)
    work = Workload(global_batch=16, seq_len=128, target_len=32)
    for engine, zero in (("ddp", 0), ("deepspeed", 2), ("fsdp", 3)):
        e = estimate(get_model("t5-mini"), cpu, Strategy(engine=engine, zero=zero, precision="fp32", micro_batch=4),
                     work)
        assert e.dp_comm_s == pytest.approx(e.dp_comm_total_s) and e.dp_comm_s > 0
    z3 = estimate(get_model("t5-mini"), cpu, Strategy(engine="deepspeed", zero=3, precision="fp32", micro_batch=4),
                  work)
    ddp = estimate(get_model("t5-mini"), cpu, Strategy(engine="ddp", precision="fp32", micro_batch=4), work)
    assert z3.dp_comm_s > ddp.dp_comm_s  # ZeRO-3 moves 1.5x the bytes of an all-reduce, per micro-batch


def _tp_across_nodes(tp: int, nodes: int, **st) -> "estimate":
    strategy = Strategy(**{"engine": "deepspeed", "tp": tp, "sequence_parallel": False, **st})
    return estimate(get_model("llama-7b"), make_cluster("a100-40gb", nodes=nodes, gpus_per_node=8), strategy,
                    Workload(global_batch=4, seq_len=2048))


def test_tensor_parallelism_over_two_whole_nodes_all_reduces_at_the_pooled_nic_rate():
    # tp 16 on 8-GPU nodes: one flat ring per channel through 16 ranks, the 8 members of a node pooling their 8 NIC
    # shares (min(NVLink 240, 8 x 23 GB/s) = 184 GB/s bus), 1 network hop + 14 NVLink hops (at least 3 x 2 us posts
    # on these AMD hosts) per walk of the ring, each of the 2 x 32 sublayer outputs all-reduced in forward and backward
    e = _tp_across_nodes(16, 2)
    assert (e.layout.tp, e.layout.dp, e.layout.grad_accum) == (16, 1, 4)
    c = make_cluster("a100-40gb", nodes=2, gpus_per_node=8)
    nbytes = 2048 * 4096 * 2  # one micro-batch's sublayer output, bf16
    bus = min(c.intra_bw, 8 * c.inter_bw)
    assert bus == 184e9
    latency = 14 * max(c.intra_latency, 3 * c.net_post_overhead) + 1 * c.inter_latency
    per_op = 2 * 15 / 16 * nbytes / bus + 2 * latency
    assert e.tp_comm_s == pytest.approx(4 * 2 * 2 * 32 * per_op)
    # the same group inside one (16-GPU) node rides NVLink alone
    inside = estimate(get_model("llama-7b"), make_cluster("a100-40gb", nodes=1, gpus_per_node=16),
                      Strategy(engine="deepspeed", tp=16, sequence_parallel=False),
                      Workload(global_batch=4, seq_len=2048))
    assert inside.tp_comm_s == pytest.approx(4 * 2 * 2 * 32 * (2 * 15 / 16 * nbytes / c.intra_bw
                                                                 + 2 * 15 * c.intra_latency))
    assert e.tp_comm_s > 1.5 * inside.tp_comm_s  # NIC-bound bytes, the network hop and the slower posts


def test_tp_comm_overlap_does_not_reach_a_tensor_parallel_group_that_spans_nodes():
    # Transformer Engine's userbuffers overlap only a single-node tensor-parallel group (NVIDIA/TransformerEngine
    # #1071): Megatron's default overlap (distributed optimizer, sequence parallel) leaves a 2-node group exposed
    spanning = _tp_across_nodes(16, 2, engine="megatron", zero=1, sequence_parallel=True)
    assert spanning.strategy.tp_comm_overlap
    off = _tp_across_nodes(16, 2, engine="megatron", zero=1, sequence_parallel=True, tp_comm_overlap=False)
    assert spanning.tp_comm_s == pytest.approx(off.tp_comm_s) and spanning.tp_comm_s > 0
    inside = _tp_across_nodes(8, 2, engine="megatron", zero=1, sequence_parallel=True)
    inside_off = _tp_across_nodes(8, 2, engine="megatron", zero=1, sequence_parallel=True, tp_comm_overlap=False)
    assert inside.tp_comm_s < inside_off.tp_comm_s  # inside a node the overlap still hides some
    # estimate --json says what was priced: off across nodes (it said the engine default's true), on inside one
    assert spanning.to_dict()["strategy"]["tp_comm_overlap"] is False
    assert inside.to_dict()["strategy"]["tp_comm_overlap"] is True
    assert spanning.to_dict()["strategy"] == off.to_dict()["strategy"]


def test_a_tensor_parallel_group_fills_whole_nodes_or_stays_inside_one():
    from scalestudy.errors import ScalestudyError

    with pytest.raises(ScalestudyError, match=r"^tp 12 is not a multiple of 8 devices per node"):
        _tp_across_nodes(12, 3)
    with pytest.raises(ScalestudyError, match=r"^tp 6 does not divide 8 devices per node"):
        _tp_across_nodes(6, 3)


def test_ring_latency_pays_the_nic_only_where_the_ring_leaves_a_node():
    # NCCL's tuning model (src/graph/tuning.cc): a ring's n-1 steps add up; nNodes - 1 of them cross a NIC
    from scalestudy.costmodel.comm import links, ring_latency

    c = make_cluster("h100-80gb", nodes=192, gpus_per_node=8)  # Intel hosts: NVLink steps at NVLink's latency
    lk = links(c)
    assert ring_latency(16, 8, lk) == pytest.approx(14 * c.intra_latency + 1 * c.inter_latency)
    assert ring_latency(8, 8, lk) == pytest.approx(7 * c.intra_latency)  # one node: NVLink hops only
    n = 1536
    assert (n - 1) * c.intra_latency < ring_latency(n, 8, lk) < (n - 1) * c.inter_latency
    assert ring_latency(n, 1, lk) == pytest.approx((n - 1) * c.inter_latency)  # one rank per node: every hop a NIC


def test_a_ring_across_nodes_steps_no_faster_than_its_hosts_post_network_steps():
    # NCCL src/graph/tuning.cc since 2.18.1: once nNodes > 1, intraLat = max(intraLat, 3 x getNetOverhead) for the
    # Simple protocol, getNetOverhead 2 us on AMD x86 hosts (DGX A100: AMD EPYC 7742), 1 us on Intel
    from scalestudy.costmodel.comm import links, ring_latency

    amd = make_cluster("a100-80gb", nodes=2, gpus_per_node=8)
    assert amd.net_post_overhead == 2e-6
    lk = links(amd)
    assert ring_latency(16, 8, lk) == pytest.approx(14 * 6e-6 + 1 * amd.inter_latency)  # 6 us > NVLink's 3.4 us
    assert ring_latency(8, 8, lk) == pytest.approx(7 * amd.intra_latency)  # one node: no network step to post
    assert ring_latency(16, 1, lk) == pytest.approx(15 * amd.inter_latency)  # every hop a NIC: unchanged
    intel = dataclasses.replace(amd, net_post_overhead_s=1e-6)  # AWS p4d: Intel hosts, 3 us < 3.4 us
    assert ring_latency(16, 8, links(intel)) == pytest.approx(14 * amd.intra_latency + 1 * amd.inter_latency)


def test_a_cluster_file_states_its_hosts_network_post_overhead(tmp_path):
    from scalestudy.errors import ScalestudyError
    from scalestudy.specs.hardware import load_cluster

    f = tmp_path / "p4d.yaml"
    f.write_text("device: a100-40gb\nnodes: 64\ngpus_per_node: 8\nnet_post_overhead_s: 1.0e-6\n")
    assert load_cluster(f).net_post_overhead == 1e-6 and get_device("a100-40gb").net_post_overhead_s == 2e-6
    f.write_text("device: a100-40gb\nnodes: 64\ngpus_per_node: 8\nnet_post_overhead_s: -1\n")
    with pytest.raises(ScalestudyError, match="net_post_overhead_s must not be negative"):
        load_cluster(f)


@pytest.mark.parametrize("exposed, bytes_exposed, latency, want", [
    (0.10, 0.05, 0.20, 0.25),  # overlapped bytes expose 0.05 s; the 0.2 s of ring latency adds in full
    (0.50, 0.05, 0.20, 0.50),  # never below the estimate that overlapped the latency too (the bytes' excess)
    (0.30, 0.10, 0.20, 0.30),  # nothing overlapped (exposed = bytes + latency): unchanged
])
def test_exposed_latency_adds_the_rings_latency_to_the_overlapped_bytes(exposed, bytes_exposed, latency, want):
    from scalestudy.costmodel.comm import exposed_latency, gather_parts, gather_time

    assert exposed_latency(exposed, bytes_exposed, latency) == pytest.approx(want)
    # the bandwidth and latency seconds terms._dp_comm overlaps separately add up to the collective's time
    lk, nolat = (2.4e11, 3.4e-6, 5e10, 1.2e-5, 1e-6), (2.4e11, 0.0, 5e10, 0.0, 0.0)
    for n, tree in ((8, False), (64, False), (64, True)):
        bw, lat = gather_parts(1e9, n, 8, lk, 0.9, "node", 12, tree)
        assert bw + lat == gather_time(1e9, n, 8, lk, 0.9, "node", 12, tree) and lat > 0
        assert gather_parts(1e9, n, 8, nolat, 0.9, "node", 12, tree) == (bw, 0.0)


@pytest.mark.parametrize("engine, zero", [("fsdp", 3), ("ddp", 0), ("deepspeed", 2)])
def test_data_parallel_ring_latency_is_exposed_in_full_through_estimate(engine, zero):
    # the bytes overlap the backward as before; every collective's (n-1)-hop ring latency lands on the step
    c = make_cluster("h100-80gb", nodes=64, gpus_per_node=8)
    flat = dataclasses.replace(c, intra_node_latency_s=0.0, inter_node_latency_s=0.0, net_post_overhead_s=0.0)
    st, work = Strategy(engine=engine, zero=zero, micro_batch=4), Workload(global_batch=2048, seq_len=2048)
    spec = get_model("llama-7b") if engine == "fsdp" else get_model("gpt2-xl")
    lat, nolat = (estimate(spec, cl, st, work) for cl in (c, flat))
    latency = lat.dp_comm_total_s - nolat.dp_comm_total_s
    assert latency > 0 and lat.dp_comm_s < lat.dp_comm_total_s  # bytes still hide behind compute
    assert lat.dp_comm_s - nolat.dp_comm_s == pytest.approx(latency)


def test_per_owner_broadcasts_move_the_buffer_at_node_rate_and_pay_one_ring_latency_each():
    # InternLM HybridZeroOptimizer.broadcast_params: one ring broadcast per owner, issued one after another
    from scalestudy.costmodel.comm import bus_time, links, per_owner_broadcast_time, ring_latency

    lk = links(make_cluster("a100-80gb", nodes=128, gpus_per_node=8))
    for n, owners in ((128, 128), (1024, 291)):
        bandwidth = bus_time(1.0, 14.6e9, n, 8, lk) / 0.95
        got = per_owner_broadcast_time(14.6e9, owners, n, 8, lk, 0.95)
        assert got == pytest.approx(bandwidth + owners * ring_latency(n, 8, lk))
    big, small = (per_owner_broadcast_time(14.6e9, o, n, 8, lk, 0.95) for n, o in ((1024, 291), (128, 128)))
    assert big > 3 * small  # count and ring length both grow with the data-parallel size


def test_gradient_collectives_and_zero3_gathers_pool_the_nodes_nics():
    from scalestudy.costmodel.comm import gather_time, links
    from scalestudy.costmodel.engines import engine_comm

    c = dataclasses.replace(make_cluster("a100-80gb", nodes=4, gpus_per_node=8), inter_node_latency_s=0.0,
                            intra_node_latency_s=0.0, net_post_overhead_s=0.0)
    lk, nbytes = links(c), 8e9
    node = gather_time(nbytes, 32, 8, lk, 1.0, "node", 1)
    rank = gather_time(nbytes, 32, 8, lk, 1.0, "rank", 1)
    assert rank == pytest.approx(31 / 32 * nbytes / c.inter_bw)  # a ring through every rank on its own NIC
    assert node == pytest.approx(rank / 8)  # the 8 members of a node pool their 8 NIC shares
    # every engine reduces gradients with NCCL collectives over the whole group (engines.yaml grad_rails)
    assert {e: engine_comm(e).grad_rails for e in ("ddp", "deepspeed", "megatron", "internlm", "fsdp")} == \
        dict.fromkeys(("ddp", "deepspeed", "megatron", "internlm", "fsdp"), "node")
    # FSDP's flat parameters and DeepSpeed's coalesced module fetches (>= 0.6) are one collective over the group too
    assert engine_comm("fsdp").gather_rails == engine_comm("deepspeed").gather_rails == "node"


def test_gradient_reduction_exposes_what_completes_at_the_end_of_the_backward():
    from scalestudy.costmodel.terms import _reduction_exposed

    assert _reduction_exposed(1.0, 0.5, 0.0, 0.0) == 0.0  # all of it hides behind a longer backward
    assert _reduction_exposed(1.0, 0.5, 1.0, 0.1) == pytest.approx(0.5)  # one bucket: nothing to hide behind
    assert _reduction_exposed(1.0, 0.5, 0.2, 0.1) == pytest.approx(0.1 + 0.1 * 0.4)
    assert _reduction_exposed(1.0, 3.0, 0.0, 0.0) == pytest.approx(2.0)  # longer than the backward: the excess
    # a large vocabulary's input-embedding gradient is the last to complete: mT5 exposes more than T5
    cluster = make_cluster("a100-80gb", nodes=4, gpus_per_node=8)
    st, work = Strategy(engine="ddp", micro_batch=8), Workload(global_batch=256, seq_len=512, target_len=114)
    mt5_spec = get_model("mt5-xl")
    t5_spec = dataclasses.replace(mt5_spec, vocab_size=32128)  # T5 v1.1 of the same shape
    t5, mt5 = (estimate(m, cluster, st, work) for m in (t5_spec, mt5_spec))
    assert mt5.dp_comm_s / mt5.dp_comm_total_s > t5.dp_comm_s / t5.dp_comm_total_s


def test_tp_comm_overlap_exposes_only_what_the_adjacent_gemms_cannot_hide():
    """Transformer Engine userbuffers (engines.yaml tp_comm_overlap), per collective and its own projection: the
    forward all-gather behind (tp-1)/tp of the QKV / FC1 GEMM, the reduce-scatter behind the proj / FC2 GEMM with the
    last of `splits` chunks exposed, the backward pair beside the dgrad / wgrad GEMMs, plus the interference share;
    nothing else of the step moves, and tp = 1 is unchanged."""
    from scalestudy.costmodel.comm import collective, links
    from scalestudy.costmodel.engines import tp_overlap
    from scalestudy.costmodel.terms import _tp_overlap_exposed
    from scalestudy.costmodel.step import compute_times
    from scalestudy.costmodel.constants import stored

    ov = tp_overlap()
    s, i = ov.pipeline_splits, ov.interference
    fg, fs, bwd = _tp_overlap_exposed(1.0, 4.0, 3.0, 8, s, i)  # hidden: the reduce-scatter's last chunk only
    assert (fg, fs, bwd) == pytest.approx((i, 1 / s + i, 2 * i))
    fg, fs, bwd = _tp_overlap_exposed(5.0, 2.0, 1.0, 8, s, i)  # comm - what the GEMM hides
    assert (fg, fs, bwd) == pytest.approx((5 - 1.75 + 1.75 * i, 5 - 0.75 * (s - 1) / s * 4 / 3 * 1 + i,
                                           (5 - 0.875) + 3 + 3 * i))
    cluster = make_cluster("h100-80gb", nodes=1, gpus_per_node=8)
    spec, work = get_model("llama-7b"), Workload(global_batch=8, seq_len=2048)
    for st in (Strategy(engine="megatron", tp=8, micro_batch=1), Strategy(engine="megatron", tp=4, pp=2,
                                                                          recompute="full")):
        off, on = (estimate(spec, cluster, st.replace(tp_comm_overlap=f), work) for f in (False, True))
        ct = compute_times(spec, cluster.device, "bf16", st.tp, st.micro_batch, 2048, 0, st.recompute, True, True,
                           stored())
        passes = 3 if st.recompute == "full" else 2
        comm = collective(2.0, ct.tp_bytes, st.tp, st.tp, links(cluster)) / 2
        per_mb = 0.0
        for gather, scatter, n in ct.tp_gemms:  # attention, FFN
            fg, fs, bwd = _tp_overlap_exposed(comm, gather / n, scatter / n, st.tp, s, i)
            per_mb += n * ((passes - 1) * (fg + fs) + bwd)
        busiest = max(st.stage_split(spec.num_layers)) / spec.num_layers
        assert on.tp_comm_s == pytest.approx(off.layout.grad_accum * busiest * per_mb)
        assert 0 < on.tp_comm_s < 0.5 * off.tp_comm_s
        for part in ("compute_s", "dp_comm_s", "pp_comm_s", "optimizer_s"):
            assert getattr(on, part) == getattr(off, part), part
    one = Strategy(engine="megatron", micro_batch=1)
    assert estimate(spec, cluster, one.replace(tp_comm_overlap=True), work).step_s == \
        estimate(spec, cluster, one, work).step_s


def test_async_tp_of_the_torch_engines_leaves_the_backward_input_reduce_scatter_exposed():
    """PyTorch micro-pipeline TP (engines.yaml tp_comm_overlap.micro_pipeline, the torch engines): each gather and
    reduce-scatter hides behind (tp-1)/tp of its projection, plus the unoverlapped local-shard copy and the partial
    sum (HBM passes); the backward input-gradient reduce-scatter (a sum of several projections' dgrads) stays an
    exposed collective -- so it hides less than Transformer Engine's overlap of the same layout. torchtitan's
    per-op checkpoint re-gathers each sublayer's input in the backward (all_gather not in its save list)."""
    from scalestudy.costmodel.engines import tp_overlap
    from scalestudy.costmodel.terms import _micro_pipeline_exposed

    ov = tp_overlap()
    assert "fsdp" in ov.micro_pipeline_engines and "megatron" not in ov.micro_pipeline_engines
    fg, fs, bwd = _micro_pipeline_exposed(1.0, 4.0, 3.0, 8, 0.1, ov)  # GEMMs long enough to hide the transfers
    assert (fg, fs) == pytest.approx((2 * 0.1 / 8, 0.1 * 9 / 8))
    assert bwd == pytest.approx(2 * 0.1 / 8 + 1.0)  # the gradient all-gather hidden, the input reduce-scatter not
    fg, _, _ = _micro_pipeline_exposed(5.0, 4.0, 3.0, 8, 0.0, ov)
    assert fg == pytest.approx(5.0 - 3.5)
    cluster = make_cluster("h100-80gb", nodes=1, gpus_per_node=8)
    spec, work = get_model("llama-7b"), Workload(global_batch=8, seq_len=4096)
    for recompute in ("none", "op"):
        fsdp, te = (Strategy(engine=e, zero=z, tp=8, micro_batch=1, sequence_parallel=True, recompute=recompute)
                    for e, z in (("fsdp", 3), ("megatron", 1)))
        off, on = (estimate(spec, cluster, fsdp.replace(tp_comm_overlap=f), work) for f in (False, True))
        te_on = estimate(spec, cluster, te.replace(tp_comm_overlap=True), work)
        assert te_on.tp_comm_s < on.tp_comm_s < off.tp_comm_s
    plain, op = (estimate(spec, cluster, Strategy(engine="fsdp", zero=3, tp=8, micro_batch=1, sequence_parallel=True,
                                                  recompute=r), work) for r in ("none", "op"))
    assert op.tp_comm_s == pytest.approx(plain.tp_comm_s * 1.25)  # 2 pairs per sublayer + one all-gather


def test_overlap_param_gather_hides_the_post_step_gather_behind_the_forward():
    """ZeRO-1/2 / distributed-optimizer parameter all-gather with overlap_param_gather: the first bucket exposed,
    the rest hidden behind the first micro-batch's forward (plus interference) -- or its excess exposed when the
    forward is short. Gradient reduction, compute and the total traffic are unchanged; no gather, no effect."""
    from scalestudy.costmodel.terms import _param_gather_exposed

    assert _param_gather_exposed(1.0, 4, 10.0, 0.1) == pytest.approx(0.25 + 0.1 * 0.75)  # long forward
    assert _param_gather_exposed(1.0, 4, 0.5, 0.1) == pytest.approx(0.25 + 0.25 + 0.1 * 0.5)  # short forward
    cluster = make_cluster("h100-80gb", nodes=4, gpus_per_node=8)
    spec = get_model("llama-7b")
    # (megatron's default is on with overlap_grad_comm: strategy.param_gather_default; off named here)
    for st in (Strategy(engine="megatron", zero=1, micro_batch=1, overlap_param_gather=False),
               Strategy(engine="deepspeed", zero=2, micro_batch=1)):
        for seq in (256, 2048):  # short and long forward
            work = Workload(global_batch=64, seq_len=seq)
            off = estimate(spec, cluster, st, work)
            on = estimate(spec, cluster, st.replace(overlap_param_gather=True), work)
            assert on.dp_comm_total_s == off.dp_comm_total_s and on.compute_s == off.compute_s
            assert on.tp_comm_s == off.tp_comm_s and on.optimizer_s == off.optimizer_s
            assert 0 < on.dp_comm_s < off.dp_comm_s
    no_gather = Strategy(engine="megatron", zero=0)
    work = Workload(global_batch=64, seq_len=1024)
    assert estimate(spec, cluster, no_gather.replace(overlap_param_gather=True), work).step_s == \
        estimate(spec, cluster, no_gather, work).step_s


def test_megatron_distributed_optimizer_moves_fp32_grads_and_bf16_params():
    """engine megatron zero 1 (Megatron-Core distributed optimizer): reduce-scatter of the fp32 main gradients plus
    all-gather of the bf16 parameters = 1.5x the bytes of DeepSpeed ZeRO-1's bf16 reduce-scatter + all-gather."""
    cluster = dataclasses.replace(make_cluster("h100-80gb", nodes=4, gpus_per_node=8), inter_node_latency_s=0.0,
                                  intra_node_latency_s=0.0)
    spec, work = get_model("llama-7b"), Workload(global_batch=32, seq_len=1024)
    mega = estimate(spec, cluster, Strategy(engine="megatron", zero=1, tp=8), work)  # one rank per node: rails equal
    # (the reduce-scatter variant, named: DeepSpeed's own default all-reduces, strategy.zero1_all_reduce_default)
    ds = estimate(spec, cluster, Strategy(engine="deepspeed", zero=1, tp=8, zero1_all_reduce=False), work)
    assert mega.dp_comm_total_s == pytest.approx(1.5 * ds.dp_comm_total_s, rel=1e-6)


def test_megatron_pipeline_sends_sequence_parallel_backward_and_fp16_gradients():
    """Megatron-family mechanisms (engines.yaml pipeline_scatter_gather, tp_async_backward; terms.main_grad_bytes):
    a replicated stage boundary goes 1/tp per rank then an NVLink all-gather, a sequence-parallel one is already
    1/tp; the sequence-parallel backward re-gather and reduce-scatter hide behind the column-parallel GEMMs; fp16
    Megatron reduces 16-bit gradients. Other engines keep full sends, synchronous collectives, their dtypes."""
    from scalestudy.costmodel.comm import collective, links, stage_boundary_time
    from scalestudy.costmodel.eager_kernels import autocast_param_s
    from scalestudy.costmodel.terms import _sp_async_exposed

    c = make_cluster("a100-80gb", nodes=2, gpus_per_node=8)
    n = 64e6
    assert stage_boundary_time(n, 8, True, False, True, c) == p2p_time(n / 8, True, c)
    assert stage_boundary_time(n, 8, False, True, True, c) == \
        pytest.approx(p2p_time(n / 8, True, c) + collective(1.0, n, 8, 8, links(c)))
    assert stage_boundary_time(n, 8, False, False, True, c) == p2p_time(n, True, c)
    assert stage_boundary_time(n, 8, False, True, True, c) < 0.3 * p2p_time(n, True, c)
    i = 0.1
    assert _sp_async_exposed(1.0, 4.0, 2, i) == pytest.approx((1.0 + 0.5 + 2 * i * 0.5) / 2)  # GEMMs hide both
    assert _sp_async_exposed(1.0, 0.0, 2, i) == pytest.approx((1.0 + 1.5) / 2)  # nothing to hide behind
    spec, work = get_model("llama-13b"), Workload(global_batch=64, seq_len=2048)
    plain = Strategy(engine="ddp", tp=8, pp=2, sequence_parallel=False)  # torch pipelining: whole tensors
    a, b, ds = (estimate(spec, c, plain.replace(engine=e, zero=z), work)
                for e, z in (("ddp", 0), ("megatron", 0), ("deepspeed", 1)))
    assert b.pp_comm_s < 0.5 * a.pp_comm_s and ds.pp_comm_s == b.pp_comm_s  # DeepSpeed partitions its sends too
    assert b.tp_comm_s == a.tp_comm_s  # no SP: synchronous all-reduces everywhere
    sp_ddp, sp_mega = (estimate(spec, c, s.replace(sequence_parallel=True), work) for s in (plain, plain.replace(
        engine="megatron")))
    # same compute, but for DDP's autocast over fp32 parameters (eager_kernels.autocast_param_s, per micro-batch)
    casts = sp_ddp.layout.grad_accum * autocast_param_s(spec, "ddp", "bf16", 8, sp_ddp.params_per_device, c.device)
    assert sp_mega.tp_comm_s < 0.9 * sp_ddp.tp_comm_s and sp_mega.compute_s == pytest.approx(sp_ddp.compute_s - casts)
    wide = make_cluster("a100-80gb", nodes=4, gpus_per_node=8)
    fp16, bf16 = (estimate(spec, wide, Strategy(engine="megatron", zero=0, tp=8, precision=p), work)
                  for p in ("fp16", "bf16"))
    assert fp16.dp_comm_total_s < 0.55 * bf16.dp_comm_total_s


def test_megatron_core_overlapped_buckets_grow_with_the_data_parallel_size(monkeypatch):
    # Megatron-Core DistributedDataParallel (read at f2e5db40): bucket_size = max(40M, 1M x dp) when
    # overlap_grad_reduce, so a bucket's ring chunk per rank stays ~1M elements; the other engines keep fixed buckets
    import scalestudy.costmodel.stage_terms as stage_terms_module
    from scalestudy.costmodel.comm import links, ring_latency
    from scalestudy.costmodel.engines import engine_comm, grad_bucket_elems

    mc = engine_comm("megatron")
    assert grad_bucket_elems(mc, 8, True) == (4e7, 4e7)
    assert grad_bucket_elems(mc, 512, True) == (5.12e8, 5.12e8)
    assert grad_bucket_elems(mc, 512, False) == (4e7, 4e7)  # no overlap: the fixed chunked all-reduce
    for name in ("ddp", "deepspeed", "internlm", "fsdp"):
        eng = engine_comm(name)
        assert grad_bucket_elems(eng, 1024, True) == (eng.reduce_bucket_elems, eng.allgather_bucket_elems)
    # tp 4, dp 512 over 256 H100 nodes: ceil(psi / 512M) instead of ceil(psi / 40M) reduce-scatters and parameter
    # all-gathers, each one ring latency of 512 ranks, 2 of them per node
    model, cluster = get_model("llama-13b"), make_cluster("h100-80gb", nodes=256, gpus_per_node=8)
    st = Strategy(engine="megatron", zero=1, tp=4, micro_batch=1, precision="bf16", overlap_grad_comm=True)
    work = Workload(seq_len=4096, global_batch=2048)
    grown = estimate(model, cluster, st, work)
    psi = grown.params_per_device
    saved = 2 * (-(-psi // 4e7) + (psi // -5.12e8)) * ring_latency(512, 2, links(cluster))
    fixed = dataclasses.replace(mc, bucket_elems_per_dp_rank=0.0)
    monkeypatch.setattr(stage_terms_module, "engine_comm",
                        lambda name: fixed if name == "megatron" else engine_comm(name))
    assert estimate(model, cluster, st, work).dp_comm_total_s - grown.dp_comm_total_s == pytest.approx(saved)
