"""What DeepSpeed ZeRO-3 actually gathers: parameters at or under `stage3_param_persistence_threshold` elements stay
whole on every rank (never partitioned, never all-gathered).

DeepSpeed (runtime/zero/parameter_offload.py, `mark_persistent_parameters`): every parameter tensor with
`ds_numel <= param_persistence_threshold` (default 100,000; engine/settings.py sets it from engines.yaml, the
default) is marked `ds_persist` and kept unpartitioned; the module hooks fetch only the others. A module
whose parameters are all persistent is not fetched at all. On a small model (gpt2-tiny: d 128, every block tensor
<= 65,536 elements) only the embedding is gathered; on a large one only the norms and biases stay whole.
FSDP has no such threshold: it gathers every flat parameter.

Fetches (runtime/zero/parameter_offload.py, partitioned_param_coordinator.py, DeepSpeed 0.19.8): hooks sit on every
module; a module's pre-forward (and pre-backward) hook runs fetch_sub_module on the parameters the module owns
directly (iter_params recurse=False), which launches ONE coalesced all-gather (all_gather_coalesced) for those that
are partitioned and not already prefetched, waits for them, cuts them out (torch.cat per parameter) and records a
fetch event; the post hook releases them. So a pass fetches once per module owning a partitioned tensor -- a
Linear's weight with its bias, per block q/k/v/o or a fused qkv, the MLP projections; norms fall under the
threshold -- plus the embedding tables / untied head. `_block_modules` groups each block's tensors by the Hugging
Face module that owns them.

Tensor sizes per block follow costmodel/params.py's layouts (Hugging Face module names); the matrix weights are
split by tensor parallelism (their elements / tp), vectors are not.

Hooks (parameter_offload.py at v0.19.2: _register_deepspeed_module recurses over module.children() and registers
the pre/post forward and backward hooks on every module; pre_sub_module_forward_function runs trace_prologue,
record_module and fetch_sub_module for every module whose forward runs, with or without parameters): the host
pays the hook bookkeeping once per module call per pass, not only per fetch. `_block_hook_calls` counts the module
calls of one Hugging Face block (containers, attention and MLP modules, Linears, norms, activations, the dropouts
T5 and GPT-2 call); t5-micro's count, 278 per forward, is the 586 fetch_sub_module calls per micro-step (forward +
backward) that engines.yaml's fetch_host_s was measured over, within 5%.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from itertools import accumulate, groupby
from operator import itemgetter

from scalestudy.costmodel.comm import gather_parts
from scalestudy.costmodel.engines import engine_comm
from scalestudy.costmodel.flops import forward_flops
from scalestudy.costmodel.kernel_counts import model_block_kernels
from scalestudy.costmodel.params import param_breakdown
from scalestudy.specs.model import ModelSpec


@dataclass(frozen=True)
class Zero3Gathers:
    """Per model-parallel rank: the elements ZeRO-3 gathers per pass and how many fetches (collectives) that takes."""

    gathered_elems: float  # elements of partitioned (non-persistent) tensors on the busiest stage
    layer_fetches: float  # blocks on that stage holding at least one partitioned tensor
    other_fetches: int  # embedding / positions / untied head tensors that are partitioned (pp 1 only)
    tensors: int = 0  # parameter tensors on the busiest stage (ZeroRedundancyOptimizer broadcasts each one)
    module_fetches: float = 0.0  # modules owning a partitioned tensor on that stage: fetch hooks that gather, per pass
    hook_calls: float = 0.0  # module calls on that stage per pass: each runs DeepSpeed's hook bookkeeping
    partitioned_tensors: float = 0.0  # tensors over the persistence threshold on that stage: one gather each before
    # DeepSpeed 0.5.5 (per_param_sync_comm_s)
    first_elems: float = 0.0  # the pass's first fetch (pp 1: the input embedding, when partitioned): nothing before
    # it to hide behind


def _block_modules(m: ModelSpec, decoder: bool, tp: int) -> list[list[float]]:
    """Element counts of one block's parameter tensors on a tensor-parallel rank, grouped by the module that owns
    them directly (a Linear's weight and bias; a norm's weight and bias), as Hugging Face builds the block."""
    d, i, f = m.d_model, m.inner_dim, m.d_ff
    if m.is_encoder_decoder:  # T5: q, k, v, o Linears per attention (self, + cross in the decoder), wi(_0, _1), wo
        attn = [[d * i / tp]] * 4
        ffn = [[d * f / tp]] * (3 if m.gated_ffn else 2)
        norms = [[d]] * (3 if decoder else 2)
        return attn * (2 if decoder else 1) + ffn + norms
    if m.family == "gpt2":  # c_attn (fused qkv) and c_proj Conv1Ds, MLP c_fc / c_proj, ln_1, ln_2
        return [[3 * d * d / tp, 3 * d / tp], [d * d / tp, d], [d * f / tp, f / tp], [f * d / tp, d], [d, d], [d, d]]
    kv = m.kv_heads * m.d_kv
    b = {"none": (), "qkv": (i / tp, kv / tp, kv / tp), "all": (i / tp, kv / tp, kv / tp, d)}[m.attention_bias]
    proj = [d * i / tp, d * kv / tp, d * kv / tp, i * d / tp]  # q, k, v, o
    attn = [[w] + ([b[n]] if n < len(b) else []) for n, w in enumerate(proj)]
    # gate, up, down (SwiGLU / GeGLU); up, down for the non-gated FFNs of the llama family (GPT-NeoX / GPT-J, Falcon:
    # GELU; Nemotron: relu2), each a Linear with its bias when the config has MLP biases
    mb = ((f / tp, f / tp, d) if m.gated_ffn else (f / tp, d)) if m.mlp_bias else ()
    mlp = [[d * f / tp] + ([mb[n]] if mb else []) for n in range(3 if m.gated_ffn else 2)]
    return attn + mlp + [[d], [d]]


def _block_hook_calls(m: ModelSpec, decoder: bool) -> int:
    """Module forward calls in one Hugging Face block, each running DeepSpeed's pre/post hooks (ModuleLists are never
    called). T5Block: per attention sublayer its wrapper, T5Attention, q/k/v/o, layer_norm, dropout; the FF sublayer's
    wrapper, DenseReluDense (wi or wi_0/wi_1, wo, act, dropout), layer_norm, dropout. GPT2Block: ln_1, attn (c_attn,
    c_proj, resid_dropout; SDPA takes the attention dropout as an argument), ln_2, mlp (c_fc, c_proj, act, dropout).
    Llama-like: the layer, two norms, self_attn (q, k, v, o), mlp (gate/up/down or up/down, act_fn)."""
    if m.is_encoder_decoder:
        ffn = 1 + 1 + (3 if m.gated_ffn else 2) + 1 + 1 + 1 + 1
        return 1 + (2 if decoder else 1) * (1 + 1 + 4 + 1 + 1) + ffn
    if m.family == "gpt2":
        return 1 + 1 + 4 + 1 + 5
    return 1 + 2 + 5 + 1 + (3 if m.gated_ffn else 2) + 1


def _root_hook_calls(m: ModelSpec) -> int:
    """Module calls outside the blocks per forward: T5 -- the model, lm_head, and per stack the stack, embed_tokens,
    its dropout (called twice), final_layer_norm and block 0's relative_attention_bias; GPT-2 -- the LM-head model,
    transformer, wte, wpe, drop, ln_f, lm_head; Llama-like -- the causal LM, model, embed_tokens, rotary_emb, norm,
    lm_head."""
    if m.is_encoder_decoder:
        return 2 + 2 * 6
    return 7 if m.family == "gpt2" else 6


def _block_tensors(m: ModelSpec, decoder: bool, tp: int) -> list[float]:
    """Element counts of one block's parameter tensors on a tensor-parallel rank."""
    return [x for module in _block_modules(m, decoder, tp) for x in module]


@lru_cache(maxsize=None)
def zero3_gathers(m: ModelSpec, tp: int, pp: int, stage_layers: int, psi: int,
                  threshold: int | None = None) -> Zero3Gathers:
    """DeepSpeed ZeRO-3's gathered elements and fetches per pass on the busiest stage (`stage_layers` blocks, `psi`
    parameters on the rank before partitioning): psi less the persistent tensors' elements. `threshold`: DeepSpeed's
    stage3_param_persistence_threshold (None: engines.yaml deepspeed param_persistence_threshold, its default)."""
    if threshold is None:
        threshold = engine_comm("deepspeed").param_persistence_threshold
    blocks = [(_block_tensors(m, False, tp), m.num_layers if m.is_encoder_decoder else 0),
              (_block_tensors(m, True, tp), m.num_decoder_layers if m.is_encoder_decoder else m.num_layers)]
    total = sum(n for _, n in blocks) or 1
    share = stage_layers / total  # the stage's blocks, in the model's encoder/decoder mix
    persistent = sum(n * sum(x for x in ts if x <= threshold) for ts, n in blocks) * share
    fetched = sum(n for ts, n in blocks if any(x > threshold for x in ts)) * share
    partitioned = sum(n * sum(1 for x in ts if x > threshold) for ts, n in blocks) * share
    modules = sum(n * sum(1 for mod in _block_modules(m, dec, tp) if max(mod) > threshold)
                  for dec, (_, n) in zip((False, True), blocks)) * share
    others, first = 0, 0.0
    tensors = sum(n * len(ts) for ts, n in blocks) * share
    calls = sum(n * _block_hook_calls(m, dec) for dec, (_, n) in zip((False, True), blocks)) * share
    if pp == 1:
        pc = param_breakdown(m)
        tables = [m.vocab_size * m.d_model / tp]  # input embedding (a tied head is the same tensor)
        if m.family == "gpt2":
            tables.append(pc.embedding - m.vocab_size * m.d_model)  # learned positions
        if pc.lm_head:
            tables.append(pc.lm_head / tp)
        persistent += sum(x for x in tables if x <= threshold) + pc.other  # final norms, position biases: small
        others = sum(1 for x in tables if x > threshold)
        tensors += len(tables) + (4 if m.is_encoder_decoder else 1 if m.family != "gpt2" else 2)  # final norms(+biases)
        calls += _root_hook_calls(m)
        first = tables[0] if tables[0] > threshold else 0.0
    return Zero3Gathers(max(0.0, psi - persistent), fetched, others, round(tensors), modules + others, calls,
                        partitioned + others, first)


def hook_host_s(z: Zero3Gathers, fetch_host_s: float, passes: int) -> float:
    """Host-thread seconds of DeepSpeed ZeRO-3's module hooks in `passes` passes over the stage (the forward; the
    backward's pre-backward fetches and, under a full recompute, the recompute forward's): `fetch_host_s` per module
    call (engines.yaml: the whole hook chain of one module call, measured -- fetch_sub_module with its coalesced
    all-gather's launch, the wait, torch.cat per parameter and the fetch event, plus the rest of the pre/post
    hooks: trace bookkeeping, release_sub_module, the autograd functions that wrap each module's inputs/outputs).

    The host thread runs the hooks in line with the module's kernel launches. The launch queue lets it run ahead of
    the GPU, and the fetch-event limit (at most 2 outstanding, then event.synchronize) ties it to the all-gather
    stream, not to compute -- so the hooks hide behind the pass's GPU time unless, summed over the pass with the
    launches (pass_launch_s), they exceed it; then the GPU waits on the host. Prefetch does not shorten them:
    prefetches are issued from the same hooks."""
    return passes * z.hook_calls * fetch_host_s


def pass_launch_s(m: ModelSpec, kernels: str, flash: bool, kernel_overhead_s: float, stage_layers: int,
                  recompute: str) -> tuple[float, float]:
    """(forward, backward) seconds per micro-batch the stage's eager kernel launches cost the host thread: the
    per-kernel fixed time step.compute_times adds to each pass (kernel_counts x calibration kernel_overhead_s; the
    backward's, and under a full recompute the forward's again). The ZeRO-3 hooks run on that same Python thread
    between the modules' ops, so they hide only behind the pass's remaining device time, never behind its launches
    (one thread cannot dispatch an op and run a hook at once)."""
    (enc_f, enc_b), (dec_f, dec_b) = model_block_kernels(m, kernels, flash)
    le = m.num_layers if m.is_encoder_decoder else 0
    ld = m.num_decoder_layers if m.is_encoder_decoder else m.num_layers
    share = stage_layers / max(1, le + ld)
    fwd = kernel_overhead_s * (le * enc_f + ld * dec_f) * share
    bwd = kernel_overhead_s * (le * enc_b + ld * dec_b) * share
    return fwd, bwd + (fwd if recompute == "full" else 0.0)


@dataclass(frozen=True)
class StackOrder:
    """An encoder-decoder's two stacks on one rank (pp 1) in the order each pass runs them: the forward the encoder
    first, the backward (with a full recompute's forwards) the decoder first (stack_order)."""

    encoder_share: float  # the encoder blocks' share of the blocks' device time (their share of the forward FLOPs)
    encoder_calls: float  # hooked module calls per forward in the encoder (its blocks, its half of the root modules)
    decoder_calls: float  # the same in the decoder
    encoder_launch: tuple[float, float]  # host seconds of the encoder blocks' kernel launches (forward, backward)
    decoder_launch: tuple[float, float]


@lru_cache(maxsize=None)
def stack_order(m: ModelSpec, kernels: str, flash: bool, kernel_overhead_s: float, recompute: str, seq_len: int,
                target_len: int) -> StackOrder | None:
    """The host / device split of a T5's two stacks for launch_order_s (None: not an encoder-decoder). Device time by
    each stack's forward FLOPs (an encoder block runs over seq_len, a decoder block over target_len with
    cross-attention: at 512 / 114 the encoder holds most of the FLOPs, the decoder most of the hooked module calls);
    hook calls by _block_hook_calls, the root modules' (_root_hook_calls) split evenly; launches as pass_launch_s."""
    if not m.is_encoder_decoder:
        return None
    (enc_f, enc_b), (dec_f, dec_b) = model_block_kernels(m, kernels, flash)
    le, ld = m.num_layers, m.num_decoder_layers
    whole = forward_flops(m, seq_len, target_len).layers
    # FLOPs are linear in the decoder's layer count (stages.layer_costs): one more decoder layer costs `per_decoder`
    per_decoder = forward_flops(replace(m, num_decoder_layers=ld + 1), seq_len, target_len).layers - whole
    share = max(0.0, min(1.0, (whole - per_decoder * ld) / whole)) if whole > 0 else 0.5
    root = _root_hook_calls(m) / 2
    again = recompute == "full"  # a full recompute runs each block's forward again in the backward

    def launch(layers: int, f: float, b: float) -> tuple[float, float]:
        fwd = kernel_overhead_s * layers * f
        return fwd, kernel_overhead_s * layers * b + (fwd if again else 0.0)

    return StackOrder(share, le * _block_hook_calls(m, False) + root, ld * _block_hook_calls(m, True) + root,
                      launch(le, enc_f, enc_b), launch(ld, dec_f, dec_b))


def launch_order_s(device_s: float, host_s: float, first_host_s: float, second_share: float) -> float:
    """Seconds of one pass over two stacks run in order, one host thread launching every kernel with the hooks in
    between (`host_s`; `first_host_s` of it in the first stack) and the device running them (`device_s`;
    `second_share` of it in the second stack).

    DeepSpeed does not put the hooks in series with the compute: 0.8.0 and 0.19.8 alike, with overlap_comm (stage
    3's default) the host blocks only on the fetch events of the all-gather stream (at most 2 outstanding, then
    event.synchronize(): partitioned_param_coordinator.py fetch_sub_module), the reduce events of the
    reduce-and-partition stream (stage3.py __reduce_and_partition_ipg_grads, max_param_reduce_events 2: a few
    buckets behind the backward) and once per micro-batch at independent_gradient_partition_epilogue; 0.19.8's
    one-rank NoGatherCoalescedHandle.wait synchronizes the all-gather stream, which holds no copy there. So the host
    runs ahead of the device (as far as CUDA's ~1000 queued launches per stream: NVIDIA developer forum, 'CUDA
    stream are blocked when launch lots of kernels (>1000)'), and the pass lasts the larger of
    its host and device times -- but the device can run only what the host has launched: at least the first
    stack's host time plus the second's device time (the flow shop of two machines in series, each stack uniform
    inside). A T5's forward runs its device-heavy stack first (the encoder, over seq_len), the decoder's extra
    module calls over target_len after, hidden; its backward runs the decoder first, whose hooks the encoder's
    device work after them cannot hide."""
    return max(device_s, host_s, first_host_s + second_share * device_s)


@dataclass(frozen=True)
class Zero3Reuse:
    """What DeepSpeed ZeRO-3's reuse distance keeps gathered on a model-parallel rank (pp 1), per micro-batch."""

    forward_elems: float  # partitioned elements the forward gathers
    backward_elems: float  # partitioned elements the backward gathers again (and, under a full recompute, its forwards)
    kept_elems: float  # partitioned elements still gathered when the backward starts (held from their forward use)
    restart_elems: float = 0.0  # tables the forward gathers after its first fetch (positions, a T5 decoder's shared
    # embedding after the encoder, the head -- tied: the embedding again): each prefetched behind one Linear only
    collectives: float = 0.0  # coalesced all-gathers per micro-batch (prefetch batches and fetches on demand;
    # zero3_reuse's prefetch walk)


def _forward_modules(m: ModelSpec, tp: int) -> list[tuple[object, list[float], int]]:
    """The forward's parameter-owning modules in call order: (parameter key, tensor elements, block index or -1). A
    tied head is the embedding's tensor again (same key); T5 calls its shared embedding once per stack."""
    pc = param_breakdown(m)
    emb = ("emb", [m.vocab_size * m.d_model / tp])
    out = [(*emb, -1)]
    if m.family == "gpt2":
        out.append(("wpe", [pc.embedding - m.vocab_size * m.d_model], -1))
    stacks = [(False, m.num_layers), (True, m.num_decoder_layers)] if m.is_encoder_decoder else [(True, m.num_layers)]
    block = 0
    for n_stack, (decoder, layers) in enumerate(stacks):
        if n_stack:
            out.append((*emb, -1))
        modules = _block_modules(m, decoder, tp)  # every block of the stack alike (their lists shared, read only)
        for _ in range(layers):
            out += [((block, j), mod, block) for j, mod in enumerate(modules)]
            block += 1
        out.append((("norm", n_stack), [m.d_model], -1))
    out.append(("head", [pc.lm_head / tp], -1) if pc.lm_head else (*emb, -1))
    return out


def zero3_reuse(m: ModelSpec, tp: int, recompute: str, reuse_elems: float,
                threshold: int | None = None) -> Zero3Reuse:
    """_zero3_reuse, cached on whether `recompute` is full: the only recompute that changes the module trace (none,
    selective and op walk the same one, so a planner's first call walks it once for them)."""
    return _zero3_reuse(m, tp, recompute == "full", reuse_elems, threshold)


def prefetch_collectives(trace: list, part: dict, released: list[bool], next_at: list[int], bucket: float,
                         max_live: float) -> int:
    """Coalesced all-gathers DeepSpeed ZeRO-3 issues over one micro-batch's module `trace` once the trace is
    complete (partitioned_param_coordinator.py fetch_sub_module / __all_gather_params_ at 00a31c99): a module whose
    partitioned parameters (`part`: elements) are neither gathered nor in flight is fetched with one all-gather;
    then, the trace's position moved past the module, one more all-gather prefetches the next parameters of the trace
    not yet gathered, popping entries while the batch holds fewer than min(`max_live` - elements gathered or in
    flight, `bucket`) elements (stage3_max_live_parameters, stage3_prefetch_bucket_size). After the module runs its
    parameters are released when the reuse rule says so (`released`), unless the prefetch walk has already passed
    their next use (`next_at`: __params_to_release keeps them). So a model whose gathered elements stay under
    max_live is gathered in batches of the bucket, and once max_live binds each fetch prefetches about what the last
    release freed: about one all-gather per module owning a partitioned tensor."""
    ids: dict = {}
    slots = [ids.setdefault(key, len(ids)) for key in trace]  # each module's slot (hot path: lists, not dicts)
    return _prefetch_walk(slots, [part[key] for key in trace], len(ids), released, next_at, bucket, max_live)


def _prefetch_walk(slots: list[int], sizes: list[float], modules: int, released: list[bool], next_at: list[int],
                   bucket: float, max_live: float) -> int:
    """prefetch_collectives over a trace of module numbers (`slots`, 0 .. `modules` - 1) and each entry's gathered
    elements (`sizes`)."""
    held = [False] * modules
    end = len(slots)
    live = 0.0
    ahead = 0  # the next trace position the prefetch has not passed
    count = 0
    for i, slot, gathered, release, reuse_at in zip(range(end), slots, sizes, released, next_at):
        # a module of persistent tensors only (gathered 0) fetches nothing, but its hook still runs the prefetch
        if gathered and not held[slot]:
            held[slot] = True
            live += gathered
            count += 1
        if ahead <= i:
            ahead = i + 1
        budget = max_live - live
        if budget > bucket:
            budget = bucket
        batch = 0.0
        while batch < budget and ahead < end:
            elems = sizes[ahead]
            if elems and not held[slots[ahead]]:
                held[slots[ahead]] = True
                batch += elems
            ahead += 1
        if batch:
            live += batch
            count += 1
        if gathered and release and reuse_at >= ahead and held[slot]:
            held[slot] = False
            live -= gathered
    return count


@lru_cache(maxsize=None)
def _zero3_reuse(m: ModelSpec, tp: int, full_recompute: bool, reuse_elems: float,
                 threshold: int | None = None) -> Zero3Reuse:
    """DeepSpeed ZeRO-3's release rule walked over one micro-batch's module trace (partitioned_param_coordinator.py,
    0.10-0.19: once the trace is complete -- from the third micro-step -- release_sub_module releases a module's
    parameters only when none recurs among the following modules of the trace before `stage3_max_reuse_distance`
    elements are traversed, counting every module's own tensors whole, persistent ones too, __params_to_release).
    The trace: the forward, then the backward in reverse; under a full recompute (Hugging Face checkpointing) each
    block's forward runs again just before its backward. So a module is kept from its forward to its backward when
    about twice the elements after it in the forward are under the distance: the last blocks (and an untied head) of
    any model, every module of a model under ~reuse/2 elements per rank. A kept module is gathered once per
    micro-batch; the others again for the backward (and for the recompute). The trace ends with the backward, so
    nothing is kept across micro-batches. `reuse_elems` <= 0: every module released after use. The prefetch walk
    (prefetch_collectives) reads engines.yaml deepspeed stage3_prefetch_elems and stage3_max_live_elems (DeepSpeed's
    defaults)."""
    eng = engine_comm("deepspeed")
    if threshold is None:
        threshold = eng.param_persistence_threshold
    fwd = _forward_modules(m, tp)
    # each parameter key numbered once, the trace a list of these numbers: the walks below index lists by them
    # (hashing a key tuple per trace entry and numbering the trace again for the prefetch walk were a third of a
    # walk; a planner's first call walks every tp of a model, full recompute and not)
    number: dict = {}
    numel, part = [], []  # by number: a module's elements, its gathered ones (its tensors over the threshold)
    sums: dict = {}  # the same of each tensor list, once per list (_forward_modules shares a stack's)
    for key, ts, _ in fwd:
        if key not in number:
            both = sums.get(id(ts))
            if both is None:
                both = sums[id(ts)] = (sum(ts), sum([x for x in ts if x > threshold]))
            number[key] = len(numel)
            numel.append(both[0])
            part.append(both[1])
    forward = [(number[key], blk) for key, _, blk in fwd]
    trace = [n for n, _ in forward]  # the forward, then the backward in reverse, each block's recompute before it
    for blk, run in groupby(reversed(forward), key=itemgetter(1)):  # a block's modules are consecutive
        run = [n for n, _ in run]
        if blk >= 0 and full_recompute:
            trace += reversed(run)
        trace += run
    end, forward_end = len(trace), len(fwd)
    before = list(accumulate(map(numel.__getitem__, trace), initial=0.0))  # elements traversed before module i
    next_at, last = [end] * end, [end] * len(numel)
    for i in range(end - 1, -1, -1):
        n = trace[i]
        next_at[i] = last[n]
        last[n] = i
    # released after module i: the coordinator reaches the module's next use j only when the modules between stay
    # under the distance
    released = [j == end or before[j] - after >= reuse_elems for j, after in zip(next_at, before[1:])]
    held: dict = {}  # number -> gathered elements, in the order gathered (`kept` adds them up in that order)
    forward_elems = restart = 0.0
    for i in range(forward_end):
        n = trace[i]
        gathered = part[n]
        if gathered and n not in held:
            held[n] = gathered
            forward_elems += gathered
            if i and forward[i][1] < 0:  # a table after the first (zero3.Zero3Reuse)
                restart += gathered
        if released[i]:
            held.pop(n, None)
    kept = sum(held.values())  # the backward starts: what the forward left gathered
    backward_elems = 0.0
    for i in range(forward_end, end):
        n = trace[i]
        gathered = part[n]
        if gathered and n not in held:
            held[n] = gathered
            backward_elems += gathered
        if released[i]:
            held.pop(n, None)
    collectives = _prefetch_walk(trace, [part[n] for n in trace], len(part), released, next_at,
                                 eng.stage3_prefetch_elems, eng.stage3_max_live_elems)
    return Zero3Reuse(forward_elems, backward_elems, kept, restart, collectives)


@lru_cache(maxsize=None)
def interleaved_grad_elems(m: ModelSpec, tp: int, pp: int, stage_layers: int, psi: int, bucket_elems: float) -> float:
    """Gradient elements per micro-batch that DeepSpeed ZeRO-3's reduce_scatter_coalesced copies once more than
    ZeRO-1/2's reduction does, of the `psi` parameters on the busiest stage (`stage_layers` blocks).

    stage3.py (0.9.5-0.19.8) __reduce_and_partition_ipg_grads hands a reduce bucket's gradients (views of the
    contiguous ipg buffer, reduce_bucket_size `bucket_elems` elements) to __avg_scatter_grads ->
    comm/coalesced_collectives.py reduce_scatter_coalesced, which interleaves every tensor's per-rank chunks with
    torch.cat into a new flat buffer unless the bucket is ONE tensor divisible by the ranks. A tensor of at least
    `bucket_elems` elements flushes the bucket before it and fills its own (no cat); every smaller one shares its
    bucket (persistent tensors too: their gradients are reduce-scattered the same way). The copy into the ipg buffer,
    the in-place pre-divide and the copy of this rank's shard into its gradient partition are ZeRO-2's too
    (stage_1_and_2.py average_tensor: ipg buffer, div_, per-owner reduce of slices, copy_grads_in_partition)."""
    if bucket_elems <= 0:
        return 0.0
    blocks = [(_block_tensors(m, False, tp), m.num_layers if m.is_encoder_decoder else 0),
              (_block_tensors(m, True, tp), m.num_decoder_layers if m.is_encoder_decoder else m.num_layers)]
    total = sum(n for _, n in blocks) or 1
    alone = sum(n * sum(x for x in ts if x >= bucket_elems) for ts, n in blocks) * stage_layers / total
    if pp == 1:
        pc = param_breakdown(m)
        tables = [m.vocab_size * m.d_model / tp, pc.lm_head / tp if pc.lm_head else 0.0]
        alone += sum(x for x in tables if x >= bucket_elems)
    return max(0.0, psi - alone)


@lru_cache(maxsize=None)
def gradient_order(m: ModelSpec, tp: int, pp: int, stage_layers: int) -> tuple[float, ...]:
    """Elements per rank of each gradient of the busiest stage's `stage_layers` blocks in the order DeepSpeed ZeRO-3's
    backward hands them to its reduce buckets: the untied head first (pp 1), the blocks last to first, the input
    embedding last (pp 1)."""
    enc, dec = _block_tensors(m, False, tp), _block_tensors(m, True, tp)
    n_enc = m.num_layers if m.is_encoder_decoder else 0
    n_dec = m.num_decoder_layers if m.is_encoder_decoder else m.num_layers
    share = stage_layers / max(1, n_enc + n_dec)
    order: list[float] = []
    pc = param_breakdown(m)
    if pp == 1 and pc.lm_head:
        order.append(pc.lm_head / tp)
    order += list(reversed(dec)) * round(n_dec * share) + list(reversed(enc)) * round(n_enc * share)
    if pp == 1:
        order.append(m.vocab_size * m.d_model / tp)
    return tuple(order)


@lru_cache(maxsize=None)
def reduce_scatter_buckets(m: ModelSpec, tp: int, pp: int, stage_layers: int, bucket_elems: float) -> int:
    """Reduce-scatters per micro-batch of DeepSpeed ZeRO-3's gradients on the busiest stage (`stage_layers` blocks):
    one per reduce bucket (stage3.py reduce_independent_p_g_buckets_and_remove_grads, 0.9.5-0.19.8: a gradient
    that would overflow a non-empty bucket of `bucket_elems` elements -- reduce_bucket_size -- flushes it first;
    __avg_scatter_grads -> reduce_scatter_coalesced issues ONE reduce-scatter per bucket), gradients arriving in
    backward order (the untied head first, the blocks last to first, the input embedding last), persistent tensors'
    too. Each pays the ring latency; a tensor over the bucket is a bucket of its own (Megatron GPT-3 175B: qkv,
    dense, fc1, fc2 -> 4 per block at the default 5e8)."""
    if bucket_elems <= 0:
        return max(1, stage_layers)
    order = gradient_order(m, tp, pp, stage_layers)
    count, filled = 0, 0.0
    for elems in order:
        if filled and filled + elems > bucket_elems:
            count += 1
            filled = 0.0
        filled += elems
    return max(1, count + (1 if filled else 0))


@lru_cache(maxsize=None)
def reduce_scatter_rank_items(m: ModelSpec, tp: int, pp: int, stage_layers: int, bucket_elems: float,
                              dp: int) -> tuple[float, float]:
    """Per-rank host items of DeepSpeed ZeRO-3's reduce-scatters in one micro-batch on the busiest stage, as
    (interleaved, divisible): comm/coalesced_collectives.py reduce_scatter_coalesced (0.9.5-0.19.8; stage3.py
    __avg_scatter_grads calls it for every reduce bucket) builds one Python slice per rank of every gradient of the
    bucket, then -- unless the bucket is ONE tensor whose elements the `dp` ranks divide -- appends every (rank,
    tensor) chunk to a list, rank-major, and torch.cat's it; and it always splits the flat buffer into `dp` views
    (torch.chunk). So a bucket of n tensors costs dp x n interleaved items, a divisible one-tensor bucket dp
    divisible items. Buckets as reduce_scatter_buckets forms them (backward order, `bucket_elems`)."""
    if dp <= 1:
        return 0.0, 0.0
    order = gradient_order(m, tp, pp, stage_layers)
    interleaved = divisible = 0.0
    bucket: list[float] = []

    def flush() -> None:
        nonlocal interleaved, divisible
        if len(bucket) == 1 and round(bucket[0]) % dp == 0:
            divisible += dp
        elif bucket:
            interleaved += dp * len(bucket)
        bucket.clear()

    filled = 0.0
    for elems in order:
        if bucket and (bucket_elems <= 0 or filled + elems > bucket_elems):
            flush()
            filled = 0.0
        bucket.append(elems)
        filled += elems
    flush()
    return interleaved, divisible


# HBM passes per byte of DeepSpeed's per-parameter ZeRO-3 collectives before 0.5.5 (partition_parameters.py at
# 0d4a54a04), beside the network transfer: a gather allocates the whole parameter with torch.zeros (a write of every
# byte) and PyTorch's list all_gather (ProcessGroupNCCL::allgather, torch 1.8) gathers into its own flat buffer, then
# copies each rank's slice into the list's views (read + write) -> 3; a gradient's list reduce_scatter first copies
# the list's input views into a flat buffer (ProcessGroupNCCL::reduce_scatter: read + write) -> 2. Units: passes over
# the gathered parameter bytes / the gradient bytes, at the device's HBM rate.
PER_PARAM_SYNC_COPY_PASSES = (3.0, 2.0)


def per_param_sync_comm_s(z: Zero3Gathers, param_bytes: int, grad_bytes: float, psi: float, dp: int, per_node: int,
                          lk: tuple, efficiency: float, rails: str, rank_host_s: float, gather_passes: float,
                          hbm_bytes_per_s: float) -> tuple[float, float]:
    """(seconds, the same of their bytes alone) of one micro-batch's ZeRO-3 collectives as DeepSpeed ran them before
    0.5.5 (Strategy.zero3_fetch "per-param-sync"), all in series with the compute.

    partition_parameters.py at 0d4a54a04 (2021-04, the ZeRO-Infinity release) gathers one parameter at a time
    (_allgather_param): torch.cuda.synchronize() first -- "the async version is not async at all, because each
    all_gather calls torch.cuda.synchronize()" (c0eeb69df, #1188, first in v0.5.5) -- then a Python loop builds
    the world size's views of the flat buffer and torch.distributed.all_gather fills that list: PyTorch's
    ProcessGroupNCCL::allgather gathers into its own flat buffer and copies each rank's slice back with one copy_
    per rank (the 'implicit memcpy' of the same commit; pytorch/pytorch #33924, NVIDIA/Fuser #2384). Gradients
    go the same way backwards (_reduce_scatter_gradient: one reduce_scatter per tensor, over a list of the world
    size's input views that PyTorch flattens with one copy per rank). So every collective costs its ring's
    (n-1) hop latencies plus `rank_host_s` per rank of the group -- a cost that grows with the data-parallel size
    per collective, on top of the bytes (which NCCL still moves over the node's pooled NICs). The same code also
    moves every gathered byte through HBM three more times and every gradient byte twice (PER_PARAM_SYNC_COPY_PASSES),
    in series with the rest. v0.6 (4912e0ad7, #1453) replaced it with one coalesced _all_gather_base per module,
    issued ahead on its own stream."""
    if dp <= 1:
        return 0.0, 0.0
    lists = dp * rank_host_s
    g_bw, g_lat = gather_parts(z.gathered_elems * param_bytes, dp, per_node, lk, efficiency, rails,
                               max(1, round(z.partitioned_tensors)))
    r_bw, r_lat = gather_parts(psi * grad_bytes, dp, per_node, lk, efficiency, rails, max(1, z.tensors))
    gather_copy_passes, reduce_copy_passes = PER_PARAM_SYNC_COPY_PASSES
    gathers = g_bw + g_lat + z.partitioned_tensors * lists + \
        gather_copy_passes * z.gathered_elems * param_bytes / hbm_bytes_per_s
    reduces = r_bw + r_lat + z.tensors * lists + reduce_copy_passes * psi * grad_bytes / hbm_bytes_per_s
    return gather_passes * gathers + reduces, gather_passes * g_bw + r_bw
