"""FSDP's CPU-offloaded optimizer step on a GPU host (terms.optimizer_offload / host_adam_slowdown): the engine's
host optimizer by default (engines.yaml fsdp host_optimizer fused: torch's fused CPU AdamW, 28 B per fp32 parameter
against CPU-Adam's 30, at the same memory-bound host rate; benchmarks/bench_cpu_adamw.py measured 0.93 on one
thread), which `train` steps too (engine/settings.host_adamw); a torch loop the run names (per-tensor, foreach) at
torch's single-tensor rate (engines.yaml fsdp host_adam_slowdown 6.4 x DeepSpeed CPU-Adam's time)."""

import pytest

from scalestudy.costmodel.engines import engine_comm
from scalestudy.costmodel.estimate import estimate
from scalestudy.costmodel.terms import HOST_FUSED_ADAMW_BYTES, host_adam_slowdown, optimizer_offload
from scalestudy.errors import ScalestudyError
from scalestudy.specs.hardware import get_device, make_cluster
from scalestudy.specs.presets import get_model
from scalestudy.specs.strategy import Strategy, Workload

OFFLOAD = dict(engine="fsdp", zero=3, micro_batch=2, recompute="full", offload_optimizer="cpu", offload_params="cpu")


def _host_step_s(**software) -> float:
    st = Strategy(**OFFLOAD, **software)
    dev = get_device("a100-80gb")
    opt_s, _ = optimizer_offload(st, engine_comm("fsdp"), 7.0e10, 8, 1, dev, 8)
    return opt_s


def test_fused_host_adamw_is_its_bytes_over_cpu_adams():
    dev = get_device("a100-80gb")
    cpu_adam_s = 7.0e10 / dev.cpu_adam_params_per_s  # 8 ranks x 7e10 / 8 parameters, one host
    assert _host_step_s(optimizer_loop="per-tensor") == pytest.approx(6.4 * cpu_adam_s)  # torch's single-tensor loop
    assert _host_step_s(optimizer_loop="fused") == pytest.approx(28.0 / 30.0 * cpu_adam_s)
    assert _host_step_s() == pytest.approx(28.0 / 30.0 * cpu_adam_s)  # the engine's own: fused
    assert _host_step_s(optimizer_loop="cpu-adam") == pytest.approx(cpu_adam_s)
    assert HOST_FUSED_ADAMW_BYTES == {"engine": 28.0, "bf16": 14.0}
    assert host_adam_slowdown(Strategy(**OFFLOAD, optimizer_loop="foreach"), engine_comm("fsdp")) == 6.4


def test_train_steps_the_host_optimizer_the_cost_model_prices():
    """One rule: engines.yaml fsdp host_optimizer is what terms.host_adam_slowdown prices for optimizer_loop engine
    and what train hands torch AdamW under CPU offload on a GPU host (fused=True); gloo ranks and on-device steps keep
    torch's default (the CPU profile measured it; foreach on the device)."""
    from scalestudy.engine.settings import fsdp_settings
    from scalestudy.specs.run import RunConfig

    host = engine_comm("fsdp").host_optimizer
    assert host == "fused"
    run = RunConfig(strategy=Strategy(**OFFLOAD))
    params = fsdp_settings(run, cuda=True)["optimizer"]["params"]
    assert params["fused"] is (host == "fused")
    assert "fused" not in fsdp_settings(run, cuda=False)["optimizer"]["params"]
    on_device = RunConfig(strategy=Strategy(engine="fsdp", zero=3, micro_batch=2))
    assert "fused" not in fsdp_settings(on_device, cuda=True)["optimizer"]["params"]
    deepspeed = Strategy(engine="deepspeed", zero=3, micro_batch=1, offload_optimizer="cpu")
    assert host_adam_slowdown(deepspeed, engine_comm("deepspeed")) == 1.0  # its CPU-Adam, the device YAML's rate


def test_fused_moves_nothing_on_the_gpu_step():
    """On a GPU the fused update is what "engine" already prices for fsdp / ddp (time and memory)."""
    model, cluster = get_model("llama-7b"), make_cluster("a100-80gb", 1, 8)
    work = Workload(global_batch=16, seq_len=2048)
    for engine, zero in (("fsdp", 3), ("ddp", 0)):
        base = estimate(model, cluster, Strategy(engine=engine, zero=zero, micro_batch=2, recompute="full"), work)
        fused = estimate(model, cluster, Strategy(engine=engine, zero=zero, micro_batch=2, recompute="full",
                                                  optimizer_loop="fused"), work)
        assert fused.step_s == pytest.approx(base.step_s)
        assert fused.memory.transient <= base.memory.transient  # no foreach sqrt temporary


@pytest.mark.parametrize("engine,zero", [("deepspeed", 3), ("megatron", 0)])
def test_fused_is_refused_where_torch_adamw_does_not_step(engine, zero):
    with pytest.raises(ScalestudyError, match="optimizer_loop fused"):
        Strategy(engine=engine, zero=zero, micro_batch=1, optimizer_loop="fused")


def test_bf16_model_halves_the_host_step_bytes_the_shard_copies_and_the_states():
    """optimizer_dtype bf16 on fsdp (torchtune dtype bf16): parameters, gradients and AdamW moments in bf16 -- the
    fused host step moves 14 B per parameter, each gather / reduce-scatter copies a 2-byte shard, the states 8 B."""
    from scalestudy.costmodel.memory import model_states
    dev, eng, psi = get_device("a100-80gb"), engine_comm("fsdp"), 7.0e10
    cpu_adam_s = psi / dev.cpu_adam_params_per_s
    fp32 = optimizer_offload(Strategy(**OFFLOAD, optimizer_loop="fused"), eng, psi, 8, 1, dev, 8)
    bf16 = optimizer_offload(Strategy(**OFFLOAD, optimizer_loop="fused", optimizer_dtype="bf16"), eng, psi, 8, 1,
                             dev, 8)
    assert bf16[0] == pytest.approx(14.0 / 30.0 * cpu_adam_s)
    assert bf16[1] == pytest.approx(fp32[1] / 2)  # (2 gathers + 1 reduce-scatter) x 2 B instead of 4
    assert fp32[1] == pytest.approx(3 * 4.0 * psi / 8 / dev.host_link_bytes_per_s(8))  # a GPU pair per host link
    assert model_states(psi, 8, "fsdp", 3, "bf16", "cpu", "cpu", optimizer_dtype="bf16")[3] == pytest.approx(8 * psi / 8)
    assert model_states(psi, 8, "fsdp", 3, "bf16", "cpu", "cpu")[3] == pytest.approx(16 * psi / 8)
    assert model_states(psi, 8, "fsdp", 3, "bf16", optimizer_dtype="bf16")[:3] == pytest.approx(
        (2 * psi / 8, 2 * psi / 8, 4 * psi / 8))
    with pytest.raises(ScalestudyError, match="optimizer_dtype"):
        Strategy(engine="ddp", micro_batch=1, optimizer_dtype="bf16")
