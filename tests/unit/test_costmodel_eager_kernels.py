"""Per-parameter traffic of torch.autocast over fp32 parameters (costmodel/eager_kernels.py): engine ddp in 16 bits
casts each weight once per forward (autocast's cache, aten/src/ATen/autocast_mode.cpp cached_cast), casts its
gradient back (ToCopyBackward) and copies it into DDP's bucket (Reducer copy_grad_to_bucket)."""

import pytest

from scalestudy.costmodel import estimate as estimate_module
from scalestudy.costmodel.eager_kernels import autocast_param_bytes, autocast_param_s
from scalestudy.specs.hardware import get_device, make_cluster
from scalestudy.specs.model import get_model
from scalestudy.specs.strategy import Strategy, Workload


def test_cast_weights_move_20_bytes_and_an_fp32_lookup_table_only_its_gradient_copy():
    # cast r4 w2 + ToCopyBackward r2 w4 + bucket copy r4 w4 = 20 B; an embedding torch looks up in fp32: the copy
    assert autocast_param_bytes(1e6, 0) == pytest.approx(20e6)
    assert autocast_param_bytes(1e6, 4e5) == pytest.approx(20 * 6e5 + 8 * 4e5)


@pytest.mark.parametrize("engine,precision,device,expected", [
    ("ddp", "bf16", "a100-80gb", True),
    ("ddp", "fp16", "h100-80gb", True),
    ("ddp", "fp32", "a100-80gb", False),  # no autocast
    ("fsdp", "bf16", "a100-80gb", False),  # 16-bit working weights
    ("megatron", "bf16", "a100-80gb", False),
    ("deepspeed", "bf16", "a100-80gb", False),
])
def test_only_ddp_under_autocast_pays(engine, precision, device, expected):
    model, dev = get_model("t5-base"), get_device(device)
    seconds = autocast_param_s(model, engine, precision, 1, 2.2e8, dev)
    assert (seconds > 0) is expected
    if expected:  # tied T5 embedding: every parameter cast, memory-bound at the device's HBM rate
        assert seconds == pytest.approx(20 * 2.2e8 / dev.hbm_bytes_per_s)


def test_estimate_charges_it_once_per_micro_batch(monkeypatch):
    model, cluster = get_model("t5-base"), make_cluster("a100-80gb", 1, 8)
    work = Workload(global_batch=64, seq_len=512, target_len=128)
    st = Strategy(engine="ddp", micro_batch=2, precision="bf16")  # 4 micro-batches per step
    with_casts = estimate_module.estimate(model, cluster, st, work)
    monkeypatch.setattr(estimate_module, "autocast_param_s", lambda *a: 0.0)
    without = estimate_module.estimate(model, cluster, st, work)
    per_micro_batch = autocast_param_s(model, "ddp", "bf16", 1, with_casts.params_per_device, cluster.device)
    assert with_casts.compute_s - without.compute_s == pytest.approx(4 * per_micro_batch)
