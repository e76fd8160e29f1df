"""plan = reality, knob by knob: the engine settings `plan --emit` writes (engine/settings.py, which `train` hands the
engines) set every knob the cost model prices to the value the cost model assumes -- costmodel/engines.yaml's sizes
and prefetch depth, terms.main_grad_bytes's reduction dtype, op_checkpoint's early-stop rule -- explicitly, and the
installed DeepSpeed parses the emitted JSON into exactly those values (a renamed key or a changed default fails
here, not silently in a run)."""

import json

import pytest

from scalestudy.costmodel.engines import engine_comm
from scalestudy.costmodel.memory import ACT_BYTES
from scalestudy.costmodel.op_checkpoint import early_stop
from scalestudy.costmodel.terms import main_grad_bytes
from scalestudy.plan.emit import emit
from scalestudy.specs.run import RunConfig
from scalestudy.specs.strategy import Strategy, Workload

# label: (strategy, GPU run); every case is emitted as `plan --emit` writes it
CASES = {
    "ds-z1-bf16": (Strategy(zero=1, precision="bf16"), True),
    "ds-z2-fp16-no-overlap": (Strategy(zero=2, precision="fp16", overlap_grad_comm=False), True),
    "ds-z2-offload": (Strategy(zero=2, precision="bf16", offload_optimizer="cpu"), True),
    "ds-z3-recompute": (Strategy(zero=3, precision="bf16", recompute="full"), True),
    "ds-z3-offload-all": (Strategy(zero=3, precision="fp16", offload_optimizer="cpu", offload_params="cpu"), True),
    "ds-z0-fp32-cpu": (Strategy(zero=0, precision="fp32"), False),
    "ds-z2-fp32-cpu": (Strategy(zero=2, precision="fp32"), False),
    "ds-z3-fp32-cpu": (Strategy(zero=3, precision="fp32", recompute="full"), False),
    "fsdp-z3-bf16-recompute": (Strategy(engine="fsdp", zero=3, precision="bf16", recompute="full"), True),
    "fsdp-z2-bf16": (Strategy(engine="fsdp", zero=2, precision="bf16"), True),
    "fsdp-z3-offload": (Strategy(engine="fsdp", zero=3, precision="bf16", offload_params="cpu",
                                 offload_optimizer="cpu"), True),
    "fsdp-z3-fp32-cpu": (Strategy(engine="fsdp", zero=3, precision="fp32"), False),
    "ddp-z0-bf16-recompute": (Strategy(engine="ddp", zero=0, precision="bf16", recompute="full"), True),
    "ddp-z1-fp32-cpu": (Strategy(engine="ddp", zero=1, precision="fp32"), False),
}
GRAD_DTYPE_BYTES = {"fp16": 2, "bf16": 2, "fp32": 4, "float16": 2, "bfloat16": 2, "float32": 4}

# (key in zero_optimization, the value the cost model assumes, stages it applies to)
DEEPSPEED_ZERO_KNOBS = [
    ("reduce_bucket_size", lambda e, s, cuda: e.reduce_bucket_elems, (1, 2, 3)),
    ("allgather_bucket_size", lambda e, s, cuda: e.allgather_bucket_elems, (1, 2, 3)),
    ("stage3_prefetch_bucket_size", lambda e, s, cuda: e.stage3_prefetch_elems, (3,)),
    ("stage3_param_persistence_threshold", lambda e, s, cuda: e.param_persistence_threshold, (3,)),
    ("stage3_max_reuse_distance", lambda e, s, cuda: e.stage3_max_reuse_elems, (3,)),
    # terms: overlapped only on GPUs and when the strategy says so (step.py: nothing overlaps on gloo ranks)
    ("overlap_comm", lambda e, s, cuda: cuda and s.overlap_grad_comm, (1, 2, 3)),
    # GPU terms: one reduce per owner's slice (a reduce-scatter's bytes); cpu_collectives: 0.19's whole-bucket
    # all-reduce
    ("use_multi_rank_bucket_allreduce", lambda e, s, cuda: not cuda, (1, 2)),
    ("contiguous_gradients", lambda e, s, cuda: True, (1, 2, 3)),
    ("reduce_scatter", lambda e, s, cuda: True, (1, 2, 3)),
]
# DeepSpeedZeroConfig attribute of each key (its aliases)
ZERO_ATTRS = {"stage3_prefetch_bucket_size": "prefetch_bucket_size",
              "stage3_param_persistence_threshold": "param_persistence_threshold",
              "stage3_max_reuse_distance": "max_reuse_distance"}


@pytest.fixture(scope="module")
def emitted(tmp_path_factory):
    """label -> (strategy, cuda, the emitted engine settings file, parsed)"""
    out = {}
    for label, (strategy, cuda) in CASES.items():
        run = RunConfig.build("t5-tiny", strategy.replace(micro_batch=2), Workload(8, 64, 16), nproc=2, nnodes=1,
                              steps=5)
        paths = emit(tmp_path_factory.mktemp(label), run, cuda=cuda)
        name = {"deepspeed": "ds_config.json", "fsdp": "fsdp_config.json", "ddp": "ddp_config.json"}[strategy.engine]
        out[label] = (strategy, cuda, json.loads(paths[name].read_text()))
    return out


def _labels(engine: str) -> list[str]:
    return [label for label, (s, _) in CASES.items() if s.engine == engine]


@pytest.mark.parametrize("label", _labels("deepspeed"))
def test_deepspeed_json_sets_what_the_cost_model_prices(emitted, label):
    from deepspeed.runtime.config import DeepSpeedConfig

    s, cuda, cfg = emitted[label]
    eng, zero = engine_comm("deepspeed"), cfg["zero_optimization"]
    # train_batch_size is checked against the world size, which is 1 here; DeepSpeed derives it from the other two
    parsed = DeepSpeedConfig({k: v for k, v in cfg.items() if k != "train_batch_size"})
    for key, assumed, stages in DEEPSPEED_ZERO_KNOBS:
        if s.zero not in stages:
            assert key not in zero, (label, key)
            continue
        expected = assumed(eng, s, cuda)
        assert zero[key] == expected, (label, key)  # set explicitly, to the cost model's value
        assert getattr(parsed.zero_config, ZERO_ATTRS.get(key, key)) == expected, (label, key)  # and read so
    grad_bytes = main_grad_bytes(s)
    assert GRAD_DTYPE_BYTES[cfg["communication_data_type"]] == grad_bytes
    assert GRAD_DTYPE_BYTES[str(parsed.communication_data_type).removeprefix("torch.")] == grad_bytes
    assert parsed.grad_accum_dtype == cfg["data_types"]["grad_accum_dtype"] == s.precision  # ZeRO's own optimizer
    for kind, field in (("optimizer", "offload_optimizer"), ("param", "offload_params")):
        offload = getattr(parsed.zero_config, f"offload_{kind}")
        if getattr(s, field) == "none":
            assert offload is None or offload.device == "none", (label, kind)
        else:  # terms.optimizer_offload prices pinned host copies on GPUs
            assert (offload.device, offload.pin_memory) == (getattr(s, field), cuda), (label, kind)


def test_deepspeed_stage0_bucket_is_the_cost_models():
    """ZeRO stage 0 reduces in a bucket DeepSpeed does not take from the config (engine.allreduce_gradients'
    MEMORY_OPT_ALLREDUCE_SIZE): the installed constant must be engines.yaml's reduce bucket."""
    import importlib.util
    import re
    from pathlib import Path

    source = Path(importlib.util.find_spec("deepspeed").origin).parent / "runtime" / "engine.py"
    size = re.search(r"^MEMORY_OPT_ALLREDUCE_SIZE = (\d+)$", source.read_text(), re.M)
    assert size and int(size.group(1)) == engine_comm("deepspeed").reduce_bucket_elems


@pytest.mark.parametrize("label", _labels("fsdp"))
def test_fsdp_settings_set_what_the_cost_model_prices(emitted, label):
    s, cuda, cfg = emitted[label]
    # terms._sharded_dp_comm: FSDP zero 2 gathers once per micro-batch (kept for the backward), zero 3 twice
    assert cfg["reshard_after_forward"] == (s.zero == 3)
    # GPU terms gather the root unit once per micro-batch (memory: held to the backward's end); gloo prices it twice
    assert cfg["root_reshard_after_forward"] == (s.zero == 3 and not cuda)
    assert cfg["prefetch_layers"] == engine_comm("fsdp").prefetch_layers
    mp = cfg["mixed_precision"]
    reduce_dtype, param_dtype = (mp["reduce_dtype"], mp["param_dtype"]) if mp else ("float32", "float32")
    assert GRAD_DTYPE_BYTES[reduce_dtype] == main_grad_bytes(s)
    assert GRAD_DTYPE_BYTES[param_dtype] == ACT_BYTES[s.precision]  # gathered in the compute dtype
    assert cfg["cpu_offload"] == (s.offload_params == "cpu")
    assert cfg["activation_checkpointing"]["early_stop"] == (s.recompute == "full")
    # terms._sharded_dp_comm / cpu_collectives.fsdp_calls_per_step: a reduce-scatter per micro-batch, sharded grads
    assert cfg["gradient_sync"] == "every_micro_batch"


@pytest.mark.parametrize("label", _labels("ddp"))
def test_ddp_settings_set_what_the_cost_model_prices(emitted, label):
    s, _, cfg = emitted[label]
    # DDP's bucket_cap_mb is MiB of gradients; the cost model's buckets are elements of main_grad_bytes each
    assert cfg["bucket_cap_mb"] * 2**20 / main_grad_bytes(s) == pytest.approx(engine_comm("ddp").reduce_bucket_elems)
    assert cfg["zero_redundancy_optimizer"] == (s.zero == 1)
    assert cfg["autocast_dtype"] == ("bfloat16" if s.precision == "bf16" else None)
    assert cfg["activation_checkpointing"]["early_stop"] == (s.recompute == "full")
    assert cfg["gradient_sync"] == "last_micro_batch"  # terms._bucketed_dp_comm: one all-reduce per step


def test_recompute_runs_early_stopped_non_reentrant_checkpoints_per_block():
    """`train` checkpoints each block with torch's non-reentrant checkpoint, early stop on (DeepSpeed ZeRO-3 needs
    it), for every engine. The cost model's `recompute_early_stop: engine` prices it on for fsdp only (published
    DeepSpeed / DDP stacks re-run whole blocks): this pins what `train` does."""
    from scalestudy.engine.settings import activation_checkpointing

    for engine in ("deepspeed", "fsdp", "ddp"):
        for recompute in ("none", "full"):
            s = Strategy(engine=engine, zero=3 if engine != "ddp" else 0, recompute=recompute)
            ac = activation_checkpointing(s)
            assert (ac["early_stop"], ac["use_reentrant"], ac["unit"]) == (recompute == "full", False,
                                                                           "transformer block")
            assert early_stop(s.replace(recompute_early_stop="on")) == ac["early_stop"]
