"""costmodel/autocast_memory.py against what autograd saves for train's HF T5 (engine/models.build_model: fp32
weights, SDPA) under CPU autocast bf16 and with bf16 weights, counted with saved_tensors_hooks by storage."""

from __future__ import annotations

import contextlib

import pytest
import torch

from scalestudy.costmodel.autocast_memory import t5_cast_bytes, weight_cast_bytes
from scalestudy.engine.models import build_model
from scalestudy.specs.model import ModelSpec

# widths chosen so no activation shape ([32 | 16 tokens, 48 | 80]) equals a weight's
SPEC = ModelSpec(name="tiny-t5", family="t5", vocab_size=64, d_model=48, num_layers=2, num_decoder_layers=2,
                 num_heads=4, d_kv=12, d_ff=80, ffn="relu", tie_word_embeddings=True)
MB, S, T = 2, 16, 8


def _count(autocast: bool):
    """(model, {storage ptr: saved tensor}, {Linear module: storage ptrs its backward saved}) of one forward."""
    model = build_model(SPEC, seed=0)
    if not autocast:
        model.to(torch.bfloat16)
    saved, by_module, current = {}, {}, []
    hooks = [m.register_forward_pre_hook(lambda m, *_: current.append(m)) for m in model.modules()]
    hooks += [m.register_forward_hook(lambda m, *_: current.pop() and None) for m in model.modules()]

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        saved.setdefault(ptr, t)
        if current and isinstance(current[-1], torch.nn.Linear):
            by_module.setdefault(current[-1], set()).add(ptr)
        return t

    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, SPEC.vocab_size, (MB, S), generator=g)
    labels = torch.randint(3, SPEC.vocab_size, (MB, T), generator=g)
    ctx = torch.autocast("cpu", dtype=torch.bfloat16) if autocast else contextlib.nullcontext()
    with ctx, torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels).loss
    for h in hooks:
        h.remove()
    return model, saved, by_module


def _input_storages(model, by_module, saved, name: str) -> list[set]:
    """Per attention module `name` (SelfAttention / EncDecAttention), the activation storages its q, k, v save."""
    out = []
    for m in model.modules():
        attn = getattr(m, name, None)
        if attn is not None:
            out.append({p for lin in (attn.q, attn.k, attn.v) for p in by_module.get(lin, ())
                        if tuple(saved[p].shape) in ((MB * S, SPEC.d_model), (MB * T, SPEC.d_model))})
    return out


def _bytes(saved, ptrs) -> int:
    return sum(saved[p].untyped_storage().nbytes() for p in ptrs)


@pytest.fixture(scope="module")
def counts():
    return _count(autocast=True), _count(autocast=False)


def test_t5_casts_under_autocast_are_what_autograd_saves(counts):
    (model, saved, by_mod), (model16, saved16, by_mod16) = counts
    one = {"enc": 2 * MB * S * SPEC.d_model, "dec": 2 * MB * T * SPEC.d_model}  # the copy activation_parts counts
    self_attn = _input_storages(model, by_mod, saved, "SelfAttention")
    cross = _input_storages(model, by_mod, saved, "EncDecAttention")
    assert [len(p) for p in self_attn] == [3] * 4  # q, k and v each save their own bf16 copy
    assert [len(p) for p in cross] == [3] * 2  # q's copy, and k, v's of the encoder output, per decoder block
    extra = sum(_bytes(saved, p) for p in self_attn) - 2 * one["enc"] - 2 * one["dec"]
    extra += sum(_bytes(saved, p) for p in cross) - 2 * one["dec"]
    assert extra == t5_cast_bytes(SPEC, "ddp", "bf16", "eager", MB, S, T, "none")
    # with bf16 weights (DeepSpeed, FSDP's param_dtype) one copy each, and one encoder output every block shares
    assert [len(p) for p in _input_storages(model16, by_mod16, saved16, "SelfAttention")] == [1] * 4
    shared = set.union(*_input_storages(model16, by_mod16, saved16, "EncDecAttention"))
    assert len(shared) == 3  # two decoder blocks' q copies + the one encoder output
    assert t5_cast_bytes(SPEC, "deepspeed", "bf16", "eager", MB, S, T, "none") == 0.0


def test_weight_casts_are_every_matmul_weight_once(counts):
    (model, saved, by_mod), _ = counts
    weights = {id(m.weight): m.weight for m in model.modules() if isinstance(m, torch.nn.Linear)}
    shapes = {tuple(w.shape) for w in weights.values()}
    casts = [t for t in saved.values() if t.dtype == torch.bfloat16 and t.dim() == 2
             and tuple(t.shape) in shapes | {tuple(reversed(s)) for s in shapes}
             and t.untyped_storage().nbytes() == 2 * t.numel()]
    counted = sum(t.untyped_storage().nbytes() for t in casts)
    assert counted == 2 * sum(w.numel() for w in weights.values())
    # the formula charges every parameter but an untied input embedding: norms and bias tables are ~1% here
    params = sum(p.numel() for p in model.parameters())
    assert weight_cast_bytes(SPEC, "ddp", "bf16", "eager", params, 1) == pytest.approx(counted, rel=0.02)
    assert weight_cast_bytes(SPEC, "fsdp", "bf16", "eager", params, 1) == 0.0


def test_residual_stream_is_fp32_under_autocast():
    """What a checkpointed block keeps (its input) is fp32 under autocast: t5_cast_bytes' full-recompute term."""
    model = build_model(SPEC, seed=0)
    dtypes = []
    for block in model.encoder.block:
        block.register_forward_pre_hook(lambda m, args, kw: dtypes.append(
            (args[0] if args else kw["hidden_states"]).dtype), with_kwargs=True)
    ids = torch.randint(3, SPEC.vocab_size, (MB, S))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        model(input_ids=ids, labels=ids[:, :T].contiguous())
    assert dtypes == [torch.float32] * SPEC.num_layers
    h = SPEC.d_model
    wider = 2 * h * (SPEC.num_layers * MB * S + SPEC.num_decoder_layers * MB * T)
    assert t5_cast_bytes(SPEC, "ddp", "bf16", "eager", MB, S, T, "full") == wider + 4 * h * (MB * T + MB * S)


def test_projection_casts_priced_in_time_are_the_counted_ones(counts):
    """eager_kernels.T5_AUTOCAST_CASTS: the casts of fp32 inputs one encoder / decoder block's projections save (wo's
    re-cast is ffn_autocast_bytes'; o reads the attention's bf16 output, no cast)."""
    from scalestudy.costmodel.eager_kernels import T5_AUTOCAST_CASTS

    (model, saved, by_mod), _ = counts

    def casts(block, names):
        lins = [m for n, m in block.named_modules() if n.split(".")[-1] in names]
        return len({p for m in lins for p in by_mod[m] if saved[p].dtype == torch.bfloat16
                    and saved[p].shape[0] in (MB * S, MB * T) and saved[p].dim() == 2})

    enc, dec = model.encoder.block[0], model.decoder.block[0]
    assert casts(enc, ("q", "k", "v", "wi")) == T5_AUTOCAST_CASTS["encoder"][0]
    assert casts(dec.layer[0], ("q", "k", "v")) + casts(dec.layer[1], ("q",)) + casts(dec.layer[2], ("wi",)) \
        == T5_AUTOCAST_CASTS["decoder"][0]
    assert casts(dec.layer[1], ("k", "v")) == T5_AUTOCAST_CASTS["cross"][0]


def test_gelu_new_fp32_chain_saves_what_gelu_cast_bytes_adds(monkeypatch):
    """gelu_new under CUDA autocast: `pow` is on CUDA's fp32 list (not CPU's), emulated here by casting pow's input
    to fp32 as autocast would; every op after it then runs in fp32. Saved per d_ff element: 14 B in the activation,
    + the bf16 cast the next matmul saves = 16, against the 5 x 2 B activation_parts counts."""
    from transformers.activations import NewGELUActivation

    from scalestudy.costmodel.autocast_memory import GELU_NEW_EXTRA, gelu_cast_bytes

    real_pow = torch.pow
    monkeypatch.setattr(torch, "pow", lambda x, e: real_pow(x.float(), e))
    x = torch.randn(64, 80, dtype=torch.bfloat16, requires_grad=True)
    saved = {}

    def pack(t):
        saved.setdefault(t.untyped_storage().data_ptr(), t.untyped_storage().nbytes())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = NewGELUActivation()(x)
    assert y.dtype == torch.float32
    per_element = (sum(saved.values()) + 2 * x.numel()) / x.numel()  # + the next matmul's bf16 cast of y
    assert per_element == 16 == 10 + GELU_NEW_EXTRA[False]
    gpt = ModelSpec(name="g", family="gpt2", vocab_size=64, d_model=48, num_layers=3, num_decoder_layers=0,
                    num_heads=4, d_kv=12, d_ff=80, ffn="gelu_new", tie_word_embeddings=True)
    assert gelu_cast_bytes(gpt, "ddp", "bf16", "eager", 2, 32, 0, 1, "none") == 6 * 2 * 32 * 3 * 80
    assert gelu_cast_bytes(gpt, "ddp", "bf16", "eager", 2, 32, 0, 1, "full") == 0.0
    assert gelu_cast_bytes(SPEC, "ddp", "bf16", "eager", 2, 32, 8, 1, "none") == 0.0  # relu
