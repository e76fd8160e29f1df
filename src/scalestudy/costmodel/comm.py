"""Collective communication times on a two-level cluster (NVLink/shared memory inside a node, NICs across nodes).

Ring algorithms (Thakur et al. 2005; NCCL): all-reduce of B bytes over n ranks sends 2(n-1)/n * B per rank,
reduce-scatter and all-gather (n-1)/n * B. A group that spans nodes runs as NCCL runs it: one flat ring (per
channel) through every rank, NVLink hops inside a node and one NIC hop where it leaves the node, with one channel
per NIC, so the g group members of a node pool their g NIC shares (bus_time). Each ring step pays its link's
latency (ring_latency), at least the host's network post overhead per step once the ring spans nodes.
Bandwidths are per device, one direction, bytes/s (specs/hardware/*.yaml); a device's inter-node figure is its
share of the node's NICs (node NIC total / GPUs per node).
"""

from __future__ import annotations

import math

from scalestudy.specs.hardware import ClusterSpec


_LINKS: dict[int, tuple] = {}


def exposed_latency(exposed: float, bytes_exposed: float, latency: float) -> float:
    """Exposed seconds of a step's data-parallel collectives when their bytes are overlapped as the engine's
    schedule allows (`bytes_exposed`: the schedule over their bandwidth seconds alone, gather_parts) but their ring
    latency (`latency`: the sum over the step's collectives of ring_latency / tree_latency) is not hidden at all;
    never less than `exposed`, the estimate that overlaps both.

    Why latency, not bytes: a ring collective is (n-1) dependent hops (NCCL src/graph/tuning.cc prices a ring
    all-gather / reduce-scatter as (nRanks-1-nInterSteps) NVLink steps + nInterSteps network steps, an all-reduce
    twice that; "the latency of ring increases linearly with the communicator size", NVIDIA/nccl#1712), so a step
    of k collectives carries k (n-1) hop latencies, growing linearly with the data-parallel size while the bytes per
    rank stay flat. Published weak-scaling runs lose throughput in that proportion although their compute per layer
    is 10-50x a collective's latency, i.e. with ample slack to hide it: llm-foundry's H100 table (FSDP, 128 -> 512
    GPUs, per-GPU tokens/s down 7-10% for MPT-1B/3B/7B; the model with latency overlapped: down 1-3%), torchtitan's
    FSDP2 Llama 3 8B (8 -> 128 H100: step +0.08 s against +0.05 s of ring latency), Megatron-LM's H100 strong
    scaling and NeMo 22.03's DDP T5 3B (1 -> 10 nodes): published step growth / modelled latency growth 0.5-1.9.
    What keeps a collective's latency on the critical path is not settled by the code read (FSDP1/2 issue each
    gather a block ahead; every collective synchronises all ranks -- each hop needs the next rank's kernel -- so
    per-rank skew and the NCCL kernel's SM time ride on it); the rule is the measured one with no free constant:
    all of the modelled latency exposed. Leave-one-source-out A/B (2026-12-02, benchmarks/RESULTS.md): mean |error|
    7.61 -> 7.21% over 422 rows, llm-foundry H100 10.2 -> 4.6%; worse by 0.5-1.5 points: the dgxc v25.04
    Nemotron4 rows (a flat compute offset; their dp trend improves) and DeepSpeed-Azure ZeRO-3."""
    return max(exposed, bytes_exposed + latency)


def spans_nodes(ranks_apart: int, cluster: ClusterSpec) -> bool:
    """Whether ranks `ranks_apart` apart in the rank order (tp innermost, then dp, then pp) sit on different nodes:
    the stride reaches a node's worth of ranks on a cluster of more than one node."""
    return ranks_apart >= cluster.gpus_per_node and cluster.nodes > 1


def links(cluster: ClusterSpec) -> tuple[float, float, float, float, float]:
    """(intra bw, intra latency, inter bw, inter latency, the hosts' network post overhead), memoised per cluster
    object (hot path)."""
    hit = _LINKS.get(id(cluster))
    if hit is None or hit[0] is not cluster:
        hit = (cluster, (cluster.intra_bw, cluster.intra_latency, cluster.inter_bw, cluster.inter_latency,
                         cluster.net_post_overhead))
        _LINKS[id(cluster)] = hit
    return hit[1]


def tp_ranks_per_node(tp: int, cluster: ClusterSpec) -> int:
    """Members of one tensor-parallel group on a node: all tp when the group sits inside a node, the node's
    gpus_per_node when it spans tp / G whole nodes (specs.strategy.resolve_layout, tp_across_nodes).

    Such a group's collectives run as any NCCL collective spanning nodes (bus_time, ring_latency): one flat ring
    per channel through the tp ranks, NVLink hops inside a node, one NIC hop between nodes, the G members of a node
    pooling their G NIC shares (the bus bandwidth nccl-tests measures across nodes: the node's NIC total), and
    tp / G - 1 network-latency hops per walk of the ring: tp 16 over two 8 x A100 40GB nodes all-reduces its
    activations at min(240, 8 x 23) = 184 GB/s of bus bandwidth (a100-40gb.yaml), not NVLink's 240."""
    return min(tp, cluster.gpus_per_node)


def tp_overlap_priced(tp_comm_overlap: bool, tp: int, cluster: ClusterSpec) -> bool:
    """Whether a strategy's tp_comm_overlap is priced as on: only for a tensor-parallel group inside one node
    (terms._tp_comm: Transformer Engine's userbuffers and PyTorch's async TP need it there), so a megatron zero 1 tp
    spanning nodes, whose engine default turns it on, is priced without it."""
    return bool(tp_comm_overlap) and tp_ranks_per_node(tp, cluster) >= tp


def tp_links(cluster: ClusterSpec, tp: int) -> tuple[float, float, float, float, float]:
    """links() for a tensor-parallel group: on an NVLink point-to-point mesh (V100 SXM2 boards, DGX-1) a group of tp
    consecutive ranks inside the node rides only the links among its members (DeviceSpec.nvlink_group_fraction)."""
    lk = links(cluster)
    share = cluster.device.nvlink_group_fraction(tp, cluster.gpus_per_node)
    return lk if share == 1.0 else (lk[0] * share,) + lk[1:]


def bus_time(volume_factor: float, nbytes: float, n: int, per_node: int, lk: tuple) -> float:
    """Bandwidth seconds (no latency) of one ring collective of `nbytes` among n ranks, `per_node` of them on each
    node (volume_factor 2: all-reduce, 1: all-gather / reduce-scatter / reduce).

    Every rank moves volume_factor (n-1)/n nbytes (its bus volume). Inside one node over NVLink. Across nodes NCCL
    runs one flat ring through all ranks (no 2D ring: NVIDIA/nccl #471), on several channels, each channel leaving
    a node through its own NIC and staying on NVLink inside it, so the per_node members of the group pool their
    NIC shares: bus bandwidth min(NVLink, per_node x NIC share). The NVLink and NIC hops of a ring are pipelined:
    the slower bounds the time, they do not add up. Measured: nccl-tests all_reduce across nodes reaches a bus
    bandwidth of the node's NIC total (NVIDIA/nccl-tests #29 -- 48 GB/s with DGX-1's 4 NICs vs 12 GB/s with one;
    #119 and NVIDIA/nccl #1048: 85-96 of 100 GB/s with 4 HDR NICs per 8 A100s), not the one NIC of a rank.
    The same at every node count: a large message's ring bus bandwidth does not fall as the ring grows, only its
    latency does (NVIDIA/nccl #1712; ring_latency). Runs that lose more per GPU with more nodes lose it to their
    fabric (ECMP hash collisions on Ethernet Clos fabrics: NVIDIA/nccl-tests #169, RoCE busbw 70 -> 40 GB/s from 3
    to 6 nodes; Alibaba HPN, SIGCOMM '24), a property of the cluster: a row gives it as inter_node_bytes_per_s from
    that cluster's own NCCL measurement (BLOOM's, taken on 4 Jean Zay nodes, prices its 48-node rows within 2%:
    bigscience2022rampup). A generic derating by node count was tried and not adopted (benchmarks/RESULTS.md
    2026-12-02 14:05, dpscale: Llama 3, narayanan2021 ZeRO-3 and DeepSpeed-Azure 1T broke).
    """
    if n <= 1 or nbytes <= 0:
        return 0.0
    intra_bw, inter_bw = lk[0], lk[2]
    g = max(1, min(per_node, n))
    bus = intra_bw if g >= n else min(intra_bw, g * inter_bw)
    return volume_factor * (n - 1) / n * nbytes / bus


def collective(volume_factor: float, nbytes: float, n: int, per_node: int, lk: tuple) -> float:
    """Ring collective (volume_factor 2: all-reduce, 1: all-gather / reduce-scatter) over links `lk` = links():
    bus_time plus the ring's step latencies (an all-reduce walks the ring twice)."""
    if n <= 1 or nbytes <= 0:
        return 0.0
    return bus_time(volume_factor, nbytes, n, per_node, lk) + volume_factor * ring_latency(n, per_node, lk)


def gather_time(nbytes: float, n: int, per_node: int, lk: tuple, efficiency: float, rails: str, count: int,
                tree: bool = False) -> float:
    """ZeRO-3 / FSDP all-gather or reduce-scatter whose full (gathered) buffer is `nbytes`, issued as `count`
    collectives among n ranks (`per_node` of them share a node).

    Inside a node: a ring over NVLink. Across nodes a rank moves (n-1)/n * nbytes at the bus bandwidth of
    `bus_time`: with rails "node" the group's members on a node pool their NIC shares (one NCCL collective over
    the group, one channel per NIC); with rails "rank" a rank gets its own NIC share only (an effective rate, see
    engines.yaml gather_rails). Every collective pays the ring's (n-1) hop latencies, or with `tree` (the half of
    an all-reduce, which NCCL runs as a tree across nodes) 2 log2(n) of them.
    """
    bandwidth, latency = gather_parts(nbytes, n, per_node, lk, efficiency, rails, count, tree)
    return bandwidth + latency


_GATHERS: dict[tuple, tuple[float, float]] = {}


def gather_parts(nbytes: float, n: int, per_node: int, lk: tuple, efficiency: float, rails: str, count: int,
                 tree: bool = False) -> tuple[float, float]:
    """gather_time's (bandwidth, latency) seconds: its bytes alone, and the hop latencies its `count` collectives
    add. Memoised on every argument (a planner prices the same collectives for each micro-batch and engine)."""
    key = (nbytes, n, per_node, lk, efficiency, rails, count, tree)
    hit = _GATHERS.get(key)
    if hit is None:
        if len(_GATHERS) > 100_000:
            _GATHERS.clear()
        hit = _GATHERS[key] = _gather_parts(nbytes, n, per_node, lk, efficiency, rails, count, tree)
    return hit


def _gather_parts(nbytes: float, n: int, per_node: int, lk: tuple, efficiency: float, rails: str, count: int,
                  tree: bool) -> tuple[float, float]:
    if n <= 1 or nbytes <= 0:
        return 0.0, 0.0
    intra_bw, intra_lat = lk[0], lk[1]
    g = max(1, min(per_node, n))
    if g >= n:
        hops = math.ceil(math.log2(n)) if tree else n - 1
        return (n - 1) / n * nbytes / (intra_bw * efficiency), count * hops * intra_lat
    latency = count * (tree_latency(n, g, lk) if tree else ring_latency(n, g, lk))
    return bus_time(1.0, nbytes, n, g if rails == "node" else 1, lk) / efficiency, latency


# Network posts per ring step of NCCL's Simple protocol, the one its large collectives run (src/graph/tuning.cc
# since 2.18.1: `if (p == NCCL_PROTO_SIMPLE) netOverhead *= 3`)
SIMPLE_POSTS_PER_RING_STEP = 3


def ring_latency(n: int, per_node: int, lk: tuple) -> float:
    """Latency of one ring all-gather / reduce-scatter through n ranks, `per_node` of them per node.

    NCCL's tuning model (src/graph/tuning.cc, ring all-gather / reduce-scatter: (nRanks - 1 - nInterSteps) steps
    at the intra-node latency, nInterSteps = nNodes - 1 at the network latency): a chunk walks the ring hop by hop,
    so the steps add up, and only the steps that leave a node pay the NIC's latency; the others are NVLink hops.
    Once the ring spans nodes its NVLink steps cost at least the host's network post overhead (lk[4]) times
    SIMPLE_POSTS_PER_RING_STEP -- tuning.cc since 2.18.1 (d97a32fa): 'Inter-node rings still have to launch nsteps *
    net overhead', intraLat = max(intraLat, netOverhead): the ring moves step by step, and each step waits on the
    CPU proxy that posts the network transfers, 2 us a post on AMD x86 hosts (DGX A100), 1 us on Intel.
    """
    if n <= 1:
        return 0.0
    inter = -(-n // max(1, per_node)) - 1
    step = max(lk[1], SIMPLE_POSTS_PER_RING_STEP * lk[4]) if inter else lk[1]
    return (n - 1 - inter) * step + inter * lk[3]


def per_owner_broadcast_time(nbytes: float, owners: int, n: int, per_node: int, lk: tuple, efficiency: float
                             ) -> float:
    """Post-step parameter sync of a ZeRO-1 optimizer that re-sends each owner's updated parameters with its own
    broadcast (InternLM HybridZeroOptimizer.broadcast_params):
    `owners` broadcasts among n ranks that together deliver the full `nbytes` to every rank.

    Bandwidth: a ring broadcast delivers its bytes to every rank; NCCL splits it over its channels, one per NIC of
    the node, so together the broadcasts move `nbytes` through each node's pooled NICs, as the all-gather of the
    same buffer does (bus_time, rails node). Latency: NCCL runs broadcast as a ring of nRanks steps
    (src/graph/tuning.cc, ring_latency), and the broadcasts are issued one after another on one communicator, so
    `owners` of them add up -- with the number of owners bounded by the data-parallel size, a term that grows
    with dp twice (count and ring length), which large data-parallel groups pay.
    """
    bandwidth, latency = per_owner_broadcast_parts(nbytes, owners, n, per_node, lk, efficiency)
    return bandwidth + latency


def per_owner_broadcast_parts(nbytes: float, owners: int, n: int, per_node: int, lk: tuple, efficiency: float
                              ) -> tuple[float, float]:
    """per_owner_broadcast_time's (bandwidth, latency) seconds."""
    if n <= 1 or nbytes <= 0:
        return 0.0, 0.0
    return bus_time(1.0, nbytes, n, per_node, lk) / efficiency, owners * ring_latency(n, per_node, lk)


def tree_latency(n: int, per_node: int, lk: tuple) -> float:
    """Latency of one half of a tree all-reduce (NCCL double binary tree across nodes, chains inside a node):
    log2(nodes) network hops plus the chain through the node's ranks."""
    nodes = -(-n // max(1, per_node))
    return math.ceil(math.log2(max(nodes, 2))) * lk[3] + (max(1, per_node) - 1) * lk[1]


def allreduce_time(nbytes: float, n: int, per_node: int, cluster: ClusterSpec) -> float:
    """All-reduce of `nbytes` among n ranks, `per_node` of which share a node."""
    return collective(2.0, nbytes, n, per_node, links(cluster))


def allgather_time(nbytes: float, n: int, per_node: int, cluster: ClusterSpec) -> float:
    """All-gather whose gathered result is `nbytes` (each rank contributes nbytes/n)."""
    return collective(1.0, nbytes, n, per_node, links(cluster))


reduce_scatter_time = allgather_time  # same volume as all-gather: (n-1)/n of the full buffer per rank


def p2p_time(nbytes: float, cross_node: bool, cluster: ClusterSpec) -> float:
    """Point-to-point send of `nbytes` (pipeline activations/gradients between neighbouring stages)."""
    if nbytes <= 0:
        return 0.0
    intra_bw, intra_lat, inter_bw, inter_lat, _ = links(cluster)
    if cross_node:
        return nbytes / inter_bw + inter_lat
    return nbytes / intra_bw + intra_lat


def stage_boundary_time(nbytes: float, tp: int, sequence_parallel: bool, scatter_gather: bool, cross_node: bool,
                        cluster: ClusterSpec) -> float:
    """One transfer of a pipeline stage boundary (`nbytes`: a micro-batch's full activation or its gradient) from
    each tensor-parallel rank of one stage to its peer on the next, all tp pairs at once over their own links.

    Under sequence parallelism each rank holds 1/tp of the sequence and sends only that. Otherwise the tensor is
    replicated on the tp ranks: with `scatter_gather` (Megatron-LM's scatter/gather optimisation, Narayanan et al.
    2021 Sec. 4.1; engines.yaml pipeline_scatter_gather) each rank sends 1/tp of it and the receiving stage
    all-gathers the pieces over NVLink; without it (DeepSpeed's pipeline engine) every rank sends all of it."""
    if tp > 1 and sequence_parallel:
        return p2p_time(nbytes / tp, cross_node, cluster)
    if tp > 1 and scatter_gather:
        return p2p_time(nbytes / tp, cross_node, cluster) + collective(1.0, nbytes, tp, tp_ranks_per_node(tp, cluster),
                                                                        links(cluster))
    return p2p_time(nbytes, cross_node, cluster)


def dp_comm_volume(psi: float, engine: str, zero: int, grad_accum: int, grad_bytes: float, param_bytes: float
                   ) -> dict[str, float]:
    """Bytes each data-parallel rank must move per optimizer step, in units of ring traffic of the full buffer.

    Returns {"grad_allreduce", "grad_reduce_scatter", "param_allgather"} as full-buffer sizes (bytes); the time
    functions apply the (n-1)/n ring factors. ZeRO paper Sec. 7: DP all-reduce = reduce-scatter + all-gather =
    2 psi; ZeRO-1/2 the same 2 psi; ZeRO-3 adds a second parameter all-gather (forward and backward): 3 psi.
    """
    if engine == "ddp":
        vol = {"grad_allreduce": psi * grad_bytes, "grad_reduce_scatter": 0.0, "param_allgather": 0.0}
        if zero == 1:
            vol["param_allgather"] = psi * param_bytes  # ZeroRedundancyOptimizer re-broadcasts updated shards
        return vol
    if engine == "deepspeed" and zero == 0:
        return {"grad_allreduce": psi * grad_bytes, "grad_reduce_scatter": 0.0, "param_allgather": 0.0}
    if engine == "deepspeed" and zero == 1:
        # stage 1 reduces (reduce-scatter) at the accumulation boundary, then all-gathers the updated weights
        return {"grad_allreduce": 0.0, "grad_reduce_scatter": psi * grad_bytes, "param_allgather": psi * param_bytes}
    if engine == "deepspeed" and zero == 2:
        # stage 2 partitions gradients, so it reduce-scatters after every micro-batch's backward
        return {"grad_allreduce": 0.0, "grad_reduce_scatter": grad_accum * psi * grad_bytes,
                "param_allgather": psi * param_bytes}
    # ZeRO-3 / FSDP: weights gathered for forward and again for backward (FSDP zero=2 keeps them: once),
    # gradients reduce-scattered, every micro-batch
    gathers = 1 if (engine == "fsdp" and zero == 2) else 2
    return {"grad_allreduce": 0.0, "grad_reduce_scatter": grad_accum * psi * grad_bytes,
            "param_allgather": grad_accum * gathers * psi * param_bytes}
