"""Which optimizer DeepSpeed 0.19.8 steps for `train`'s DeepSpeed settings (specs/run.deepspeed_optimizer_wrapper,
read from runtime/engine.py _configure_optimizer / _do_optimizer_sanity_check), the optimizer_loop train_software
writes for it, and what the cost model prices for a bf16 pipeline's BF16_Optimizer ("deepspeed-bf16")."""

import pytest

from scalestudy.costmodel.estimate import estimate
from scalestudy.costmodel.memory import step_temporary_bytes
from scalestudy.costmodel.step import OPTIMIZER_BYTES, OPTIMIZER_LOOPS, STAGE_LOOP_BYTES, optimizer_loop_s
from scalestudy.errors import ScalestudyError
from scalestudy.specs.hardware import get_device, make_cluster
from scalestudy.specs.presets import get_model
from scalestudy.specs.run import as_trained, deepspeed_optimizer_wrapper, train_software
from scalestudy.specs.strategy import TRAIN_VALUES, Strategy, Workload

# (precision, zero, pp) -> the wrapper DeepSpeed 0.19.8 builds around train's torch AdamW (grad_accum_dtype = the
# compute dtype, engine/settings.deepspeed_config), and the loop train_software writes. ZeRO-2/3 under a pipeline
# are refused by PipelineEngine (and Strategy), so not listed.
CASES = [
    ("bf16", 0, 1, "fp16-unfused", "deepspeed-unfused"),  # DDP_BFLOAT16 -> FP16_UnfusedOptimizer (bf16)
    ("bf16", 0, 2, "bf16", "deepspeed-bf16"),  # pipeline_parallelism -> BFLOAT16 -> BF16_Optimizer
    ("fp16", 0, 1, "fp16-unfused", "deepspeed-unfused"),  # FP16 -> FP16_UnfusedOptimizer (no FusedAdam)
    ("fp16", 0, 2, "fp16-unfused", "deepspeed-unfused"),  # the pipeline test is bf16-only
    ("fp32", 0, 1, "client", "foreach"),  # None: torch AdamW itself
    ("fp32", 0, 2, "client", "foreach"),
    ("bf16", 1, 1, "zero", "foreach"),  # ZERO_OPTIMIZATION (BFLOAT16 needs fp32 gradient accumulation)
    ("bf16", 1, 2, "zero", "foreach"),
    ("fp16", 1, 2, "zero", "foreach"),
    ("bf16", 2, 1, "zero", "foreach"),
    ("fp16", 3, 1, "zero", "foreach"),
    ("fp32", 1, 2, "zero", "foreach"),
]


def _fields(precision, zero, pp, **kw):
    return dict(engine="deepspeed", zero=zero, tp=1, pp=pp, precision=precision, offload_optimizer="none",
                attention="flash", **kw)


@pytest.mark.parametrize("precision,zero,pp,wrapper,loop", CASES)
def test_train_software_names_the_optimizer_deepspeed_runs(precision, zero, pp, wrapper, loop):
    fields = _fields(precision, zero, pp)
    assert deepspeed_optimizer_wrapper(fields) == wrapper
    assert train_software(fields, get_model("gpt2-tiny"))["optimizer_loop"] == loop
    assert loop in TRAIN_VALUES["optimizer_loop"]  # labels leave what train runs unnamed


def test_offloaded_and_torch_native_engines_keep_their_loops():
    model = get_model("gpt2-tiny")
    assert train_software({**_fields("bf16", 1, 2), "offload_optimizer": "cpu"}, model)["optimizer_loop"] == "engine"
    for engine in ("fsdp", "ddp"):
        assert train_software({**_fields("bf16", 0, 2), "engine": engine}, model)["optimizer_loop"] == "foreach"


def test_bf16_pipeline_label_is_unchanged_and_names_nothing_new():
    st = Strategy(engine="deepspeed", zero=0, pp=2, precision="bf16")
    trained = as_trained(st, get_model("gpt2-tiny"))
    assert trained.optimizer_loop == "deepspeed-bf16" and trained.label == st.label == "ds-z0 tp1 pp2 mb1 bf16"


@pytest.mark.parametrize("kw", [dict(zero=1, pp=2), dict(pp=1), dict(pp=2, precision="fp16"),
                                dict(engine="fsdp", zero=3, pp=2)])
def test_bf16_loop_is_refused_outside_a_zero0_bf16_deepspeed_pipeline(kw):
    with pytest.raises(ScalestudyError, match="deepspeed-bf16"):
        Strategy(**{"engine": "deepspeed", "zero": 0, "precision": "bf16", **kw}, optimizer_loop="deepspeed-bf16")


def test_bf16_optimizer_steps_its_partition_and_norms_the_stage():
    """BF16_Optimizer.step: per tensor of the stage a .float() and a norm (2 launches, 10 B), the flat bf16 gradient
    buffer zeroed (2 B); on the 1/dp fp32 partition cast (6 B) + foreach AdamW (80 B) + bf16 copy back (6 B)."""
    dev, k = get_device("a100-80gb"), 3e-5
    assert OPTIMIZER_LOOPS["deepspeed-bf16"] == ((2, 0), 92.0) and STAGE_LOOP_BYTES["deepspeed-bf16"] == 12.0
    got = optimizer_loop_s("deepspeed-bf16", 1e8, 150, "bf16", dev, k, stage_params=4e8)
    extra = 1e8 * (92.0 - OPTIMIZER_BYTES["bf16"]) + 4e8 * 12.0
    assert got == pytest.approx(150 * 2 * k + extra / dev.hbm_bytes_per_s)
    # other loops ignore the stage's parameters
    assert optimizer_loop_s("deepspeed-unfused", 1e8, 150, "bf16", dev, k, stage_params=4e8) == \
        optimizer_loop_s("deepspeed-unfused", 1e8, 150, "bf16", dev, k)


def test_bf16_optimizer_step_temporary_is_its_partitions_not_the_unfused_copies():
    psi, dp = 3e8, 4
    # grad partition .to(fp32) + torch AdamW's foreach sqrt temporary, both over the rank's 1/dp partition
    assert step_temporary_bytes(psi, dp, "deepspeed", 0, "bf16", True, "deepspeed-bf16", 2) == 8.0 * psi / dp
    # FP16_UnfusedOptimizer (ZeRO-0 16-bit, no pipeline): a per-tensor fp32 copy + the foreach temporary, whole
    assert step_temporary_bytes(psi, dp, "deepspeed", 0, "bf16", True, "deepspeed-unfused", 1) == 8.0 * psi


def test_estimate_of_a_bf16_pipeline_prices_the_partitioned_step():
    """gpt2-medium over pp 2 x dp 4: the as-trained strategy's optimizer seconds above the fused update are the
    BF16_Optimizer loop over psi / dp (and the stage's tensors and parameters), well below the unfused loop's."""
    model, cluster, work = get_model("gpt2-medium"), make_cluster("a100-80gb", 1, 8), Workload(global_batch=64,
                                                                                              seq_len=1024)
    trained = as_trained(Strategy(engine="deepspeed", zero=0, pp=2, micro_batch=4, precision="bf16"), model)
    assert trained.optimizer_loop == "deepspeed-bf16"
    fused, bf16 = estimate(model, cluster, trained.replace(optimizer_loop="engine"), work), \
        estimate(model, cluster, trained, work)
    unfused = estimate(model, cluster, trained.replace(optimizer_loop="deepspeed-unfused"), work)
    assert fused.optimizer_s < bf16.optimizer_s < unfused.optimizer_s
    assert bf16.optimizer_s - fused.optimizer_s < (unfused.optimizer_s - fused.optimizer_s) / 3
    assert bf16.compute_s == fused.compute_s


# deepspeed_optimizer_wrapper's names -> DeepSpeed's classes
_CLASSES = {"bf16": "BF16_Optimizer", "fp16-unfused": "FP16_UnfusedOptimizer", "zero": "DeepSpeedZeroOptimizer",
            "client": "AdamW"}


# The session's one real DeepSpeed launch (tests/unit/_deepspeed_probe.py), shared with test_grad_accum_dtype
@pytest.mark.slow
def test_deepspeed_builds_the_optimizer_the_rule_names(deepspeed_probe):
    """The real thing, where DeepSpeed's CPU comm op is already built (else skipped: its build takes ~1 min)."""
    from _deepspeed_probe import CLASS_CASES

    got = deepspeed_probe["classes"]
    for precision, zero, pipe in CLASS_CASES:
        rule = deepspeed_optimizer_wrapper(_fields(precision, zero, 2 if pipe else 1))
        assert got[f"{precision} {zero} {int(pipe)}"] == _CLASSES[rule], (precision, zero, pipe)
