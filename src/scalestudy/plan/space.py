"""The strategy search space: every Strategy a model can train with on a cluster at a given global batch.

Pure Python (no torch). A point of the space is a `Strategy` plus the node count it runs on; validity of the
degrees is checked by `scalestudy.specs.strategy.resolve_layout`, so the planner never proposes what `train`
(or the cost model) would reject for divisibility.

Dimensions, outermost first:
- node count (only the given one, unless the user lets the planner use fewer: `Constraints.node_counts`);
- tp x pp x dp factorisations of the device count: tp divides the devices per node (tensor parallelism stays inside
  a node, on the fast link), the attention heads (and grouped-query K/V heads) divide by tp; pp needs no more
  stages than layers (an uneven split spreads the remainder, `Strategy.stage_split`);
- pipeline schedule (pp > 1): 1F1B, and the interleaved schedule with each of `Constraints.virtual_stages` model
  chunks per device where the layers allow it (GPipe has 1F1B's bubble with more activation memory: searched
  only when asked for);
- engine x ZeRO stage x offload: DeepSpeed ZeRO 0-3 with optimizer offload (stage >= 1) and parameter offload
  (stage 3), DDP (plain, or + ZeroRedundancyOptimizer), FSDP2 (reshard = ZeRO-3-like, no reshard = ZeRO-2-like;
  CPU offload of parameters and optimizer together); the cost-model-only engines megatron (zero 0, 1) and internlm
  only when `Constraints.engines` names them (plan then predicts a published run's software; `train` runs none);
- activation recompute none / selective / full;
- micro-batch: every divisor of the per-replica batch, and the gradient accumulation that keeps the global batch.

Pipeline split of encoder-decoder models (T5/mT5): the encoder and decoder stacks are concatenated into one stack
of `num_layers + num_decoder_layers` blocks and cut into `pp` stages (a stage may hold the last encoder and the first
decoder blocks; the encoder output then travels with the decoder activations).

Clusters mixing device types (`ClusterSpec.groups`, or measured `--stage-speeds`): pipeline stage i runs on ranks
[i W/pp, (i+1) W/pp) of the cluster's rank order (costmodel/stages.py); unless `stage_layers` is fixed, the
planner gives every pipeline strategy it estimates the resource-aware split of plan/partition.py (`resource_split`:
the slowest stage as fast as it can be, every stage within its device's memory; chosen when the point is estimated,
so points the memory bound prunes cost nothing). The interleaved schedule is not searched there.

Execution options the user fixes rather than searches (`Constraints.attention`, `sequence_parallel`,
`overlap_grad_comm`, `stage_layers`, and the cost-model-only `overlap_param_gather`, `tp_comm_overlap`,
`zero1_all_reduce`, `kernels`, `grad_reduce`, `recompute_early_stop`, `cross_entropy`, `attention_kernel`,
`optimizer_dtype`, `optimizer_loop`, `lm_head`, `grad_accum_dtype`, `grad_buckets`) are carried into every Strategy --
`recompute_early_stop`, `kernels`, `cross_entropy`, `optimizer_loop`, `lm_head`, `grad_accum_dtype` and `grad_buckets`
left at "train" as the value `train` runs on train's engines (early stop on, eager kernels, the model's own loss, torch
AdamW's foreach step, the vocabulary whole on every tp rank, DeepSpeed's gradients accumulated in the compute dtype,
DDP's gradients as views into its buckets:
specs/run.as_trained), so a candidate is priced as
the run its emitted config makes, and a value the user names (a published run's software, "engine" included) as
given; sequence parallelism only
where the sequences split evenly over tp (Megatron-LM and `train` refuse it otherwise: those points are planned
without it).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import MISSING, dataclass, field
from dataclasses import fields as dataclass_fields

from scalestudy.errors import OptionError, ScalestudyError
from scalestudy.specs.hardware import ClusterSpec
from scalestudy.specs.model import ModelSpec
from scalestudy.specs.run import trained_fill
from scalestudy.specs.strategy import (ATTENTION_KERNELS, ATTENTIONS, CONTEXT_PARALLEL_ENGINES, COST_MODEL_ENGINES,
                                      CROSS_ENTROPIES, FP8_ENGINES,
                                      CUBLAS_VERSIONS, EARLY_STOPS, GRAD_ACCUM_DTYPES, GRAD_BUCKETS, GRAD_REDUCES,
                                      GRADIENT_SYNCS,
                                      KERNELS, LM_HEADS, NORM_DTYPES, OFFLOADS, OPTIMIZER_DTYPES, OPTIMIZER_LOOPS,
                                      ADAMW_ONLY_LOOPS, OPTIMIZER_KINDS,
                                      PP_SCHEDULES,
                                      RECOMPUTES, SCATTER_GATHERS,
                                      ZERO3_FETCHES, ZERO_STAGES, Strategy, Workload, check_choice, hf_decoder,
                                      resolve_layout, software_fill)

TRAINED = "train"  # the default of Constraints' TRAIN_KNOBS: price each candidate with the value train runs
# Software options whose plan default is TRAINED (specs/run.train_software fills them per candidate); a value the user
# names -- "engine" too: a published run typed into plan -- is priced as given
TRAIN_KNOBS = ("recompute_early_stop", "kernels", "cross_entropy", "optimizer_loop", "lm_head", "grad_accum_dtype",
               "grad_buckets")


@dataclass(frozen=True)
class Constraints:
    """User constraints that narrow the space; None / empty means "search this dimension"."""

    engines: tuple[str, ...] = ()
    zero: tuple[int, ...] = ()
    tp: tuple[int, ...] = ()
    pp: tuple[int, ...] = ()
    micro_batch: tuple[int, ...] = ()
    recompute: tuple[str, ...] = ()
    offload_optimizer: tuple[str, ...] = ("none", "cpu")  # nvme only when asked for: it needs a local SSD path
    offload_params: tuple[str, ...] = ("none", "cpu")
    precision: str = "bf16"
    max_nodes: int | None = None
    vary_nodes: bool = False  # search node counts 1..max_nodes (or 1..cluster.nodes) instead of exactly cluster.nodes
    max_micro_batch: int = 0  # 0 = no cap
    pp_schedules: tuple[str, ...] = ("1f1b", "interleaved")  # searched when pp > 1
    virtual_stages: tuple[int, ...] = (2, 4)  # model chunks per device tried by the interleaved schedule
    attention: str = "flash"
    sequence_parallel: bool = True
    overlap_grad_comm: bool = True
    stage_layers: tuple[int, ...] = ()  # explicit split; only pipelines with len(stage_layers) stages are searched
    overlap_param_gather: bool | None = None  # None: the engine's default (strategy.param_gather_default)
    tp_comm_overlap: bool | None = None  # None: the engine's default (strategy.tp_comm_overlap_default)
    zero1_all_reduce: bool | None = None  # None: the engine's default (strategy.zero1_all_reduce_default)
    kernels: str = TRAINED  # Strategy.kernels, kept fixed (not searched); "train": what train runs (eager)
    # the other cost-model-only software options (specs/strategy.py), kept fixed; optimizer_dtype describes engine
    # megatron / fsdp, searched only when --engine names them
    grad_reduce: str = "engine"
    recompute_early_stop: str = TRAINED  # "train": the value train runs (specs/run.as_trained); else as given
    cross_entropy: str = TRAINED
    attention_kernel: str = "engine"
    optimizer_dtype: str = "engine"
    optimizer_loop: str = TRAINED
    optimizer_kind: str = "adamw"  # the optimizer the user's run steps: a statement, not searched
    lm_head: str = TRAINED  # "train": replicated (train's tp leaves the vocabulary whole on every rank)
    grad_accum_dtype: str = TRAINED  # "train": compute on deepspeed (train's data_types.grad_accum_dtype)
    grad_buckets: str = TRAINED  # "train": view on ddp without tp / pp (train's gradient_as_bucket_view)
    zero3_fetch: str = "engine"  # DeepSpeed's ZeRO-3 gather path: a statement about the user's DeepSpeed, not searched
    cp: int = 1  # context-parallel degree (Strategy.cp): held fixed, not searched (plan --cp)
    cublas: str = "11"  # the cuBLAS major version of the user's torch build: a statement, not searched
    tf32: bool = False  # fp32 matmuls on TF32 Tensor Cores (the user's torch / container): a statement, not searched
    norm_dtype: str = "engine"  # the dtype eager LayerNorms run in (autocast's fp32 or not): a statement, not searched
    pipeline_scatter_gather: str = "engine"  # the pipeline send layout of the user's software: a statement
    gradient_sync: str = "engine"  # FSDP2's reduce-scatter per micro-batch or per step: a statement, not searched
    fp8_params: bool = False  # Transformer Engine FP8 model parameters (fp8 megatron): a statement, not searched
    distribute_saved_activations: bool = False  # checkpointed inputs split over tp: a statement, not searched

    def __post_init__(self) -> None:
        for sched in self.pp_schedules:
            check_choice("pp schedule", sched, PP_SCHEDULES)
        if any(v < 2 for v in self.virtual_stages):
            raise ScalestudyError("virtual stages of the interleaved schedule must be >= 2")
        for name, choices in (("attention", ATTENTIONS), ("kernels", (*KERNELS, TRAINED)),
                              ("grad_reduce", GRAD_REDUCES), ("cross_entropy", (*CROSS_ENTROPIES, TRAINED)),
                              ("recompute_early_stop", (*EARLY_STOPS, TRAINED)),
                              ("attention_kernel", ATTENTION_KERNELS), ("optimizer_loop", (*OPTIMIZER_LOOPS, TRAINED)),
                              ("optimizer_kind", OPTIMIZER_KINDS),
                              ("lm_head", (*LM_HEADS, TRAINED)),
                              ("grad_accum_dtype", (*GRAD_ACCUM_DTYPES, TRAINED)),
                              ("grad_buckets", (*GRAD_BUCKETS, TRAINED)),
                              ("zero3_fetch", ZERO3_FETCHES), ("cublas", CUBLAS_VERSIONS),
                              ("norm_dtype", NORM_DTYPES), ("pipeline_scatter_gather", SCATTER_GATHERS),
                              ("gradient_sync", GRADIENT_SYNCS)):
            check_choice(name, getattr(self, name), choices)
        for off in (*self.offload_optimizer, *self.offload_params):
            check_choice("offload", off, OFFLOADS)
        for rc in self.recompute:
            check_choice("recompute", rc, RECOMPUTES)
        for eng in self.engines:  # the cost-model-only engines only when named: plan proposes what train runs
            if eng not in ZERO_STAGES and eng not in COST_MODEL_ENGINES:
                raise ScalestudyError(f"unknown engine {eng!r} (choose from {', '.join(ZERO_STAGES)}; cost model "
                                      f"only, when named: {', '.join(COST_MODEL_ENGINES)})")
        check_choice("optimizer_dtype", self.optimizer_dtype, OPTIMIZER_DTYPES)
        if self.attention_kernel == "torch-softmax" and (self.attention != "eager" or not self.engines or not set(
                self.engines) <= {"deepspeed", "megatron", "ddp"}):  # Strategy's own refusal, once, before the search
            raise ScalestudyError("--attention-kernel torch-softmax describes Megatron's eager attention: give "
                                  "--attention eager and --engine deepspeed, megatron and/or ddp")
        if self.attention_kernel == "hf-fp32-softmax" and (self.attention != "eager" or self.precision != "fp16"):
            raise ScalestudyError("--attention-kernel hf-fp32-softmax describes Hugging Face OPT's eager attention "
                                  "in fp16: give --attention eager and --precision fp16")
        if self.tp_comm_overlap and not self.sequence_parallel and (not self.tp or max(self.tp) > 1):
            Strategy(engine="ddp", tp=2, tp_comm_overlap=True, sequence_parallel=False)  # its one-line refusal
        if self.cp != 1:  # a whole degree >= 1 (every candidate's world splits by it): Strategy's one-line refusal
            Strategy(engine="megatron", cp=self.cp)
        if self.precision == "fp8" and not (self.engines and set(self.engines) <= set(FP8_ENGINES)):
            # said here: plan's first candidate engine (deepspeed) would be named as if the user had chosen it
            raise ScalestudyError("--precision fp8 is modelled as Transformer Engine (engine megatron) or torchao "
                                  "float8 (engine fsdp): it needs --engine fsdp and/or megatron")
        if self.fp8_params and (self.precision != "fp8" or set(self.engines) != {"megatron"}):
            raise ScalestudyError("--fp8-params describes Transformer Engine's FP8 model parameters (NeMo / "
                                  "Megatron-Core fp8_params): it needs --precision fp8 --engine megatron")
        dtype_engines = {"megatron", "fsdp"}  # Strategy's rule: megatron's optimizer, or a bf16 model under fsdp
        if self.optimizer_dtype != "engine" and not (self.engines and set(self.engines) <= dtype_engines):
            raise ScalestudyError(f"--optimizer-dtype {self.optimizer_dtype} describes engine megatron's optimizer "
                                  "or a bf16 model under fsdp: it needs --engine megatron and/or fsdp")
        if self.grad_accum_dtype not in ("engine", TRAINED) and set(self.engines) != {"deepspeed"}:
            raise ScalestudyError(f"--grad-accum-dtype {self.grad_accum_dtype} describes DeepSpeed's "
                                  "data_types.grad_accum_dtype: it needs --engine deepspeed")
        if self.grad_buckets not in ("engine", TRAINED) and set(self.engines) != {"ddp"}:
            raise ScalestudyError(f"--grad-buckets {self.grad_buckets} describes PyTorch DDP's "
                                  "gradient_as_bucket_view: it needs --engine ddp")
        if self.cross_entropy == "torch-16bit" and (not self.engines or "ddp" in self.engines
                                                    or self.precision == "fp32"):
            raise ScalestudyError("--cross-entropy torch-16bit describes torch's loss on the 16-bit logits of a model "
                                  "without autocast: it needs --engine fsdp, deepspeed and/or megatron (ddp's "
                                  "autocast runs the loss in fp32) and a 16-bit precision")
        if self.gradient_sync != "engine" and set(self.engines) != {"fsdp"}:
            raise ScalestudyError(f"--gradient-sync {self.gradient_sync} describes FSDP2's "
                                  "set_requires_gradient_sync: it needs --engine fsdp")
        if self.zero3_fetch != "engine" and set(self.engines) != {"deepspeed"}:
            raise ScalestudyError(f"--zero3-fetch {self.zero3_fetch} describes DeepSpeed ZeRO-3's parameter gathers: "
                                  "it needs --engine deepspeed")
        if self.optimizer_loop == "deepspeed-stage1-whole" and (set(self.engines) != {"deepspeed"} or
                                                               set(self.zero) != {1}):
            raise ScalestudyError("--optimizer-loop deepspeed-stage1-whole describes DeepSpeed's ZeRO stage 1 "
                                  "optimizer: it needs --engine deepspeed --zero 1")
        if self.optimizer_kind != "adamw" and self.optimizer_loop in ADAMW_ONLY_LOOPS:
            raise ScalestudyError(f"--optimizer-loop {self.optimizer_loop} is an AdamW implementation, not "
                                  f"--optimizer-kind {self.optimizer_kind}")
        if self.optimizer_loop == "deepspeed-serial" and set(self.engines) != {"deepspeed"}:
            raise ScalestudyError("--optimizer-loop deepspeed-serial describes DeepSpeed's ZeRO optimizer: it needs "
                                  "--engine deepspeed")
        if self.optimizer_loop == "deepspeed-unfused" and (set(self.engines) != {"deepspeed"} or set(self.zero) != {0}):
            raise ScalestudyError("--optimizer-loop deepspeed-unfused describes DeepSpeed ZeRO-0's "
                                  "FP16_UnfusedOptimizer: it needs --engine deepspeed --zero 0")
        # checked on the flags, not left to the first candidate's Strategy: that names an engine the user never typed
        if self.optimizer_loop == "cpu-adam" and (set(self.engines) != {"fsdp"} or
                                                  set(self.offload_optimizer) != {"cpu"}):
            raise ScalestudyError("--optimizer-loop cpu-adam describes DeepSpeed's CPU-Adam stepping FSDP's "
                                  "CPU-offloaded shards: it needs --engine fsdp --offload-optimizer cpu")
        if self.optimizer_loop == "fused" and not (self.engines and set(self.engines) <= {"fsdp", "ddp"}):
            raise ScalestudyError("--optimizer-loop fused describes torch AdamW(fused=True) on the torch-native "
                                  "engines: it needs --engine fsdp and/or ddp")
        if self.optimizer_loop == "deepspeed-bf16" and (set(self.engines) != {"deepspeed"} or set(self.zero) != {0}
                                                        or self.precision != "bf16" or not self.pp or min(self.pp) < 2):
            raise ScalestudyError("--optimizer-loop deepspeed-bf16 describes the BF16_Optimizer of a DeepSpeed bf16 "
                                  "pipeline at ZeRO-0: it needs --engine deepspeed --zero 0 --precision bf16 and "
                                  "--pp 2 or more")
        for z in self.zero:
            if z not in (0, 1, 2, 3):
                raise ScalestudyError(f"zero stage must be 0-3, got {z}")
        if self.max_nodes is not None and self.max_nodes < 1:
            raise OptionError(f"max_nodes must be >= 1, got {self.max_nodes}", "max_nodes")

    def node_counts(self, cluster: ClusterSpec) -> list[int]:
        """Exactly the cluster's nodes (capped by max_nodes), or, when vary_nodes, every count up to 16 and then
        powers of two and the cap itself (a 128-node search stays a few thousand strategies per count)."""
        top = cluster.nodes if self.max_nodes is None else min(cluster.nodes, self.max_nodes)
        if not self.vary_nodes:
            return [top]
        counts = set(range(1, min(top, 16) + 1)) | {2**k for k in range(5, 30) if 2**k <= top} | {top}
        return sorted(counts)


# slots: one per strategy, kept while the plan runs (no per-instance __dict__: fewer bytes and page faults)
@dataclass(frozen=True, slots=True)
class Point:
    """One point of the space: a strategy on a number of nodes (the cluster is the planner's, cut to `nodes`)."""

    strategy: Strategy
    nodes: int
    dp: int
    grad_accum: int


_set_point_strategy, _set_point_nodes, _set_point_dp, _set_point_grad_accum = (
    Point.__dict__[name].__set__ for name in ("strategy", "nodes", "dp", "grad_accum"))


def _point(strategy: Strategy, nodes: int, dp: int, grad_accum: int) -> Point:
    """Point(strategy, nodes, dp, grad_accum), built as its __init__ builds it, each slot written by its descriptor
    (the frozen dataclass's __init__ goes through object.__setattr__; the planner builds one per strategy)."""
    point = object.__new__(Point)
    _set_point_strategy(point, strategy)
    _set_point_nodes(point, nodes)
    _set_point_dp(point, dp)
    _set_point_grad_accum(point, grad_accum)
    return point


# Strategy's fields and defaults, where every field is a plain init field with a default (else None: its __init__)
_STRATEGY_DEFAULTS = {f.name: f.default for f in dataclass_fields(Strategy)} if all(
    f.init and f.default is not MISSING and f.default_factory is MISSING for f in dataclass_fields(Strategy)) and \
    len(dataclass_fields(Strategy)) == len(Strategy.__dataclass_fields__) else None


def _at_micro_batch(strategy: Strategy, micro_batch: int) -> Strategy:
    """strategy.with_micro_batch(micro_batch) for a divisor of the per-replica batch (an int >= 1: its type checks
    hold) below 2**63 (else its one-line refusal), built as it builds it."""
    if micro_batch >= 2**63:
        return strategy.with_micro_batch(micro_batch)
    new = object.__new__(Strategy)
    state = strategy.__dict__.copy()
    state["micro_batch"] = micro_batch
    object.__setattr__(new, "__dict__", state)  # half the time of updating the new instance's empty __dict__
    return new


def _strategy(values: dict) -> Strategy:
    """Strategy(**values), checked by its __post_init__ as there: the defaults, then `values`, written into the new
    instance's __dict__ in field order as the frozen dataclass's __init__ writes them (one object.__setattr__ per
    field: two thirds of its time)."""
    if _STRATEGY_DEFAULTS is None or not values.keys() <= _STRATEGY_DEFAULTS.keys():
        return Strategy(**values)
    strategy = object.__new__(Strategy)
    state = strategy.__dict__
    state.update(_STRATEGY_DEFAULTS)
    state.update(values)
    strategy.__post_init__()
    return strategy


@dataclass
class SpaceStats:
    points: int = 0
    layouts: int = 0
    skipped: dict[str, int] = field(default_factory=dict)


def divisors(n: int) -> list[int]:
    """Every divisor of n >= 1, ascending: from its prime factors, so a global batch of 2^63 costs microseconds
    (trial division up to sqrt(n) took minutes)."""
    out = [1]
    for prime, power in _prime_powers(n).items():
        out = [d * prime**k for d in out for k in range(power + 1)]
    return sorted(out)


def _prime_powers(n: int) -> dict[int, int]:
    """{prime: exponent} of n >= 1: small primes by trial division, the rest by Pollard's rho."""
    powers: dict[int, int] = {}
    for p in (2, 3, 5, 7, 11, 13):
        while n % p == 0:
            powers[p], n = powers.get(p, 0) + 1, n // p
    stack = [n] if n > 1 else []
    while stack:
        m = stack.pop()
        if _is_prime(m):
            powers[m] = powers.get(m, 0) + 1
        else:
            f = _rho(m)
            stack += [f, m // f]
    return powers


def _is_prime(n: int) -> bool:
    """Miller-Rabin with the first 13 primes as bases: exact below 3.3e24, and a composite beyond passes with
    probability < 4^-13."""
    bases = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41)
    if n < 2 or any(n % p == 0 for p in bases):
        return n in bases
    d, r = n - 1, 0
    while d % 2 == 0:
        d, r = d // 2, r + 1
    for a in bases:
        x = pow(a, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(r - 1):
            x = x * x % n
            if x == n - 1:
                break
        else:
            return False
    return True


def _rho(n: int) -> int:
    """A non-trivial factor of the composite, odd n (no factor below 17): Pollard's rho with Floyd cycles."""
    from math import gcd

    c = 1
    while True:
        x = y = 2
        d = 1
        while d == 1:
            x = (x * x + c) % n
            y = (y * y + c) % n
            y = (y * y + c) % n
            d = gcd(abs(x - y), n)
        if d != n:
            return d
        c += 1


def pipeline_layers(model: ModelSpec) -> int:
    """Blocks the pipeline cuts into stages (encoder + decoder concatenated for T5/mT5; see module docstring)."""
    return model.total_layers


def engine_variants(constraints: Constraints) -> list[tuple[str, int, str, str]]:
    """(engine, zero, offload_optimizer, offload_params) combinations the Strategy accepts, narrowed by constraints."""
    out = []
    named = {e: COST_MODEL_ENGINES[e] for e in constraints.engines if e in COST_MODEL_ENGINES}
    for engine, stages in {**ZERO_STAGES, **named}.items():
        if constraints.engines and engine not in constraints.engines:
            continue
        for zero in stages:
            if constraints.zero and zero not in constraints.zero:
                continue
            for off_opt in constraints.offload_optimizer:
                if off_opt != "none" and not (engine == "deepspeed" and zero >= 1 or engine == "fsdp" and off_opt == "cpu"):
                    continue
                for off_par in constraints.offload_params:
                    if engine == "fsdp":
                        if off_par != off_opt:
                            continue  # FSDP offloads parameters and optimizer together
                    elif off_par != "none" and not (engine == "deepspeed" and zero == 3):
                        continue
                    # Parameter offload without optimizer offload is a legal but strictly worse DeepSpeed setting:
                    # left out of a search, kept when --offload-params asks for offload only (plan = estimate)
                    if off_par != "none" and off_opt == "none" and "none" in constraints.offload_params:
                        continue
                    out.append((engine, zero, off_opt, off_par))
    return out


def model_parallel_degrees(model: ModelSpec, cluster: ClusterSpec, world: int, constraints: Constraints
                           ) -> Iterator[tuple[int, int]]:
    """(tp, pp) pairs valid for the model on `world` devices: tp inside a node, heads % tp, pp <= layers. A tp the
    user fixes that fills whole nodes (a multiple of the devices per node) is taken as estimate prices it."""
    layers = pipeline_layers(model)
    node = cluster.gpus_per_node
    for tp in (*divisors(node), *sorted(t for t in constraints.tp if t > node and t % node == 0)):
        if constraints.tp and tp not in constraints.tp:
            continue
        if model.num_heads % tp or model.kv_heads % tp or world % tp:  # grouped-query K/V heads split too
            continue
        for pp in divisors(world // tp):
            if constraints.pp and pp not in constraints.pp:
                continue
            if pp > layers or (constraints.stage_layers and pp > 1 and pp != len(constraints.stage_layers)):
                continue
            yield tp, pp


def schedules(pp: int, layers: int, constraints: Constraints) -> list[tuple[str, int]]:
    """(pp_schedule, virtual_stages) pairs for a pipeline of pp stages (one entry when pp == 1)."""
    if pp == 1:
        return [("1f1b", 1)]
    out = [(s, 1) for s in ("1f1b", "gpipe") if s in constraints.pp_schedules]
    if "interleaved" in constraints.pp_schedules:
        out += [("interleaved", v) for v in constraints.virtual_stages if layers >= pp * v]
    return out


def micro_batches(per_replica: int, constraints: Constraints) -> list[int]:
    out = divisors(per_replica)
    if constraints.micro_batch:
        out = [m for m in out if m in constraints.micro_batch]
    if constraints.max_micro_batch:
        out = [m for m in out if m <= constraints.max_micro_batch]
    return out


def _decoder_len(model: ModelSpec, workload: Workload) -> int:
    """The decoder length the cost model uses (costmodel.flops.target_length): enc-dec only, 0 resolved."""
    from scalestudy.specs.run import resolve_target_len

    return resolve_target_len("span", workload.seq_len, workload.target_len) if model.is_encoder_decoder else 0


def _filled_fields(fields: dict, model: ModelSpec, named: set, hf_kind: str) -> dict:
    """`fields` with the software train's engines run written in (as_trained: early stop, kernels, loss, optimizer
    loop -- not a published run's -- where the user named none; a named value, e.g. a published run's, is kept: a
    what-if) and the "engine" kernels resolved (software_fill), so each Strategy is built and checked once. Neither
    fill reads the micro-batch, recompute or pipeline schedule (train_software: engine, zero, tp, pp, precision,
    offloads, attention and the filled fields; software_fill: engine, tp, pp, attention and the software fields),
    so the planner fills a layout's engine variant once for all its groups."""
    fields.update({k: v for k, v in trained_fill(fields["engine"], fields, model).items() if k not in named})
    fields.update(software_fill(fields, model.is_encoder_decoder, hf_kind))  # "engine" kernels
    return fields


def enumerate_groups(model: ModelSpec, cluster: ClusterSpec, workload: Workload, constraints: Constraints,
                     stats: SpaceStats | None = None) -> Iterator[list[Point]]:
    """Yield groups of points that differ only in micro-batch (ascending): memory grows with micro-batch, so the
    planner can stop a group at its first micro-batch that does not fit."""
    stats = stats if stats is not None else SpaceStats()
    variants = engine_variants(constraints)
    if not variants:  # plan's 'no strategy fits' then says why, as estimate would
        stages = ", ".join(f"{e} {'/'.join(map(str, z))}" for e, z in {**ZERO_STAGES, **COST_MODEL_ENGINES}.items())
        stats.skipped[f"no engine / ZeRO stage / offload of the constraints go together (ZeRO stages: {stages}; "
                      "DeepSpeed offloads the optimizer from ZeRO 1 and the parameters at ZeRO 3; FSDP offloads "
                      "both together, to cpu only)"] = 1
    # Cheapest memory first (full recompute): when that does not fit at micro-batch 1, nothing lighter will.
    # op (torchtitan's operator-level checkpointing, cost model only) only when asked for
    recomputes = [rc for rc in ("full", "op", "selective", "none")
                  if rc in (constraints.recompute or ("full", "selective", "none"))]
    layers = pipeline_layers(model)
    mixed = cluster.heterogeneous
    lengths = (workload.seq_len, _decoder_len(model, workload))
    hf_kind = hf_decoder(model)  # the Hugging Face decoder the model is taken for: its "engine" kernels / loss
    # the TRAIN_KNOBS the user named (priced as given); the others start at the Strategy default and get train's value
    named = {k for k in TRAIN_KNOBS if getattr(constraints, k) != TRAINED}
    software = {k: getattr(constraints, k) if k in named else Strategy.__dataclass_fields__[k].default
                for k in TRAIN_KNOBS}
    # the Strategy fields the constraints fix for every candidate, built once
    fixed = dict(precision=constraints.precision, attention=constraints.attention,
                 overlap_grad_comm=constraints.overlap_grad_comm,
                 overlap_param_gather=constraints.overlap_param_gather,
                 tp_comm_overlap=constraints.tp_comm_overlap, zero1_all_reduce=constraints.zero1_all_reduce,
                 grad_reduce=constraints.grad_reduce, attention_kernel=constraints.attention_kernel,
                 optimizer_dtype=constraints.optimizer_dtype, zero3_fetch=constraints.zero3_fetch,
                 cublas=constraints.cublas, tf32=constraints.tf32, norm_dtype=constraints.norm_dtype,
                 optimizer_kind=constraints.optimizer_kind,
                 pipeline_scatter_gather=constraints.pipeline_scatter_gather,
                 gradient_sync=constraints.gradient_sync, fp8_params=constraints.fp8_params,
                 distribute_saved_activations=constraints.distribute_saved_activations, **software)
    for nodes in constraints.node_counts(cluster):
        world = nodes * cluster.gpus_per_node
        degrees = list(model_parallel_degrees(model, cluster, world, constraints))
        if not degrees:  # said in plan's 'no strategy fits' line (as estimate names the rule)
            key = (f"no tp/pp of the constraints fits {model.name} on {world} devices (tp divides the "
                   f"{model.num_heads} heads, the {model.kv_heads} key/value heads and the {cluster.gpus_per_node} "
                   f"devices per node, or a --tp you fix fills whole nodes; pp at most the {layers} layers)")
            stats.skipped[key] = stats.skipped.get(key, 0) + 1
        cp = constraints.cp
        for tp, pp in degrees:
            if world % (tp * pp * cp):
                key = f"world size not divisible by tp x pp x cp {cp}"
                stats.skipped[key] = stats.skipped.get(key, 0) + 1
                continue
            dp = world // (tp * pp * cp)
            if workload.global_batch % dp:
                stats.skipped["global batch not divisible by dp"] = stats.skipped.get(
                    "global batch not divisible by dp", 0) + 1
                continue
            stats.layouts += 1
            mbs = micro_batches(workload.global_batch // dp, constraints)
            if not mbs:  # said in the planner's 'nothing evaluated' line instead of a bare count
                key = "no allowed micro-batch divides the global batch / data-parallel degree"
                stats.skipped[key] = stats.skipped.get(key, 0) + 1
                continue
            # SP where tp splits the lengths (a rank's share of each sequence under context parallelism)
            sp = constraints.sequence_parallel and not any((n // cp) % tp for n in lengths)
            if constraints.tp_comm_overlap and tp > 1 and not sp:  # the overlap needs SP (Strategy refuses it)
                key = "tp_comm_overlap needs sequence parallelism: the sequence lengths do not divide by tp"
                stats.skipped[key] = stats.skipped.get(key, 0) + 1
                continue
            scheds = schedules(pp, layers, constraints)
            if not scheds:
                key = f"no pipeline schedule of the constraints fits {layers} layers in pp {pp} stages"
                stats.skipped[key] = stats.skipped.get(key, 0) + 1
                continue
            for engine, zero, off_opt, off_par in variants:
                if cp > 1 and engine not in CONTEXT_PARALLEL_ENGINES:
                    key = f"context parallelism (cp {cp}) runs on engines {', '.join(CONTEXT_PARALLEL_ENGINES)} only"
                    stats.skipped[key] = stats.skipped.get(key, 0) + 1
                    continue
                if pp > 1 and engine == "deepspeed" and zero >= 2:
                    # DeepSpeed pipeline engine supports ZeRO 0-1 only (Strategy enforces this too)
                    key = "pipeline parallelism is incompatible with DeepSpeed ZeRO stage 2/3"
                    stats.skipped[key] = stats.skipped.get(key, 0) + 1
                    continue
                common = _filled_fields(dict(engine=engine, zero=zero, offload_optimizer=off_opt,
                                             offload_params=off_par, tp=tp, pp=pp, cp=cp, sequence_parallel=sp,
                                             stage_layers=constraints.stage_layers if pp > 1 else (), **fixed),
                                        model, named, hf_kind)
                # (schedule, virtual stages) -> the first point of its group at the first recompute: a later
                # recompute's group starts at the same micro-batch and layout (Strategy.with_recompute)
                checked: dict[tuple[str, int], Point] = {}
                for rc in recomputes:
                    for sched, v in scheds:
                        if mixed and sched == "interleaved":
                            continue  # contiguous stages only on mixed clusters (costmodel/stages.py)
                        group = []
                        for mb in mbs:
                            accum = workload.global_batch // (dp * mb)
                            if sched == "interleaved" and accum % pp:
                                continue  # Megatron-LM: micro-batches per step a multiple of pp
                            if group:  # the group's strategy, checked once, at this micro-batch (mb divides)
                                group.append(_point(_at_micro_batch(group[0].strategy, mb), nodes, dp, accum))
                                continue
                            first = checked.get((sched, v))
                            if first is not None:  # checked at the first recompute, same micro-batch and layout
                                group.append(_point(first.strategy.with_recompute(rc), nodes, first.dp,
                                                    first.grad_accum))
                                continue
                            strategy = _strategy({**common, "micro_batch": mb, "recompute": rc, "pp_schedule": sched,
                                                  "virtual_stages": v})
                            layout = resolve_layout(strategy, world, workload.global_batch,
                                                    gpus_per_node=cluster.gpus_per_node, num_heads=model.num_heads,
                                                    num_layers=layers, tp_across_nodes=True)  # a user-fixed tp only
                            point = _point(strategy, nodes, layout.dp, layout.grad_accum)
                            checked[(sched, v)] = point
                            group.append(point)
                        stats.points += len(group)
                        if group:
                            yield group


def enumerate_space(model: ModelSpec, cluster: ClusterSpec, workload: Workload,
                    constraints: Constraints | None = None) -> list[Point]:
    """Every point of the space (flattened), for inspection and tests."""
    constraints = constraints or Constraints()
    return [p for group in enumerate_groups(model, cluster, workload, constraints) for p in group]
