"""Strategy.grad_accum_dtype: the bytes per parameter DeepSpeed 0.19.8 holds for a bf16 run by its gradient
accumulation dtype (costmodel/memory.py deepspeed_bf16_wrapper / deepspeed_accumulator_bytes), what `train` runs
(compute: engine/settings.deepspeed_config's data_types.grad_accum_dtype), what DeepSpeed does unasked (engine: fp32
only without ZeRO, engine.get_data_types) and what the BigScience rows state (fp32). The slow test measures the
tensors a real DeepSpeed engine holds on 2 gloo ranks."""

import pytest

from scalestudy.costmodel.estimate import estimate
from scalestudy.costmodel.memory import (buffer_bytes, deepspeed_accumulator_bytes, deepspeed_bf16_wrapper,
                                        model_states)
from scalestudy.costmodel.options import DEFAULT_OPTIONS
from scalestudy.engine.settings import DS_DTYPES, deepspeed_config
from scalestudy.errors import ScalestudyError
from scalestudy.plan.space import Constraints
from scalestudy.specs.hardware import make_cluster
from scalestudy.specs.presets import get_model
from scalestudy.specs.run import RunConfig, as_trained, check_cost_model_only, deepspeed_optimizer_wrapper, \
    train_software
from scalestudy.specs.strategy import Strategy, Workload

DP = 8
# (zero, pp, grad_accum_dtype) -> bytes per parameter (weights, gradients, optimizer, accumulator) of a bf16 run on
# DP data-parallel ranks; the wrapper named after it. compute = what train runs, engine = DeepSpeed's default (fp32
# without ZeRO, the model dtype with it), fp32 = the BigScience runs' BF16_Optimizer.
BYTES = [
    (0, 1, "compute", (2, 2, 12, 0), "unfused"),  # FP16_UnfusedOptimizer: bf16 .grad accumulates, whole fp32 states
    (0, 2, "compute", (2, 2, 12 / DP, 2), "bf16"),  # BF16_Optimizer: 1/dp fp32 partition + moments, bf16 buffer
    (1, 1, "compute", (2, 2, 12 / DP, 0), "zero"),  # DeepSpeedZeroOptimizer: no second gradient copy
    (1, 2, "compute", (2, 2, 12 / DP, 0), "zero"),
    (2, 1, "compute", (2, 2 / DP, 12 / DP, 0), "zero"),
    (0, 2, "engine", (2, 2, 12, 4), "bf16"),  # BF16_Optimizer, fp32 buffer; the published view's whole states
    # DeepSpeed's default with ZeRO is the model dtype (engine.get_data_types, v0.7.7 .. 0.19.8): no fp32 buffer
    (1, 1, "engine", (2, 2, 12 / DP, 0), "zero"),
    (1, 2, "engine", (2, 2, 12 / DP, 0), "zero"),
    (1, 1, "fp32", (2, 2, 12 / DP, 4), "bf16"),  # 0.19.8: bf16 + fp32 accumulation + ZeRO-1 -> BF16_Optimizer
    (1, 2, "fp32", (2, 2, 12 / DP, 4), "bf16"),  # BLOOM's BF16_Optimizer (the bigscience rows state fp32)
    (2, 1, "engine", (2, 2 / DP, 12 / DP, 0), "zero"),
    (0, 1, "engine", (2, 2, 12, 4), "bf16"),  # the published view kept as it was (no published row to tell)
]


@pytest.mark.parametrize("zero, pp, accum, per_param, wrapper", BYTES)
def test_bytes_per_parameter_by_stage_and_accumulation_dtype(zero, pp, accum, per_param, wrapper):
    psi = 1e9
    w, g, o, host, nvme = model_states(psi, DP, "deepspeed", zero, "bf16", pp=pp, grad_accum_dtype=accum)
    acc = deepspeed_accumulator_bytes(psi, "deepspeed", zero, "bf16", pp, accum)
    assert (w / psi, g / psi, o / psi, acc / psi) == pytest.approx(per_param)
    assert host == nvme == 0
    assert deepspeed_bf16_wrapper("deepspeed", zero, "bf16", pp, accum) == wrapper


def test_zero1_buffers_trade_the_whole_fp32_accumulator_for_the_fp32_gradient_partition():
    """ZeRO-1 under compute accumulation: DeepSpeedZeroOptimizer's fp32 copy of the rank's gradient partition
    (4 psi / dp) instead of BF16_Optimizer's whole fp32 buffer (4 psi, of which the partition is a view)."""
    model, psi = get_model("gpt2-xl"), 1.5e9
    args = (model, psi, DP, 1, "deepspeed", 1, "bf16", "none", DEFAULT_OPTIONS)
    fp32 = buffer_bytes(*args, grad_accum_dtype="fp32")
    bf16 = buffer_bytes(*args, grad_accum_dtype="compute")
    assert fp32 - bf16 == pytest.approx(4 * psi - 4 * psi / DP)


def test_other_precisions_and_engines_are_unchanged():
    for precision in ("fp16", "fp32"):
        for zero in (0, 1, 2):
            for pp in (1, 2):
                a = model_states(1e9, DP, "deepspeed", zero, precision, pp=pp, grad_accum_dtype="compute")
                assert a == model_states(1e9, DP, "deepspeed", zero, precision, pp=pp)
                assert deepspeed_accumulator_bytes(1e9, "deepspeed", zero, precision, pp, "compute") == 0
    assert deepspeed_bf16_wrapper("deepspeed", 3, "bf16", 1, "compute") == ""


@pytest.mark.parametrize("zero, pp", [(0, 1), (0, 2), (1, 1), (1, 2), (2, 1)])
def test_the_wrapper_is_the_one_train_gets(zero, pp):
    """Under compute accumulation the memory rule names the optimizer specs/run.deepspeed_optimizer_wrapper (read
    from DeepSpeed 0.19.8's engine for train's settings) names."""
    names = {"unfused": "fp16-unfused", "bf16": "bf16", "zero": "zero"}
    rule = deepspeed_optimizer_wrapper({"zero": zero, "pp": pp, "precision": "bf16"})
    assert names[deepspeed_bf16_wrapper("deepspeed", zero, "bf16", pp, "compute")] == rule


def test_train_runs_compute_and_its_config_says_so():
    model = get_model("gpt2-tiny")
    fields = vars(Strategy(engine="deepspeed", zero=1))
    assert train_software(fields, model)["grad_accum_dtype"] == "compute"
    for engine, zero in (("fsdp", 3), ("ddp", 0)):
        assert "grad_accum_dtype" not in train_software(vars(Strategy(engine=engine, zero=zero)), model)
    trained = as_trained(Strategy(engine="deepspeed", zero=1), model)
    assert trained.grad_accum_dtype == "compute"
    check_cost_model_only(trained, model)  # train runs it
    with pytest.raises(ScalestudyError, match="grad_accum_dtype"):
        check_cost_model_only(Strategy(engine="deepspeed", zero=1, grad_accum_dtype="fp32"), model)
    for precision in ("bf16", "fp32"):  # plan = reality: the emitted ds_config accumulates in the compute dtype
        run = RunConfig.build("gpt2-tiny", trained.replace(precision=precision), Workload(global_batch=2, seq_len=8),
                              nproc=1, nnodes=1)
        assert deepspeed_config(run, cuda=False)["data_types"]["grad_accum_dtype"] == DS_DTYPES[precision]


def test_refusals_and_label():
    with pytest.raises(ScalestudyError, match="grad_accum_dtype fp32 describes DeepSpeed"):
        Strategy(engine="fsdp", zero=3, grad_accum_dtype="fp32")
    with pytest.raises(ScalestudyError, match="unknown grad_accum_dtype"):
        Strategy(grad_accum_dtype="bf16")
    with pytest.raises(ScalestudyError, match="--grad-accum-dtype fp32 .* needs --engine deepspeed"):
        Constraints(grad_accum_dtype="fp32")
    assert Constraints(engines=("deepspeed",), grad_accum_dtype="fp32").grad_accum_dtype == "fp32"
    base = Strategy(engine="deepspeed", zero=1)
    assert base.replace(grad_accum_dtype="compute").label == base.label  # train's value: not named
    assert base.replace(grad_accum_dtype="fp32").label.endswith(" accum-fp32")


def test_estimate_gpt2_xl_zero1_drops_the_accumulator():
    """The issue's example: gpt2-xl ZeRO-1 on 8 x A100-80GB, 1.56 B parameters: the fp32 accumulator (5.8 GiB) goes,
    the fp32 gradient partition (0.73 GiB) comes; the other terms stay."""
    model, cluster = get_model("gpt2-xl"), make_cluster("a100-80gb", 1, 8)
    work = Workload(global_batch=64, seq_len=1024)
    st = Strategy(engine="deepspeed", zero=1, micro_batch=4, grad_accum_dtype="fp32")
    old = estimate(model, cluster, st, work).memory
    new = estimate(model, cluster, st.replace(grad_accum_dtype="compute"), work).memory
    psi = old.params / 2
    assert old.buffers - new.buffers == pytest.approx(4 * psi - 4 * psi / 8)
    assert (new.params, new.grads, new.optimizer, new.activations) == (old.params, old.grads, old.optimizer,
                                                                     old.activations)


_CLASSES = {"bf16": "BF16_Optimizer", "unfused": "FP16_UnfusedOptimizer", "zero": "DeepSpeedZeroOptimizer"}


# The session's one real DeepSpeed launch (tests/unit/_deepspeed_probe.py: 2 gloo ranks, what they measure), shared
# with test_deepspeed_optimizer_wrapper
@pytest.mark.slow
def test_deepspeed_holds_what_the_model_prices(deepspeed_probe):
    from _deepspeed_probe import BYTE_CASES

    got = deepspeed_probe["bytes"]
    for zero, pipe, accum in BYTE_CASES:
        m = got[f"{zero} {int(pipe)} {accum}"]
        psi, pp = m["psi"], 2 if pipe else 1
        assert m["wrapper"] == _CLASSES[deepspeed_bf16_wrapper("deepspeed", zero, "bf16", pp, accum)]
        w, g, o, _, _ = model_states(psi, 2, "deepspeed", zero, "bf16", pp=pp, grad_accum_dtype=accum)
        acc = deepspeed_accumulator_bytes(psi, "deepspeed", zero, "bf16", pp, accum)
        before, after = m["backward"], m["after"]
        assert before["weights"] == pytest.approx(w, rel=0.01)
        assert before.get("accumulator", 0) == pytest.approx(acc, rel=0.01)
        assert after["optimizer"] == pytest.approx(o, rel=0.01)
        # whole bf16 gradients where the wrapper keeps them through the step (BF16_Optimizer); ZeRO's optimizer
        # has reduced them into its bf16 partition and freed them by then (the model's `grads` is the backward's)
        assert before.get("grads", 0) == pytest.approx(g if acc else 0, rel=0.01)


def test_engine_at_zero1_is_deepspeeds_default_not_an_fp32_accumulator():
    """DeepSpeed's engine.get_data_types defaults a bf16 run with ZeRO to bf16 accumulation, so an unasked ZeRO-1 run
    is DeepSpeedZeroOptimizer's (its fp32 gradient partition, 4 psi / dp) -- not BF16_Optimizer's whole fp32 buffer
    (4 psi), which only data_types.grad_accum_dtype fp32 buys: estimate's memory drops by the difference and equals
    the compute dtype's, pipeline or not. Without ZeRO "engine" stays fp32 (BF16_Optimizer)."""
    model, cluster = get_model("gpt2-xl"), make_cluster("a100-80gb", 1, 8)
    work = Workload(global_batch=64, seq_len=1024)
    for pp in (1, 2):
        st = Strategy(engine="deepspeed", zero=1, micro_batch=4, pp=pp)
        fp32 = estimate(model, cluster, st.replace(grad_accum_dtype="fp32"), work).memory
        engine = estimate(model, cluster, st, work).memory
        compute = estimate(model, cluster, st.replace(grad_accum_dtype="compute"), work).memory
        psi, dp = engine.params / 2, 8 // pp
        assert fp32.buffers - engine.buffers == pytest.approx(4 * psi - 4 * psi / dp)
        assert engine.total == compute.total
    for pp in (1, 2):
        assert deepspeed_bf16_wrapper("deepspeed", 0, "bf16", pp, "engine") == "bf16"
        assert deepspeed_accumulator_bytes(1e9, "deepspeed", 0, "bf16", pp, "engine") == 4e9
