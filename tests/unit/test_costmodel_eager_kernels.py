"""Per-parameter traffic of torch.autocast over fp32 parameters (costmodel/eager_kernels.py): engine ddp in 16 bits
casts each weight once per forward (autocast's cache, aten/src/ATen/autocast_mode.cpp cached_cast), casts its
gradient back (ToCopyBackward) and copies it into DDP's bucket (Reducer copy_grad_to_bucket)."""

import pytest

from scalestudy.costmodel import estimate as estimate_module
from scalestudy.costmodel import stage_terms
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
    monkeypatch.setattr(stage_terms, "autocast_param_s", lambda *a: 0.0)
    without = estimate_module.estimate(model, cluster, st, work)
    per_micro_batch = autocast_param_s(model, "ddp", "bf16", 1, with_casts.params_per_device, cluster.device)
    assert with_casts.compute_s - without.compute_s == pytest.approx(4 * per_micro_batch)


def test_eager_t5_scores_pay_the_fp32_softmax_and_the_trained_position_bias():
    """HF T5Attention in eager mode (eager_kernels.t5_score_bytes): 33 B forward per bf16 score element (biased add,
    fp32 softmax between two casts, dropout), 47 B backward where the relative position bias trains (self-attention),
    29 B where it is a constant mask (cross-attention); in fp32 the casts vanish. A T5 with eager kernels and eager
    attention is charged these instead of the stored-softmax bytes the fused path uses."""
    from scalestudy.costmodel.eager_kernels import t5_score_bytes
    from scalestudy.costmodel.step import elementwise_bytes

    assert t5_score_bytes(2, True) == (33.0, 47.0) and t5_score_bytes(2, False) == (33.0, 29.0)
    assert t5_score_bytes(4, True) == (29.0, 33.0)
    model = get_model("t5-small")
    fused = elementwise_bytes(model, 8, 512, 128, "bf16", False, 1, False, "fused")
    eager = elementwise_bytes(model, 8, 512, 128, "bf16", False, 1, False, "eager")
    scores = 8 * model.num_heads * model.num_layers * (512 * 512 + 128 * 128 + 128 * 512)
    assert eager[0] > fused[0] + 20 * scores and eager[1] > fused[1] + 25 * scores


@pytest.mark.parametrize("engine,precision,kernels,model_name,expected", [
    ("ddp", "bf16", "eager", "t5-base", True),
    ("ddp", "bf16", "eager", "mt5-small", True),  # gated gelu_new: its fp32 chain under autocast
    ("ddp", "bf16", "fused", "t5-base", False),  # a compiled graph fuses the round trip away
    ("ddp", "fp32", "eager", "t5-base", False),  # no autocast: wo's input is already fp32
    ("deepspeed", "bf16", "eager", "t5-base", False),  # 16-bit working weights: wo is 16-bit too
    ("ddp", "bf16", "eager", "gpt2", False),  # only HF T5's FFN casts to wo's dtype
])
def test_hf_t5_ffn_under_autocast_pays_its_casts_and_gelu_new_its_fp32_chain(engine, precision, kernels, model_name,
                                                                               expected):
    """transformers' T5DenseGatedActDense / T5DenseActDense under autocast over fp32 weights. A 16-bit activation
    (t5-base relu): `.to(self.wo.weight.dtype)` and autocast's cast back, 2 casts of the d_ff-wide activation each
    pass (r2 w4 + r4 w2 = 12 B per element), 4 kernels per FFN. Gated gelu_new (T5 v1.1 / mT5): torch.pow is on
    autocast's fp32 list, so the GELU, the gate product and dropout run in fp32 and only the cast for wo remains:
    48 B forward + 82 B backward per element beyond the 16-bit count, 2 + 5 kernels per FFN."""
    from scalestudy.costmodel.eager_kernels import autocast_ffn_cast_s

    model, dev = get_model(model_name), get_device("a100-80gb")
    seconds = autocast_ffn_cast_s(model, engine, precision, kernels, 1, 4, 512, 128, dev, 1e-5)
    assert (seconds > 0) is expected
    if expected:
        gated = model.ffn == "gated-gelu"
        per_element, per_ffn = (48 + 82, 7) if gated else (24, 4)
        token_layers = 4 * (model.num_layers * 512 + model.num_decoder_layers * 128)
        kernels_s = per_ffn * (model.num_layers + model.num_decoder_layers) * 1e-5
        assert seconds == pytest.approx(per_element * token_layers * model.d_ff / dev.hbm_bytes_per_s + kernels_s)
