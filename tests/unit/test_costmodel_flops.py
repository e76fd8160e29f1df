"""FLOPs: equal to torch's FLOP counter on real HF models, and to Megatron-LM's closed form."""

import pytest

from scalestudy.costmodel.flops import forward_flops, six_n_flops, training_flops
from scalestudy.costmodel.params import param_breakdown
from scalestudy.specs.model import ModelSpec
from scalestudy.specs.presets import get_model
from scalestudy.specs.strategy import Workload


def _gpt(h=12288, layers=96, heads=96, vocab=51200, seq=2048):
    return ModelSpec(name="gpt", family="gpt2", vocab_size=vocab, d_model=h, num_layers=layers, num_heads=heads,
                     d_kv=h // heads, d_ff=4 * h, ffn="gelu", tie_word_embeddings=True, max_position_embeddings=seq)


def test_decoder_only_matches_megatron_formula():
    # Narayanan et al. 2021 eq. 3 (with recompute: 96 B s l h^2 (1 + s/6h + V/16lh)); without: 72 (1 + s/6h + V/12lh)
    B, s, l, h, V = 64, 2048, 96, 12288, 51200
    m = _gpt(h, l, 96, V, s)
    w = Workload(global_batch=B, seq_len=s)
    assert training_flops(m, w) == pytest.approx(72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h)), rel=1e-12)
    assert training_flops(m, w, "full") == pytest.approx(96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h)),
                                                         rel=1e-12)
    sel = training_flops(m, w, "selective") - training_flops(m, w)
    assert sel == pytest.approx(B * 4 * s * s * h * l, rel=1e-12)  # only the attention products are recomputed


def test_encoder_and_decoder_use_their_own_lengths():
    m = get_model("mt5-base")
    a = forward_flops(m, 512, 114)
    b = forward_flops(m, 512, 228)
    c = forward_flops(m, 1024, 114)
    # the head runs on target tokens only
    assert b.head == 2 * a.head and c.head == a.head
    # doubling the target length adds decoder work only (cross K/V projections run on the source side)
    assert a.dense < b.dense < 2 * a.dense
    # 6*N*D counts every parameter for every token; in an encoder-decoder a token passes one stack only:
    # 6 * (N_enc * s + (N_dec + N_head) * t) is the matching estimate; attention products and the cross-attention
    # K/V projections of the source tokens come on top (~30% for mT5-base at 512/114)
    p = param_breakdown(m)
    approx = 6 * (p.encoder_layer * p.encoder_layers * 512 + (p.decoder_layer * p.decoder_layers + p.lm_head) * 114)
    ratio = training_flops(m, Workload(1, 512, 114)) / approx
    assert 1.0 < ratio < 1.4
    assert training_flops(m, Workload(1, 512, 114)) < six_n_flops(m, 512 + 114)


@pytest.mark.parametrize("name", ["t5-tiny", "gpt2-tiny"])
def test_training_flops_equal_torch_flop_counter(name):
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    from scalestudy.engine.hf_model import build_hf_model

    torch.manual_seed(0)
    torch.set_num_threads(1)
    spec = get_model(name)
    model = build_hf_model(spec)
    B, s, t = 2, 64, 16
    ids = torch.randint(2, spec.vocab_size, (B, s))
    if spec.is_encoder_decoder:
        kwargs = {"input_ids": ids, "labels": torch.randint(2, spec.vocab_size, (B, t))}
    else:
        t, kwargs = 0, {"input_ids": ids, "labels": ids}
    with FlopCounterMode(display=False) as counter:
        model(**kwargs).loss.backward()
    assert counter.get_total_flops() == training_flops(spec, Workload(B, s, t))


def test_six_n_uses_non_embedding_params():
    m = get_model("gpt2")
    assert six_n_flops(m, 1000) == 6 * param_breakdown(m).layers_total * 1000


def test_vocabulary_costs_are_the_counted_mechanisms_mt5_vs_t5():
    # NeMo 3B shape (nemo2022 rows): T5 and mT5 differ only in V; per micro-batch on a tp rank the head's time is the
    # logit GEMMs (fwd + 2 bwd) at the head's GEMM efficiency plus memory-bound passes at HBM bandwidth: 52 B per
    # logit of fp32 cross-entropy (40 in fp32) and, for a tied enc-dec table, 26 B per V/tp x d element
    from scalestudy.costmodel.constants import stored
    from scalestudy.costmodel.efficiency import gemm_dim, matmul_efficiency
    from scalestudy.costmodel.flops import cross_entropy_bytes_per_logit, logit_elements, vocab_grad_bytes
    from scalestudy.costmodel.step import compute_times
    from scalestudy.specs.hardware import get_device

    assert (cross_entropy_bytes_per_logit("bf16"), cross_entropy_bytes_per_logit("fp32")) == (52.0, 40.0)
    per_elem = {n: vocab_grad_bytes(get_model(n), "bf16", 1) / (get_model(n).vocab_size * get_model(n).d_model)
                for n in ("mt5-xxl", "gpt2")}
    assert per_elem == {"mt5-xxl": 30.0, "gpt2": 18.0}  # untied enc-dec (table + head), tied decoder-only

    def t5(vocab):
        return ModelSpec(name=f"t5-{vocab}", family="t5", vocab_size=vocab, d_model=2048, num_layers=24,
                         num_decoder_layers=24, num_heads=32, d_kv=64, d_ff=5120, ffn="gated-gelu",
                         tie_word_embeddings=True)

    dev, cal, tp, mb, s, t = get_device("a100-80gb"), stored(), 2, 24, 512, 128
    small, big = (compute_times(m, dev, "bf16", tp, mb, s, t, "none", False, False, cal) for m in (t5(29184), t5(250112)))
    assert (big.forward, big.backward) == (small.forward, small.backward)  # the blocks do not see V
    dv = (250112 - 29184) / tp
    tokens = mb * t
    eff = matmul_efficiency(dev, gemm_dim(tokens, 250112 / tp, 2048), cal)
    assert eff == matmul_efficiency(dev, gemm_dim(tokens, 29184 / tp, 2048), cal)  # both limited by the tokens
    gemm = 3 * 2 * tokens * 2048 * dv / (dev.peak("bf16") * eff)
    memory = (tokens * dv * 52 + dv * 2048 * 26) / dev.hbm_bytes_per_s
    assert big.head - small.head == pytest.approx(gemm + memory, rel=1e-9)
    assert logit_elements(t5(250112), mb, s, t, tp) == tokens * 250112 / tp


def test_eager_elementwise_bytes_are_the_counted_kernels():
    """Eager element-wise kernels (Strategy.kernels, costmodel/eager_kernels.py), bf16, bytes per token per layer of
    a torchtitan Llama block: forward 84h + 24(i+kv) + 10f (two fp32 RMSNorms of 36h, two residual adds of 6h, rotary
    20 per q/k element, repeat_kv's copies 4(i+kv), SiLU and gate 10f), backward 196h + 24(i+kv) + 18f (norms 92h
    each); torchtitan's Triton RMSNorm moves 4h / 6h instead; in fp32 the casts vanish. step.compute_times charges
    them at a fraction of the device's HBM bandwidth (forward, backward, and the forward again under full recompute;
    calibration elementwise_hbm_fraction); the default
    (fused) is what the model charged before, and tensor parallelism shards i, kv, f (and h under sp)."""
    from scalestudy.costmodel.constants import stored
    from scalestudy.costmodel.eager_kernels import eager_block_bytes, rms_norm_eager
    from scalestudy.costmodel.kernel_counts import model_block_kernels
    from scalestudy.costmodel.step import compute_times, elementwise_bytes
    from scalestudy.specs.hardware import get_device

    m = ModelSpec(name="l3-8b", family="llama", vocab_size=128256, d_model=4096, num_layers=32, num_heads=32,
                  d_kv=128, d_ff=14336, ffn="swiglu", num_kv_heads=8, tie_word_embeddings=False)
    h, i, kv, f = 4096, 4096, 1024, 14336
    assert eager_block_bytes(m, 2, 1, False, "eager")[1] == (84 * h + 24 * (i + kv) + 10 * f,
                                                             196 * h + 24 * (i + kv) + 18 * f)
    assert eager_block_bytes(m, 2, 1, False, "eager-fused-norm")[1] == (20 * h + 24 * (i + kv) + 10 * f,
                                                                        24 * h + 24 * (i + kv) + 18 * f)
    assert rms_norm_eager(4) == (28.0, 92.0) and rms_norm_eager(2) == (36.0, 92.0)
    mha = ModelSpec(name="mha", family="llama", vocab_size=32000, d_model=h, num_layers=2, num_heads=32, d_kv=128,
                    d_ff=f, ffn="swiglu", tie_word_embeddings=False)  # no GQA: repeat_kv copies nothing
    assert eager_block_bytes(mha, 2, 1, False, "eager")[1][0] == 84 * h + 20 * 2 * i + 10 * f
    fw2, bw2 = eager_block_bytes(m, 2, 2, True, "eager")[1]
    assert (fw2, bw2) == (84 * h / 2 + 12 * (i + kv) + 5 * f, 98 * h + 12 * (i + kv) + 9 * f)
    dev, cal = get_device("h100-80gb"), stored()
    args = (m, dev, "bf16", 1, 2, 8192, 0, "full", True, False, cal)
    fused, eager = compute_times(*args), compute_times(*args, kernels="eager")
    assert compute_times(*args, kernels="fused") == fused
    fused_b = elementwise_bytes(m, 2, 8192, 0, "bf16", True, 1, False, "fused")
    tokens_layers = 2 * 8192 * 32
    assert fused_b[0] == pytest.approx(tokens_layers * 2 * (8 * h + 8 * i + 8 * f))  # 2 passes of the stored acts
    # eager's bytes counted per kernel move at calibration elementwise_hbm_fraction of the HBM rate, the fused
    # footprint rule's at the rate itself
    rate = dev.hbm_bytes_per_s * cal.elementwise_hbm_fraction
    fwd_extra = tokens_layers * (84 * h + 24 * (i + kv) + 10 * f) / rate - fused_b[0] / dev.hbm_bytes_per_s
    bwd_extra = tokens_layers * (196 * h + 24 * (i + kv) + 18 * f) / rate - fused_b[1] / dev.hbm_bytes_per_s
    # + the launches eager runs beyond fused (kernel_counts.py x calibration.kernel_overhead_s)
    (fk_f, fk_b), (ek_f, ek_b) = model_block_kernels(m, "fused", True)[1], model_block_kernels(m, "eager", True)[1]
    fwd_extra += 32 * (ek_f - fk_f) * cal.kernel_overhead_s
    bwd_extra += 32 * (ek_b - fk_b) * cal.kernel_overhead_s
    assert eager.forward - fused.forward == pytest.approx(fwd_extra)
    assert eager.backward - fused.backward == pytest.approx(bwd_extra + fwd_extra)  # + the recomputed forward


def test_flash_backward_and_checkpoint_early_stop():
    """Two counted mechanisms of the attention core and of a full recompute (MPT-7B shape, A100 80GB, bf16).

    - A flash kernel's backward recomputes S = QK^T: 5 matmuls against the forward's 2, 2.5x its FLOPs
      (flash-attn benchmarks/benchmark_flash_attention.py flops(); the Triton kernel llm-foundry v0.3.0 ran has five
      tl.dot per backward tile); eager attention keeps P, 2x. So backward - 2 x forward = 0.5 x the attention core's
      forward time + the element-wise difference.
    - PyTorch >= 2.1's non-reentrant checkpoint stops the re-run at the block's last saved tensor (early stop,
      pytorch PR #96866): the FFN output projection (2 s d d_ff FLOPs per layer and sequence) is not recomputed.
      For MPT-7B at seq 1024 that is 8% fewer step FLOPs -- the +8% MFU llm-foundry's A100 80GB rows gained from
      torch 1.13.1 to 2.1 (7b 53.66 -> 58.01, 13b 55.23 -> 59.48, 30b 51.69 -> 55.82, same micro-batches)."""
    from scalestudy.costmodel.constants import stored
    from scalestudy.costmodel.efficiency import attention_efficiency, gemm_dim, matmul_efficiency
    from scalestudy.costmodel.estimate import estimate
    from scalestudy.costmodel.flops import attention_backward_factor, step_flops_per_sequence
    from scalestudy.costmodel.kernel_counts import model_block_kernels
    from scalestudy.costmodel.op_checkpoint import early_stop
    from scalestudy.costmodel.step import compute_times, elementwise_bytes
    from scalestudy.specs.hardware import ClusterSpec, get_device
    from scalestudy.specs.strategy import Strategy

    assert (attention_backward_factor(True), attention_backward_factor(False)) == (2.5, 2.0)
    d, layers, s, mb = 4096, 32, 2048, 4
    m = _gpt(d, layers, 32, 50368, s)
    dev, cal = get_device("a100-80gb"), stored()
    peak = dev.peak("bf16")
    attn = layers * 4 * mb * s * s * d / (peak * attention_efficiency(dev, gemm_dim(s, s, d // 32), "fa2", cal))
    for flash, extra in ((True, 0.5 * attn), (False, 0.0)):
        ct = compute_times(m, dev, "bf16", 1, mb, s, 0, "none", flash, False, cal)
        rate = dev.hbm_bytes_per_s * cal.elementwise_hbm_fraction  # a GPT block's fused kernels, counted per kernel
        ew_f, ew_b = (x / rate for x in elementwise_bytes(m, mb, s, 0, "bf16", flash, 1, False, "fused"))
        k_f, k_b = model_block_kernels(m, "fused", flash)[1]  # + the launches (kernel_counts.py)
        launches = layers * (k_b - 2 * k_f) * cal.kernel_overhead_s
        assert ct.backward - 2 * ct.forward == pytest.approx(extra + ew_b - 2 * ew_f + launches, rel=1e-9)

    full, stop = (compute_times(m, dev, "bf16", 1, mb, s, 0, "full", True, False, cal, early_stop=e) for e in (0, 1))
    down = layers * 2 * mb * s * d * 4 * d
    assert full.backward - stop.backward == pytest.approx(
        down / (peak * matmul_efficiency(dev, gemm_dim(mb * s, d, 4 * d), cal)), rel=1e-9)
    assert full.flops_hw - stop.flops_hw == pytest.approx(down, rel=1e-9)
    assert (full.forward, full.head) == (stop.forward, stop.head)
    assert step_flops_per_sequence(m, s, 0, "full") - step_flops_per_sequence(m, s, 0, "full", True) == \
        pytest.approx(down / mb, rel=1e-12)
    ratio = step_flops_per_sequence(m, 1024, 0, "full") / step_flops_per_sequence(m, 1024, 0, "full", True)
    assert 1.075 < ratio < 1.09

    # which runs stop early: fsdp by default (Composer / torchtitan / OLMo-core / fms checkpoint NO_REENTRANT),
    # Megatron-family engines not; a row states its software (YAML's unquoted off arrives as False)
    fsdp, ddp = Strategy(engine="fsdp", zero=3, recompute="full"), Strategy(engine="ddp", recompute="full")
    assert (early_stop(fsdp), early_stop(ddp)) == (True, False)
    assert not early_stop(Strategy(engine="fsdp", zero=3, recompute="full", recompute_early_stop=False))
    assert early_stop(Strategy(engine="ddp", recompute="full", recompute_early_stop="on"))
    assert not early_stop(Strategy(engine="fsdp", zero=3, recompute="selective"))
    cluster, w = ClusterSpec(device=dev, nodes=1, gpus_per_node=8), Workload(global_batch=32, seq_len=s)
    engine_s, off_s = (estimate(m, cluster, Strategy(engine="fsdp", zero=3, micro_batch=mb, recompute="full",
                                                     recompute_early_stop=v), w).compute_s for v in ("engine", "off"))
    assert off_s - engine_s == pytest.approx(full.backward - stop.backward, rel=1e-9)  # one micro-batch per GPU
