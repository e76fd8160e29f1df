"""Strategy.optimizer_kind (costmodel/optimizers.py): AdamW keeps two moments per parameter beside the master copy,
torch SGD without momentum none, SGD with momentum one; the update moves 3 + 2 x states elements per parameter in one
fused pass, torch's op-by-op implementation its own ops (SGD with weight decay: add + add_, 6 elements)."""

import json

import pytest

from scalestudy.cli import main
from scalestudy.costmodel.estimate import estimate
from scalestudy.costmodel.memory import megatron_model_states, model_states
from scalestudy.costmodel.optimizers import LOOP_STEPS, STATE_TENSORS, flat_update_bytes, loop_step_delta
from scalestudy.costmodel.step import OPTIMIZER_BYTES, OPTIMIZER_LOOPS, optimizer_loop_s
from scalestudy.errors import ScalestudyError
from scalestudy.specs.hardware import get_device, make_cluster
from scalestudy.specs.presets import PRESETS
from scalestudy.specs.run import train_runs
from scalestudy.specs.strategy import ADAMW_ONLY_LOOPS, OPTIMIZER_KINDS, Strategy, Workload
from scalestudy.specs.strategy import OPTIMIZER_LOOPS as STRATEGY_LOOPS

PSI = 1e9


def test_kinds_and_loops_are_partitioned():
    """Every kind has its states and torch ops; every optimizer_loop is either an AdamW implementation or a way of
    launching any optimizer's step (optimizers.LOOP_STEPS)."""
    assert set(OPTIMIZER_KINDS) == set(STATE_TENSORS)
    assert set(LOOP_STEPS) | set(ADAMW_ONLY_LOOPS) == set(STRATEGY_LOOPS) == {"engine", *OPTIMIZER_LOOPS}
    assert not set(LOOP_STEPS) & set(ADAMW_ONLY_LOOPS)


def test_adamw_fused_pass_is_the_zero_offload_figure():
    """30 B per parameter under mixed precision, 28 in fp32 (step.OPTIMIZER_BYTES); a bf16 model stepped in bf16:
    14 (terms.HOST_FUSED_ADAMW_BYTES' bf16 figure). SGD: parameter r/w and gradient r; momentum adds its buffer r/w."""
    assert flat_update_bytes("adamw", "bf16") == OPTIMIZER_BYTES["bf16"] == 30.0
    assert flat_update_bytes("adamw", "fp32") == OPTIMIZER_BYTES["fp32"] == 28.0
    assert flat_update_bytes("adamw", "bf16", 2.0) == 14.0
    assert (flat_update_bytes("sgd", "bf16"), flat_update_bytes("sgd-momentum", "fp32")) == (14.0, 20.0)
    assert flat_update_bytes("sgd", "bf16", 2.0) == 6.0


@pytest.mark.parametrize("engine,zero,precision,adamw,sgd,momentum", [
    ("ddp", 0, "bf16", 8.0, 0.0, 4.0),  # fp32 moments under autocast
    ("fsdp", 3, "bf16", 8.0 / 8, 0.0, 4.0 / 8),  # sharded fp32 moments
    ("deepspeed", 0, "fp16", 12.0, 4.0, 8.0),  # K = 12: master + two moments; SGD the master only
    ("deepspeed", 1, "bf16", 12.0 / 8, 4.0 / 8, 8.0 / 8),
    ("deepspeed", 3, "fp32", 8.0 / 8, 0.0, 4.0 / 8),  # no master in fp32 (K = 8)
    ("deepspeed", 2, "fp32", 12.0 / 8, 4.0 / 8, 8.0 / 8),  # stage 1/2 clone an fp32 master even in fp32
])
def test_optimizer_states_per_kind(engine, zero, precision, adamw, sgd, momentum):
    states = {kind: model_states(PSI, 8, engine, zero, precision, optimizer_kind=kind)[2] / PSI
              for kind in OPTIMIZER_KINDS}
    assert states == pytest.approx({"adamw": adamw, "sgd": sgd, "sgd-momentum": momentum})
    for kind in OPTIMIZER_KINDS:  # weights and gradients do not depend on the optimizer
        assert model_states(PSI, 8, engine, zero, precision, optimizer_kind=kind)[:2] == \
            model_states(PSI, 8, engine, zero, precision)[:2]


def test_fsdp_bf16_model_and_megatron_states():
    """A bf16 model stepped as it is (fsdp optimizer_dtype bf16): AdamW's moments in bf16 (4 B), SGD none; under CPU
    offload the host holds shard, gradient and states. Megatron (bf16, fp32 main gradients): 12 -> 4 for SGD, its
    distributed bf16 optimizer 6 -> 2 (the bf16 parameter shard alone)."""
    assert model_states(PSI, 1, "fsdp", 3, "bf16", optimizer_dtype="bf16")[2] == 4.0 * PSI
    assert model_states(PSI, 1, "fsdp", 3, "bf16", optimizer_dtype="bf16", optimizer_kind="sgd")[2] == 0.0
    assert model_states(PSI, 2, "fsdp", 3, "bf16", "cpu", "cpu", optimizer_kind="sgd")[3] == 2 * 4.0 * PSI / 2
    assert megatron_model_states(PSI, 1, 0, "bf16", optimizer_kind="sgd")[2] == 4.0 * PSI
    assert megatron_model_states(PSI, 1, 0, "bf16", optimizer_dtype="bf16", optimizer_kind="sgd")[2] == 2.0 * PSI


def test_loop_replaces_adamws_step_by_the_kinds_ops():
    """torch SGD foreach=False with weight decay: 2 kernels per tensor, 24 B per fp32 parameter against the fused
    pass's 14; the foreach implementation the same bytes, no per-tensor launches; DeepSpeed's serial checks around a
    flat step keep their 4 kernels, 2 syncs and 28 B. AdamW: the table unchanged."""
    dev, k, params, tensors = get_device("a100-80gb"), 3e-5, 2.5e8, 282
    hbm = dev.hbm_bytes_per_s
    assert optimizer_loop_s("per-tensor", params, tensors, "bf16", dev, k, optimizer_kind="sgd") == pytest.approx(
        params * (24.0 - 14.0) / hbm + tensors * 2 * k)
    assert optimizer_loop_s("foreach", params, tensors, "bf16", dev, k, optimizer_kind="sgd-momentum") == \
        pytest.approx(params * (44.0 - 22.0) / hbm)
    assert optimizer_loop_s("deepspeed-serial", params, tensors, "bf16", dev, k, optimizer_kind="sgd") == \
        pytest.approx(optimizer_loop_s("deepspeed-serial", params, tensors, "bf16", dev, k))
    for loop in LOOP_STEPS:
        assert loop_step_delta("adamw", loop) == (0, 0.0)
    # bf16 states (elem 2): the table's fp32 bytes halved, against the 6-byte fused pass
    assert optimizer_loop_s("per-tensor", params, tensors, "bf16", dev, k, optimizer_kind="sgd", elem=2.0) == \
        pytest.approx(params * (12.0 - 6.0) / hbm + tensors * 2 * k)


def test_strategy_refuses_adamw_implementations_for_other_kinds_and_train_runs_adamw_only():
    with pytest.raises(ScalestudyError, match="AdamW implementation"):
        Strategy(engine="ddp", optimizer_kind="sgd", optimizer_loop="per-tensor-hf")
    with pytest.raises(ScalestudyError, match="unknown optimizer_kind 'lion'"):
        Strategy(engine="ddp", optimizer_kind="lion")
    assert "sgd" in Strategy(engine="fsdp", zero=3, optimizer_kind="sgd").label
    assert train_runs("optimizer_kind", "adamw") and not train_runs("optimizer_kind", "sgd")


def test_estimate_prices_less_memory_and_a_shorter_step_for_sgd():
    """Llama-2 7B, FSDP over 8 A100-80GB: SGD drops the 8 B of fp32 moments per parameter (/ 8 ranks) and moves 14
    of AdamW's 30 B per parameter in its update."""
    model, cluster, work = PRESETS["llama2-7b"], make_cluster("a100-80gb", 1, 8), Workload(global_batch=8,
                                                                                                seq_len=4096)
    adam = estimate(model, cluster, Strategy(engine="fsdp", zero=3, recompute="full"), work)
    sgd = estimate(model, cluster, Strategy(engine="fsdp", zero=3, recompute="full", optimizer_kind="sgd"), work)
    assert adam.memory.optimizer - sgd.memory.optimizer == pytest.approx(8.0 * adam.params_per_device / 8)
    assert sgd.optimizer_s == pytest.approx(adam.optimizer_s * 14.0 / 30.0)
    assert sgd.compute_s == adam.compute_s


def test_cli_flag_reaches_estimate_and_a_bad_value_is_one_line(capsys):
    args = ["estimate", "--model", "t5-small", "--gpu", "a100-80gb", "--gpus-per-node", "1", "--engine", "ddp"]
    with pytest.raises(SystemExit) as exc:
        main([*args, "--json"])
    adam = json.loads(capsys.readouterr().out)
    with pytest.raises(SystemExit) as exc:
        main([*args, "--optimizer-kind", "sgd", "--json"])
    sgd = json.loads(capsys.readouterr().out)
    assert exc.value.code == 0 and sgd["strategy"]["optimizer_kind"] == "sgd"
    assert sgd["memory"]["parts"]["optimizer"] == 0.0 < adam["memory"]["parts"]["optimizer"]
    with pytest.raises(SystemExit) as exc:
        main([*args, "--optimizer-kind", "lion"])
    out = capsys.readouterr()
    assert exc.value.code != 0 and "Traceback" not in out.err and "--optimizer-kind" in out.err
