"""FLOPs: equal to torch's FLOP counter on real HF models, and to Megatron-LM's closed form."""

import pytest

from scalestudy.costmodel.flops import forward_flops, six_n_flops, training_flops
from scalestudy.costmodel.params import param_breakdown
from scalestudy.specs.model import ModelSpec, get_model
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
