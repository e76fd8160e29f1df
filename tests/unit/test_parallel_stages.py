"""Pipeline chunks chained in one process compute exactly the full Hugging Face model (no process group needed)."""

from __future__ import annotations

import pytest
import torch

from scalestudy.engine.models import build_model
from scalestudy.engine.parallel.stages import EdgeDropout, loss_function, split_model
from scalestudy.specs.presets import get_model


def run_chunks(chunks, input_ids, attention_mask, labels):
    acts = (input_ids,)
    for chunk in chunks:
        out = chunk(*acts, attention_mask=attention_mask, labels=labels)
        acts = out if isinstance(out, tuple) else (out,)
    return acts[0]


@pytest.mark.parametrize("name, counts", [
    ("llama-tiny", [1, 1]),
    ("gpt2-tiny", [1, 1]),  # tied embedding/head on different chunks
    ("t5-tiny", [2, 2]),  # encoder | decoder
    ("t5-tiny", [1, 1, 1, 1]),  # mid-encoder and mid-decoder cuts: copied relative position bias
    ("t5-tiny", [3, 1]),  # a chunk with the encoder's end and the decoder's start
])
def test_chunks_compose_to_the_full_model(name, counts):
    spec = get_model(name)
    torch.manual_seed(0)
    ids = torch.randint(2, spec.vocab_size, (2, 16))
    mask = torch.ones_like(ids)
    mask[1, 12:] = 0  # padding in the second sequence
    labels = torch.randint(2, spec.vocab_size, (2, 8 if spec.is_encoder_decoder else 16))
    full = build_model(spec, seed=3)
    expected = full(input_ids=ids, attention_mask=mask, labels=labels)
    chunks = split_model(build_model(spec, seed=3), spec.family, counts)
    logits = run_chunks(chunks, ids, mask, labels)
    torch.testing.assert_close(logits, expected.logits, rtol=1e-5, atol=1e-5)
    loss = loss_function(spec.family)(logits, labels)
    torch.testing.assert_close(loss, expected.loss, rtol=1e-6, atol=1e-6)
    names = {canon for c in chunks for canon in c.canonical.values()}
    assert names == {n for n, _ in full.named_parameters()}  # every parameter, under its full-model name


def test_edge_dropout_applies_only_the_stack_edges_a_chunk_has():
    drop = EdgeDropout(1.0, at_entry=False, at_exit=True).train()
    x = torch.ones(3)
    assert torch.equal(drop(x), x) and torch.equal(drop(x), torch.zeros(3))  # entry kept, exit dropped
