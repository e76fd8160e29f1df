"""Resource-aware pipeline partitioning: contiguous layer counts per stage for devices of different speed.

ERNIE 3.0 Titan and heterogeneous-cluster pipelines give faster devices more layers. Each pipeline layer costs its
forward FLOPs (costmodel/flops.py: T5 encoder layers over the source length, decoder layers over the target length
with cross-attention), the last stage also runs the LM head; a stage's time is its FLOPs / its device's speed. The
split minimises the slowest stage (dynamic programme over contiguous splits, every stage >= 1 layer), which sets a
pipeline's steady-state rate. Torch-free.

On a cluster mixing device types (`resource_split`, used by the planner) a stage's time is the cost model's
(costmodel/stages.py: its blocks' share of forward + backward on its own device, tensor-parallel and pipeline
sends, the LM head on the last stage) and every stage must fit its device's memory (the cost model's per-stage
memory): the split minimises the slowest stage among the splits that fit.
"""

from __future__ import annotations

from dataclasses import dataclass

from scalestudy.costmodel.stages import layer_costs  # noqa: F401  (re-exported: per-block FLOPs in stage order)
from scalestudy.errors import ScalestudyError
from scalestudy.specs.model import ModelSpec


@dataclass(frozen=True)
class StagePlan:
    stage_layers: tuple[int, ...]
    stage_seconds: tuple[float, ...]  # forward + backward (3 x forward FLOPs) of one micro-batch, per stage

    @property
    def slowest_s(self) -> float:
        return max(self.stage_seconds)

    def step_seconds(self, micro_batches: int) -> float:
        """1F1B/GPipe step of `micro_batches`: fill and drain through every stage, then one micro-batch per
        slowest-stage interval (compute only; point-to-point sends are not counted)."""
        return sum(self.stage_seconds) + (micro_batches - 1) * self.slowest_s


def stage_seconds(costs: list[float], head: float, split: tuple[int, ...], flops_per_s: list[float],
                  micro_batch: int = 1) -> tuple[float, ...]:
    """Seconds per micro-batch of each stage: 3 x forward FLOPs (forward + backward) / its device's FLOP/s."""
    out, start = [], 0
    for k, n in enumerate(split):
        work = sum(costs[start:start + n]) + (head if k == len(split) - 1 else 0.0)
        out.append(3 * work * micro_batch / flops_per_s[k])
        start += n
    return tuple(out)


def balanced_split(costs: list[float], head: float, speeds: list[float]) -> tuple[int, ...]:
    """Contiguous layers per stage (each >= 1) minimising max over stages of work / speed."""
    n, pp = len(costs), len(speeds)
    if pp > n:
        raise ScalestudyError(f"{pp} pipeline stages cannot each hold a layer of a {n}-layer model")
    if any(v <= 0 for v in speeds):
        raise ScalestudyError(f"stage speeds must be > 0, got {','.join(map(str, speeds))}")
    prefix = [0.0]
    for c in costs:
        prefix.append(prefix[-1] + c)
    inf = float("inf")
    # best[k][j]: slowest time when the first k stages hold the first j layers; cut[k][j]: where stage k starts
    best = [[inf] * (n + 1) for _ in range(pp + 1)]
    cut = [[0] * (n + 1) for _ in range(pp + 1)]
    best[0][0] = 0.0
    for k in range(1, pp + 1):
        for j in range(k, n - (pp - k) + 1):
            extra = head if k == pp else 0.0
            for i in range(k - 1, j):
                t = max(best[k - 1][i], (prefix[j] - prefix[i] + extra) / speeds[k - 1])
                if t < best[k][j]:
                    best[k][j], cut[k][j] = t, i
    split, j = [], n
    for k in range(pp, 0, -1):
        i = cut[k][j]
        split.append(j - i)
        j = i
    return tuple(reversed(split))


def plan_stages(spec: ModelSpec, seq_len: int, target_len: int, flops_per_s: list[float],
                micro_batch: int = 1) -> StagePlan:
    """The resource-aware split for pipeline devices of the given speeds (FLOP/s, or any common unit) and the
    predicted seconds per micro-batch of every stage."""
    costs, head = layer_costs(spec, seq_len, target_len)
    split = balanced_split(costs, head, flops_per_s)
    return StagePlan(split, stage_seconds(costs, head, split, flops_per_s, micro_batch))


CONTIGUOUS_ONLY = ("--stage-layers auto splits the layers into contiguous stages: not with the interleaved "
                   "schedule (use --pp-schedule 1f1b or gpipe)")


@dataclass(frozen=True)
class AutoSplit:
    """`train --stage-layers auto`: the run with its split, and what the split rests on."""

    run: object  # the RunConfig with stage_layers set
    layers: tuple[int, ...]
    even: tuple[int, ...]  # the default even split
    ratio: float  # slowest stage of `layers` / slowest stage of `even` (per micro-batch)
    basis: str  # what the stage times and memory are
    # per stage (bytes, capacity bytes per rank) by the cost model; () when memory could not be estimated
    memory: tuple[tuple[float, float], ...] = ()
    compute_only: tuple[int, ...] = ()  # the fastest split ignoring memory, when memory moved the split
    note: str = ""  # why memory was not checked, or that no split fits

    def describe(self, speeds_text: str) -> str:
        gib = 2**30
        line = (f"stage layers {','.join(map(str, self.layers))} for stage speeds {speeds_text}: slowest stage "
                f"{self.ratio:.2f}x the even split's ({','.join(map(str, self.even))}); cost model: {self.basis}")
        if self.memory:
            line += "; memory per rank (GiB, 2^30 bytes) by stage " + ", ".join(
                f"{used / gib:.2f} of {cap / gib:.1f}" for used, cap in self.memory)
        if self.compute_only and self.compute_only != self.layers:
            line += (f"; the compute-only split {','.join(map(str, self.compute_only))} would not fit a stage's "
                     "memory")
        return line + (f"; {self.note}" if self.note else "")


def auto_stage_layers(run, speeds: list[float], node_memory_bytes: float | None = None,
                      no_memory_reason: str = "", gpu=None) -> AutoSplit:
    """`run` (a RunConfig) with stage_layers for pipeline ranks of relative `speeds`.

    With `node_memory_bytes` (a CPU run: the RAM of a node, shared by its ranks) or `gpu` (a run on this machine's
    GPUs: their device entry with the memory they report) the split is the planner's (`resource_split`): each
    stage's forward + backward on the run's ranks at its speed, the fastest split among those whose every stage fits
    (cost model memory). Without either (no device figures for the run: a cluster's nodes unknown here) the split
    balances forward + backward FLOPs / speed only, and says why."""
    strategy = run.strategy
    if strategy.pp < 2 or len(speeds) != strategy.pp:
        raise ScalestudyError(f"--stage-layers auto needs --pp >= 2 and one --stage-speeds value per pipeline rank "
                              f"(pp {strategy.pp}, {len(speeds)} speed(s) given)")
    if strategy.pp_schedule == "interleaved":
        raise ScalestudyError(CONTIGUOUS_ONLY)
    if node_memory_bytes or gpu is not None:
        try:
            return _auto_with_memory(run, speeds, *_ranks_device(run, node_memory_bytes, gpu))
        except ScalestudyError as exc:  # e.g. a precision the CPU figures lack: the FLOP split, said why
            no_memory_reason = f"memory not checked ({exc})"
    spec, workload = run.model_spec(), run.to_workload()
    plan = plan_stages(spec, workload.seq_len, workload.target_len, speeds, strategy.micro_batch)
    costs, head = layer_costs(spec, workload.seq_len, workload.target_len)
    even = strategy.replace(stage_layers=()).stage_split(len(costs))
    baseline = StagePlan(even, stage_seconds(costs, head, even, speeds, strategy.micro_batch))
    return AutoSplit(run.replace(stage_layers=list(plan.stage_layers)), plan.stage_layers, even,
                     plan.slowest_s / baseline.slowest_s, "forward + backward FLOPs per stage / its speed",
                     note=no_memory_reason)


def _ranks_device(run, node_memory_bytes: float | None, gpu):
    """(the device the run's ranks train on, what the split's basis says about it): this machine's CPU ranks
    (local-cpu figures, `node_memory_bytes` of RAM shared by the node's ranks) or its GPUs (`gpu`)."""
    from dataclasses import replace

    from scalestudy.specs.hardware import get_device

    if gpu is not None:
        return gpu, (f"each stage's forward + backward on this machine's {gpu.name} ranks at its speed, and its memory "
                     f"within the {gpu.memory_bytes / 2**30:.1f} GiB each GPU reports")
    device = replace(get_device("local-cpu"), memory_bytes=int(node_memory_bytes),
                     host_memory_bytes=int(node_memory_bytes))
    return device, ("each stage's forward + backward on this machine's CPU ranks at its speed, and its memory "
                    f"within {node_memory_bytes / 2**30:.1f} GiB of RAM shared by {run.workload.nproc} rank(s)")


def _auto_with_memory(run, speeds: list[float], device, basis: str) -> AutoSplit:
    """The resource-aware split on the run's nodes of `device` (its memory: what a rank may use)."""
    from scalestudy.costmodel.estimate import estimate
    from scalestudy.specs.hardware import ClusterSpec, with_stage_speeds
    from scalestudy.specs.run import as_trained

    w = run.workload
    cluster = with_stage_speeds(ClusterSpec(device=device, nodes=w.nnodes, gpus_per_node=w.nproc), speeds)
    spec, workload, layout = run.model_spec(), run.to_workload(), run.layout()
    strategy = as_trained(run.strategy, spec)  # priced with the software train runs
    split, fastest, fits = _memory_split(spec, cluster, strategy, workload, layout.dp, layout.grad_accum)
    chosen = estimate(spec, cluster, strategy.replace(stage_layers=split), workload)
    even = estimate(spec, cluster, strategy.replace(stage_layers=()), workload)
    slowest = max(x.slot_s for x in chosen.stages) / max(x.slot_s for x in even.stages)
    note = "" if fits else ("no split fits every stage's memory by the cost model: the fastest one is used, the run "
                            "may run out of memory")
    return AutoSplit(run.replace(stage_layers=list(split)), split, even.strategy.stage_split(spec.total_layers),
                     slowest, basis, tuple((x.memory.total, x.capacity_bytes) for x in chosen.stages), fastest, note)


def min_max_split(prefix: list[float], rate: list[float], fixed: list[float], max_ends=None
                  ) -> tuple[int, ...] | None:
    """Contiguous blocks per stage (each >= 1) minimising the slowest stage, where stage k holding blocks [i, j)
    takes (prefix[j] - prefix[i]) x rate[k] + fixed[k] seconds (`prefix`: prefix sums of the block costs, len n + 1)
    and, when `max_ends` is given, may hold no more than blocks [i, max_ends(k)[i]) (memory). None when no split
    satisfies max_ends. Exact dynamic programme over (stages, blocks covered), O(pp n^2) at worst; a stage's time
    grows with its blocks, so each scan stops at the first start that cannot improve."""
    n, pp = len(prefix) - 1, len(rate)
    if pp > n:
        raise ScalestudyError(f"{pp} pipeline stages cannot each hold a layer of a {n}-layer model")
    inf = float("inf")
    best = [0.0] + [inf] * n  # best[j]: slowest stage when the stages so far hold blocks [0, j)
    cuts = []
    for k in range(pp):
        r, f = rate[k], fixed[k]
        new, cut = [inf] * (n + 1), [0] * (n + 1)
        ends = max_ends(k) if max_ends is not None else None
        for j in range(k + 1, n - (pp - 1 - k) + 1):
            pj, top = prefix[j], inf
            for i in range(j - 1, k - 1, -1):  # this stage holds [i, j): slower as i falls
                stage = (pj - prefix[i]) * r + f
                if stage >= top:
                    break
                prev = best[i]
                if prev == inf or (ends is not None and j > ends[i]):
                    continue
                t = prev if prev > stage else stage
                if t < top:
                    top, cut[j] = t, i
            new[j] = top
        best = new
        cuts.append(cut)
    if best[n] == inf:
        return None
    split, j = [], n
    for k in range(pp - 1, -1, -1):
        i = cuts[k][j]
        split.append(j - i)
        j = i
    return tuple(reversed(split))


_SPLITS: dict[tuple, tuple] = {}


def resource_split(model: ModelSpec, cluster, strategy, workload, dp: int, grad_accum: int, options=None,
                   calibration=None) -> tuple[int, ...]:
    """Layers per pipeline stage for `strategy` on a cluster mixing devices (`cluster.groups`): the contiguous
    split minimising the slowest stage's seconds per micro-batch (cost model, per stage on its own device) among
    the splits whose every stage fits its device's memory; the fastest split when none fits (the estimate then
    says it does not fit)."""
    return _memory_split(model, cluster, strategy, workload, dp, grad_accum, options, calibration)[0]


def _memory_split(model: ModelSpec, cluster, strategy, workload, dp: int, grad_accum: int, options=None,
                  calibration=None) -> tuple[tuple[int, ...], tuple[int, ...], bool]:
    """(the split `resource_split` returns, the fastest split ignoring memory, whether the first fits)."""
    from scalestudy.costmodel.options import DEFAULT_OPTIONS
    from scalestudy.costmodel.memory import stage_in_flight
    from scalestudy.costmodel.stages import slot_terms, stage_devices, stage_memory

    if strategy.pp_schedule == "interleaved":
        raise ScalestudyError(CONTIGUOUS_ONLY)
    from scalestudy.costmodel.flops import target_length
    from scalestudy.specs.strategy import resolve_software

    # the software estimate() prices (its "engine" kernels resolved): the per-stage terms below read it directly
    st, pp, options = resolve_software(strategy, model), strategy.pp, options or DEFAULT_OPTIONS
    s, t = workload.seq_len, target_length(model, workload)
    costs, _ = layer_costs(model, s, t)
    n = len(costs)
    if pp > n:
        raise ScalestudyError(f"{pp} pipeline stages cannot each hold a layer of a {n}-layer model")
    total = sum(costs)
    prefix = [0.0]
    for c in costs:
        prefix.append(prefix[-1] + c / total)
    # every Strategy field stages.slot_terms reads (the engine: its pipeline sends and padded vocabulary)
    key = (id(model), id(cluster), st.engine, st.tp, pp, st.micro_batch, st.recompute, st.precision, st.attention,
           st.sequence_parallel, dp, s, t, id(calibration), st.kernels, st.cross_entropy, st.attention_kernel,
           st.recompute_early_stop, st.lm_head, st.cublas, st.tf32, st.pipeline_scatter_gather)
    hit = _SPLITS.get(key)
    if hit is not None and hit[0] is cluster and hit[1] is model:
        rate, fixed, fastest = hit[2:]
    else:
        terms = slot_terms(model, cluster, st, workload, dp, calibration)
        rate = [r for r, _, _ in terms]
        fixed = [f + (h if k == pp - 1 else 0.0) for k, (_, f, h) in enumerate(terms)]  # the LM head: last stage
        fastest = min_max_split(prefix, rate, fixed)
        if len(_SPLITS) > 50_000:
            _SPLITS.clear()
        _SPLITS[key] = (cluster, model, rate, fixed, fastest)
    places = stage_devices(cluster, pp, st.precision)
    in_flight = stage_in_flight(st.pp_schedule, pp, grad_accum, st.virtual_stages)  # micro-batches per stage
    enc_blocks = model.num_layers if model.is_encoder_decoder else 0
    sizes: dict[tuple, bool] = {}

    def fits(k, i, j):
        # a stage's memory depends on its block counts (encoder, decoder), whether it is first / last, its
        # micro-batches in flight and its device
        n_enc = max(0, min(j, enc_blocks) - i)
        where = places[k]
        key = (k == 0, k == pp - 1, in_flight[k], where.device.process_memory_bytes, where.capacity_bytes,
               where.host_capacity_bytes, n_enc, j - i - n_enc)
        got = sizes.get(key)
        if got is None:
            mem = stage_memory(model, st, dp, st.tp, pp, grad_accum, s, t, k, i, j - i, where.device, options)
            got = sizes[key] = mem.total <= where.capacity_bytes and mem.host_bytes <= where.host_capacity_bytes
        return got

    start = 0
    for k, m in enumerate(fastest):
        if not fits(k, start, start + m):
            break
        start += m
    else:
        return fastest, fastest, True
    if not fits(0, 0, 1) or not enc_blocks and any(not fits(k, k, k + 1) for k in range(1, pp)):
        return fastest, fastest, False  # a stage cannot hold even one block (all alike in a decoder-only model)
    # Some stage of the fastest split does not fit: the most blocks each stage can hold from each start (memory
    # grows with the blocks, so the end moves forward with the start: one pass per stage), then the fastest split
    # within those.
    done: dict[tuple, list[int]] = {}

    def max_ends(k):
        where = places[k]  # stages alike in memory (first/last, in flight, device) share their ends
        key = (k == 0, k == pp - 1, in_flight[k], where.device.process_memory_bytes, where.capacity_bytes,
               where.host_capacity_bytes)
        got = done.get(key)
        if got is None:
            got, j = [], 0
            for i in range(n):
                j = max(j, i)
                while j < n and fits(k, i, j + 1):
                    j += 1
                got.append(j)
            done[key] = got
        return got

    fitting = min_max_split(prefix, rate, fixed, max_ends)
    return (fitting, fastest, True) if fitting else (fastest, fastest, False)
