"""Tensor and pipeline parallelism as `scalestudy train` runs them on CPU ranks (gloo, one thread per rank).

The GPU terms of costmodel/estimate.py model Megatron-LM: a vocabulary-parallel head, one all-reduce per sub-layer
and pass, a pipeline of equal slots. On a CPU, `train`'s hybrid backend (engine/backends/hybrid.py with
engine/parallel/*) is what runs, and its costs differ by mechanism (issue 12: before these terms the model put tp2
at 0.95x the step of dp2 where llama-tiny measured 2.9x, and pp2 at 2.2x where it measured 0.76x):

- Replicated head: embeddings, norms and the head stay whole on every tp rank (tensor_parallel.py), so the head
  GEMMs, the softmax / cross-entropy over the vocabulary and the embedding gradient do not shrink with tp.
- Collectives of the DTensor plans, counted per layer and micro-batch: forward, one per row-parallel projection
  (all-reduce; with sequence parallelism a reduce-scatter, plus an all-gather before each sub-layer); backward,
  one all-reduce per column-parallel projection (each projection's `from_local` input reduces its own Partial
  gradient: q, k and v three times, not once as Megatron's fused backward), plus with sequence parallelism an
  all-gather per row-parallel output, and an all-gather at each chunk's sequence scatter and gather. Full
  recomputation repeats the forward ones. On gloo they are latency-bound; each is priced by the calibrated
  alpha-beta ring (`comm.collective`), its bytes term at the calibration's measured rate of that op
  (DeviceSpec.collective_time_ratio: gloo's reduce-scatter is several times slower per byte than all-reduce),
  or, where the profile measured it, at the time of a DTensor collective of a 64 KiB activation in a compute loop
  on this machine's ranks ("tp-collective@multi": gloo, the functional collective's dispatch and wait, the ranks'
  skew; 0.6-1.6 ms here, against 0.5 ms for a raw gloo all-reduce) plus the ring's bytes term beyond 64 KiB.
- DTensor dispatch: per sharded projection and micro-batch (from_local / redistribute / to_local and the
  sharded matmuls, forward and backward), per sequence-parallel sub-layer, and per sharded projection and
  optimizer step (AdamW, partial-gradient reduction and the global norm on DTensors): measured seconds in the
  CPU profile's `engine_overhead_s` ("tp-linear", "tp-sp-sublayer", "tp-step"; engine/parallel_profile.py),
  0 on a profile without them.
- Pipeline: stages differ (the last one holds the head, the first the embedding and its dense gradient), so a step of m micro-batches is
  m times the slowest stage plus one pass of every other stage (fill and drain), not (m + pp - 1) slowest slots;
  interleaving divides the fill and drain by v. Each stage pays its gloo sends/receives per boundary and
  micro-batch (the whole sequence: the sequence-parallel gather precedes the boundary) and the schedule's own
  bookkeeping per micro-batch and chunk ("pp-microbatch", measured).
- Framework: the hybrid backend has no DDP wrapper (replication is one flat all-reduce after the step), so DDP's
  per-sublayer hook cost does not apply; FSDP's does (fully_shard per block), its multi-rank part only with dp > 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scalestudy.costmodel.comm import collective, p2p_time, spans_nodes, tp_ranks_per_node
from scalestudy.costmodel.cpu_engine import engine_step_overhead
from scalestudy.costmodel.memory import ACT_BYTES, boundary_bytes, loss_kernel
from scalestudy.costmodel.step import EMBED_GRAD_BYTES, ComputeTimes, compute_times

# engine_overhead_s keys of a measured CPU profile (seconds; engine/parallel_profile.py)
TP_LINEAR = "tp-linear"  # per sharded projection per micro-batch (forward + backward)
TP_SP_SUBLAYER = "tp-sp-sublayer"  # extra per sub-layer per micro-batch with sequence parallelism
TP_STEP = "tp-step"  # per sharded projection per optimizer step
PP_MICROBATCH = "pp-microbatch"  # per micro-batch per model chunk of a pipeline stage
TP_COLLECTIVE = "tp-collective@multi"  # s of one DTensor all-reduce of TP_COLLECTIVE_BYTES on several ranks
TP_COLLECTIVE_BYTES = 65536


@dataclass(frozen=True, slots=True)
class HybridTimes:
    """Seconds per optimizer step, as Estimate reports them (step = their sum + optimizer + dp communication)."""

    compute_s: float  # slowest stage's compute x micro-batches
    tp_s: float  # its tensor-parallel collectives and DTensor dispatch
    pp_s: float  # its pipeline sends/receives and schedule bookkeeping
    bubble_s: float  # one pass of every other stage (fill and drain)
    framework_s: float  # engine hooks per micro-batch of the slowest stage + DTensor optimizer-step overhead


def tp_layer_counts(model) -> tuple[tuple[int, int, int, int], ...]:
    """Per stack, (layers, column-parallel projections, row-parallel projections, sub-layers) of one layer, in the
    plans of engine/parallel/tensor_parallel.py: attention q, k, v colwise (GPT-2: its fused c_attn) and o rowwise;
    FFN gate/up (or wi) colwise and down (wo) rowwise; a T5 decoder layer adds cross-attention."""
    ffn_in = 2 if model.gated_ffn else 1
    if model.family == "gpt2":  # fused c_attn: one column-parallel projection for q, k and v
        return ((model.num_layers, 1 + ffn_in, 2, 2),)
    if model.is_encoder_decoder:
        return ((model.num_layers, 3 + ffn_in, 2, 2), (model.num_decoder_layers, 6 + ffn_in, 3, 3))
    return ((model.num_layers, 3 + ffn_in, 2, 2),)


def _stage_stacks(model, split: tuple[int, ...]) -> list[list[tuple[int, int]]]:
    """For each pipeline device, [(stack index, layers of that stack), ...] (T5: encoder layers, then decoder)."""
    sizes = [n for n, *_ in tp_layer_counts(model)]
    out, start = [], 0
    for n in split:
        parts, lo, hi, offset = [], start, start + n, 0
        for k, size in enumerate(sizes):
            a, b = max(lo, offset), min(hi, offset + size)
            if b > a:
                parts.append((k, b - a))
            offset += size
        out.append(parts)
        start += n
    return out


def tp_costs(model, st, cluster, lk: tuple, tp: int, mb: int, s: int, t: int, parts: list[tuple[int, int]],
             chunks: int) -> tuple[float, float, int]:
    """(collective seconds, dispatch seconds, sharded projections) per micro-batch of one stage's layers."""
    if tp <= 1:
        return 0.0, 0.0, 0
    dev = cluster.device
    sp = st.sequence_parallel
    a = ACT_BYTES[st.precision]
    counts = tp_layer_counts(model)
    ratio = dev.collective_time_ratio  # measured / alpha-beta time per gloo op (calibration), on the bytes term
    latency_only = (math.inf, lk[1], math.inf, lk[3], lk[4])
    per_node = tp_ranks_per_node(tp, cluster)

    def bytes_term(volume: float, nbytes: float) -> float:
        return collective(volume, nbytes, tp, per_node, lk) - collective(volume, nbytes, tp, per_node, latency_only)

    measured = dev.engine_overhead_s.get(TP_COLLECTIVE)

    def timed(op: str, volume: float, nbytes: float) -> float:
        if measured is not None:  # the measured DTensor collective, plus the bytes beyond its message
            extra = bytes_term(volume, nbytes) - bytes_term(volume, TP_COLLECTIVE_BYTES * volume / 2.0)
            return measured + ratio.get(op, 1.0) * max(0.0, extra)
        return collective(volume, nbytes, tp, per_node, latency_only) + ratio.get(op, 1.0) * bytes_term(volume, nbytes)

    ar = lambda n: timed("all_reduce", 2.0, n)  # noqa: E731
    ag = lambda n: timed("all_gather", 1.0, n)  # noqa: E731
    rs = lambda n: timed("reduce_scatter", 1.0, n)  # noqa: E731
    fwd_repeat = 2 if st.recompute == "full" else 1
    comm = dispatch = 0.0
    linears = 0
    for k, layers in parts:
        _, col, row, sub = counts[k]
        length = t if (model.is_encoder_decoder and k == 1) else s
        act = mb * length * model.d_model * a
        if sp:
            per_layer = fwd_repeat * row * (ag(act) + rs(act)) + col * ar(act) + row * ag(act)
            dispatch += layers * sub * dev.engine_overhead_s.get(TP_SP_SUBLAYER, 0.0)
        else:
            per_layer = fwd_repeat * row * ar(act) + col * ar(act)
        if model.is_encoder_decoder and k == 1:  # cross-attention k, v read the encoder output (length s)
            enc = mb * s * model.d_model * a
            per_layer += 2 * (ar(enc) - ar(act))
        comm += layers * per_layer
        linears += layers * (col + row)
        if sp:  # the sequence is scattered at the chunk's first block and gathered after its last
            comm += chunks * 2 * ag(act)
    dispatch += linears * dev.engine_overhead_s.get(TP_LINEAR, 0.0)
    return comm, dispatch, linears


def hybrid_times(model, cluster, st, layout, ct: ComputeTimes, split: tuple[int, ...], s: int, t: int, lk: tuple,
                 flash: bool, cal) -> HybridTimes:
    """Step-time parts of a tp and/or pp layout of train's hybrid backend on CPU ranks (module docstring)."""
    dev = cluster.device
    tp, pp, ga, mb = layout.tp, layout.pp, layout.grad_accum, st.micro_batch
    v = st.virtual_stages if pp > 1 else 1
    total = model.total_layers
    # the head, softmax and embedding gradient of the whole vocabulary on every tp rank
    head = ct.head if tp == 1 else compute_times(model, dev, st.precision, 1, mb, s, t, st.recompute, flash, False,
                                                 cal, loss=loss_kernel(st)).head
    # the dense embedding gradient of each lookup (step.py puts it in the head term) is the first stage's work
    embed = (2 if model.is_encoder_decoder else 1) * model.vocab_size * model.d_model * EMBED_GRAD_BYTES \
        / dev.hbm_bytes_per_s if pp > 1 else 0.0
    cross_node = spans_nodes(tp * layout.dp, cluster)
    boundary = boundary_bytes(model, mb, s, t, st.precision)
    per_chunk = dev.engine_overhead_s.get(PP_MICROBATCH, 0.0)
    eng_key = f"{st.engine}-{st.zero}"
    hooks = step_hooks = 0.0
    if st.engine == "fsdp":  # fully_shard per block; the ddp engine replicates without a wrapper
        hooks = dev.engine_overhead_s.get(eng_key, 0.0)
        if layout.dp > 1:
            hooks += dev.engine_overhead_s.get(eng_key + "@multi", 0.0)
        step_hooks = engine_step_overhead(dev, st.engine, st.zero, layout.dp)  # its step(), once per step
    sublayers_per_layer = {k: sub for k, (_, _, _, sub) in enumerate(tp_layer_counts(model))}
    stages, linears_max = [], 0
    for d, parts in enumerate(_stage_stacks(model, split)):
        n = split[d]
        compute = (ct.forward + ct.backward) * n / total + (head - embed if d == pp - 1 else 0.0) \
            + (embed if d == 0 else 0.0)
        comm, dispatch, linears = tp_costs(model, st, cluster, lk, tp, mb, s, t, parts, v)
        linears_max = max(linears_max, linears)
        pp_part = 0.0
        if pp > 1:
            edges = 1 if d in (0, pp - 1) else 2
            pp_part = v * (2 * edges * p2p_time(boundary, cross_node, cluster) + per_chunk)
        own = sum(layers * sublayers_per_layer[k] for k, layers in parts)
        stages.append((compute, comm + dispatch, pp_part, hooks * own, step_hooks * own))
    times = [sum(x[:4]) for x in stages]
    b = max(range(len(times)), key=times.__getitem__)
    others = sum(times) - times[b]
    bubble = others / v if st.pp_schedule == "interleaved" else others
    compute, tp_part, pp_part, fw, fw_step = stages[b]
    step_overhead = linears_max * dev.engine_overhead_s.get(TP_STEP, 0.0) + fw_step
    return HybridTimes(compute_s=ga * compute, tp_s=ga * tp_part, pp_s=ga * pp_part, bubble_s=bubble if pp > 1 else 0.0,
                       framework_s=ga * fw + step_overhead)
