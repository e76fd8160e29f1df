"""costmodel/zero3.py's per-module tensor lists (what DeepSpeed ZeRO-3 fetches, module by module, and what its reuse
distance walks) hold exactly the block's parameters as costmodel/params.py counts them, for every block layout:
gated and non-gated llama-family FFNs (GPT-NeoX / GPT-J, Falcon and Nemotron are llama-family blocks with two MLP
Linears, not three), with and without biases, GPT-2 and T5."""

import dataclasses

import pytest

from scalestudy.costmodel.params import param_breakdown
from scalestudy.costmodel.zero3 import _block_modules, _block_tensors
from scalestudy.specs.model import from_shape
from scalestudy.specs.presets import get_model

_SHAPE = {"d_model": 1024, "layers": 4, "heads": 8, "vocab": 1000, "seq": 128}


def _models():
    neox = from_shape("neox-like", {**_SHAPE, "family": "llama", "ffn": "gelu", "d_ff": 4096}, "test")
    llama = from_shape("llama-like", {**_SHAPE, "family": "llama", "d_ff": 2816}, "test")
    return [neox, dataclasses.replace(neox, mlp_bias=True, attention_bias="all"), llama,
            dataclasses.replace(llama, mlp_bias=True, attention_bias="qkv"), get_model("gpt2-medium"),
            get_model("t5-large")]


@pytest.mark.parametrize("model", _models(), ids=lambda m: f"{m.name}-{m.mlp_bias}-{m.attention_bias}")
def test_block_modules_hold_the_blocks_parameters(model):
    pc = param_breakdown(model)
    assert sum(_block_tensors(model, True, 1)) == pc.decoder_layer
    if model.is_encoder_decoder:
        assert sum(_block_tensors(model, False, 1)) == pc.encoder_layer


def test_non_gated_llama_family_ffn_is_two_linears():
    """GPT-NeoX's MLP is dense_h_to_4h and dense_4h_to_h (and Falcon's, Nemotron's up / down): two fetches, not a
    gate, an up and a down projection."""
    neox, _, llama, *_ = _models()
    assert len(_block_modules(neox, True, 1)) == 4 + 2 + 2  # q, k, v, o; up, down; two norms
    assert len(_block_modules(llama, True, 1)) == 4 + 3 + 2
