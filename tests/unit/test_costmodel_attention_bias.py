"""Hugging Face T5 under attention flash: SDPA gets T5's relative position bias as a float mask, so it runs the
memory-efficient kernel, not FlashAttention (costmodel/attention_bias.py). Checked here: what the installed
transformers passes to SDPA (the premise), the bias bytes by hand, the software `estimate` and `train` price, and
the price itself."""

from __future__ import annotations

import pytest

from scalestudy.costmodel.attention_bias import bias_launches, bias_memory_bytes, bias_pass_bytes
from scalestudy.costmodel.estimate import estimate
from scalestudy.errors import ScalestudyError
from scalestudy.specs.hardware import ClusterSpec, get_device
from scalestudy.specs.model import ModelSpec
from scalestudy.specs.presets import get_model
from scalestudy.specs.run import check_cost_model_only, train_software
from scalestudy.specs.strategy import Strategy, Workload, software_fill

TINY = ModelSpec(name="tiny-t5", family="t5", vocab_size=64, d_model=16, num_layers=2, num_decoder_layers=2,
                 num_heads=2, d_kv=8, d_ff=32, ffn="relu", tie_word_embeddings=True)
A100 = ClusterSpec(device=get_device("a100-80gb"), nodes=1, gpus_per_node=8, name="a100")


def test_installed_transformers_passes_the_position_bias_as_a_float_mask(monkeypatch):
    """The premise, on CPU: every SDPA call of a T5 built with sdpa gets a float [1, heads, q, k] attn_mask (never
    None, so torch's dispatcher cannot take FlashAttention: sdp_utils check_for_attn_mask); the self-attention
    masks require grad (the mem-efficient backward writes the bias gradient), cross-attention's zeros do not."""
    torch = pytest.importorskip("torch")
    from scalestudy.engine.hf_model import build_hf_model

    calls = []
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def record(q, k, v, attn_mask=None, **kw):
        calls.append((tuple(attn_mask.shape), attn_mask.dtype.is_floating_point, attn_mask.requires_grad)
                     if attn_mask is not None else None)
        return sdpa(q, k, v, attn_mask=attn_mask, **kw)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", record)
    model = build_hf_model(TINY, attn_implementation="sdpa")
    model.train()
    s, t, b = 6, 3, 2
    ids, labels = torch.randint(0, 64, (b, s)), torch.randint(0, 64, (b, t))
    # the plain backends pass no mask; the hybrid one (tp / pp) an all-ones one (packed batches), dropped by HF
    for mask in (None, torch.ones(b, s, dtype=torch.long)):
        calls.clear()
        model(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()
        heads = TINY.num_heads
        encoder, decoder = calls[:2], calls[2:]
        assert encoder == [((1, heads, s, s), True, True)] * 2
        assert decoder[0::2] == [((1, heads, t, t), True, True)] * 2  # decoder self-attention, causal bias
        assert decoder[1::2] == [((1, heads, t, s), True, False)] * 2  # cross-attention: shared zeros
    assert model.encoder.block[0].layer[0].SelfAttention.relative_attention_bias.weight.grad is not None


# (recompute, target length, forward bytes, backward bytes, memory bytes) of TINY at micro-batch 3, s 16, one rank,
# 2 bytes an element, 2 layers per stack. E = 2 heads x q x k: encoder 512 (B = 3 E = 1536), decoder self 2 t^2,
# cross 32 t. Forward per call: B (+ 2 E for a fresh mask, + 2 E where k is not a multiple of 8: SDPA's padded copy);
# backward: B (+ 2 B + 4 E for a trained bias); memory: the saved masks + the largest [3, 2, q, k padded to 16]
# gradient + its accumulated E
BYTES = [
    ("none", 8, 2 * 2 * ((1536 + 1024) + (384 + 256) + 768), 2 * 2 * ((4608 + 2048) + (1152 + 512) + 768),
     2 * (2 * 512 + 2 * 128 + 256 + 3 * 2 * 16 * 16 + 512)),
    ("none", 6, 2 * 2 * ((1536 + 1024) + (216 + 144 + 144) + 576), 2 * 2 * ((4608 + 2048) + (648 + 288) + 576),
     2 * (2 * 512 + 2 * 72 + 192 + 3 * 2 * 16 * 16 + 512)),  # k = 6: decoder self-attention masks padded
    # HF gradient checkpointing: the cross zeros require grad; only the shared biases are saved
    ("full", 6, 2 * 2 * ((1536 + 1024) + (216 + 144 + 144) + 576),
     2 * 2 * ((4608 + 2048) + (648 + 288) + (576 + 1152 + 768)), 2 * (512 + 72 + 192 + 3 * 2 * 16 * 16 + 512)),
]


@pytest.mark.parametrize("recompute,t,fwd,bwd,mem", BYTES)
def test_bias_bytes_by_hand(recompute, t, fwd, bwd, mem):
    assert bias_pass_bytes(TINY, 3, 16, t, 1, recompute) == (fwd, bwd)
    assert bias_memory_bytes(TINY, 3, 16, t, 1, recompute) == mem
    assert bias_pass_bytes(get_model("gpt2"), 3, 16, 0, 1, recompute) == (0.0, 0.0)


# (recompute, target length, forward launches, backward launches) of TINY: per encoder call 1 (the mask's copy), per
# decoder self call 4 (causal pattern + where) + 1 where t is not a multiple of 8 (SDPA's pad); backward 2 per trained
# call (batch sum, accumulation) + 1 per decoder self call (the where's backward)
LAUNCHES = [("none", 8, 2 * 1 + 2 * 4, 2 * 2 + 2 * 3), ("none", 6, 2 * 1 + 2 * 5, 2 * 2 + 2 * 3),
            ("full", 6, 2 * 1 + 2 * 5, 2 * 2 + 2 * 3 + 2 * 2)]


@pytest.mark.parametrize("recompute,t,fwd,bwd", LAUNCHES)
def test_bias_launches_by_hand(recompute, t, fwd, bwd):
    assert bias_launches(TINY, 16, t, recompute) == (fwd, bwd)


def _fields(**kw) -> dict:
    return {**vars(Strategy(engine="deepspeed", zero=2, attention="flash")), **kw}


# (model, fields changed, estimate's fill of attention_kernel, train's attention_kernel)
SOFTWARE = [
    ("t5-base", {}, "mem-efficient", "mem-efficient"),  # HF T5 under flash: its float mask
    ("mt5-xxl", {"engine": "fsdp", "zero": 3}, "mem-efficient", "mem-efficient"),
    ("t5-base", {"attention": "eager"}, None, None),  # read under flash only
    ("t5-base", {"tp": 2}, None, "mem-efficient"),  # estimate: NeMo / Megatron-style T5; train: still HF's
    ("t5-base", {"attention_kernel": "fa2"}, None, "mem-efficient"),  # a named kernel is kept (train: refused)
    ("gpt2", {}, None, None),  # decoder-only: no mask, FlashAttention-2
]


@pytest.mark.parametrize("name,changes,filled,trained", SOFTWARE)
def test_software_fill_and_train_software(name, changes, filled, trained):
    model = get_model(name)
    fields = _fields(**changes)
    assert software_fill(fields, model.is_encoder_decoder).get("attention_kernel") == filled
    assert train_software(fields, model).get("attention_kernel") == trained


def test_train_accepts_mem_efficient_for_t5_only():
    st = Strategy(engine="deepspeed", zero=2, attention="flash", attention_kernel="mem-efficient")
    check_cost_model_only(st, get_model("t5-base"))
    with pytest.raises(ScalestudyError, match="attention_kernel"):
        check_cost_model_only(st, get_model("gpt2"))


def test_hf_t5_under_flash_is_priced_slower_and_larger_than_flashattention():
    model, work = get_model("t5-large"), Workload(global_batch=64, seq_len=512)
    by_kernel = {k: estimate(model, A100, Strategy(engine="deepspeed", zero=2, attention="flash", micro_batch=8,
                                                   attention_kernel=k), work)
                 for k in ("engine", "mem-efficient", "fa2")}
    default, mem_eff, fa2 = by_kernel["engine"], by_kernel["mem-efficient"], by_kernel["fa2"]
    assert default.step_s == mem_eff.step_s and default.memory.activations == mem_eff.memory.activations
    assert 1.0 < mem_eff.step_s / fa2.step_s < 1.2
    grown = mem_eff.memory.activations - fa2.memory.activations
    assert grown == bias_memory_bytes(model, 8, 512, work.target_len or default.target_len, 1, "none")
