"""Clusters mixing device types (or ranks of measured speed): the step bound by the slowest pipeline stage, and
memory per stage on its own device. `estimate()` hands such clusters (`ClusterSpec.groups`) here. Torch-free.

Placement (Megatron-LM rank order, pipeline outermost): stage k holds ranks [k W/pp, (k+1) W/pp) of the cluster's
rank order (its groups in the order written, node by node), its dp x tp ranks inside. A stage whose ranks span
device types runs at its slowest device (data-parallel replicas and tensor-parallel shards move in lock-step) and
must fit the smallest memory among them.

Per stage k holding n_k blocks -- a share f_k of the blocks' forward FLOPs (encoder and decoder blocks of T5
weighted by their FLOPs) -- on its device d_k, per micro-batch:
    slot_k = f_k x (forward + backward)(d_k) [+ LM head on the last stage] + f_k x tensor-parallel all-reduces
             + 2 point-to-point sends of the stage boundary (pp > 1; 2 v under the interleaved schedule)
    pipeline = sum_k slot_k + (m - 1) x max_k slot_k      (1F1B and GPipe with m micro-batches per step: every
               micro-batch passes every stage once, fill and drain, then one per slowest-stage interval;
               interleaved with v model chunks per device: the fill and drain (sum_k slot_k - max_k slot_k) / v;
               1F1B with the slowest stage k before lighter ones -- a T5 split encoder-first -- the stages after k
               only where k's warm-up forwards and cool-down backwards do not hide them: pipeline_fill)
    step = pipeline + max_k (exposed dp comm_k + optimizer_k + offload_k + framework_k)  (each stage reduces and
           updates its own parameters after the drain; the step ends with the slowest) -- a tied embedding's
           first/last-stage gradient all-reduce (terms._tied_embedding_sync) adds to those two stages' tails
Reported as estimate terms: compute/tp/pp = m x the slowest stage's, bubble = the fill and drain above.
Memory of stage k: model states, buffers and optimizer of its own parameters (its blocks; + the embedding on the
first, + the LM head on the last stage), activations of its blocks for min(pp - k, m) micro-batches in flight
(1F1B; GPipe: m; interleaved: memory.stage_in_flight), + the logits on the last stage. Interleaved, device k runs
chunks k, k + pp, ... of the model: its n_k blocks, the embedding on the first and the LM head on the last device as
contiguous stages; decoder-only models only (a T5's encoder/decoder mix per device would differ: refused).

On one device type `estimate()` prices the slowest stage alone and derives the others' slots from their shares
(estimate._stage_blocks_s, _other_slots_s): the same fill and drain, the same step
(tests/unit/test_costmodel_pipeline.py). Both price a stage's terms with stage_terms.price_stage; what differs is
which blocks a stage holds and on what device.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from scalestudy.costmodel.attention_bias import priced_bias_memory
from scalestudy.costmodel.autocast_memory import autocast_rank_bytes, t5_cast_bytes
from scalestudy.costmodel.block_seconds import encoder_decoder_time_shares
from scalestudy.costmodel.breakdown import Estimate
from scalestudy.costmodel.alignment import pads_vocab
from scalestudy.costmodel.comm import collective, links, spans_nodes, stage_boundary_time, tp_ranks_per_node
from scalestudy.costmodel.constants import stored
from scalestudy.costmodel.engines import copies_tied_modules, engine_comm, scatters_stage_boundary
from scalestudy.costmodel.fp8 import recipe as fp8_recipe
from scalestudy.costmodel.flops import forward_flops, step_flops_per_sequence, target_length
from scalestudy.costmodel.memory import (Memory, activation_parts, block_gradient_bytes, boundary_bytes,
                                         eager_composed_gelu, eager_fp32_softmax, eager_rms_norms, fused_swiglu,
                                         gqa_native, head_or_recompute_bytes, layer_activation_bytes, logits_bytes,
                                         loss_kernel, rank_memory, recompute_working_bytes, split_saved_input,
                                         stage_in_flight)
from scalestudy.costmodel.kernel_counts import sublayers
from scalestudy.costmodel.mfu import peak_precision
from scalestudy.costmodel.op_checkpoint import early_stop
from scalestudy.costmodel.params import chunk_block_params, chunk_vocab_params, param_breakdown, param_count
from scalestudy.costmodel.pipeline_fill import fill_drain_s
from scalestudy.costmodel.stage_terms import price_stage, setting, sharded_dp_in_slot
from scalestudy.costmodel.step import compute_times
from scalestudy.costmodel.terms import (_deepspeed_pipeline_accumulates, _shape, _tied_embedding_sync,
                                        attention_kernel, hp_grad_accumulation_s, model_layout)
from scalestudy.costmodel.zero3 import zero3_gathers
from scalestudy.errors import OptionError, ScalestudyError
from scalestudy.specs.hardware import ClusterSpec, DeviceSpec
from scalestudy.specs.model import ModelSpec
from scalestudy.specs.strategy import Strategy, Workload, logit_shards, vocab_shards



def layer_costs(spec: ModelSpec, seq_len: int, target_len: int = 0) -> tuple[list[float], float]:
    """Forward FLOPs per sequence of each pipeline block in stage order (T5: encoder blocks, then decoder blocks),
    and of the LM head (last stage)."""
    whole = forward_flops(spec, seq_len, target_len)
    if not spec.is_encoder_decoder:
        return [whole.layers / spec.num_layers] * spec.num_layers, whole.head
    # FLOPs are linear in the decoder layer count: one more decoder layer costs `decoder`
    more = forward_flops(dataclasses.replace(spec, num_decoder_layers=spec.num_decoder_layers + 1), seq_len,
                         target_len).layers
    decoder = more - whole.layers
    encoder = whole.layers - decoder * spec.num_decoder_layers
    return [encoder / spec.num_layers] * spec.num_layers + [decoder] * spec.num_decoder_layers, whole.head


@dataclass(frozen=True)
class StageDevice:
    """Where pipeline stage `index` runs: ranks [start, stop) of the cluster's order."""

    index: int
    start: int
    stop: int
    devices: tuple[str, ...]  # device names among its ranks (several: the slowest bounds it)
    device: DeviceSpec  # the slowest of them (as these ranks run it: measured speed applied)
    capacity_bytes: float  # device memory per rank: the smallest among its ranks (CPU nodes: host RAM / ranks)
    host_capacity_bytes: float  # host RAM per rank, smallest
    cluster: ClusterSpec  # a one-device cluster of `device` with the cluster's links (communication terms)


_PLACEMENT: dict[tuple, tuple] = {}


def stage_devices(cluster: ClusterSpec, pp: int, precision: str) -> tuple[StageDevice, ...]:
    """The device of every pipeline stage (module docstring: placement rule). Cached per cluster object."""
    key = (id(cluster), pp, precision)
    hit = _PLACEMENT.get(key)
    if hit is not None and hit[0] is cluster:
        return hit[1]
    world, gpn = cluster.world_size, cluster.gpus_per_node
    if world % pp:
        raise OptionError(f"pp {pp} does not divide the cluster's {world} ranks", "pp")
    per = world // pp
    bounds, at = [], 0
    for g in cluster.rank_groups():
        bounds.append((at, at + g.ranks, g))
        at += g.ranks
    out = []
    for k in range(pp):
        start, stop = k * per, (k + 1) * per
        groups = [g for lo, hi, g in bounds if lo < stop and hi > start]
        devs = [g.effective for g in groups]
        for d in devs:
            d.peak(precision)  # one-line error when a device of this stage lacks the precision
        slowest = min(devs, key=lambda d: d.peak(precision))
        per_rank = gpn if slowest.kind == "cpu" else 1
        capacity = min(d.memory_bytes for d in devs) / per_rank
        host = min(d.host_memory_bytes for d in devs) / gpn
        sub = dataclasses.replace(cluster, device=slowest, groups=())
        names = tuple(dict.fromkeys(d.name for d in devs))
        out.append(StageDevice(k, start, stop, names, slowest, capacity, host, sub))
    if len(_PLACEMENT) > 4096:
        _PLACEMENT.clear()
    _PLACEMENT[key] = (cluster, tuple(out))
    return tuple(out)


def _passes(ct) -> float:
    """Forward + backward seconds of one micro-batch of the blocks (step.ComputeTimes)."""
    return ct.forward + ct.backward


def stage_params(model: ModelSpec, tp: int, pp: int, k: int, start: int, n: int, vocab_tp: int = 0,
                 embed_tp: int = 0, tied_copy: bool = False) -> int:
    """Parameters on a rank of stage k (blocks [start, start + n)) before ZeRO sharding: its blocks (matmul weights
    / tp, norms replicated), its vocabulary tensors (params.chunk_vocab_params: the embedding on the first stage,
    a T5 decoder's embedding copy where decoder block 0 is, the LM head on the last -- a tied head a second copy
    there, as Megatron), the final norms / position biases counted on every stage (a bound); the embedding and
    head split over `vocab_tp` ranks (strategy.vocab_shards; 0 = tp), the embedding over `embed_tp` when given
    (strategy.logit_shards)."""
    vocab_tp = vocab_tp or tp
    return chunk_block_params(model, tp, start, n) + param_breakdown(model).other + chunk_vocab_params(
        model, pp, k, start, n, vocab_tp, embed_tp, tied_copy)


def _encoder_blocks(model: ModelSpec, start: int, n: int) -> int:
    """How many of blocks [start, start + n) are encoder blocks (T5: the encoder stack comes first)."""
    enc = model.num_layers if model.is_encoder_decoder else 0
    return max(0, min(start + n, enc) - start)


def stage_memory(model: ModelSpec, st: Strategy, dp: int, tp: int, pp: int, ga: int, s: int, t: int, k: int,
                 start: int, n: int, device, options) -> Memory:
    """Bytes on a rank of stage k holding blocks [start, start + n) (module docstring)."""
    acts = stage_activations(model, st, tp, pp, ga, s, t, k, start, n, device)
    psi = stage_params(model, tp, pp, k, start, n, vocab_shards(st, tp), logit_shards(st, tp),
                       copies_tied_modules(st.engine))
    return rank_memory(model, st, psi, dp, tp, acts, device, options, ga)


def stage_activations(model: ModelSpec, st: Strategy, tp: int, pp: int, ga: int, s: int, t: int, k: int, start: int,
                      n: int, device) -> float:
    """Activation bytes on a rank of stage k holding blocks [start, start + n) on `device`: its blocks' for the
    micro-batches in flight, + the last stage's logits or a recomputed block's working set (module docstring), + a
    Hugging Face T5's position-bias masks where SDPA takes them (attention_bias.priced_bias_memory)."""
    prec = st.precision
    sp = st.sequence_parallel and tp > 1
    enc, dec = activation_parts(model, st.micro_batch, s, t, prec, st.attention == "flash", gqa_native(st.engine),
                                fused_swiglu(st.engine), eager_composed_gelu(model, st.kernels),
                                eager_fp32_softmax(model, st), eager_rms_norms(model, st.kernels))
    n_enc = _encoder_blocks(model, start, n)
    in_flight = stage_in_flight(st.pp_schedule, pp, ga, st.virtual_stages)[k]  # 1F1B min(pp - k, m), GPipe m
    split_input = split_saved_input(st, tp)
    acts = (n_enc * layer_activation_bytes(enc, tp, sp, st.recompute, split_input)
            + (n - n_enc) * layer_activation_bytes(dec, tp, sp, st.recompute, split_input)) * in_flight
    # the last stage's logits and the loss's buffers, or a recomputed block (never both at once: costmodel/memory.py)
    head = logits_bytes(model, st.micro_batch, s, t, prec, logit_shards(st, tp), loss_kernel(st)) \
        if k == pp - 1 else 0.0
    working = recompute_working_bytes(enc, dec, tp, sp, st.recompute, split_input) + block_gradient_bytes(
        model, st.micro_batch, s, t, prec, tp, sp)
    masks = priced_bias_memory(model, attention_kernel(st, device), st.attention == "flash", device, st.micro_batch,
                               s, t, tp, st.recompute, (n_enc, n - n_enc), in_flight)
    # autocast over fp32 weights (costmodel/autocast_memory.py): HF T5's casts per in-flight micro-batch of a
    # pipeline stage's blocks; without pipeline parallelism also the weight copies and gelu_new's fp32 chain
    if pp == 1:
        casts = autocast_rank_bytes(model, st.engine, prec, st.kernels, st.micro_batch, s, t, tp, st.recompute,
                                    stage_params(model, tp, pp, k, start, n, vocab_shards(st, tp),
                                                 logit_shards(st, tp)))
    else:
        casts = in_flight * t5_cast_bytes(model, st.engine, prec, st.kernels, st.micro_batch, s, t, st.recompute,
                                          (n_enc, n - n_enc))
    return acts + head_or_recompute_bytes(head, working) + masks + casts


@dataclass(frozen=True)
class StageEstimate:
    """One pipeline stage of a mixed cluster: seconds per micro-batch, per-step tail, memory on its device."""

    index: int
    layers: int
    ranks: tuple[int, int]  # [start, stop) in the cluster's rank order
    devices: tuple[str, ...]
    device: str  # the slowest device of the stage, which bounds it
    params: int  # on one of its ranks, before ZeRO sharding
    compute_s: float  # forward + backward (+ LM head on the last stage) of one micro-batch
    tp_comm_s: float
    pp_comm_s: float
    dp_comm_s: float  # exposed, per step
    dp_comm_total_s: float  # incl. what overlaps the backward
    optimizer_s: float
    offload_s: float
    framework_s: float
    memory: Memory
    capacity_bytes: float
    host_capacity_bytes: float
    tied_sync_s: float = 0.0  # per step: the tied embedding's gradient all-reduce between the first and last stage
    dp_slot_s: float = 0.0  # per micro-batch: exposed FSDP time inside the slot (stage_terms.sharded_dp_in_slot)

    @property
    def slot_s(self) -> float:
        """Seconds of one micro-batch through this stage (forward + backward + its communication)."""
        return self.compute_s + self.tp_comm_s + self.pp_comm_s + self.dp_slot_s

    @property
    def tail_s(self) -> float:
        """Seconds after the pipeline drains: tied-embedding sync, gradient reduction (unless in the slots),
        optimizer, offload, framework time."""
        dp = 0.0 if self.dp_slot_s else self.dp_comm_s
        return self.tied_sync_s + dp + self.optimizer_s + self.offload_s + self.framework_s

    @property
    def fits(self) -> bool:
        return self.memory.total <= self.capacity_bytes and self.memory.host_bytes <= self.host_capacity_bytes

    def to_dict(self) -> dict:
        return {"stage": self.index, "layers": self.layers, "ranks": list(self.ranks), "devices": list(self.devices),
                "device": self.device, "params": self.params, "slot_s": self.slot_s, "compute_s": self.compute_s,
                "tp_comm_s": self.tp_comm_s, "pp_comm_s": self.pp_comm_s, "dp_comm_exposed_s": self.dp_comm_s,
                "optimizer_s": self.optimizer_s, "offload_s": self.offload_s, "framework_s": self.framework_s,
                "tied_sync_s": self.tied_sync_s, "tail_s": self.tail_s, "memory_bytes": self.memory.total,
                "memory_parts": self.memory.parts(), "capacity_bytes": self.capacity_bytes, "fits": self.fits}


def slot_terms(model: ModelSpec, cluster: ClusterSpec, st: Strategy, workload: Workload, dp: int, calibration=None
               ) -> list[tuple[float, float, float]]:
    """Per stage k, (seconds per unit share of the blocks' FLOPs, fixed seconds, LM head seconds) of one
    micro-batch: slot_k = share x first + second (+ third on the last stage) -- the terms of estimate_stages()."""
    cal = calibration or stored()
    tp, pp, prec = st.tp, st.pp, st.precision
    s, t = workload.seq_len, target_length(model, workload)
    flash, sp = st.attention == "flash", st.sequence_parallel and tp > 1
    boundary = boundary_bytes(model, st.micro_batch, s, t, prec)
    cross = spans_nodes(tp * dp, cluster)
    gather = scatters_stage_boundary(st, engine_comm(st.engine))
    out = []
    for where in stage_devices(cluster, pp, prec):
        ct = compute_times(model, where.device, prec, tp, st.micro_batch, s, t, st.recompute, flash, sp, cal,
                          st.kernels, attention_kernel(st, where.device), early_stop(st), loss_kernel(st),
                          pads_vocab(st.engine), vocab_shards(st, tp), st.cublas, st.tf32, logit_shards(st, tp),
                          fp8_recipe(st.engine))
        tp_all = ct.tp_ops * collective(2.0, ct.tp_bytes, tp, tp_ranks_per_node(tp, where.cluster),
                                        links(where.cluster)) if tp > 1 else 0.0
        fixed = 2.0 * stage_boundary_time(boundary, tp, sp, gather, cross, where.cluster) if pp > 1 else 0.0
        out.append((ct.forward + ct.backward + tp_all, fixed, ct.head))
    return out


def _tied_sync(model: ModelSpec, st: Strategy, cluster: ClusterSpec, placed, tp: int, dp: int) -> float:
    """Seconds per step of a tied embedding's gradient all-reduce between the first and the last stage (as
    estimate(): terms._tied_embedding_sync), over the slower of the two stages' links; 0 without pipeline or tie."""
    pp = len(placed)
    if pp < 2 or not model.tie_word_embeddings:
        return 0.0
    cross = spans_nodes((pp - 1) * tp * dp, cluster)  # stages outermost, as estimate()
    return max(_tied_embedding_sync(model, st, tp, cross, placed[k].cluster) for k in (0, pp - 1))


def pipeline_seconds(stages: tuple[StageEstimate, ...] | list[StageEstimate], micro_batches: int, virtual: int = 1,
                     forward_share: float | None = None) -> float:
    """The step bound by the slowest stage (module docstring): the other stages' slots once (/ v model chunks per
    device, interleaved; under 1F1B -- `forward_share` of a slot given -- the stages after the slowest only where its
    warm-up and cool-down do not hide them, pipeline_fill.fill_drain_s) + m x the slowest slot + the slowest tail."""
    return (pipeline_bubble_s(stages, micro_batches, virtual, forward_share)
            + micro_batches * max(x.slot_s for x in stages) + max(x.tail_s for x in stages))


def pipeline_bubble_s(stages, micro_batches: int, virtual: int = 1, forward_share: float | None = None) -> float:
    """The fill and drain of pipeline_seconds: the other stages' slots once (/ v model chunks per device)."""
    fill = fill_drain_s([x.slot_s for x in stages], forward_share if virtual == 1 else None, micro_batches)
    return fill / virtual


def estimate_stages(model: ModelSpec, cluster: ClusterSpec, strategy: Strategy, workload: Workload, options,
                    calibration=None):
    """estimate() for a cluster mixing device types or rank speeds: per stage, bound by the slowest."""
    st = strategy
    cal = calibration or stored()
    layout = model_layout(model, cluster, st, workload)
    dp, tp, pp, ga = layout.dp, layout.tp, layout.pp, layout.grad_accum
    virtual = st.virtual_stages if pp > 1 and st.pp_schedule == "interleaved" else 1
    if virtual > 1 and model.is_encoder_decoder:
        raise ScalestudyError("the interleaved schedule on a cluster mixing devices is modelled for decoder-only "
                              "models (an encoder-decoder's chunks mix encoder and decoder blocks per device): use "
                              "--pp-schedule 1f1b or gpipe")
    if virtual > 1 and ga % pp:
        raise ScalestudyError(f"the interleaved schedule needs the micro-batches per step ({ga}) to be a multiple "
                              f"of pp {pp} (Megatron-LM)")
    s, t, prec = workload.seq_len, target_length(model, workload), st.precision
    flash, sp = st.attention == "flash", st.sequence_parallel and tp > 1
    split = st.stage_split(model.total_layers) if pp > 1 else (model.total_layers,)
    placed = stage_devices(cluster, pp, prec)
    costs, _ = layer_costs(model, s, t)
    total_cost = sum(costs)
    model_f_seq = step_flops_per_sequence(model, s, t, "none")
    hw_f_seq = step_flops_per_sequence(model, s, t, st.recompute, early_stop(st))
    params_total = param_count(model)
    tied = _tied_sync(model, st, cluster, placed, tp, dp)
    flights = stage_in_flight(st.pp_schedule, pp, ga, st.virtual_stages)  # micro-batches each rank holds
    cfg = setting(model, cluster, st, layout, s, t, cal, options)
    out, start, forward_shares = [], 0, []
    for k, n in enumerate(split):
        where, last_stage = placed[k], k == pp - 1
        dev = where.device

        def times(m: ModelSpec, dev: DeviceSpec = dev):
            return compute_times(m, dev, prec, tp, st.micro_batch, s, t, st.recompute, flash, sp, cal,
                                 st.kernels, attention_kernel(st, dev), early_stop(st), loss_kernel(st),
                                 pads_vocab(st.engine), vocab_shards(st, tp), st.cublas, st.tf32,
                                 logit_shards(st, tp), fp8_recipe(st.engine))

        ct = times(model)
        share = sum(costs[start:start + n]) / total_cost
        # its share of the blocks' seconds on its device: an encoder-decoder's blocks differ per FLOP (block_seconds)
        time_shares = encoder_decoder_time_shares(model, split, lambda m: _passes(ct if m is model else times(m)),
                                                  ct)
        forward_shares.append(ct.forward / (ct.forward + ct.backward))
        # its own blocks (+ the LM head on the last stage) + DeepSpeed's bf16 fp32 gradient fold per micro-batch
        blocks_s = (ct.forward + ct.backward) * (time_shares[k] if time_shares else share) \
            + (ct.head if last_stage else 0.0) + hp_grad_accumulation_s(model, st, dev, tp, n, last_stage)
        psi = stage_params(model, tp, pp, k, start, n, vocab_shards(st, tp), logit_shards(st, tp),
                           copies_tied_modules(st.engine))
        # estimate()'s per-configuration quantities on this stage's device, with this stage's own parameters
        shape = dataclasses.replace(_shape(model, dev, st, tp, pp, s, t, flash, sp, flights, split, cal), psi=psi,
                                    stage_layers=n, activations=stage_activations(model, st, tp, pp, ga, s, t, k,
                                                                                  start, n, dev))
        n_enc = _encoder_blocks(model, start, n)
        terms = price_stage(cfg, dev, where.cluster, ct, share, blocks_s, shape,
                            zero3_gathers(model, tp, pp, n, psi).tensors, sublayers(model, n_enc, n - n_enc),
                            window_share=time_shares[k] if time_shares else None)
        out.append(StageEstimate(index=k, layers=n, ranks=(where.start, where.stop), devices=where.devices,
                                 device=dev.name, params=psi, **terms._asdict(), capacity_bytes=where.capacity_bytes,
                                 host_capacity_bytes=where.host_capacity_bytes,
                                 tied_sync_s=tied if k in (0, pp - 1) else 0.0,
                                 dp_slot_s=terms.dp_comm_s / ga if pp > 1 and sharded_dp_in_slot(st, dev)
                                 else 0.0))
        start += n
    stages = tuple(out)
    slowest = max(stages, key=lambda x: x.slot_s)
    last = max(stages, key=lambda x: x.tail_s)
    tightest = min(stages, key=lambda x: x.capacity_bytes - x.memory.total)
    # 1F1B: the forward share of the slowest stage's passes (pipeline_fill; DeepSpeed's pipeline folds: not applied,
    # as estimate() does not)
    forward_share = None
    if pp > 1 and st.pp_schedule == "1f1b" and not _deepspeed_pipeline_accumulates(st):
        top = max(x.slot_s for x in stages)
        forward_share = forward_shares[max(i for i, x in enumerate(stages) if x.slot_s >= top)]
    step = pipeline_seconds(stages, ga, virtual, forward_share)
    ranks = [(g.effective.peak(peak_precision(prec, tf32_matmul=st.tf32, peaks=g.effective.peak_flops)), g.ranks)
             for g in cluster.rank_groups()]
    peak = sum(p * r for p, r in ranks) / sum(r for _, r in ranks)  # per device, averaged over the ranks
    return Estimate(
        model=model, cluster=cluster, strategy=st, workload=workload, options=options, layout=layout, target_len=t,
        params_total=params_total, params_per_device=max(x.params for x in stages), memory=tightest.memory,
        capacity_bytes=tightest.capacity_bytes, host_capacity_bytes=tightest.host_capacity_bytes,
        fits=all(x.fits for x in stages), compute_s=ga * slowest.compute_s,
        bubble_s=pipeline_bubble_s(stages, ga, virtual, forward_share),
        tp_comm_s=ga * slowest.tp_comm_s, pp_comm_s=ga * slowest.pp_comm_s + last.tied_sync_s,
        dp_comm_s=ga * slowest.dp_slot_s if slowest.dp_slot_s else last.dp_comm_s,
        dp_comm_total_s=last.dp_comm_total_s, optimizer_s=last.optimizer_s, offload_s=last.offload_s,
        framework_s=last.framework_s, step_s=step, model_flops=workload.global_batch * model_f_seq,
        hardware_flops=workload.global_batch * hw_f_seq, tokens_per_step=workload.global_batch * (s + t),
        peak_flops=peak, stages=stages)


