"""estimate(model, cluster, strategy, workload) -> Estimate: memory per device, step time, throughput, MFU.

Pure arithmetic over cached per-model quantities, so a planner can evaluate tens of thousands of strategies per
second. `Estimate.to_dict()` is the `scalestudy estimate --json` schema (docs/estimate-schema.md).

Rank placement (Megatron-LM order): tensor-parallel ranks are adjacent inside a node (a tp that is a multiple of
the node's devices fills tp / G whole nodes), data-parallel next, pipeline stages outermost. One device type: the steady state runs at the slowest stage (stage_terms.price_stage
prices its terms, as stages.estimate_stages does stage by stage on mixed clusters); the fill and drain charge every
stage its own slot (_pipeline_times), so both paths give the same step on one device type.
"""

from __future__ import annotations

import operator
from typing import NamedTuple

from scalestudy.costmodel.breakdown import Estimate
from scalestudy.costmodel.comm import links, spans_nodes
from scalestudy.costmodel.constants import Calibration, stored
from scalestudy.costmodel.cpu_parallel import hybrid_times
from scalestudy.costmodel.flops import target_length
from scalestudy.costmodel.memory import memory_with_activations, rank_memory, rank_states, stage_in_flight
from scalestudy.costmodel.mfu import peak_precision
from scalestudy.costmodel.options import DEFAULT_OPTIONS, CostOptions
from scalestudy.costmodel.pipeline_fill import hidden_after_slowest_s
from scalestudy.costmodel.stage_terms import (StageTerms, price_stage, setting, setting_at_micro_batch,
                                              sharded_dp_in_slot, stage_fixed)
from scalestudy.costmodel.stages import estimate_stages, layer_costs, stage_params
from scalestudy.costmodel.terms import (_deepspeed_pipeline_accumulates, _shape, _sublayers, _tied_embedding_sync,
                                        hp_grad_accumulation_s, model_layout, shape_group)
from scalestudy.errors import ScalestudyError
from scalestudy.specs.hardware import ClusterSpec
from scalestudy.specs.model import ModelSpec
from scalestudy.specs.strategy import Strategy, Workload, logit_shards, resolve_software, vocab_shards



def estimate(model: ModelSpec, cluster: ClusterSpec, strategy: Strategy, workload: Workload,
             options: CostOptions = DEFAULT_OPTIONS, calibration: Calibration | None = None) -> Estimate:
    """Predict memory, time and throughput of one training configuration (raises ScalestudyError if invalid)."""
    return _estimate(model, cluster, strategy, workload, options, calibration, False, None)


def estimate_if_fits(model: ModelSpec, cluster: ClusterSpec, strategy: Strategy, workload: Workload,
                     options: CostOptions = DEFAULT_OPTIONS, calibration: Calibration | None = None) -> Estimate | None:
    """`estimate`, or None where its memory certainly does not fit (one device type: the memory, priced first, is
    what `estimate` prices, so `estimate(...).fits` is False exactly then; the time terms are not priced). The
    planner's estimator: a strategy that does not fit is only counted."""
    return _estimate(model, cluster, strategy, workload, options, calibration, True, None)


class MicroBatchGroup:
    """estimate_if_fits for strategies equal in every field but micro_batch (a planner's group,
    plan/space.enumerate_groups), called in turn: what no micro-batch quantity enters -- the resolved software, the
    lengths, stage split and shares, capacities, the DeepSpeed pipeline's gradient folds, the tied-embedding sync, the
    Setting but its boundary send, the stage collectives' memo number, ZeRO-3's gradient interleave and the optimizer
    step without offloads (stage_terms.stage_fixed), a rank's memory but its activations (memory.rank_states) -- is
    priced at the first strategy and read at the others. Of those, what no recompute enters either (all but the
    resolved software and the memo number) is kept in `shared` (a dict the caller keeps for groups of this model,
    cluster, workload, options and calibration), for the groups of the same strategy under another recompute. Every
    result equals estimate_if_fits(model, cluster, strategy, workload, options, calibration)
    (tests/unit/test_plan_speed_group.py); a rule that raises for one strategy raises as it does there."""

    __slots__ = ("model", "cluster", "workload", "options", "calibration", "shared", "resolved", "stages",
                 "variant", "shape_group", "peak")

    def __init__(self, model: ModelSpec, cluster: ClusterSpec, workload: Workload,
                 options: CostOptions = DEFAULT_OPTIONS, calibration: Calibration | None = None,
                 shared: dict | None = None) -> None:
        self.model, self.cluster, self.workload = model, cluster, workload
        self.options, self.calibration, self.shared = options, calibration, shared
        self.resolved = None  # (the first strategy, resolve_software of it)
        # stage_terms.StageFixed of the slowest stage by its share of the blocks' FLOPs, once priced (an
        # encoder-decoder's slowest stage can change with the micro-batch)
        self.stages = {}
        self.variant = None  # _Variant of its strategies, once looked up (_variant)
        self.shape_group = None  # terms.shape_group of its strategies, once numbered
        self.peak = None  # the MFU peak of its strategies (their device, precision and tf32), once read

    def __call__(self, strategy: Strategy) -> Estimate | None:
        return _estimate(self.model, self.cluster, strategy, self.workload, self.options, self.calibration, True,
                         self)


class _Variant:
    """What _estimate prices from inputs a strategy's micro-batch and recompute variants share, each once priced:
    _fixed, the first strategy's Setting (setting_at_micro_batch: another's), a rank's memory but the activations
    (memory.rank_states) and a stage_terms.StageFixed (stage_fixed's `like`)."""

    __slots__ = ("fixed", "setting", "states", "stage")

    def __init__(self) -> None:
        self.fixed = self.setting = self.stage = None
        self.states = {}  # memory.rank_states by whether the accumulation is 1 (DDP's bucket views differ)


# Strategy fields but the micro-batch and the recompute: a _Variant's key in MicroBatchGroup.shared
_VARIANT_FIELDS = operator.itemgetter(*(name for name in Strategy.__dataclass_fields__
                                        if name not in ("micro_batch", "recompute")))


def _variant(group: MicroBatchGroup, st: Strategy) -> _Variant:
    """The group's _Variant: its shared one for `st` (resolved), else a new one (registered there)."""
    variant = group.variant
    if variant is None:
        if group.shared is None:
            variant = _Variant()
        else:
            key = _VARIANT_FIELDS(st.__dict__)
            variant = group.shared.get(key)
            if variant is None:
                variant = group.shared[key] = _Variant()
        group.variant = variant
    return variant


class _Fixed(NamedTuple):
    """What _estimate prices, on one device type, from inputs a strategy's micro-batch and recompute variants
    share."""

    target_len: int
    flash: bool
    sp: bool  # sequence parallelism in effect (tp > 1)
    split: tuple[int, ...]  # layers per pipeline stage
    capacity: float  # bytes per rank
    host_capacity: float
    shares: tuple[float, ...]  # each stage's share of the blocks (_stage_shares)
    busiest: float
    hybrid: bool  # train's hybrid backend on CPU ranks prices the pipeline (cpu_parallel.hybrid_times)
    hooked: float | None  # sublayers whose engine hooks a CPU profile prices
    folds: tuple[float, float, float] | None  # _pipeline_folds
    tied_sync_s: float | None  # a tied embedding's first/last-stage gradient sync per step (pp > 1), else None
    # each stage's parameters on a rank where an encoder-decoder is split over stages (its stages differ: a decoder
    # block holds cross-attention too), else None (the even split's params_per_device is every stage's)
    stage_psi: tuple[int, ...] | None


def _fixed(model: ModelSpec, cluster: ClusterSpec, st: Strategy, workload: Workload, layout) -> _Fixed:
    dev, tp, pp = cluster.device, layout.tp, layout.pp
    s = workload.seq_len
    t = target_length(model, workload)
    split = st.stage_split(model.total_layers) if pp > 1 else (model.total_layers,)
    capacity = dev.memory_bytes / cluster.gpus_per_node if dev.kind == "cpu" else float(dev.memory_bytes)
    host_capacity = dev.host_memory_bytes / cluster.gpus_per_node
    # the slowest stage (the busiest one's blocks, or the last one's with the LM head) sets the steady state
    shares = _stage_shares(model, split, s, t)
    busiest = max(shares)
    hybrid = dev.kind == "cpu" and (tp > 1 or pp > 1)  # train's hybrid backend on CPU ranks (GPU terms unchanged)
    # sublayers whose engine hooks a CPU profile prices (counted only there; the hybrid backend prices its own)
    hooked = _sublayers(model) * busiest if dev.engine_overhead_s and not hybrid else None
    tied = None
    if pp > 1 and model.tie_word_embeddings:  # the first and the last stage are (pp-1) x tp x dp ranks apart
        tied = _tied_embedding_sync(model, st, tp, spans_nodes((pp - 1) * tp * layout.dp, cluster), cluster)
    folds = _pipeline_folds(model, st, dev, tp, split) if pp > 1 else None
    stage_psi = _stage_params(model, st, tp, split) if pp > 1 and model.is_encoder_decoder else None
    # tuple.__new__: _Fixed's fields in order, without the generated __new__ (a third of this function's time;
    # stage_terms._NEW_TUPLE says more)
    return _NEW_TUPLE(_Fixed, (t, st.attention == "flash", st.sequence_parallel and tp > 1, split, capacity,
                               host_capacity, shares, busiest, hybrid, hooked, folds, tied, stage_psi))


def _slowest_params(stage_psi: tuple[int, ...], time_shares: tuple[float, ...], k: int) -> int:
    """The parameters of slowest stage k (_stage_blocks_s, the last of the stages tied on the blocks' seconds): where
    the first stage ties with it (two encoder stages), the more of the two -- the first holds the embedding, whose
    weights its autocast casts too (tied stages hold the same blocks; only the first and last add weights)."""
    psi = stage_psi[k]
    return max(psi, stage_psi[0]) if k and time_shares[0] == time_shares[k] else psi


_STAGE_PSI: dict[tuple, tuple] = {}


def _stage_params(model: ModelSpec, st: Strategy, tp: int, split: tuple[int, ...]) -> tuple[int, ...]:
    """_Fixed.stage_psi: stages.stage_params of each stage of `split`, memoised by the model's identity (a planner
    asks once per strategy variant)."""
    vocab_tp, embed_tp = vocab_shards(st, tp), logit_shards(st, tp)
    key = (id(model), tp, split, vocab_tp, embed_tp)
    hit = _STAGE_PSI.get(key)
    if hit is not None and hit[0] is model:
        return hit[1]
    if len(_STAGE_PSI) > 4096:
        _STAGE_PSI.clear()
    out, start, pp = [], 0, len(split)
    for k, n in enumerate(split):
        out.append(stage_params(model, tp, pp, k, start, n, vocab_tp, embed_tp))
        start += n
    _STAGE_PSI[key] = (model, tuple(out))
    return _STAGE_PSI[key][1]


_NEW_TUPLE = tuple.__new__


def _resolved(strategy: Strategy, model: ModelSpec, group: MicroBatchGroup) -> Strategy:
    """resolve_software(strategy, model) in a group: the first strategy's resolution at this micro-batch (the fill
    reads no micro-batch: specs/strategy.software_fill)."""
    if group.resolved is None:
        resolved = resolve_software(strategy, model)
        group.resolved = (strategy, resolved)
        return resolved
    first, resolved = group.resolved
    return strategy if resolved is first else resolved.with_micro_batch(strategy.micro_batch)


def _estimate(model: ModelSpec, cluster: ClusterSpec, strategy: Strategy, workload: Workload, options: CostOptions,
              calibration: Calibration | None, only_fitting: bool, group: MicroBatchGroup | None) -> Estimate | None:
    if strategy.cp > 1:  # context parallelism: a rank of dp x cp at seq_len / cp, plus the attention ring
        from scalestudy.costmodel.context_parallel import estimate_context_parallel

        return estimate_context_parallel(_estimate, model, cluster, strategy, workload, options, calibration,
                                         only_fitting)
    # "engine" kernels / a HF T5's loss: the software assumed
    strategy = resolve_software(strategy, model) if group is None else _resolved(strategy, model, group)
    if cluster.groups:  # ranks of different devices or speeds: stage by stage, bound by the slowest
        return estimate_stages(model, cluster, strategy, workload, options, calibration)
    st, dev = strategy, cluster.device
    cal = calibration or stored()
    layout = model_layout(model, cluster, st, workload)
    peak = group.peak if group is not None else None
    if peak is None:
        peak = dev.peak(peak_precision(st.precision, tf32_matmul=st.tf32, peaks=dev.peak_flops))  # MFU's (mfu.py)
        if group is not None:
            group.peak = peak
    tp, pp, ga = layout.tp, layout.pp, layout.grad_accum
    if pp > 1 and st.pp_schedule == "interleaved" and ga % pp:
        raise ScalestudyError(f"the interleaved schedule needs the micro-batches per step ({ga}) to be a multiple "
                              f"of pp {pp} (Megatron-LM)")
    s = workload.seq_len
    variant = _variant(group, st) if group is not None else None
    fixed = variant.fixed if variant is not None else None
    if fixed is None:
        fixed = _fixed(model, cluster, st, workload, layout)
        if variant is not None:
            variant.fixed = fixed
    # one unpacking (_Fixed's order), not a dozen attribute reads
    t, flash, sp, split, capacity, host_capacity, shares, busiest, is_hybrid, hooked, folds, tied_sync_s, \
        stage_psi = fixed
    base = variant.setting if variant is not None else None
    if base is None:
        cfg = setting(model, cluster, st, layout, s, t, cal, options)
        if variant is not None:
            variant.setting = cfg
    else:
        cfg = setting_at_micro_batch(base, st, layout)
    in_flight = stage_in_flight(st.pp_schedule, pp, ga, st.virtual_stages)  # micro-batches per rank (memory.py)
    number = None  # one strategy alone: _shape keys its memo by every input
    if group is not None:
        number = group.shape_group
        if number is None:
            number = group.shape_group = shape_group(model, dev, st, tp, pp, s, t, flash, sp, split, cal)
    shape = _shape(model, dev, st, tp, pp, s, t, flash, sp, in_flight, split, cal, number)
    ct = shape.compute
    mem = None
    if only_fitting and variant is not None:  # the activation-free terms (no micro-batch or recompute enters them)
        states = variant.states.get(ga == 1)
        if states is None:
            states = variant.states[ga == 1] = rank_states(model, st, shape.psi, layout.dp, tp, dev, options, ga)
        mem = memory_with_activations(states, shape.activations)
    elif only_fitting:  # price_stage's memory, priced first: the time terms only where it fits
        mem = rank_memory(model, st, shape.psi, layout.dp, tp, shape.activations, dev, options, ga)
    if only_fitting and not (mem.total <= capacity and mem.host_bytes <= host_capacity):
        return None

    hybrid = None
    if is_hybrid:  # train's hybrid backend on CPU ranks (GPU terms below unchanged)
        hybrid = hybrid_times(model, cluster, st, layout, ct, split, s, t, links(cluster), flash, cal)
    tensors = shape.zero3.tensors if shape.zero3 is not None else 0
    blocks = _stage_blocks_s(ct, split, shares, folds, shape.time_shares)
    # the per-share terms (TP collectives, casts) at the busiest share: every stage charged as the busiest (alike
    # blocks; the per-step terms pair its window with the busiest stage's parameters). Where the blocks differ in
    # kind (an encoder-decoder split over stages: time_shares) the slowest stage by seconds need not hold the most
    # FLOPs: its own share and its autocast weight casts at its own parameters (a decoder stage holds more than
    # params_per_device's even split), as stages.estimate_stages prices that stage
    share = blocks.share if shape.time_shares else busiest
    stage_fixed_terms = None  # one strategy alone: price_stage prices its StageFixed terms itself, once
    if group is not None:
        stage_fixed_terms = group.stages.get(share)
        if stage_fixed_terms is None:
            stage_fixed_terms = group.stages[share] = stage_fixed(cfg, dev, cluster, shape, tensors, share,
                                                                  variant.stage)
            if variant.stage is None:
                variant.stage = stage_fixed_terms
    stage = price_stage(cfg, dev, cluster, ct, share, blocks.slowest, shape, tensors, hooked, mem,
                        stage_fixed_terms, shape.time_shares[blocks.index] if shape.time_shares else None,
                        _slowest_params(stage_psi, shape.time_shares, blocks.index) if stage_psi else None)
    if mem is None:  # estimate(): price_stage priced it
        mem = stage.memory
        fits = mem.total <= capacity and mem.host_bytes <= host_capacity
    else:  # estimate_if_fits: it fits (else it returned above); price_stage returns the memory it was given
        fits = True

    other_slots = _other_slots_s(stage, blocks, share, pp)
    if pp > 1 and st.pp_schedule == "1f1b" and folds is None and hybrid is None:
        other_slots = _one_f_one_b_others_s(stage, blocks, share, pp, shares, ct, ga, other_slots, shape.time_shares)
    compute_s, tp_s, pp_s, bubble_s, framework_s = _pipeline_times(st, layout, stage, hybrid, other_slots,
                                                                   tied_sync_s)
    dp_s, dp_total = stage.dp_comm_s, stage.dp_comm_total_s
    if pp > 1 and sharded_dp_in_slot(st, dev):  # FSDP's exposure is in every stage's slot: fill and drain too
        bubble_s += (pp - 1) * dp_s / ga / (st.virtual_stages if st.pp_schedule == "interleaved" else 1)
    opt_s, offload_s = stage.optimizer_s, stage.offload_s
    step = compute_s + tp_s + pp_s + bubble_s + dp_s + opt_s + offload_s + framework_s
    model_f = workload.global_batch * shape.model_flops_per_seq
    hw_f = workload.global_batch * shape.hardware_flops_per_seq
    # positional (a third of the keyword call's time, plan's hot path): the order of _ESTIMATE_FIELDS, checked below
    return Estimate(model, cluster, st, workload, options, layout, t, shape.params_total, shape.psi, mem, capacity,
                    host_capacity, fits, compute_s, bubble_s, tp_s, pp_s, dp_s, dp_total, opt_s, offload_s,
                    framework_s, step, model_f, hw_f, workload.global_batch * (s + t), peak)


# Estimate's fields in the order _estimate passes them
_ESTIMATE_FIELDS = ("model", "cluster", "strategy", "workload", "options", "layout", "target_len", "params_total",
                    "params_per_device", "memory", "capacity_bytes", "host_capacity_bytes", "fits", "compute_s",
                    "bubble_s", "tp_comm_s", "pp_comm_s", "dp_comm_s", "dp_comm_total_s", "optimizer_s", "offload_s",
                    "framework_s", "step_s", "model_flops", "hardware_flops", "tokens_per_step", "peak_flops")
if tuple(Estimate.__dataclass_fields__)[:len(_ESTIMATE_FIELDS)] != _ESTIMATE_FIELDS:  # pragma: no cover
    raise ImportError("costmodel.estimate passes Estimate's fields by position: update _ESTIMATE_FIELDS and the call")


def _pipeline_times(st: Strategy, layout, stage: StageTerms, hybrid, other_slots: float,
                    tied_sync_s: float | None) -> tuple[float, float, float, float, float]:
    """(compute, tp, pp, bubble, framework) seconds per step: grad_accum slots of the slowest stage; the fill and
    drain, every other stage's own slot once (`other_slots`, _other_slots_s; / v interleaved: each of the v chunks a
    stage runs in the fill is 1/v of its slot); a tied embedding's first/last-stage gradient sync; on CPU ranks under
    train's hybrid backend its own times (costmodel/cpu_parallel.py).

    The fill and drain: in 1F1B (and GPipe) the first micro-batch's forward passes every stage before the slowest
    one can start its steady state of m slots, and the last micro-batch's backward passes them again after it, so
    the step is sum_k slot_k + (m - 1) x max_k slot_k (stages.pipeline_seconds, Narayanan et al. 2021 Sec. 2.2 with
    stages of unequal time): a stage lighter than the slowest (no LM head, fewer blocks) adds only its own slot.
    Charging every stage the slowest's slot made head-heavy pipelines (GPT-2 124M pp 4: a 6.7 ms last stage beside
    3.9 ms ones) up to 1.3x slow at few micro-batches. Under 1F1B the stages after a slowest stage that is not the
    last (T5's encoder-first split) count only where its warm-up and cool-down do not hide them
    (_one_f_one_b_others_s, pipeline_fill)."""
    ga = layout.grad_accum
    compute_s, tp_s, pp_s = ga * stage.compute_s, ga * stage.tp_comm_s, ga * stage.pp_comm_s
    bubble_s = other_slots / (st.virtual_stages if st.pp_schedule == "interleaved" else 1)
    if tied_sync_s is not None:
        pp_s += tied_sync_s
    if hybrid is None:
        return compute_s, tp_s, pp_s, bubble_s, stage.framework_s
    # its times, engine hooks and DTensor optimizer-step overhead
    return hybrid.compute_s, hybrid.tp_s, hybrid.pp_s, hybrid.bubble_s, stage.framework_s + hybrid.framework_s


_SHARES: dict[tuple, tuple] = {}


def _stage_shares(model: ModelSpec, split: tuple[int, ...], seq_len: int, target_len: int) -> tuple[float, ...]:
    """_stage_shares_of, memoised by the model's identity (hashing a ModelSpec is most of a hit's time)."""
    if len(split) == 1:  # no pipeline: all the blocks (_stage_shares_of's n / n), without a lookup
        return (1.0,)
    key = (id(model), split, seq_len, target_len)
    hit = _SHARES.get(key)
    if hit is not None and hit[0] is model:
        return hit[1]
    if len(_SHARES) > 4096:
        _SHARES.clear()
    shares = _stage_shares_of(model, split, seq_len, target_len)
    _SHARES[key] = (model, shares)
    return shares


def _stage_shares_of(model: ModelSpec, split: tuple[int, ...], seq_len: int, target_len: int) -> tuple[float, ...]:
    """Each pipeline stage's share of the blocks' work: its share of the layers, or for an encoder-decoder split
    over stages its share of the blocks' forward FLOPs (an encoder block runs over seq_len, a decoder block over
    target_len with cross-attention: by layer count a T5 encoder stage was priced at the average block; the
    per-stage path, stages.estimate_stages, already shares by FLOPs)."""
    if len(split) == 1 or not model.is_encoder_decoder:
        return tuple(n / model.total_layers for n in split)
    costs, _ = layer_costs(model, seq_len, target_len)
    total, out, start = sum(costs), [], 0
    for n in split:
        out.append(sum(costs[start:start + n]) / total)
        start += n
    return tuple(out)


class _Blocks(NamedTuple):
    """Seconds per micro-batch of the pipeline stages' blocks (_stage_blocks_s)."""

    slowest: float  # the slowest stage's: it sets the steady state
    share: float  # that stage's share of the blocks' FLOPs (the per-share terms: TP collectives, casts)
    total: float  # every stage's together (the fill and drain pass each once)
    index: int  # which stage is the slowest (the last of equal ones)


def _pipeline_folds(model: ModelSpec, st: Strategy, dev, tp: int,
                    split: tuple[int, ...]) -> tuple[float, float, float] | None:
    """DeepSpeed's pipeline gradient accumulation per micro-batch (terms.hp_grad_accumulation_s, linear in the
    layers; None where it is 0: _deepspeed_pipeline_accumulates, its first test) of (the busiest stage's blocks, the
    last stage's with the LM head, every stage's but the last), for _stage_blocks_s."""
    if len(split) == 1 or not _deepspeed_pipeline_accumulates(st):
        return None
    fold = hp_grad_accumulation_s
    return (fold(model, st, dev, tp, max(split), False), fold(model, st, dev, tp, split[-1], True),
            fold(model, st, dev, tp, sum(split[:-1]), False))


def _stage_blocks_s(ct, split: tuple[int, ...], shares: tuple[float, ...],
                    folds: tuple[float, float, float] | None,
                    time_shares: tuple[float, ...] | None = None) -> _Blocks:
    """Seconds per micro-batch of the stages' blocks: a stage's share of the blocks' seconds (`time_shares`,
    block_seconds: an encoder-decoder's encoder and decoder blocks differ per FLOP; else its FLOP share `shares`,
    _stage_shares), + the LM head on the last stage (a partition that gives the head a block's slot, e.g. BLOOM's
    'type:transformer|embedding', leaves it fewer blocks than the others), + DeepSpeed's pipeline gradient
    accumulation of its layers (`folds`, _pipeline_folds). The slowest stage is the busiest one or the last; in
    closed form (no per-stage loop: plan's hot path)."""
    passes = ct.forward + ct.backward
    pp = len(split)
    if pp == 1:
        return _NEW_TUPLE(_Blocks, (passes + ct.head, 1.0, passes + ct.head, 0))
    time = time_shares or shares
    top = max(time)
    k = pp - 1
    while time[k] < top:  # the last of the busiest stages
        k -= 1
    busy, tail, total = passes * top, passes * time[-1] + ct.head, passes + ct.head  # shares sum to 1
    if folds is not None:
        busy_fold, head_fold, rest_fold = folds
        busy += busy_fold
        tail += head_fold
        total += rest_fold + head_fold
    return _NEW_TUPLE(_Blocks, (busy, shares[k], total, k) if busy >= tail else (tail, shares[-1], total, pp - 1))


def _one_f_one_b_others_s(stage: StageTerms, blocks: _Blocks, share: float, pp: int, shares: tuple[float, ...],
                          ct, ga: int, others: float, time_shares: tuple[float, ...] | None = None) -> float:
    """_other_slots_s under 1F1B when the slowest stage is not the last (an encoder stage of an encoder-first T5
    split): the stages before it once, those after it only where its own warm-up forwards and cool-down backwards
    do not cover them (pipeline_fill.hidden_after_slowest_s); `others` (every other stage once) otherwise. The
    stages' slots as _other_slots_s derives them from their shares: blocks (their share of the blocks' seconds,
    `time_shares`, else of the FLOPs) + the per-share terms (FLOP share), the LM head on the last."""
    k = blocks.index
    if k == pp - 1 or ga < pp:  # the last stage (its head) is the slowest, or fewer micro-batches
        return others
    passes = ct.forward + ct.backward
    per_share = (stage.compute_s - blocks.slowest + stage.tp_comm_s) / share
    after = passes * sum((time_shares or shares)[k + 1:]) + per_share * sum(shares[k + 1:]) + ct.head
    sends = (pp - 1) * stage.pp_comm_s
    before = others - sends - after
    slot = stage.compute_s + stage.tp_comm_s
    return before + hidden_after_slowest_s(after, slot, ct.forward / passes, pp - 1 - k) + sends


def _other_slots_s(stage: StageTerms, blocks: _Blocks, share: float, pp: int) -> float:
    """Seconds per micro-batch of every stage but the slowest, added up (the fill and drain, _pipeline_times):
    `stage` priced the slowest one (`blocks.slowest`, with the tensor-parallel collectives and autocast casts of
    `share`, _estimate's rule); another stage has its own blocks, the same boundary sends, and those per-share terms in
    proportion to its share (terms._tp_comm is linear in the share)."""
    if pp == 1:
        return 0.0
    per_share = (stage.compute_s - blocks.slowest + stage.tp_comm_s) / share  # autocast, ZeRO-3 interleave, TP
    return blocks.total - blocks.slowest + per_share * (1.0 - blocks.share) + (pp - 1) * stage.pp_comm_s
