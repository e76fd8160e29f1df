"""Every memo of the cost model is keyed by everything its function reads: in ONE process, a varied sample of
strategies priced in a shuffled order (each memo filled by whichever neighbour came first) gives, field for field,
what the same strategy gives priced alone after every memo is cleared (costmodel.clear_memos).

A memo whose hand-listed key leaves out a field its function reads lends one strategy's tables to another that
differs only in that field (4567660: terms._derived_shape without virtual_stages / the engine's tied copies let plan
propose a strategy that estimate, in the same process, priced as not fitting). A random sample alone seldom holds
two strategies equal in every key field but the missing one, so the sample is built of neighbours: base strategies
(every engine and ZeRO stage in turn, pipeline schedules, tp, cp, offloads, precisions, models of each kind,
clusters of several devices) and every strategy one field away from each (every other value of every Strategy
field, read from the dataclass: a new field is varied without editing this file), plus a few two or three fields
away -- ~3,600 strategies; each field differs from the default in at least two of them. Deleting one field from a
hand-listed key fails it (tried: memory._stored_working_logits without cross_entropy, 406 wrong; rank_states
without optimizer_kind, 115; _stage_comm's fields without overlap_grad_comm, 45; estimate._stage_params without
embed_tp, 1); HEAD 2dee03d failed it with 3 (terms._derived_shape without autocast's engine, ab1e23b).

Beside it, a deterministic check of the memos whose key is listed by hand from a Strategy's fields: a hit reads
the key alone, a miss the key and what the function reads, so a field read on a miss and not on a hit is one the
key leaves out (the field 4567660 added, virtual_stages, would have failed it)."""

import ast
import dataclasses
import pathlib
import random
import sys

import pytest

from scalestudy.costmodel import clear_memos
from scalestudy.costmodel.estimate import MicroBatchGroup, estimate, estimate_if_fits
from scalestudy.costmodel.input_numbers import InputNumbers
from scalestudy.errors import ScalestudyError
from scalestudy.specs.hardware import make_cluster, with_stage_speeds
from scalestudy.specs.presets import get_model
from scalestudy.specs.strategy import CHOICES, COST_MODEL_ENGINES, ZERO_STAGES, Strategy, Workload

SEED = 11
BASES = 56  # base strategies
MIXED = 80  # strategies two or three fields away from a base (memos whose key misses a pair)

# the values tried per field that is not a choice list (CHOICES) or a bool; stage_layers: _uneven_split
INTS = {"zero": (0, 1, 2, 3), "tp": (1, 2, 4, 8), "pp": (1, 2, 4), "cp": (1, 2), "micro_batch": (1, 2, 4),
        "virtual_stages": (1, 2, 3, 4)}
DEFAULT = Strategy()
FIELDS = tuple(f.name for f in dataclasses.fields(Strategy))


def _settings():
    """(model, cluster, workload) triples: an encoder-decoder with position-bias masks (mt5-small, 8 + 8 layers) and
    two decoders (GPT-2: learned positions, tied head, Hugging Face eager defaults; Llama 3: grouped KV, untied head)
    on A100 / H100 (fp8, tf32) / V100 (fp16 only, no FlashAttention-2), a cluster of two stage speeds (the per-stage
    path, stages.estimate_stages) and CPU ranks (measured framework terms, train's hybrid backend)."""
    t5, gpt, llama = get_model("mt5-small"), get_model("gpt2"), get_model("llama3-8b")
    a100, h100 = make_cluster("a100-40gb", 2, 8), make_cluster("h100-80gb", 2, 8)
    v100, mixed = make_cluster("v100-32gb", 1, 8), with_stage_speeds(make_cluster("a100-80gb", 2, 8), (1.0, 0.8))
    cpu = make_cluster("local-cpu", 1, 4)
    t5w, gptw, llw = (Workload(global_batch=64, seq_len=512, target_len=114), Workload(global_batch=64, seq_len=1024),
                      Workload(global_batch=64, seq_len=2048))
    return [(t5, a100, t5w), (t5, h100, t5w), (t5, mixed, t5w), (gpt, a100, gptw), (gpt, v100, gptw),
            (gpt, h100, gptw), (gpt, cpu, Workload(global_batch=8, seq_len=256)), (llama, h100, llw),
            (llama, mixed, llw), (llama, a100, llw)]


def _values(field: str, model) -> tuple:
    if field in CHOICES:
        return CHOICES[field]
    if field in INTS:
        return INTS[field]
    if field == "engine":
        return (*ZERO_STAGES, *COST_MODEL_ENGINES)
    if field == "stage_layers":
        return ((), "uneven")
    if isinstance(getattr(DEFAULT, field), bool):  # overlap_param_gather & co. resolve None to a bool
        return (False, True)
    return (getattr(DEFAULT, field),)  # a new kind of field: the coverage test asks for its values


def _uneven_split(st: Strategy, model) -> tuple[int, ...]:
    """stage_layers one layer away from the even split (the first stage one more, the last one fewer)."""
    even = list(st.stage_split(model.total_layers))
    even[0] += 1
    even[-1] -= 1
    return tuple(even)


def _make(base: Strategy, model, **changes) -> Strategy | None:
    if changes.get("stage_layers") == "uneven":
        if base.pp < 2:
            return None
        changes["stage_layers"] = _uneven_split(base, model)
    try:
        return dataclasses.replace(base, **changes)
    except (ScalestudyError, ValueError, TypeError):
        return None


def _priced(setting, st: Strategy):
    """estimate's result as one dict (None where the cost model refuses the strategy)."""
    model, cluster, work = setting
    try:
        return estimate(model, cluster, st, work).to_dict()
    except ScalestudyError:
        return None


ENGINE_ZEROS = tuple((engine, zero) for engine, zeros in (ZERO_STAGES | COST_MODEL_ENGINES).items() for zero in zeros)


def _base(rng: random.Random, setting, engine: str, zero: int) -> Strategy | None:
    model, cluster, _ = setting
    pp = rng.choice((1, 2, 2, 4))
    schedule = rng.choice(("1f1b", "gpipe", "interleaved", "interleaved")) if pp > 1 else "1f1b"
    fp8 = "fp8" in cluster.device.peak_flops and engine in ("megatron", "fsdp")
    fields = dict(engine=engine, zero=zero, tp=rng.choice((1, 2, 4)), pp=pp, pp_schedule=schedule,
                  virtual_stages=rng.choice((2, 4)) if schedule == "interleaved" else 1,
                  micro_batch=rng.choice((1, 2, 4)), recompute=rng.choice(CHOICES["recompute"]),
                  precision=rng.choice(("bf16", "fp16", "fp32", *(("fp8",) * 3 * fp8))))
    if cluster.device.kind == "cpu":
        fields["precision"] = "fp32"
    if engine in ("megatron", "fsdp") and rng.random() < 0.3:
        fields["cp"] = 2
    if rng.random() < 0.4:
        fields["offload_optimizer"] = "cpu"
        if engine == "fsdp" or zero == 3:
            fields["offload_params"] = "cpu"
    st = _make(Strategy(), model, **fields)
    return st if st is not None and _priced(setting, st) is not None else None


def _neighbours(base: Strategy, model):
    """The strategies one field away from `base`: every other value of every field (an engine with its own ZeRO
    stage where the base's is not one of its, and its own defaults of the engine-dependent overlaps)."""
    stages = ZERO_STAGES | COST_MODEL_ENGINES
    for field in FIELDS:
        for value in _values(field, model):
            if value == getattr(base, field):
                continue
            changes = {field: value}
            if field == "engine":
                changes.update(zero=base.zero if base.zero in stages[value] else stages[value][0],
                               overlap_param_gather=None, tp_comm_overlap=None, zero1_all_reduce=None)
            yield _make(base, model, **changes)


def _sample() -> list[tuple[int, Strategy, dict]]:
    """(setting index, strategy, its estimate priced where it first came): the bases, every one-field neighbour of
    each and a few strategies two or three fields away, priced in that order, then shuffled."""
    rng = random.Random(SEED)
    settings = _settings()
    bases: list[tuple[int, Strategy]] = []
    for n in range(BASES):  # every engine and ZeRO stage in turn, on a setting that prices it
        engine, zero = ENGINE_ZEROS[n % len(ENGINE_ZEROS)]
        for _ in range(200):
            k = rng.randrange(len(settings))
            st = _base(rng, settings[k], engine, zero)
            if st is not None:
                bases.append((k, st))
                break
    out, seen = [], set()

    def add(k: int, st: Strategy | None) -> None:
        if st is None or (k, st) in seen:
            return
        seen.add((k, st))
        priced = _priced(settings[k], st)
        if priced is not None:
            out.append((k, st, priced))

    for k, st in bases:
        add(k, st)
        for other in _neighbours(st, settings[k][0]):
            add(k, other)
    for _ in range(MIXED):
        k, st = rng.choice(bases)
        model = settings[k][0]
        add(k, _make(st, model, **{f: rng.choice(_values(f, model)) for f in rng.sample(FIELDS, rng.choice((2, 3)))}))
    rng.shuffle(out)
    return out


@pytest.fixture(scope="module")
def sample():
    clear_memos()
    return _settings(), _sample()


def test_the_sample_varies_every_strategy_field(sample):
    settings, points = sample
    assert len(points) >= 1000
    for field in FIELDS:
        differ = sum(getattr(st, field) != getattr(DEFAULT, field) for _, st, _ in points)
        assert differ >= 2, f"{field}: {differ} strategies differ from the default (give its values in _values)"
    kinds = {(settings[k][0].is_encoder_decoder, settings[k][1].device.kind, bool(settings[k][1].groups))
             for k, _, _ in points}
    assert {(True, "gpu", False), (False, "gpu", False), (False, "cpu", False), (True, "gpu", True)} <= kinds


def test_every_memo_is_keyed_by_what_it_reads(sample):
    """Priced in one process after its neighbours (memo hits) == priced alone with every memo cleared."""
    settings, points = sample
    again = [_priced(settings[k], st) for k, st, _ in points]  # the same process, in a shuffled order
    wrong = []
    for (k, st, first), later in zip(points, again):
        clear_memos()
        alone = _priced(settings[k], st)
        for got in (first, later):
            if got != alone:
                diff = _diff(got, alone)
                wrong.append(f"{settings[k][0].name} on {settings[k][1].label}: {st.label}: {diff[:3]}")
                break
    assert not wrong, f"{len(wrong)} of {len(points)} strategies priced differently after their neighbours:\n" \
        + "\n".join(wrong[:20])


def test_calibrations_and_options_are_keyed(sample):
    """The same strategies priced under other constants (a leave-one-source-out fold's refit, another overlap
    interference, GEMM half-dimension or element-wise HBM share) and other DeepSpeed bucket sizes (CostOptions), mixed
    in one process, each == priced alone under its own after clear_memos (memos hold them by identity)."""
    from scalestudy.costmodel.constants import stored
    from scalestudy.costmodel.options import DEFAULT_OPTIONS, CostOptions

    settings, points = sample
    base = stored()
    calibrations = (base, base.replace_values({"gemm.share": 0.7, "kernel_overhead_s": 5e-5}),
                    dataclasses.replace(base, overlap_interference=base.overlap_interference * 1.5),
                    dataclasses.replace(base, half_dim=base.half_dim * 2),
                    dataclasses.replace(base, elementwise_hbm_fraction=0.8))
    options = (DEFAULT_OPTIONS, CostOptions(reduce_bucket_elems=1e8, allgather_bucket_elems=2e8,
                                            stage3_prefetch_elems=1e7))
    rng = random.Random(SEED)
    runs = [(k, st, rng.choice(calibrations), rng.choice(options)) for k, st, _ in points[:800]]

    def priced(k, st, cal, opt):
        model, cluster, work = settings[k]
        return estimate(model, cluster, st, work, opt, cal).to_dict()

    together = [priced(*run) for run in runs]
    wrong = []
    for run, got in zip(runs, together):
        clear_memos()
        if got != priced(*run):
            wrong.append(f"{settings[run[0]][0].name}: {run[1].label}")
    assert not wrong, f"{len(wrong)} of {len(runs)} priced differently under mixed constants: {wrong[:10]}"


GROUPED = 500  # strategies of the sample whose micro-batch variants are also priced as a planner's group


def _fitting(fn, st: Strategy):
    """estimate_if_fits' result as a dict, None where it does not fit, or the refusal's text."""
    try:
        est = fn(st)
    except ScalestudyError as exc:
        return f"refused: {exc}"
    return None if est is None else est.to_dict()


def test_a_planners_groups_price_each_strategy_as_alone(sample):
    """plan's path (estimate.MicroBatchGroup: what no micro-batch enters priced at a group's first strategy, what no
    recompute enters either shared across the groups of a setting), after the sample's neighbours in one process,
    == estimate_if_fits of each strategy priced alone with every memo cleared."""
    settings, points = sample
    shared = {k: {} for k in range(len(settings))}
    runs = []
    for k, st, _ in points[:GROUPED]:
        model, cluster, work = settings[k]
        group = MicroBatchGroup(model, cluster, work, shared=shared[k])
        for mb in INTS["micro_batch"]:
            other = _make(st, model, micro_batch=mb)
            if other is not None:
                runs.append((k, other, _fitting(group, other)))
    wrong = []
    for k, st, got in runs:
        model, cluster, work = settings[k]
        clear_memos()
        alone = _fitting(lambda s: estimate_if_fits(model, cluster, s, work), st)
        if got != alone:
            diff = _diff(got, alone) if isinstance(got, dict) and isinstance(alone, dict) else [f"{got} vs {alone}"]
            wrong.append(f"{model.name} on {cluster.label}: {st.label}: {diff[:3]}")
    assert sum(isinstance(got, dict) for _, _, got in runs) > GROUPED  # most fit: their numbers are compared
    assert not wrong, f"{len(wrong)} of {len(runs)} grouped strategies priced differently:\n" + "\n".join(wrong[:20])


def _diff(a, b, path="") -> list[str]:
    """The paths where two nested dicts differ, with both values."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for key in sorted(set(a) | set(b), key=str) for d in _diff(a.get(key), b.get(key), f"{path}.{key}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in _diff(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {a!r} vs {b!r} alone"]


@pytest.mark.parametrize("field, first, then, pp, tp, mb, precision", [
    ("tf32", True, False, 4, 1, 1, "fp32"), ("cublas", "11", "10", 2, 2, 1, "fp16"),
    ("pipeline_scatter_gather", "off", "on", 4, 4, 2, "fp16")])
def test_a_mixed_clusters_split_is_keyed_by_what_prices_its_stages(field, first, then, pp, tp, mb, precision):
    """plan/partition's split memo (_SPLITS) keys every Strategy field stages.slot_terms reads: its GEMM rates (tf32,
    cublas) and boundary sends (pipeline_scatter_gather) too -- a strategy priced after a neighbour differing only
    there took the neighbour's split (gpt2-medium on examples/cluster-a100-v100.yaml: fp32 pp 4 without tf32 alone
    10,11,2,1, after the same with tf32 7,8,6,3; fp16 tp 2 pp 2 cublas 10 alone 17,7, after cublas 11 15,9)."""
    from scalestudy.plan import partition
    from scalestudy.specs.hardware import load_cluster

    model = get_model("gpt2-medium")
    cluster = load_cluster(pathlib.Path(__file__).parents[2] / "examples" / "cluster-a100-v100.yaml")
    work, dp = Workload(64, 512), cluster.world_size // (tp * pp)
    a, b = (Strategy(engine="deepspeed", zero=1, tp=tp, pp=pp, micro_batch=mb, precision=precision,
                     sequence_parallel=False, **{field: value}) for value in (first, then))
    clear_memos()
    partition._SPLITS.clear()
    alone = partition._memory_split(model, cluster, b, work, dp, 64 // (dp * mb))
    partition._SPLITS.clear()
    assert partition._memory_split(model, cluster, a, work, dp, 64 // (dp * mb)) != alone  # the field matters
    assert partition._memory_split(model, cluster, b, work, dp, 64 // (dp * mb)) == alone


class _Reads:
    """A Strategy that records the fields read from it (its methods run on the recorder too)."""

    def __init__(self, st: Strategy) -> None:
        object.__setattr__(self, "_st", st)
        object.__setattr__(self, "read", set())

    def __getattr__(self, name: str):
        value = getattr(type(self._st), name, None)
        if callable(value):  # Strategy.stage_split & co.: their reads are recorded too
            return value.__get__(self)
        self.read.add(name)
        return getattr(self._st, name)


def _memoised_calls():
    """(name, call(st)) of each memo whose key is listed by hand from a Strategy's fields."""
    from scalestudy.costmodel import estimate as estimate_module, memory, stage_terms, terms
    from scalestudy.costmodel.constants import stored
    from scalestudy.costmodel.engines import engine_comm
    from scalestudy.costmodel.options import DEFAULT_OPTIONS

    model, cluster, work = get_model("mt5-small"), make_cluster("a100-40gb", 2, 8), Workload(64, 512, 114)
    dev, cal, split = cluster.device, stored(), (9, 7)
    ct = terms._shape(model, dev, Strategy(tp=2, pp=2), 2, 2, 512, 114, True, True, (2.0, 1.0), split, cal).compute
    return (("terms.model_layout", lambda st: terms.model_layout(model, cluster, st, work)),
            ("terms._shape", lambda st: terms._shape(model, dev, st, 2, 2, 512, 114, True, True, (2.0, 1.0), split,
                                                     cal)),
            ("terms._derived_shape", lambda st: terms._derived_shape(model, dev, st, 2, 2, 512, 114, True, True,
                                                                     (2.0, 1.0), split, cal)),
            ("memory.rank_states", lambda st: memory.rank_states(model, st, 1e8, 4, 2, dev, DEFAULT_OPTIONS, 4)),
            ("stage_terms._stage_tp_comm", lambda st: stage_terms._stage_tp_comm(
                st, engine_comm(st.engine), ct, 0.5, 2, cluster, cal.overlap_interference)),
            ("estimate._stage_params", lambda st: estimate_module._stage_params(model, st, 2, split)))


@pytest.mark.parametrize("engine, zero", [("ddp", 0), ("deepspeed", 1), ("fsdp", 3), ("megatron", 1)])
def test_a_memo_hit_reads_every_field_its_miss_reads(engine, zero):
    """A hand-listed key is read on a hit; the miss reads the key and the function's own inputs: a field the miss
    reads that a hit does not is one the key leaves out. (A key of derived values -- terms._derived_shape's
    gqa_native(engine) & co. -- reads the field on a hit but may still lose what the function reads of it: the
    neighbours' comparison above sees those.)"""
    st = Strategy(engine=engine, zero=zero, tp=2, pp=2, micro_batch=2, recompute="full", precision="fp16")
    for name, call in _memoised_calls():
        clear_memos()
        miss, hit = _Reads(st), _Reads(st)
        call(miss)
        call(hit)
        # a field the key holds only through an argument (pp, the split) counts as left out too: key it as read
        assert miss.read - hit.read == set(), f"{name}: its key leaves out {sorted(miss.read - hit.read)} " \
            "(key each Strategy field the function reads, as it reads it)"
        assert hit.read, name  # the key reads the strategy


def _memos() -> dict[str, object]:
    """Every memo of the cost model and the specs it reads, by name: each lru_cache defined there, and each
    module-level container that starts empty in its source (`= {}`, `dict()`, `IdMemo()`, `InputNumbers(...)`: what
    is filled as the process prices; a table of constants is written out where it is assigned)."""
    out = {}
    for name, module in list(sys.modules.items()):
        if not name.startswith(("scalestudy.costmodel", "scalestudy.specs")) or not getattr(module, "__file__", None):
            continue
        for attr, value in vars(module).items():
            if hasattr(value, "cache_info") and value.__module__ == name:
                out[f"{name}.{value.__qualname__}"] = value
        for node in ast.parse(pathlib.Path(module.__file__).read_text()).body:
            target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
            value = getattr(node, "value", None)
            empty = isinstance(value, ast.Dict) and not value.keys or isinstance(value, ast.Call) and getattr(
                value.func, "id", "") in ("dict", "IdMemo", "InputNumbers") and not value.keywords and (
                value.func.id == "InputNumbers" or not value.args)
            if isinstance(target, ast.Name) and empty:
                out[f"{name}.{target.id}"] = getattr(module, target.id)
    return out


def _size(memo) -> int:
    if hasattr(memo, "cache_info"):
        return memo.cache_info().currsize
    return len(memo._numbers) if isinstance(memo, InputNumbers) else len(memo)


def test_clear_memos_empties_every_memo(sample):
    """After pricing, clear_memos leaves every memo empty -- else the comparisons above price 'alone' with that memo
    warm and cannot see its key bugs. Loaders of input files are not memos of a computation (their one entry is
    the file: calibration.yaml, engines.yaml, published.yaml, the device YAMLs)."""
    settings, points = sample
    for k, st, _ in points[:200]:
        _priced(settings[k], st)
    memos = _memos()
    assert sum(_size(m) > 0 for m in memos.values()) > 20  # pricing fills them (what is checked is found)
    clear_memos()
    left = [name for name, m in memos.items() if _size(m) and name not in LOADERS]
    assert not left, f"clear_memos leaves {left}"


LOADERS = ("scalestudy.costmodel.constants.stored", "scalestudy.costmodel.engines._engines_yaml",
           "scalestudy.costmodel.engines.engine_table", "scalestudy.costmodel.engines.tp_overlap",
           "scalestudy.costmodel.published.load", "scalestudy.specs.hardware.get_device",
           "scalestudy.specs.hardware.gemm_families")
