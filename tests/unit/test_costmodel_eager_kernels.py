"""Per-parameter traffic of torch.autocast over fp32 parameters (costmodel/eager_kernels.py): engine ddp in 16 bits
casts each weight once per forward (autocast's cache, aten/src/ATen/autocast_mode.cpp cached_cast), casts its
gradient back (ToCopyBackward) and copies it into DDP's bucket (Reducer copy_grad_to_bucket)."""

import pytest

from scalestudy.costmodel import estimate as estimate_module
from scalestudy.costmodel import stage_terms
from scalestudy.costmodel.eager_kernels import autocast_param_bytes, autocast_param_s
from scalestudy.specs.hardware import get_device, make_cluster
from scalestudy.specs.presets import get_model
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


@pytest.mark.parametrize("precision,attention,engine,score_bytes,autocast_bytes", [
    # HF GPT2Attention._attn / Megatron-LM 2019 in 16-bit weights: / sqrt(d), causal mask, padding-mask add (or
    # Megatron's mul and subtract), softmax, dropout: 21 B forward, 19 B backward per score element
    ("fp16", "eager", "deepspeed", (21.0, 19.0), 0.0),
    ("fp32", "eager", "ddp", (41.0, 37.0), 0.0),  # no autocast
    # autocast over fp32 weights: the fp32 mask promotes, softmax in fp32, .type() cast: +12 / +18 B, 2 + 2 kernels
    ("fp16", "eager", "ddp", (21.0, 19.0), 30.0),
    ("bf16", "flash", "ddp", (0.0, 0.0), 0.0),  # SDPA: no materialised scores
])
def test_hf_gpt2_eager_scores_are_counted_per_op(precision, attention, engine, score_bytes, autocast_bytes):
    """A GPT block with eager attention pays its score passes per op (eager_kernels.gpt_score_bytes) plus torch.
    matmul's copies of the permuted q, k, v and the context (4 x 2a per width-i element each pass) -- instead of the
    fused count's 2a + 1 per pass; under DDP autocast also the fp32 promotions (autocast_gpt_s), whatever the FFN."""
    from dataclasses import replace

    from scalestudy.costmodel.eager_kernels import GPT_SCORE_AUTOCAST_KERNELS, autocast_gpt_s
    from scalestudy.costmodel.memory import ACT_BYTES
    from scalestudy.costmodel.step import elementwise_bytes

    model, dev, b, s = replace(get_model("gpt2"), ffn="gelu"), get_device("v100-32gb"), 4, 1024
    a, flash = ACT_BYTES[precision], attention == "flash"
    eager = elementwise_bytes(model, b, s, 0, precision, flash, 1, False, "eager")
    sdpa = elementwise_bytes(model, b, s, 0, precision, True, 1, False, "eager")
    scores = model.num_layers * b * model.num_heads * s * s
    copies = 0.0 if flash else model.num_layers * b * s * 4 * 2 * a * model.inner_dim
    for pass_ in (0, 1):
        assert eager[pass_] - sdpa[pass_] == pytest.approx(score_bytes[pass_] * scores + copies)
    seconds = autocast_gpt_s(model, engine, precision, "eager", flash, 1, b, s, dev, 1e-5)
    launches = model.num_layers * sum(GPT_SCORE_AUTOCAST_KERNELS) * 1e-5 if autocast_bytes else 0.0
    assert seconds == pytest.approx(autocast_bytes * scores / dev.hbm_bytes_per_s + launches)
    assert autocast_gpt_s(model, engine, precision, "fused", flash, 1, b, s, dev, 1e-5) == 0.0  # compiled


def test_hf_gpt2_gelu_new_is_read_and_pays_its_fp32_chain_under_autocast(tmp_path):
    """GPT2Config.activation_function (default gelu_new) reaches the spec; a gpt model YAML may say `ffn`; the
    gelu_new chain runs in fp32 from torch.pow on under autocast: 40 B forward + 62 B backward per d_ff element
    beyond its 16-bit eager ops, 2 + 4 kernels per block; erf gelu (one kernel) stays 16-bit."""
    import json

    from scalestudy.costmodel.eager_kernels import autocast_gpt_s, gpt_ffn_autocast_bytes
    from scalestudy.errors import ScalestudyError
    from scalestudy.specs.hf_config import from_hf_config, to_hf_config
    from scalestudy.specs.model import from_shape

    config = {"model_type": "gpt2", "vocab_size": 50257, "n_embd": 768, "n_layer": 12, "n_head": 12}
    for written, read in ((None, "gelu_new"), ("gelu", "gelu"), ("gelu_new", "gelu_new")):
        path = tmp_path / f"{written}.json"
        path.write_text(json.dumps(config | ({"activation_function": written} if written else {})))
        spec = from_hf_config(path)
        assert spec.ffn == read and to_hf_config(spec)["activation_function"] == read
    assert get_model("gpt2").ffn == "gelu_new"  # the presets are HF GPT-2
    shape = {"d_model": 768, "layers": 12, "heads": 12, "vocab": 50257, "seq": 1024}
    assert from_shape("x", shape, "row").ffn == "gelu" and from_shape("x", shape | {"ffn": "gelu_new"}, "row").ffn \
        == "gelu_new"
    with pytest.raises(ScalestudyError, match="a gpt model's activation"):
        from_shape("x", shape | {"ffn": "swiglu"}, "row")
    assert gpt_ffn_autocast_bytes("gelu_new") == ((40.0, 62.0), (2, 4))
    assert gpt_ffn_autocast_bytes("gelu") == ((0.0, 0.0), (0, 0))
    dev, model = get_device("v100-32gb"), get_model("gpt2")
    seconds = autocast_gpt_s(model, "ddp", "fp16", "eager", True, 1, 8, 1024, dev, 1e-5)
    assert seconds == pytest.approx(12 * (102 * 8 * 1024 * 3072 / dev.hbm_bytes_per_s + 6e-5))


@pytest.mark.parametrize("engine,kernels,model_name,recompute,tp,sp,expected", [
    ("megatron", "eager", "gpt2", "full", 1, False, True),  # Megatron-LM 2019: the forward and its recompute add
    ("megatron", "eager", "gpt2", "none", 2, False, True),
    ("megatron", "eager", "gpt2", "none", 2, True, True),  # sequence parallel: row-parallel outputs h / tp wide
    ("megatron", "fused", "gpt2", "full", 1, False, False),  # fused bias-GeLU / bias-dropout-add take the biases
    ("ddp", "eager", "gpt2", "full", 1, False, False),  # HF Conv1D: addmm adds the bias in the GEMM
    ("megatron", "eager", "llama-7b", "full", 1, False, False),  # no biases
])
def test_megatron_2019_adds_each_linear_bias_as_its_own_kernel(engine, kernels, model_name, recompute, tp, sp,
                                                               expected):
    """Megatron-LM 2019 (a0368ddf mpu/layers.py): F.linear on a 3-D input is matmul + `output += bias` in torch 1.x,
    RowParallelLinear adds `output_ + self.bias` after its all-reduce: QKV (3i / tp) and FC1 (f / tp) and the two
    whole-width (h) outputs are read and written once more per forward pass (2a B per element), 4 kernels a layer,
    twice under a full recompute; and the per-stage compute carries it (stage_terms.price_stage)."""
    from scalestudy.costmodel.constants import stored
    from scalestudy.costmodel.eager_kernels import megatron_bias_add_s

    model, dev, b, s = get_model(model_name), get_device("v100-32gb"), 8, 1024
    seconds = megatron_bias_add_s(model, engine, "fp16", kernels, tp, b, s, recompute, dev, 1e-5, sp)
    assert (seconds > 0) is expected
    if expected:
        width = (3 * model.inner_dim + model.d_ff) / tp + 2 * model.d_model / (tp if sp else 1)
        passes = 2 if recompute == "full" else 1
        per_layer = passes * (2 * 2 * b * s * width / dev.hbm_bytes_per_s + 4e-5)
        assert seconds == pytest.approx(model.num_layers * per_layer)
        cluster = make_cluster("v100-32gb", 1, tp)
        st = Strategy(engine=engine, tp=tp, micro_batch=b, recompute=recompute, precision="fp16", kernels=kernels,
                      attention="eager", sequence_parallel=sp)
        work = Workload(global_batch=b, seq_len=s)
        with_adds = estimate_module.estimate(model, cluster, st, work).compute_s
        real = stage_terms.megatron_bias_add_s
        try:
            stage_terms.megatron_bias_add_s = lambda *args: 0.0
            without = estimate_module.estimate(model, cluster, st, work).compute_s
        finally:
            stage_terms.megatron_bias_add_s = real
        seconds = megatron_bias_add_s(model, engine, "fp16", kernels, tp, b, s, recompute, dev,
                                      stored().kernel_overhead_s, sp)
        assert with_adds - without == pytest.approx(seconds)


def test_layer_norm_under_autocast_moves_its_casts_and_fp32_passes():
    """nn.LayerNorm under torch.autocast on a 16-bit input (Strategy.norm_dtype fp32): forward cast up r2 w4, norm
    r4 w4, the next linear's cast down r4 w2 = 20 B against the 16-bit norm's 4; backward cast up 6, fp32 dx r4 r4 w4
    and gamma/beta r4 r4, cast down 6 = 32 against 10. Nothing in fp32, where the norm is fp32 anyway."""
    from scalestudy.costmodel.eager_kernels import layer_norm_autocast_bytes

    assert layer_norm_autocast_bytes(2) == (16.0, 22.0)
    assert layer_norm_autocast_bytes(4) == (0.0, 0.0)


@pytest.mark.parametrize("norm_dtype,kernels,precision,model_name,recompute,expected", [
    ("fp32", "eager", "bf16", "gpt2-xl", "full", True),
    ("fp32", "eager", "fp16", "gpt2", "none", True),
    ("compute", "eager", "bf16", "gpt2-xl", "full", False),  # a 16-bit module without autocast, or LPLayerNorm
    ("engine", "eager", "bf16", "gpt2-xl", "full", False),
    ("fp32", "fused", "bf16", "gpt2-xl", "full", False),  # one fused / compiled norm kernel either way
    ("fp32", "eager", "fp32", "gpt2-xl", "full", False),  # no casts, the norm is fp32 already
    ("fp32", "eager", "bf16", "llama-7b", "full", False),  # eager RMSNorm is counted in fp32 already
    ("fp32", "eager", "bf16", "t5-base", "full", False),
])
def test_autocast_layer_norms_are_priced_once_per_norm_and_pass(norm_dtype, kernels, precision, model_name,
                                                                recompute, expected):
    """Two LayerNorms per GPT block and the final one; a full recompute runs the blocks' forward norms twice; and the
    per-stage compute carries exactly this (stage_terms.price_stage)."""
    from scalestudy.costmodel.constants import stored
    from scalestudy.costmodel.eager_kernels import autocast_layer_norm_s

    model, dev, b, s = get_model(model_name), get_device("a100-80gb"), 4, 2048
    seconds = autocast_layer_norm_s(model, norm_dtype, precision, kernels, 1, b, s, recompute, dev, 1e-5)
    assert (seconds > 0) is expected
    if not expected:
        return
    passes = 2 if recompute == "full" else 1
    fwd, bwd = 2 * model.num_layers * passes + 1, 2 * model.num_layers + 1
    moved = b * s * model.d_model * (16 * fwd + 22 * bwd)
    assert seconds == pytest.approx(moved / dev.hbm_bytes_per_s + 4 * (fwd + bwd) * 1e-5)
    cluster, work = make_cluster("a100-80gb", 1, 8), Workload(global_batch=8 * b, seq_len=s)
    st = Strategy(engine="fsdp", zero=3, micro_batch=b, recompute=recompute, precision=precision, kernels=kernels,
                  norm_dtype=norm_dtype)
    priced = estimate_module.estimate(model, cluster, st, work).compute_s
    real = stage_terms.autocast_layer_norm_s
    try:
        stage_terms.autocast_layer_norm_s = lambda *args: 0.0
        without = estimate_module.estimate(model, cluster, st, work).compute_s
    finally:
        stage_terms.autocast_layer_norm_s = real
    expected_s = autocast_layer_norm_s(model, norm_dtype, precision, kernels, 1, b, s, recompute, dev,
                                       stored().kernel_overhead_s)
    assert priced - without == pytest.approx(expected_s)


def test_norm_dtype_is_one_of_its_names():
    from scalestudy.errors import ScalestudyError

    with pytest.raises(ScalestudyError, match="norm_dtype"):
        Strategy(engine="fsdp", zero=3, norm_dtype="bf16")
